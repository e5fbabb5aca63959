"""The poll policy, its delay arithmetic, and the single-object wait helpers.

Waiting is not retrying: a task that is still running is not a failure, so it is not backed
off like one. Three kinds of gap are computed here, all by pure functions with no I/O (each
takes its randomness as a number in ``[0, 1)`` so that it can be tested on its own):

* :func:`growth_interval`: one object on its own (``tasks.wait``, ``projects.wait``): a first
  poll soon, then gaps that grow with the object's age (a fixed fraction of it, so the expected
  detection lag stays a fixed fraction of the run time), with jitter, up to a cap.
* :func:`batch_delay`: one id of a batch (``gather_until_done``). Tasks of one batch take
  similar times, so the coordinator learns the batch's *finish window* (:func:`estimate_window`)
  from the durations (``finished_at - created_at``) of the tasks that finished, and polls the
  others sparsely before that window and densely inside it. Before anything has finished, a
  few ids (the *probes*, :func:`probe_count`) are polled densely to find the window's start,
  while the rest grow their gaps.
* After a transient failure or a 429 the loops ask the one retry engine (``_retry``:
  :func:`error_delay`, :func:`rate_limit_pause`, the AIMD arithmetic), and every request
  is paced by the client's ``_pacing`` state, so a 429 slows the whole client.

The waiting engines never see the client: they poll through a :class:`TaskSource` (one read
of one task, with no retries of its own, and the client's pacing).
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar, Union

import anyio
import attrs

from ._exceptions import RateLimitError, TaskFailedError, WaitTimeoutError
from ._hooks import EventHooks
from ._models import Project, Task
from ._observe import end_wait, poll_event, wait_span
from ._pacing import Pacing

# The backoff and AIMD arithmetic live in the one retry engine; they are re-exported here for
# the scheduler and for code that imported them from this module.
from ._retry import (
    aimd_decrease,
    aimd_increase,
    error_delay,
    is_transient,
    rate_limit_pause,
    recovered_rate,
)
from ._schedule import FinishTimeMemory

__all__ = [
    "FinishWindow",
    "PollPolicy",
    "PollingClient",
    "TaskSource",
    "UpdateCallback",
    "aimd_decrease",
    "aimd_increase",
    "batch_delay",
    "dense_interval",
    "error_delay",
    "estimate_window",
    "growth_interval",
    "is_transient",
    "on_read",
    "poll_until",
    "probe_count",
    "rate_limit_pause",
    "recovered_rate",
    "source_of",
    "wait_for_task",
    "wait_on_source",
]

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_V = TypeVar("_V", Task, Project)

#: A progress callback of a single wait: a plain or async callable taking each new state.
UpdateCallback = Callable[[_V], Union[Awaitable[object], object]]  # noqa: UP007

_ge0 = attrs.validators.ge(0.0)
_gt0 = attrs.validators.gt(0.0)
_optional_ge1: Any = attrs.validators.optional(attrs.validators.ge(1))


def _fraction(upper: float) -> Any:
    return attrs.validators.and_(attrs.validators.ge(0.0), attrs.validators.le(upper))


@attrs.frozen
class PollPolicy:
    """How waiting helpers and ``gather_until_done`` space their polls.

    The defaults were chosen by ``bench/gather.py`` (see ``docs/waiting.md``). All times are in
    seconds.

    Attributes:
        first_delay: Wait before the first poll of an object (0: poll at once, which also
            returns at once for an object that is already finished).
        min_interval: The shortest gap of the growing schedule (single waits, and ids of a
            batch whose finish window is not known yet).
        growth: Gap of a single wait as a fraction of the object's age (time since its
            ``created_at``, or since the wait began): ``0.1`` keeps the expected detection lag
            near 5 % of the run time.
        max_interval: The cap of every growing gap.
        jitter: Relative jitter applied to gaps (``0.1``: +-10 %), so that ids do not march in
            step.
        adaptive: Learn the batch's finish window (``gather_until_done``); ``False`` polls every
            id on the growing schedule of a single wait.
        dense_interval: The longest gap of a batch's id inside the ages at which its class is
            seen to finish (from one gap before the ``window_quantile`` of the durations to a
            margin past their ``1 - window_quantile``), and the gap of the probes: a batch is
            never polled more sparsely there than a loop at this gap.
        relative_interval: Lower bound of the dense gap as a fraction of the task's age, so
            that long tasks (minutes) are not polled every second: the dense gap is
            ``max(dense_interval, age * relative_interval)``, at most ``max_interval``.
        probes: Ids of each class of a batch polled densely until the first one finishes
            (``None``: about the square root of the class's size, between 8 and 64).
        sparse_growth: Gap of a batch's other ids before the window is known, as a fraction of
            their age (``1.0`` doubles the age at each poll), at least ``min_interval`` and at
            most ``max_interval``.
        sparse_cap: The longest gap before the learned window starts.
        window_quantile: The window starts at this quantile of the finished durations (one
            dense gap early), which keeps a rare fast outlier from widening it.
        overdue_growth: Past the window's end, the gap grows by this fraction of the time
            overdue (at least the dense gap, at most ``max_interval``).
        max_consecutive_failures: Transient failures in a row after which one id is given up
            (a permanent failure); ``None`` never gives up (the deadline still applies).
        error_initial: Ceiling of the first backoff after a transient failure.
        error_max: Cap of the backoff after transient failures.
        rate_limit_initial: Pause after a 429 without ``Retry-After``, doubled for each 429 in
            a row.
        rate_limit_max: Cap of that pause.
        rate_decrease: Factor applied to the allowed concurrency and request rate on a 429.
        rate_recovery: After a 429, the allowed rate grows back by this fraction of the
            reduced rate per second, until the rate limit is lifted.
        coalesce: Polls of a batch due within this many seconds of each other are sent
            together (a little early, never late), so that the event loop wakes once for
            them; at most a fifth of ``dense_interval``.
        half_life: Finished tasks after which an observed duration counts half as much as a
            new one, so that the estimate follows a service that gets faster or slower.
        prior_weight: The most finished tasks a remembered estimate (from an earlier gather
            on the same client, see ``docs/waiting.md``) counts for.

    ``relative_interval`` is no longer used by ``gather_until_done`` (its gaps inside the
    observed finish times are at most ``dense_interval``); it is still accepted.
    """

    first_delay: float = attrs.field(default=0.0, validator=_ge0)
    min_interval: float = attrs.field(default=1.0, validator=_gt0)
    growth: float = attrs.field(default=0.1, validator=_ge0)
    max_interval: float = attrs.field(default=15.0, validator=_gt0)
    jitter: float = attrs.field(default=0.1, validator=_fraction(0.5))
    adaptive: bool = True
    dense_interval: float = attrs.field(default=1.0, validator=_gt0)
    relative_interval: float = attrs.field(default=0.02, validator=_ge0)
    probes: int | None = attrs.field(default=None, validator=_optional_ge1)
    sparse_growth: float = attrs.field(default=2.0, validator=_ge0)
    sparse_cap: float = attrs.field(default=30.0, validator=_gt0)
    window_quantile: float = attrs.field(default=0.02, validator=_fraction(0.5))
    overdue_growth: float = attrs.field(default=0.5, validator=_ge0)
    max_consecutive_failures: int | None = attrs.field(default=8, validator=_optional_ge1)
    error_initial: float = attrs.field(default=1.0, validator=_gt0)
    error_max: float = attrs.field(default=30.0, validator=_gt0)
    rate_limit_initial: float = attrs.field(default=1.0, validator=_gt0)
    rate_limit_max: float = attrs.field(default=60.0, validator=_gt0)
    rate_decrease: float = attrs.field(
        default=0.5, validator=attrs.validators.and_(attrs.validators.gt(0.0), _fraction(1.0))
    )
    rate_recovery: float = attrs.field(default=0.1, validator=_gt0)
    coalesce: float = attrs.field(default=0.15, validator=_ge0)
    half_life: float = attrs.field(default=256.0, validator=_gt0)
    prior_weight: float = attrs.field(default=16.0, validator=_ge0)

    def __attrs_post_init__(self) -> None:
        if self.max_interval < self.min_interval:
            raise ValueError(
                f"max_interval ({self.max_interval}) must be >= min_interval ({self.min_interval})"
            )


DEFAULT_POLICY = PollPolicy()

# ---------------------------------------------------------------------------------------------
# Pure delay arithmetic
# ---------------------------------------------------------------------------------------------


def _jittered(value: float, jitter: float, rand: float) -> float:
    """``value`` scaled by a factor in ``[1 - jitter, 1 + jitter)`` chosen by ``rand``."""
    return value * (1.0 + jitter * (2.0 * rand - 1.0))


def growth_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap before the next poll of a lone object.

    Args:
        policy: The poll policy.
        age: Seconds since the object was created (or since the wait began).
        rand: A random number in ``[0, 1)``.

    Returns:
        ``clamp(age * growth, min_interval, max_interval)`` with jitter, never above
        ``max_interval`` and never below ``min_interval * (1 - jitter)``.
    """
    base = min(policy.max_interval, max(policy.min_interval, max(age, 0.0) * policy.growth))
    return min(policy.max_interval, _jittered(base, policy.jitter, rand))


def dense_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap inside a batch's finish window, and of the probes.

    Args:
        policy: The poll policy.
        age: Seconds since the task was created.
        rand: A random number in ``[0, 1)``.

    Returns:
        ``max(dense_interval, min(max_interval, age * relative_interval))`` with jitter.
    """
    base = max(
        policy.dense_interval, min(policy.max_interval, max(age, 0.0) * policy.relative_interval)
    )
    return _jittered(base, policy.jitter, rand)


def sparse_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap of a batch's non-probe id while the finish window is not known yet.

    Args:
        policy: The poll policy.
        age: Seconds since the task was created.
        rand: A random number in ``[0, 1)``.

    Returns:
        ``clamp(age * sparse_growth, min_interval, max_interval)`` with jitter, at most
        ``max_interval``.
    """
    base = min(policy.max_interval, max(policy.min_interval, max(age, 0.0) * policy.sparse_growth))
    return min(policy.max_interval, _jittered(base, policy.jitter, rand))


@attrs.frozen
class FinishWindow:
    """When, by age, the pending tasks of a batch are expected to finish.

    Attributes:
        start: Age (seconds since creation) at which dense polling begins.
        end: Age after which the gaps grow again (``inf`` while too few tasks have finished
            to tell).
        samples: How many finished durations the estimate rests on.
    """

    start: float
    end: float
    samples: int


def probe_count(policy: PollPolicy, total: int) -> int:
    """How many ids of a batch are probes.

    Args:
        policy: The poll policy.
        total: Distinct ids in the batch.

    Returns:
        ``policy.probes`` if set, otherwise ``isqrt(total)`` between 8 and 64; never more
        than ``total``.
    """
    if not policy.adaptive:
        return 0
    wanted = policy.probes if policy.probes is not None else min(64, max(8, math.isqrt(total)))
    return max(0, min(total, wanted))


def estimate_window(
    policy: PollPolicy, durations: Sequence[float], total: int
) -> FinishWindow | None:
    """Estimate a batch's finish window from the durations of its finished tasks.

    Args:
        policy: The poll policy.
        durations: ``finished_at - created_at`` of the tasks that finished, sorted ascending.
        total: Distinct ids in the batch.

    Returns:
        ``None`` when nothing has finished (or the policy is not adaptive). Otherwise the
        window: it starts one dense gap before the ``window_quantile`` of the durations; its
        end stays open (``inf``) until half the batch has finished, then lies past the longest
        duration by the larger of the spread, a quarter of that duration, and two dense gaps.
    """
    count = len(durations)
    if count == 0 or not policy.adaptive:
        return None
    low = durations[min(count - 1, int(count * policy.window_quantile))]
    start = max(0.0, low - policy.dense_interval)
    end = math.inf
    if count >= max(3, math.ceil(total * 0.5)):
        high = durations[-1]
        end = high + max(high - low, 0.25 * high, 2.0 * policy.dense_interval)
    return FinishWindow(start=start, end=end, samples=count)


def batch_delay(
    policy: PollPolicy,
    *,
    age: float,
    elapsed: float,
    window: FinishWindow | None,
    probe: bool,
    rand: float,
) -> float:
    """The gap before the next poll of one pending id of a batch.

    Two ages are used. ``age`` comes from the service's timestamps (``created_at``, with the
    clock skew removed) and places the task against the finish window, which is also measured
    on the service's clock. The growing gaps use ``min(age, elapsed)``, where ``elapsed`` is
    measured on the local clock: a service clock that runs at another rate (the sandbox with a
    ``time_scale``) or far off can then only make the polls denser, never sparser.

    Args:
        policy: The poll policy.
        age: Seconds since the task was created, on the service's clock.
        elapsed: Local seconds since the gather began.
        window: The batch's finish window, if known.
        probe: Whether the id is a probe.
        rand: A random number in ``[0, 1)``.

    Returns:
        Before the window is known: the dense gap for a probe, the sparse gap otherwise.
        Before the window: the time until it starts (a little less, by up to ``jitter``),
        at most the sparse gap and ``sparse_cap``. Inside it: the dense gap. Past its end: a
        gap growing with the time overdue, between the dense gap and ``max_interval``.
    """
    local_age = max(0.0, min(age, elapsed))
    if window is None:
        if probe:
            return dense_interval(policy, local_age, rand)
        return sparse_interval(policy, local_age, rand)
    if age < window.start:
        wait = (window.start - age) * (1.0 - policy.jitter * rand)
        cap = min(policy.sparse_cap, sparse_interval(policy, local_age, rand))
        return max(0.0, min(cap, wait))
    dense = dense_interval(policy, local_age, rand)
    if age <= window.end:
        return dense
    overdue = min(age - window.end, elapsed)
    return max(dense, min(policy.max_interval, overdue * policy.overdue_growth))


# ---------------------------------------------------------------------------------------------
# Single-object waits
# ---------------------------------------------------------------------------------------------


class _TasksAPI(Protocol):
    async def get(self, task_id: str) -> Task: ...


class PollingClient(Protocol):
    """What the wait helpers need of a client (``AsyncVideoGen`` has it)."""

    @property
    def tasks(self) -> _TasksAPI:
        """The tasks namespace."""
        ...

    def with_options(self, *, max_retries: int | None = ...) -> PollingClient:
        """A view of the client with other options, sharing its connection pool."""
        ...


@attrs.frozen
class TaskSource:
    """What the waiting engines poll through: the narrow interface to a client.

    Attributes:
        fetch: Reads one task once, with no retries of its own (the engine's loop owns the
            backoff); a failure is raised as the ``VideoGenError`` it is.
        pacing: The client's pacing state, if it has one (the gather aligns its 429 pause
            with it).
        poll_policy: The client's default poll policy, if it has one.
        finish_times: What the client remembers of finish times for its gathers (a
            ``FinishTimeMemory``), if it has one.
        hooks: The client's event hooks (the engines emit ``poll`` events), if it has any.
    """

    fetch: Callable[[str], Awaitable[Task]]
    pacing: Pacing | None = None
    poll_policy: PollPolicy | None = None
    finish_times: FinishTimeMemory | None = None
    hooks: EventHooks | None = None


def source_of(client: object) -> TaskSource:
    """The :class:`TaskSource` of a client (the top layer's one look at the client).

    ``AsyncVideoGen`` hands out its own; any other object with ``with_options`` and
    ``tasks.get`` (a :class:`PollingClient`) is read through
    ``with_options(max_retries=0).tasks.get``.

    Args:
        client: The client.

    Returns:
        Its task source.
    """
    if isinstance(client, TaskSource):
        return client
    own = getattr(client, "_task_source", None)
    if callable(own):
        source = own()
        if isinstance(source, TaskSource):
            return source
    view = client.with_options(max_retries=0)  # type: ignore[attr-defined]
    policy = getattr(client, "poll_policy", None)
    return TaskSource(
        fetch=view.tasks.get,
        poll_policy=policy if isinstance(policy, PollPolicy) else None,
        finish_times=getattr(client, "finish_times", None),
    )


def on_read(
    hooks: EventHooks | None,
    on_update: UpdateCallback[_V] | None,
    terminal: Callable[[_V], bool],
) -> Callable[[_V], Awaitable[object]] | None:
    """What a single wait does with each state it reads: the ``poll`` hooks, ``on_update``.

    ``on_update`` is called with the first state and then with each one that differs (by
    equality, which ignores the answer's metadata) from the one before; a coroutine it
    returns is awaited. Its exceptions propagate: it is the caller's own code, run inside the
    caller's call.

    Args:
        hooks: The client's event hooks, if any.
        on_update: The caller's progress callback, if any.
        terminal: Whether a state ends the wait.

    Returns:
        The callback for the wait loop, or ``None`` when there is nothing to do.
    """
    polls = hooks if hooks is not None and hooks.wants("poll") else None
    if polls is None and on_update is None:
        return None
    previous: list[_V] = []

    async def seen(value: _V) -> None:
        if polls is not None:
            await polls.emit("poll", poll_event(value, is_terminal=terminal(value)))
        if on_update is not None and (not previous or previous[0] != value):
            previous[:] = [value]
            result = on_update(value)
            if inspect.isawaitable(result):
                await result

    return seen


def _policy_of(client: object, policy: PollPolicy | None) -> PollPolicy:
    if policy is not None:
        return policy
    own = getattr(client, "poll_policy", None)
    return own if isinstance(own, PollPolicy) else DEFAULT_POLICY


async def _poll_loop(
    fetch: Callable[[], Awaitable[_T]],
    done: Callable[[_T], bool],
    age_of: Callable[[_T, float], float],
    *,
    seconds: float | None,
    policy: PollPolicy,
    what: str,
    on_value: Callable[[_T], Awaitable[object]] | None = None,
) -> _T:
    rng = random.Random()
    start = anyio.current_time()
    last: _T | None = None
    failures = 0
    rate_limited = 0
    timeout = seconds
    with anyio.move_on_after(math.inf if timeout is None else timeout):
        if policy.first_delay > 0:
            await anyio.sleep(policy.first_delay)
        while True:
            try:
                value = await fetch()
            except RateLimitError as exc:
                rate_limited += 1
                delay = rate_limit_pause(policy, rate_limited, rng.random(), exc.retry_after)
                logger.debug("%s: rate limited, pausing %.2fs", what, delay)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                failures += 1
                limit = policy.max_consecutive_failures
                if limit is not None and failures >= limit:
                    logger.warning("%s: giving up after %d failures in a row", what, failures)
                    raise
                hint = getattr(exc, "retry_after", None)
                hint = float(hint) if isinstance(hint, (int, float)) and hint >= 0 else None
                delay = error_delay(policy, failures, rng.random(), hint)
                logger.debug("%s: transient %s, retrying in %.2fs", what, exc, delay)
            else:
                failures = 0
                rate_limited = 0
                last = value
                finished = done(value)
                if on_value is not None:
                    await on_value(value)
                if finished:
                    return value
                elapsed = anyio.current_time() - start
                delay = growth_interval(policy, age_of(value, elapsed), rng.random())
            await anyio.sleep(delay)
    raise WaitTimeoutError(
        f"{what} was not done after {timeout:g} s", last=last, pending=(what,), timeout=timeout
    )


async def poll_until(
    fetch: Callable[[], Awaitable[_T]],
    done: Callable[[_T], bool],
    *,
    timeout: float | None,  # noqa: ASYNC109 - the wait helpers' documented signature
    poll_policy: PollPolicy | None,
    what: str,
    on_value: Callable[[_T], Awaitable[object]] | None = None,
) -> _T:
    """Poll one object until ``done`` says so.

    The gaps grow with the time waited (see :func:`growth_interval`). A transient failure
    (connection error, 5xx, 408, garbled body) backs off and goes on; a 429 pauses for its
    ``Retry-After``; ``max_consecutive_failures`` transient failures in a row, or any other
    error, are raised. An exception raised by ``done`` propagates as it is.

    Args:
        fetch: Reads the object once.
        done: Whether the object read is final.
        timeout: Deadline in seconds for the whole wait (``None``: none).
        poll_policy: The poll policy (``None``: the defaults).
        what: Names the object in errors and logs, e.g. ``"project p_123"``; also the one
            entry of ``WaitTimeoutError.pending``.
        on_value: Awaited with each value read, after ``done`` has judged it (an exception
            it raises ends the wait with that exception).

    Returns:
        The first value for which ``done`` is true.

    Raises:
        WaitTimeoutError: The deadline passed; ``.last`` is the last value read (or ``None``).
        VideoGenError: A permanent failure, or the last of too many transient ones.
    """
    policy = poll_policy or DEFAULT_POLICY
    return await _poll_loop(
        fetch,
        done,
        lambda _value, elapsed: elapsed,
        seconds=timeout,
        policy=policy,
        what=what,
        on_value=on_value,
    )


async def wait_for_task(
    client: PollingClient,
    task_id: str,
    *,
    timeout: float | None,  # noqa: ASYNC109 - the wait helpers' documented signature
    raise_on_failure: bool,
    poll_policy: PollPolicy | None,
) -> Task:
    """Poll one task of ``client`` until it is terminal (see :func:`wait_on_source`).

    Args:
        client: The client (``AsyncVideoGen``, or any :class:`PollingClient`).
        task_id: The task.
        timeout: Deadline in seconds for the whole wait (``None``: none).
        raise_on_failure: Raise :class:`TaskFailedError` when the task ends failed or error.
        poll_policy: The poll policy (``None``: the client's).

    Returns:
        The task in a terminal state.
    """
    source = source_of(client)
    policy = poll_policy or source.poll_policy or _policy_of(client, None)
    return await wait_on_source(
        source, task_id, timeout=timeout, raise_on_failure=raise_on_failure, poll_policy=policy
    )


async def wait_on_source(
    source: TaskSource,
    task_id: str,
    *,
    timeout: float | None,  # noqa: ASYNC109 - the wait helpers' documented signature
    raise_on_failure: bool,
    poll_policy: PollPolicy | None,
    on_update: UpdateCallback[Task] | None = None,
) -> Task:
    """Poll one task until it is terminal.

    Polls ``source.fetch`` (one read, no retries of its own) so that this loop alone owns the
    backoff; gaps grow with the task's age (from its ``created_at``).

    Args:
        source: Where the task is read.
        task_id: The task.
        timeout: Deadline in seconds for the whole wait (``None``: none).
        raise_on_failure: Raise :class:`TaskFailedError` when the task ends failed or error.
        poll_policy: The poll policy (``None``: the source's, else the defaults).
        on_update: Called (or awaited) with each state of the task that differs from the
            one before, the first read included; an exception it raises ends the wait.

    Returns:
        The task in a terminal state.

    Raises:
        WaitTimeoutError: The deadline passed; ``.last`` is the last ``Task`` seen (or
            ``None``), ``.pending`` is ``(task_id,)``.
        TaskFailedError: The task failed and ``raise_on_failure`` was set.
        VideoGenError: A permanent failure (e.g. ``NotFoundError``), or the last of too many
            transient ones.
    """
    policy = poll_policy or source.poll_policy or DEFAULT_POLICY
    get = source.fetch

    def age_of(task: Task, elapsed: float) -> float:
        if task.created_at is None:
            return elapsed
        return max(elapsed, time.time() - task.created_at.timestamp())

    on_value = on_read(source.hooks, on_update, lambda t: t.is_terminal)
    try:
        with wait_span("task", task_id) as span:
            task = await _poll_loop(
                lambda: get(task_id),
                lambda t: t.is_terminal,
                age_of,
                seconds=timeout,
                policy=policy,
                what=task_id,
                on_value=on_value,
            )
            end_wait(span, task)
    except WaitTimeoutError as exc:
        exc.message = f"task {task_id} was not terminal after {timeout:g} s"
        exc.args = (exc.message,)
        raise
    if raise_on_failure and task.is_failed:
        raise TaskFailedError(task)
    return task
