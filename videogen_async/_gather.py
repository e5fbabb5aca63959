"""``gather_until_done``: wait on many task ids at once, with one scheduler for all of them.

Design (see ``docs/waiting.md`` for the user's view):

* **One scheduler.** The next poll of every pending id is an entry of one heap (``heapq``),
  so scheduling a poll costs O(log n) and nothing scans all ids per tick. Entries made stale
  by a rescheduling are skipped when they reach the top (lazy deletion).
* **Bounded concurrency.** ``max_concurrency`` worker tasks poll. One dispatcher waits for
  the next due id (and for an idle worker, the allowed concurrency, the pacing of the request
  rate or the end of a 429 pause) and hands every id due before its next wake to an idle
  worker through a future: no task is created per poll, and the event loop wakes at most once
  per ``coalesce`` seconds for the dispatching, however many ids are due.
* **Finish times per class** are learned from every terminal task (``_schedule``: a decaying
  histogram per class key, with what the client remembers of the class as a prior), with a
  few probe ids per class polled densely until the first one finishes. When a class's
  support first becomes known, starts earlier or ends later, its waiting ids whose support
  starts sooner than their next poll are pulled forward: an O(k log n) pass over the class,
  a handful of times per class, never per poll.
* **Overload.** A 429 pauses every poll until its ``Retry-After`` (or a backoff), halves the
  allowed concurrency and the request rate, which then recover additively (AIMD). Other
  transient failures back off only their id.
* **No cancel scope across a yield.** The polling runs in a task group owned either by the
  ``async with`` block or by a background asyncio task started by the first ``__anext__`` of
  a plain ``async for``; results reach the consumer through an anyio memory object stream,
  and the consumer side never yields inside a cancel scope.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import random
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import attrs
from anyio.abc import TaskGroup

from ._exceptions import RateLimitError, TaskPollError, WaitTimeoutError
from ._models import Task
from ._observe import observe_gather
from ._polling import (
    PollingClient,
    PollPolicy,
    TaskSource,
    _policy_of,
    aimd_decrease,
    aimd_increase,
    growth_interval,
    probe_count,
    recovered_rate,
    source_of,
)
from ._retry import error_delay, is_transient, rate_limit_pause, retry_after_of
from ._schedule import ClassModel, FinishTimeMemory, Support, next_delay
from ._validation import check_id

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "GatherProgress",
    "GatherResults",
    "gather_until_done",
]

logger = logging.getLogger("videogen_async")

DEFAULT_MAX_CONCURRENCY = 32
"""Requests in flight at most, by default (see ``bench/gather.py``)."""

_BACKGROUND: set[asyncio.Task[None]] = set()
"""Strong references to the background runners of plain ``async for`` consumers."""


@attrs.frozen
class GatherProgress:
    """A snapshot of a gather's progress, readable at any time without consuming results.

    Attributes:
        total: Distinct ids being waited on.
        succeeded: Ids seen succeeded.
        failed: Ids seen failed or error (a result, not an exception).
        errors: Ids that could not be polled (permanent failure or timeout).
        pending: Ids not finished yet.
        requests: Polls sent so far.
        transient_errors: Polls that failed transiently (including 429s).
        rate_limited: Polls answered 429.
        in_flight: Polls in flight now.
        peak_in_flight: The most polls that were in flight at once.
        concurrency_limit: Polls allowed in flight now (lowered by 429s, recovering).
        paused: Whether polling is paused by a 429.
        elapsed: Seconds since the gather started (0 before).
    """

    total: int
    succeeded: int = 0
    failed: int = 0
    errors: int = 0
    pending: int = 0
    requests: int = 0
    transient_errors: int = 0
    rate_limited: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    concurrency_limit: int = 0
    paused: bool = False
    elapsed: float = 0.0

    @property
    def done(self) -> int:
        """Ids finished: succeeded, failed or could not be polled."""
        return self.succeeded + self.failed + self.errors


@attrs.frozen
class _Fatal:
    """The item that ends the stream with an error (``return_exceptions=False``)."""

    error: BaseException


_Item = Task | TaskPollError | _Fatal


class _Class:
    """The scheduler's record of one class of ids (one per class key; ``None``: no key)."""

    __slots__ = ("key", "learned", "model", "pending", "states", "support")

    def __init__(self, key: object) -> None:
        self.key = key
        self.states: list[_IdState] = []
        self.pending = 0
        self.model: ClassModel | None = None
        self.support: Support | None = None
        self.learned = 0  # finishes since the memory was last updated


