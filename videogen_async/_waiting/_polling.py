"""The single-object waits, and the narrow interface every waiting engine polls.

* :func:`poll_until`: one object, on the growing gaps of ``_policy.growth_interval``; after a
  failure ``decide_retry`` (as a poll) decides; requests share the client's ``_pacing``.
* :class:`TaskSource`: engines never see the client, only one read of one task (no retries of
  its own, the client's pacing and backoff policy).
"""

from __future__ import annotations

import asyncio
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
from .._contract._models import GetTask, Project, Task
from .._http._pacing import Pacing, paced
from .._http._retry import DEFAULT_BACKOFF, BackoffPolicy, decide_retry
from .._observe._hooks import EventHooks
from .._observe._spans import end_wait, poll_event, wait_span
from ._policy import DEFAULT_POLICY, PollPolicy, growth_interval
from ._schedule import FinishTimeMemory

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_V = TypeVar("_V", Task, Project)

#: A progress callback of a single wait: a plain or async callable taking each new state.
UpdateCallback = Callable[[_V], Union[Awaitable[object], object]]  # noqa: UP007


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
        fetch: Reads one task once, with no retries of its own (the engine owns the backoff).
        pacing: The client's pacing, if it has one (a source without one is paced on its own).
        poll_policy: The client's default poll policy, if it has one.
        backoff: The client's backoff policy.
        finish_times: What the client remembers of finish times for its gathers, if anything.
        hooks: The client's event hooks (the engines emit ``poll`` events), if any.
    """

    fetch: GetTask
    pacing: Pacing | None = None
    poll_policy: PollPolicy | None = None
    backoff: BackoffPolicy = DEFAULT_BACKOFF
    finish_times: FinishTimeMemory | None = None
    hooks: EventHooks | None = None

    def paced(self) -> tuple[GetTask, Pacing]:
        """``fetch`` and the pacing it goes through: the client's, else one of its own."""
        if self.pacing is not None:
            return self.fetch, self.pacing
        pacing = Pacing()
        return paced(self.fetch, pacing, self.backoff), pacing


def source_of(client: object) -> TaskSource:
    """The :class:`TaskSource` of a client: ``AsyncVideoGen``'s own, else a new one.

    Another client (a :class:`PollingClient`) is read through
    ``with_options(max_retries=0).tasks.get``, with its ``poll_policy`` and ``backoff``.
    """
    if isinstance(client, TaskSource):
        return client
    own = getattr(client, "_task_source", None)
    if callable(own):
        source = own()
        if isinstance(source, TaskSource):
            return source
    policy = getattr(client, "poll_policy", None)
    backoff = getattr(client, "backoff", None)
    return TaskSource(
        fetch=client.with_options(max_retries=0).tasks.get,  # type: ignore[attr-defined]
        poll_policy=policy if isinstance(policy, PollPolicy) else None,
        backoff=backoff if isinstance(backoff, BackoffPolicy) else DEFAULT_BACKOFF,
        finish_times=getattr(client, "finish_times", None),
    )


