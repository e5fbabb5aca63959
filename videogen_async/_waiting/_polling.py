"""The single-object wait helpers, and the narrow interface every waiting engine polls.

* :func:`poll_until`, :func:`wait_for_task`, :func:`wait_on_source`: one object
  (``tasks.wait``, ``projects.wait``), polled on the growing gaps of the poll policy
  (``_policy``: :class:`PollPolicy`, :func:`growth_interval`).
* After a transient failure or a 429 the loops ask the one retry engine (``_retry``:
  :func:`error_delay`, :func:`rate_limit_pause`), and every request is paced by the client's
  ``_pacing`` state, so a 429 slows the whole client.
* :class:`TaskSource`: the waiting engines never see the client: they poll through one read
  of one task, with no retries of its own, and the client's pacing. :func:`source_of` makes
  one from a client.

The policy's names (and the retry engine's backoff arithmetic) are re-exported here for code
that imported them from this module.
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar, Union

import anyio
import attrs

from .._contract._exceptions import RateLimitError, TaskFailedError, WaitTimeoutError
from .._contract._models import Project, Task
from .._http._pacing import Pacing
from .._http._retry import (
    aimd_decrease,
    aimd_increase,
    error_delay,
    is_transient,
    rate_limit_pause,
    recovered_rate,
)
from .._observe._hooks import EventHooks
from .._observe._spans import end_wait, poll_event, wait_span
from ._policy import (
    DEFAULT_POLICY,
    FinishWindow,
    PollPolicy,
    batch_delay,
    dense_interval,
    estimate_window,
    growth_interval,
    probe_count,
    sparse_interval,
)
from ._schedule import FinishTimeMemory

__all__ = [
    "DEFAULT_POLICY",
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
    "sparse_interval",
    "wait_for_task",
    "wait_on_source",
]

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_V = TypeVar("_V", Task, Project)

#: A progress callback of a single wait: a plain or async callable taking each new state.
UpdateCallback = Callable[[_V], Union[Awaitable[object], object]]  # noqa: UP007

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