class _IdState:
    """The scheduler's record of one distinct id."""

    __slots__ = (
        "created",
        "done",
        "due",
        "entry",
        "failures",
        "klass",
        "probe",
        "sent",
        "task_id",
    )

    def __init__(self, task_id: str, klass: _Class) -> None:
        self.task_id = task_id
        self.klass = klass
        self.created = math.nan  # server epoch seconds of created_at (nan: not seen yet)
        self.due = 0.0  # monotonic time of the next poll
        self.entry = -1  # counter of its live heap entry (-1: none, e.g. in flight)
        self.failures = 0  # transient failures in a row
        self.sent = math.nan  # wall time of the last poll that found it pending
        self.probe = False
        self.done = False


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Coordinator:
    """The polling engine of one gather. Holds no reference to the consumer's object."""

    def __init__(
        self,
        source: TaskSource,
        ids: dict[str, _IdState],
        *,
        timeout: float | None,
        max_concurrency: int,
        return_exceptions: bool,
        policy: PollPolicy,
        on_progress: Callable[[GatherProgress], object] | None,
        progress_interval: float,
        classes: dict[object, _Class] | None = None,
        memory: FinishTimeMemory | None = None,
    ) -> None:
        self._source = source
        self._states = ids
        if classes is None:
            classes = {}
            for state in ids.values():
                classes.setdefault(state.klass.key, state.klass)
        self._classes = classes
        self._memory = memory
        self._start_age = 0.0  # the oldest age at the start seen among the answered ids
        self._timeout = timeout
        self._max_concurrency = max_concurrency
        self._return_exceptions = return_exceptions
        self._policy = policy
        self._on_progress = on_progress
        self._progress_interval = progress_interval
        self._rng = random.Random()
        self._total = len(ids)
        self._remaining = len(ids)
        # Scheduling.
        self._heap: list[tuple[float, int, _IdState]] = []
        self._counter = 0
        self._now: Callable[[], float] = time.monotonic
        self._early = min(policy.coalesce, 0.2 * policy.dense_interval)
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at = -math.inf  # when the dispatcher wakes by itself (inf: on an event)
        self._need_worker = False  # the dispatcher waits for an idle worker
        self._idle: list[asyncio.Future[_IdState | None]] = []
        self._closing = False
        self._last_round = -math.inf  # when the dispatcher last sent polls
        self._skew_low = -math.inf  # bounds of (local wall clock - server clock)
        self._skew_high = math.inf
        self._skew = 0.0
        self._wall_offset = 0.0  # wall clock - monotonic clock
        # Overload control.
        self._limit = float(max_concurrency)
        self._paused_until = -math.inf
        self._rate_events = 0
        self._last_cut = -math.inf
        self._reduced_rate = math.inf
        self._rate = math.inf
        self._next_send = -math.inf
        self._window_start = 0.0
        self._window_sent = 0
        self._measured_rate = 0.0
        # Counters.
        self._succeeded = 0
        self._failed = 0
        self._errors = 0
        self._requests = 0
        self._transient = 0
        self._rate_limited = 0
        self._in_flight = 0
        self._peak = 0
        self._started = math.nan
        # Life cycle.
        self._send: MemoryObjectSendStream[_Item] | None = None
        self._scope: anyio.CancelScope | None = None
        self._fatal: BaseException | None = None
        self._stopped = False
        self.finished = anyio.Event()

    # -- life cycle -----------------------------------------------------------------------------

    def open_stream(self) -> MemoryObjectReceiveStream[_Item]:
        send, receive = anyio.create_memory_object_stream[_Item](math.inf)
        self._send = send
        return receive

    def stop(self) -> None:
        """Stop polling (the consumer went away or closed the gather); synchronous."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()
        if self._send is not None:
            self._send.close()

    async def run(self) -> None:
        """Poll until every id is finished, the deadline passes or a fatal error."""
        # Observed: the ``poll`` hooks, and one span around the whole gather.
        source = self._source
        with observe_gather(source.fetch, source.hooks, self._total) as watch:
            self._source = attrs.evolve(source, fetch=watch.fetch)
            await self._run()
            watch.done(
                succeeded=self._succeeded,
                failed=self._failed,
                errors=self._errors,
                fatal=self._fatal,
            )

    async def _run(self) -> None:
        send = self._send
        if send is None:
            raise RuntimeError("open_stream() was not called")
        try:
            with send:
                loop = asyncio.get_running_loop()
                self._now = loop.time
                now = loop.time()
                self._started = now
                self._wall_offset = time.time() - now
                deadline = math.inf if self._timeout is None else now + self._timeout
                self._start_schedule(now)
                try:
                    with anyio.CancelScope(deadline=deadline) as scope:
                        self._scope = scope
                        if self._stopped:
                            scope.cancel()
                        async with anyio.create_task_group() as tg:
                            if self._on_progress is not None:
                                tg.start_soon(self._ticker)
                            async with anyio.create_task_group() as workers:
                                for _ in range(min(self._max_concurrency, self._remaining)):
                                    workers.start_soon(self._worker)
                                await self._dispatch(loop)
                            tg.cancel_scope.cancel()
                except Exception as exc:  # a bug: end the consumer's loop with it, not silently
                    logger.exception("gather_until_done: the coordinator failed")
                    self._fatal = exc
                    self._finish(send, timed_out=False)
                    return
                self._scope = None
                self._finish(send, timed_out=scope.cancelled_caught)
        finally:
            self._scope = None
            self.finished.set()

    def _finish(self, send: MemoryObjectSendStream[_Item], *, timed_out: bool) -> None:
        if self._stopped:
            return
        try:
            if self._fatal is None and timed_out and self._remaining > 0:
                self._on_timeout(send)
            if self._fatal is None:
                self._report_progress()  # the last call; it may still fail the gather
            if self._fatal is not None:
                send.send_nowait(_Fatal(self._fatal))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return

    def _on_timeout(self, send: MemoryObjectSendStream[_Item]) -> None:
        pending = tuple(s.task_id for s in self._states.values() if not s.done)
        logger.info(
            "gather_until_done: %d ids still pending after %ss", len(pending), self._timeout
        )
        if not self._return_exceptions:
            self._fatal = WaitTimeoutError(
                f"{len(pending)} of {self._total} tasks were not terminal after"
                f" {self._timeout:g} s",
                pending=pending,
                timeout=self._timeout,
            )
            return
        for task_id in pending:
            cause = WaitTimeoutError(
                f"task {task_id} was not terminal after {self._timeout:g} s",
                pending=(task_id,),
                timeout=self._timeout,
            )
            self._errors += 1
            self._remaining -= 1
            send.send_nowait(TaskPollError(task_id, cause))

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
        if self._scope is not None:
            self._scope.cancel()

    # -- progress -------------------------------------------------------------------------------

    def snapshot(self) -> GatherProgress:
        started = self._started
        now = self._now() if not math.isnan(started) else math.nan
        return GatherProgress(
            total=self._total,
            succeeded=self._succeeded,
            failed=self._failed,
            errors=self._errors,
            pending=self._remaining,
            requests=self._requests,
            transient_errors=self._transient,
            rate_limited=self._rate_limited,
            in_flight=self._in_flight,
            peak_in_flight=self._peak,
            concurrency_limit=int(self._limit),
            paused=now < self._paused_until,
            elapsed=0.0 if math.isnan(now) else now - started,
        )

    def _report_progress(self) -> None:
        if self._on_progress is None:
            return
        try:
            self._on_progress(self.snapshot())
        except Exception as exc:
            logger.exception("gather_until_done: on_progress raised")
            self._fail(exc)

    async def _ticker(self) -> None:
        while True:
            await anyio.sleep(self._progress_interval)
            self._report_progress()

    # -- scheduling -----------------------------------------------------------------------------

    def _start_schedule(self, now: float) -> None:
        """Build each class's model (from the memory, if any) and push every id's first poll.

        The probes of each class (see :func:`probe_count`) poll first. The other ids poll at
        once too unless their class is remembered, in which case their first poll waits
        for the class's support (assuming the ids were just created; a probe that shows them
        older brings them forward, see :meth:`_next_delay`).
        """
        policy = self._policy
        first = now + policy.first_delay
        for klass in self._classes.values():
            klass.pending = len(klass.states)
            if policy.adaptive:
                prior = self._memory.load(klass.key) if self._memory is not None else None
                klass.model = ClassModel(
                    half_life=policy.half_life,
                    prior=prior,
                    prior_weight=policy.prior_weight,
                    low_quantile=policy.window_quantile,
                    high_quantile=1.0 - policy.window_quantile,
                )
                klass.support = klass.model.support(klass.pending)
            probes = probe_count(policy, len(klass.states))
            later = first
            if klass.support is not None:
                wait = klass.support.start - policy.dense_interval
                later = first + min(policy.sparse_cap, max(0.0, wait))
            for index, state in enumerate(klass.states):
                state.probe = index < probes
                self._push(state, first if state.probe else later)

    def _push(self, state: _IdState, due: float) -> None:
        self._counter += 1
        state.due = due
        state.entry = self._counter
        heapq.heappush(self._heap, (due, self._counter, state))
        if due < self._wake_at:
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _ready_in(self, now: float) -> float:
        """Seconds until a poll may be sent (0: now); ``inf`` when waiting for an event."""
        if now < self._paused_until:
            return self._paused_until - now
        if not self._idle or self._in_flight >= int(self._limit):
            self._need_worker = True
            return math.inf
        heap = self._heap
        while heap and heap[0][2].entry != heap[0][1]:
            heapq.heappop(heap)
        if not heap:
            return math.inf
        due = heap[0][0]
        if due > now:
            # Wake at most once per `early` seconds, sending everything due before the next
            # wake: a poll leaves up to `early` seconds before its time. An overdue id (a
            # backlog) is sent at once.
            wait = max(due - self._early, self._last_round + self._early) - now
            if wait > 0:
                return wait
        if self._rate != math.inf:
            self._refresh_rate(now)
            if self._rate != math.inf and now + self._early < self._next_send:
                return self._next_send - self._early - now
        return 0.0

    def _refresh_rate(self, now: float) -> None:
        self._rate = recovered_rate(
            self._policy, self._reduced_rate, now - max(self._last_cut, self._paused_until)
        )

    async def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand due ids to idle workers until every id is finished (the scheduler's loop).

        Ids due within ``early`` seconds are sent together, a little early, so that the loop
        wakes once for them rather than once each.
        """
        while self._remaining > 0 and self._fatal is None and not self._stopped:
            now = loop.time()
            wait = self._ready_in(now)
            if wait <= 0:
                self._send_due(now)
                continue
            waiter = loop.create_future()
            self._waiter = waiter
            self._wake_at = now + wait
            handle = None if wait == math.inf else loop.call_at(now + wait, _resolve, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                self._wake_at = -math.inf
                self._need_worker = False
                if handle is not None:
                    handle.cancel()
        self._closing = True
        for idle in self._idle:
            if not idle.done():
                idle.set_result(None)
        self._idle.clear()

    def _send_due(self, now: float) -> None:
        heap, idle = self._heap, self._idle
        horizon = now + self._early
        limit = int(self._limit)
        while heap and idle and self._in_flight < limit:
            due, entry, state = heap[0]
            if state.entry != entry:
                heapq.heappop(heap)
                continue
            if due > horizon or (self._rate != math.inf and self._next_send > horizon):
                break
            worker = idle.pop()
            if worker.done():  # its worker was cancelled (the gather is ending)
                continue
            heapq.heappop(heap)
            state.entry = -1
            self._dispatched(now)
            self._last_round = now
            worker.set_result(state)

    def _dispatched(self, now: float) -> None:
        self._requests += 1
        self._in_flight += 1
        self._peak = max(self._peak, self._in_flight)
        # Request rate over the last second, used to set the rate after a 429.
        if now - self._window_start >= 1.0:
            self._measured_rate = self._window_sent / (now - self._window_start)
            self._window_start = now
            self._window_sent = 0
        self._window_sent += 1
        if self._rate != math.inf:
            self._next_send = max(self._next_send, now) + 1.0 / self._rate

    async def _worker(self) -> None:
        get = self._source.fetch
        loop = asyncio.get_running_loop()
        idle = self._idle
        state: _IdState | None = None
        while not self._closing:
            if state is None:
                assigned: asyncio.Future[_IdState | None] = loop.create_future()
                idle.append(assigned)
                if self._need_worker:
                    self._wake()
                state = await assigned
                if state is None:
                    return
            sent = loop.time()
            try:
                task = await get(state.task_id)
            except Exception as exc:
                self._in_flight -= 1
                self._on_error(state, exc, sent)
            else:
                self._in_flight -= 1
                self._on_task(state, task, sent)
            if self._remaining <= 0 or self._fatal is not None:
                self._wake()
                state = None
            else:
                state = self._take_overdue(loop.time())

    def _take_overdue(self, now: float) -> _IdState | None:
        """The overdue id a worker that just finished may poll at once (a backlog), if any."""
        heap = self._heap
        if now < self._paused_until or self._in_flight >= int(self._limit):
            return None
        while heap and heap[0][2].entry != heap[0][1]:
            heapq.heappop(heap)
        if not heap or heap[0][0] > now:
            return None
        if self._rate != math.inf:
            self._refresh_rate(now)
            if self._rate != math.inf and now < self._next_send:
                return None
        state = heapq.heappop(heap)[2]
        state.entry = -1
        self._dispatched(now)
        return state

    # -- results --------------------------------------------------------------------------------

    def _age(self, state: _IdState, now: float) -> float:
        return (now + self._wall_offset - self._skew) - state.created

    def _on_task(self, state: _IdState, task: Task, sent: float) -> None:
        now = self._now()
        state.failures = 0
        self._rate_events = 0
        if self._limit < self._max_concurrency:
            self._limit = aimd_increase(self._limit, self._max_concurrency)
        if state.created != state.created:  # first answer: learn the creation time
            created = task.created_at
            state.created = created.timestamp() if created is not None else sent + self._wall_offset
        if task.is_terminal:
            self._learn(state, task, now)
            self._complete(state, task)
            return
        state.sent = sent + self._wall_offset
        self._push(state, now + self._next_delay(state, now))

    def _next_delay(self, state: _IdState, now: float) -> float:
        """The gap before the next poll of a pending id (see :func:`next_delay`)."""
        policy = self._policy
        elapsed = now - self._started
        age = self._age(state, now)
        if not policy.adaptive:
            return growth_interval(policy, min(age, elapsed), self._rng.random())
        self._saw_age(age - elapsed, now)
        return next_delay(
            age=age,
            elapsed=elapsed,
            support=state.klass.support,
            probe=state.probe,
            rand=self._rng.random(),
            interval=policy.dense_interval,
            probe_interval=policy.dense_interval,
            min_interval=policy.min_interval,
            sparse_growth=policy.sparse_growth,
            sparse_cap=policy.sparse_cap,
            max_interval=policy.max_interval,
            overdue_growth=policy.overdue_growth,
            jitter=policy.jitter,
        )

    def _saw_age(self, start_age: float, now: float) -> None:
        """Note an id's age at the gather's start; ids older than assumed come forward."""
        if start_age > self._start_age + 0.5 * self._policy.dense_interval:
            # The deferred first polls of remembered classes assumed younger ids.
            self._start_age = start_age
            for klass in self._classes.values():
                if klass.support is not None:
                    self._pull_forward(klass, now)

    def _learn(self, state: _IdState, task: Task, now: float) -> None:
        """Learn the clock skew and the class's finish times from a terminal task.

        Every terminal state counts (failed and error tasks end on a schedule too). The
        support is recomputed for each of a class's first 64 finishes, then after every
        1/32 more (and at the class's last): a pass over a few hundred bins, never per poll.
        """
        klass = state.klass
        klass.pending -= 1
        result = task.result
        finished = result.finished_at if result is not None else None
        if finished is None or task.created_at is None or not self._policy.adaptive:
            return
        finished_ts = finished.timestamp()
        # Bracket (local wall - server) between the last pending poll and this answer.
        high = now + self._wall_offset - finished_ts
        low = state.sent - finished_ts if state.sent == state.sent else -math.inf
        if high < self._skew_low or low > self._skew_high:  # a clock jumped: start over
            self._skew_low, self._skew_high = low, high
        else:
            self._skew_low = max(self._skew_low, low)
            self._skew_high = min(self._skew_high, high)
        self._skew = min(max(0.0, self._skew_low), self._skew_high)
        model = klass.model
        if model is None:
            return
        self._saw_age(self._age(state, now) - (now - self._started), now)
        model.add(finished_ts - task.created_at.timestamp())
        klass.learned += 1
        count = model.sketch.count
        if count > 64 and klass.learned * 32 < count and klass.pending > 0:
            return
        klass.learned = 0
        old = klass.support
        new = model.support(klass.pending)
        klass.support = new
        if self._memory is not None:
            self._memory.update(klass.key, model.sketch.snapshot())
        if new is None:
            return
        half = 0.5 * self._policy.dense_interval
        if old is None or new.start < old.start - half or new.end > old.end + half:
            self._pull_forward(klass, now)

    def _pull_forward(self, klass: _Class, now: float) -> None:
        """Bring forward the ids of a class whose support starts before their next poll.

        An O(k log n) pass over the class's k ids, done when its support is first known,
        starts earlier or ends later: a handful of times per class, never per poll.
        """
        support = klass.support
        if support is None:
            return
        moved = 0
        assumed = self._start_age + now - self._started  # the age of an id not answered yet
        lead = support.start - self._policy.dense_interval
        for state in klass.states:
            if state.done or state.entry < 0:
                continue
            age = self._age(state, now) if state.created == state.created else assumed
            due = now + max(0.0, lead - age)
            if due < state.due:
                self._push(state, due)
                moved += 1
        logger.debug(
            "gather_until_done: class %r finishes from %.2fs of age (%.0f samples); %d ids"
            " moved up",
            klass.key,
            support.start,
            support.samples,
            moved,
        )

    def _complete(self, state: _IdState, item: Task | TaskPollError) -> None:
        state.done = True
        self._remaining -= 1
        if isinstance(item, TaskPollError):
            self._errors += 1
        elif item.is_succeeded:
            self._succeeded += 1
        else:
            self._failed += 1
        try:
            self._send.send_nowait(item)  # type: ignore[union-attr]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.stop()
            return
        self._report_progress()

    def _on_error(self, state: _IdState, exc: Exception, sent: float) -> None:
        now = self._now()
        policy = self._policy
        if not is_transient(exc):
            self._give_up(state, exc)
            return
        self._transient += 1
        if isinstance(exc, RateLimitError):
            self._rate_limited += 1
            if sent >= self._last_cut:  # one cut per 429 event, not per answer
                self._rate_events += 1
                self._last_cut = now
                self._limit = aimd_decrease(self._limit, policy.rate_decrease)
                partial = self._window_sent / max(now - self._window_start, 0.1)
                measured = max(self._measured_rate, partial, 1.0)
                base = measured if self._rate == math.inf else min(self._rate, measured)
                self._reduced_rate = max(1.0, base * policy.rate_decrease)
                self._rate = self._reduced_rate
                pause = rate_limit_pause(
                    policy, self._rate_events, self._rng.random(), exc.retry_after
                )
                self._paused_until = max(self._paused_until, now + pause)
                pacing = self._source.pacing
                if pacing is not None:  # the client's pause (its clock is the loop's)
                    self._paused_until = max(self._paused_until, pacing.paused_until)
                logger.info(
                    "gather_until_done: 429, pausing %.2fs; concurrency %d, rate %.1f/s",
                    pause,
                    int(self._limit),
                    self._rate,
                )
                self._report_progress()
            self._push(state, max(now, self._paused_until))
            return
        state.failures += 1
        limit = policy.max_consecutive_failures
        if limit is not None and state.failures >= limit:
            logger.warning(
                "gather_until_done: giving up on %s after %d failures in a row",
                state.task_id,
                state.failures,
            )
            self._give_up(state, exc)
            return
        delay = error_delay(policy, state.failures, self._rng.random(), retry_after_of(exc))
        logger.debug("gather_until_done: %s failed (%s); retry in %.2fs", state.task_id, exc, delay)
        self._push(state, now + delay)

    def _give_up(self, state: _IdState, exc: Exception) -> None:
        if self._return_exceptions:
            self._complete(state, TaskPollError(state.task_id, exc))
        else:
            state.done = True
            self._fail(exc)


class GatherResults:
    """The async iterator returned by :func:`gather_until_done`.

    Use it as ``async with ... as results: async for task in results`` (structured: polling
    stops when the block exits) or as a plain ``async for`` (polling stops when the iterator
    is exhausted, raises, is closed with :meth:`aclose`, or is garbage collected).
    """

    def __init__(self, coordinator: _Coordinator) -> None:
        self._core = coordinator
        self._receive: MemoryObjectReceiveStream[_Item] | None = None
        self._mode = "new"
        self._tg: TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def progress(self) -> GatherProgress:
        """A snapshot of the progress so far (cheap; readable at any time)."""
        return self._core.snapshot()

    # -- the structured form --------------------------------------------------------------------

    async def __aenter__(self) -> GatherResults:
        if self._mode != "new":
            raise RuntimeError("this gather_until_done() was already started")
        self._mode = "context"
        self._receive = self._core.open_stream()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._core.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self._tg = self._tg, None
        self._shutdown()
        if tg is None:
            return None
        tg.cancel_scope.cancel()
        # The block's own exception is not handed to the task group, which would wrap it in
        # an exception group: the runner never raises, so the block's exception (or a
        # cancellation from outside, re-raised by the task group) is the one that propagates.
        await tg.__aexit__(None, None, None)
        return None

    # -- iteration ------------------------------------------------------------------------------

    def __aiter__(self) -> GatherResults:
        return self

    async def __anext__(self) -> Task | TaskPollError:
        if self._mode == "new" and not self._closed:
            self._start_background()
        receive = self._receive
        if self._closed or receive is None:
            raise StopAsyncIteration
        try:
            item = await receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self.aclose()
            raise StopAsyncIteration from None
        except BaseException:
            # Cancelled while waiting: nobody else will stop a background runner.
            if self._mode == "background":
                with anyio.CancelScope(shield=True):
                    await self.aclose()
            raise
        if isinstance(item, _Fatal):
            await self.aclose()
            raise item.error
        return item

    def _start_background(self) -> None:
        self._mode = "background"
        self._receive = self._core.open_stream()
        task = asyncio.get_running_loop().create_task(
            self._core.run(), name="videogen_async.gather_until_done"
        )
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)
        self._task = task

    def _shutdown(self) -> None:
        """Stop polling and close the consumer's end (synchronous; safe in ``__del__``)."""
        self._closed = True
        self._core.stop()
        if self._receive is not None:
            self._receive.close()

    async def aclose(self) -> None:
        """Stop polling and wait until no poll is in flight. Idempotent.

        In the ``async with`` form the polling task group itself is left at the block's end.
        """
        self._shutdown()
        if self._mode == "new":
            return
        with anyio.CancelScope(shield=True):
            if self._mode == "background" and self._task is not None:
                task = self._task
                if not task.done():
                    task.cancel()
                    await asyncio.wait({task})
            elif self._mode == "context" and self._tg is not None:
                await self._core.finished.wait()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        receive = self._receive
        if receive is not None:
            receive.close()
        task = self._task
        if task is None:
            self._core.stop()
            return
        if not task.done():
            loop = task.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._core.stop)
                loop.call_soon_threadsafe(task.cancel)