def on_read(
    hooks: EventHooks | None, on_update: UpdateCallback[_V] | None, terminal: Callable[[_V], bool]
) -> Callable[[_V], Awaitable[object]] | None:
    """What a single wait does with each state it reads (``None``: nothing).

    The ``poll`` hooks hear of every state (``terminal`` says whether it ends the wait);
    ``on_update`` of the first and of each one that differs (by equality, which ignores the
    answer's metadata) from the one before. Its exceptions propagate: it is the caller's code.
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


async def poll_until(
    fetch: Callable[[], Awaitable[_T]],
    done: Callable[[_T], bool],
    *,
    timeout: float | None,  # noqa: ASYNC109 - the wait helpers' documented signature
    poll_policy: PollPolicy | None,
    what: str,
    backoff: BackoffPolicy = DEFAULT_BACKOFF,
    on_value: Callable[[_T], Awaitable[object]] | None = None,
    age_of: Callable[[_T, float], float] = lambda _value, elapsed: elapsed,
    pending: str | None = None,
    after: _T | None = None,
) -> _T:
    """Poll one object (named ``what`` in errors and logs) until ``done`` says so.

    Gaps grow with the object's age (``age_of``; default: the seconds waited), so that an
    object that has run long is not polled as often as a new one: the lag stays a fraction
    of its run time. ``after`` is a value the caller read last (``tasks.watch`` between two
    states): the first poll then waits the gap that value's age gives, as if this loop had
    read it, instead of ``first_delay``. After a failure ``decide_retry`` (as a poll)
    decides: transient failures back off, a 429 waits its ``Retry-After``;
    ``backoff.max_consecutive_failures`` in a row, any other error, and what ``done`` or
    ``on_value`` (awaited per value) raise are raised.

    Raises:
        WaitTimeoutError: The deadline passed, or a wait asked for after a failure would
            pass it; ``.last`` is the last value read, ``.pending`` is ``(pending or what,)``.
        VideoGenError: A permanent failure, or the last of too many transient ones.
    """
    policy = poll_policy or DEFAULT_POLICY
    rng = random.Random()
    # The loop's clock read directly (asyncio's is time.monotonic): anyio.current_time() and
    # anyio.sleep find the backend on every call, a poll's share of CPU for nothing.
    start = time.monotonic()
    end = math.inf if timeout is None else start + timeout
    last = after
    failures = 0  # transient failures in a row, 429s apart (the pacing answers those)

    def timed_out(why: str = "") -> WaitTimeoutError:
        return WaitTimeoutError(
            f"{what} was not done after {timeout:g} s{why}",
            last=last,
            pending=(pending or what,),
            timeout=timeout,
        )

    def gap(value: _T) -> float:
        return growth_interval(policy, age_of(value, time.monotonic() - start), rng.random())

    with anyio.move_on_after(timeout):  # None: no deadline
        delay = policy.first_delay if after is None else gap(after)
        while True:
            await asyncio.sleep(delay)
            try:
                value = await fetch()
            except Exception as exc:
                decision = decide_retry(
                    exc,
                    failures=failures + 1,
                    policy=backoff,
                    poll=True,
                    remaining=end - time.monotonic(),
                    rng=rng,
                )
                if decision.delay is None:
                    if decision.reason == "exhausted":
                        logger.warning("%s: giving up: %s", what, decision.detail)
                    if decision.reason != "too long":
                        raise
                    # The wait the failure asks for would pass the deadline.
                    raise timed_out(f": {decision.detail}") from exc
                logger.debug("%s: %s; polling again in %.2fs", what, exc, decision.delay)
                failures += not isinstance(exc, RateLimitError)
                delay = decision.delay
                continue
            failures = 0
            last = value
            finished = done(value)
            if on_value is not None:
                await on_value(value)
            if finished:
                return value
            delay = gap(value)
    raise timed_out()


async def wait_on_source(
    source: TaskSource,
    task_id: str,
    *,
    timeout: float | None,  # noqa: ASYNC109 - the wait helpers' documented signature
    raise_on_failure: bool,
    poll_policy: PollPolicy | None,
    on_update: UpdateCallback[Task] | None = None,
    done: Callable[[Task], bool] | None = None,
    after: Task | None = None,
) -> Task:
    """``tasks.wait`` and ``tasks.watch`` below the client: :func:`poll_until` on ``source``.

    The source's reads have no retries of their own (this loop owns the backoff) and are
    paced by its pacing, or one of this wait's own; the gaps grow with the task's age (from
    its ``created_at``), so a task an hour old is polled as one, whoever waits. ``done``
    says when the wait ends (``None``: a terminal state; ``tasks.watch`` waits for the next
    state that differs from ``after``, the last it yielded, and waits that state's gap before
    its first poll). The other arguments and the errors are those of ``tasks.wait``.
    """
    get, _ = source.paced()

    def age_of(task: Task, elapsed: float) -> float:
        if task.created_at is None:
            return elapsed
        return max(elapsed, time.time() - task.created_at.timestamp())

    with wait_span("task", task_id) as span:
        task = await poll_until(
            lambda: get(task_id),
            done or (lambda t: t.is_terminal),
            timeout=timeout,
            poll_policy=poll_policy or source.poll_policy,
            what=f"task {task_id}",
            backoff=source.backoff,
            on_value=on_read(source.hooks, on_update, lambda t: t.is_terminal),
            age_of=age_of,
            pending=task_id,
            after=after,
        )
        end_wait(span, task)
    if raise_on_failure and task.is_failed:
        raise TaskFailedError(task)
    return task