def gather_until_done(
    client: PollingClient | TaskSource,
    task_ids: Iterable[str],
    *,
    timeout: float | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    return_exceptions: bool = False,
    poll_policy: PollPolicy | None = None,
    on_progress: Callable[[GatherProgress], Any] | None = None,
    progress_interval: float = 1.0,
    classes: Mapping[str, Hashable] | Callable[[str], Hashable] | None = None,
    finish_times: FinishTimeMemory | None = None,
) -> GatherResults:
    """Wait for many tasks at once, yielding each as soon as it is terminal.

    ::

        async with gather_until_done(client, ids, timeout=600) as results:
            async for task in results:
                await notify(task.task_id, task.status, task.video_url)

    A task that ended failed or error is a result (a :class:`Task`), not an exception.
    Transient failures of a poll (connection errors, 5xx, 429, a garbled body) slow that id
    down (a 429 slows everyone) and never end the batch.

    Args:
        client: The client (``AsyncVideoGen``); polls are single reads without retries of
            their own, so that the gather owns the backoff, paced by the client's pacing
            (a 429 seen here slows every request of the client, and the other way round).
            Below the client, a :class:`TaskSource` is taken as it is.
        task_ids: The ids; duplicates are polled once and yielded once.
        timeout: Deadline in seconds for the whole gather (``None``: none).
        max_concurrency: Polls in flight at most (never exceeded).
        return_exceptions: How an id that cannot be polled (404, 401, 403, 400, or
            ``max_consecutive_failures`` transient failures in a row) or is still pending at
            the deadline is reported: ``False`` raises the first such error (the deadline
            raises :class:`WaitTimeoutError` with ``.pending``) after stopping every poll;
            ``True`` yields a :class:`TaskPollError` for that id (its ``__cause__`` is the
            error, a :class:`WaitTimeoutError` for the deadline) and goes on.
        poll_policy: The poll policy (``None``: the client's, else the defaults).
        on_progress: Called with a :class:`GatherProgress` after each id finishes, on 429
            pauses, at the end and every ``progress_interval`` seconds. It must be quick and
            must not block; an exception it raises ends the gather with that exception.
        progress_interval: Seconds between periodic ``on_progress`` calls.
        classes: The class of each id, for ids that take different times (e.g. ``(model,
            duration)``): a mapping from id to a hashable key (ids not in it have no class),
            or a callable returning the key of an id. Each class's finish times are learned
            on their own, and remembered (see ``finish_times``) for the next gather.
        finish_times: Where what is learned about each class is kept between gathers
            (``None``: the client's ``finish_times``, an in-memory store, if it has one).
            Ids without a class are kept under the key ``None``.

    Returns:
        A :class:`GatherResults`: an async iterator of :class:`Task` (and, with
        ``return_exceptions=True``, :class:`TaskPollError`), also an async context manager;
        its ``progress`` property is readable at any time.

    Raises:
        ValueError: ``max_concurrency`` < 1, a negative ``timeout`` or a non-positive
            ``progress_interval``.
        TypeError: An id is not a string, ``classes`` is neither a mapping nor a callable,
            or a class key is not hashable.
    """
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise TypeError(f"max_concurrency must be an int, got {max_concurrency!r}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
    if not progress_interval > 0:
        raise ValueError(f"progress_interval must be > 0, got {progress_interval!r}")
    if isinstance(task_ids, str):
        raise TypeError("task_ids must be an iterable of ids, not a single string")
    key_of = _class_keys(classes)
    states: dict[str, _IdState] = {}
    by_key: dict[object, _Class] = {}
    for task_id in task_ids:
        if not isinstance(task_id, str):
            raise TypeError(f"task ids must be strings, got {task_id!r}")
        check_id("task_id", task_id)
        if task_id not in states:
            key = key_of(task_id)
            klass = by_key.get(key)
            if klass is None:
                klass = by_key[key] = _Class(key)
            state = _IdState(task_id, klass)
            klass.states.append(state)
            states[task_id] = state
    source = source_of(client)
    memory = finish_times if finish_times is not None else getattr(source, "finish_times", None)
    coordinator = _Coordinator(
        source,
        states,
        timeout=timeout,
        max_concurrency=max_concurrency,
        return_exceptions=return_exceptions,
        policy=poll_policy or source.poll_policy or _policy_of(client, None),
        on_progress=on_progress,
        progress_interval=progress_interval,
        classes=by_key,
        memory=memory,
    )
    return GatherResults(coordinator)


def _class_keys(
    classes: Mapping[str, Hashable] | Callable[[str], Hashable] | None,
) -> Callable[[str], object]:
    """A checked ``id -> class key`` function for ``gather_until_done``'s ``classes``."""
    if classes is None:
        return lambda _task_id: None
    if isinstance(classes, Mapping):
        table = classes

        def lookup(task_id: str) -> object:
            return _checked_key(task_id, table.get(task_id))

        return lookup
    if callable(classes):
        function = classes

        def call(task_id: str) -> object:
            return _checked_key(task_id, function(task_id))

        return call
    raise TypeError(
        f"classes must be a mapping of id to class key or a callable, got {type(classes).__name__}"
    )


def _checked_key(task_id: str, key: object) -> object:
    try:
        hash(key)
    except TypeError:
        raise TypeError(
            f"classes: the class key of {task_id!r} must be hashable, got {key!r}"
        ) from None
    return key
