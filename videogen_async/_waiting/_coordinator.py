"""The polling engine of ``gather_until_done``: one dispatcher, a heap, a pool of workers.

Each pending id's next poll is in one heap (``_due.DueHeap``), its due time the class state's.
``max_concurrency`` workers poll, fed by one dispatcher waking at most once per ``coalesce``
seconds. 429s are the client's pacing's (a source without one gets its own); repolling after a
failure is ``decide_retry``'s. No cancel scope across a yield: polling runs in a task group
owned by ``_gather.GatherResults``; results leave through a memory object stream.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from .._contract._exceptions import RateLimitError, TaskPollError, WaitTimeoutError
from .._contract._models import Task
from .._http._retry import decide_retry
from .._observe._spans import observe_gather
from ._cohorts import BatchSchedule, IdState
from ._due import DueHeap
from ._policy import PollPolicy
from ._polling import TaskSource
from ._progress import GatherCounts, GatherProgress
from ._schedule import FinishTimeMemory

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

logger = logging.getLogger("videogen_async")


@attrs.frozen
class _Fatal:
    """The item that ends the stream with an error (``return_exceptions=False``)."""

    error: BaseException


_Item = Task | TaskPollError | _Fatal


def _resolve(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Coordinator:
    """The polling engine of one gather. Holds no reference to the consumer's object."""

    def __init__(
        self,
        source: TaskSource,
        *,
        timeout: float | None,
        max_concurrency: int,
        return_exceptions: bool,
        policy: PollPolicy,
        on_progress: Callable[[GatherProgress], object] | None,
        progress_interval: float,
        memory: FinishTimeMemory | None = None,
        open_ended: bool = False,
    ) -> None:
        self._source = source
        # One pacing per client: the client's, which its transport already keeps (a 429 cuts
        # it once, for every request of the client); a bare source gets one of its own.
        self._fetch, self._pacing = source.paced()
        # The ids of the gather by id: pending ones, and finished ones unless open-ended.
        self.known: dict[str, IdState] = {}  # joined by `add`
        self._timeout = timeout
        self._max_concurrency = max_concurrency
        self._return_exceptions = return_exceptions
        self._policy = policy  # the policy this gather runs on (inspectable)
        self._on_progress = on_progress
        self._progress_interval = progress_interval
        self._rng = random.Random()
        self._counts = GatherCounts(total=0)
        # Scheduling.
        self._due = DueHeap()
        self._now = time.monotonic
        self._early = min(policy.coalesce, 0.2 * policy.dense_interval)
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at = -math.inf  # when the dispatcher wakes by itself (inf: on an event)
        self._need_worker = False  # the dispatcher waits for an idle worker
        self._idle: list[asyncio.Future[IdState | None]] = []
        self._closing = False
        self._last_round = -math.inf  # when the dispatcher last sent polls
        self._last_pause = -math.inf  # the end of the last 429 pause reported
        self.schedule = BatchSchedule(
            {}, policy=policy, memory=memory, push=self._push, rng=self._rng
        )
        self._started = math.inf  # before the run: no time has passed (elapsed 0)
        # Life cycle.
        self._send: MemoryObjectSendStream[_Item] | None = None
        self._scope: anyio.CancelScope | None = None
        self._fatal: BaseException | None = None
        self._stopped = False
        self._open = open_ended  # ids may still join (`add`) until `end_input`
        self._open_ended = open_ended
        self.finished = anyio.Event()

    # -- life cycle -----------------------------------------------------------------------------

    def open_stream(self) -> MemoryObjectReceiveStream[_Item]:
        self._send, receive = anyio.create_memory_object_stream[_Item](math.inf)
        return receive

    def add(self, states: list[IdState]) -> None:
        """Join ids (not pending in this gather) to the polling; see ``GatherResults.add``."""
        for state in states:
            self.known[state.task_id] = state
        self._counts.total += len(states)
        self._counts.pending += len(states)
        if self._started < math.inf:  # running: the schedule has started
            self.schedule.add(states, self._now())
            return
        for state in states:  # not started: `BatchSchedule.start` schedules them
            state.klass.states.append(state)
            self.schedule.classes.setdefault(state.klass.key, state.klass)

    def discard(self, task_id: str) -> bool:
        """Stop polling a pending id without yielding it; ``False`` when it is not pending."""
        # Forgotten: it may join again later (a finished id is forgotten too, as if it left).
        state = self.known.pop(task_id, None)
        if state is None or state.done:
            return False
        state.done = True
        state.entry = -2  # its heap entry, if any, is stale from now on
        state.klass.pending -= 1
        self._counts.total -= 1
        self._counts.pending -= 1
        self._wake()
        return True

    def end_input(self) -> None:
        """No id joins from now on: the gather ends once its ids are finished."""
        self._open = False
        self._wake()

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
        with observe_gather(self._fetch, self._source.hooks, self._counts.total) as watch:
            self._fetch = watch.fetch
            await self._run()
            watch.done(
                succeeded=self._counts.succeeded,
                failed=self._counts.failed,
                errors=self._counts.errors,
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
                self._started = now = loop.time()
                self.schedule.start(now, time.time() - now)
                timed_out = False
                try:
                    with anyio.CancelScope(
                        deadline=math.inf if self._timeout is None else now + self._timeout
                    ) as scope:
                        self._scope = scope
                        if self._stopped:
                            scope.cancel()
                        async with anyio.create_task_group() as tg:
                            if self._on_progress is not None:
                                tg.start_soon(self._tick)
                            async with anyio.create_task_group() as workers:
                                # No more workers than ids, unless more may join.
                                for _ in range(
                                    self._max_concurrency
                                    if self._open
                                    else min(self._max_concurrency, self._counts.pending)
                                ):
                                    workers.start_soon(self._worker)
                                await self._dispatch(loop)
                            tg.cancel_scope.cancel()
                    timed_out = scope.cancelled_caught
                except Exception as exc:  # a bug: end the consumer's loop with it, not silently
                    logger.exception("gather_until_done: the coordinator failed")
                    self._fatal = exc
                self._scope = None
                self._finish(send, timed_out=timed_out)
        finally:
            self._scope = None
            self.finished.set()

    def _finish(self, send: MemoryObjectSendStream[_Item], *, timed_out: bool) -> None:
        if self._stopped:
            return
        try:
            if self._fatal is None and timed_out and self._counts.pending > 0:
                self._on_timeout(send)
            if self._fatal is None:
                self._report()  # the last call; it may still fail the gather
            if self._fatal is not None:
                send.send_nowait(_Fatal(self._fatal))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return

    def _on_timeout(self, send: MemoryObjectSendStream[_Item]) -> None:
        pending = tuple(s.task_id for s in self.known.values() if not s.done)
        timeout = self._timeout
        logger.info("gather_until_done: %d ids still pending after %ss", len(pending), timeout)
        if not self._return_exceptions:
            self._fatal = WaitTimeoutError(
                f"{len(pending)} of {self._counts.total} tasks were not terminal after"
                f" {timeout:g} s",
                pending=pending,
                timeout=timeout,
            )
            return
        for task_id in pending:
            error = TaskPollError(
                task_id,
                WaitTimeoutError(
                    f"task {task_id} was not terminal after {timeout:g} s",
                    pending=(task_id,),
                    timeout=timeout,
                ),
            )
            self._counts.finished(error)
            send.send_nowait(error)

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None:
            self._fatal = error
        if self._scope is not None:
            self._scope.cancel()

    # -- progress -------------------------------------------------------------------------------

    def snapshot(self) -> GatherProgress:
        now = self._now()
        # The counts now, with what the coordinator knows of its pacing and its clock.
        return GatherProgress(
            **attrs.asdict(self._counts, recurse=False),
            concurrency_limit=self._limit(),
            paused=now < self._pacing.paused_until,
            elapsed=max(0.0, now - self._started),
        )

    def _report(self) -> None:
        """Call ``on_progress`` with a snapshot now (nothing without a callback).

        A callback that raises fails the gather rather than being ignored.
        """
        if self._on_progress is None:
            return
        try:
            self._on_progress(self.snapshot())
        except Exception as exc:
            logger.exception("gather_until_done: on_progress raised")
            self._fail(exc)

    async def _tick(self) -> None:
        """Report every ``progress_interval`` seconds until cancelled."""
        while True:
            await anyio.sleep(self._progress_interval)
            self._report()

    # -- scheduling -----------------------------------------------------------------------------

    def _push(self, state: IdState, due: float) -> None:
        self._due.push(state, due)
        if due < self._wake_at:
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None:
            _resolve(self._waiter)

    def _limit(self) -> int:
        """Polls allowed in flight now: ``max_concurrency``, lowered by the client's pacing."""
        # The pacing's limit is ``inf`` when no 429 lowered it: ``min`` first, then ``int``.
        return max(1, int(min(self._max_concurrency, self._pacing.limit)))

    def _ready_in(self, now: float) -> float:
        """Seconds until a poll may be sent (0: now); ``inf`` when waiting for an event.

        A 429's pause and lowered concurrency hold the dispatch back; the lowered rate is
        kept by the pacing slot each poll takes.
        """
        paused_until = self._pacing.paused_until
        if now < paused_until:
            return paused_until - now
        if not self._idle or self._counts.in_flight >= self._limit():
            self._need_worker = True
            return math.inf
        due = self._due.next_due()
        if due is None:
            return math.inf
        if due <= now:  # an overdue id (a backlog) is sent at once
            return 0.0
        # Wake at most once per `early` seconds, sending everything due before the next
        # wake: a poll leaves up to `early` seconds before its time.
        return max(0.0, due - self._early - now, self._last_round + self._early - now)

    async def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand due ids to idle workers until every id is finished (the scheduler's loop).

        Ids due within ``early`` seconds are sent together, a little early, so that the loop
        wakes once for them rather than once each.
        """
        while (
            (self._counts.pending > 0 or self._open) and self._fatal is None and not self._stopped
        ):
            now = loop.time()
            wait = self._ready_in(now)
            if wait <= 0:
                self._send_due(now)
                continue
            waiter = loop.create_future()
            self._waiter = waiter
            self._wake_at = wake = now + wait
            handle = None if wait == math.inf else loop.call_at(wake, _resolve, waiter)
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
            _resolve(idle)
        self._idle.clear()

    def _send_due(self, now: float) -> None:
        idle = self._idle
        while idle:
            if idle[-1].done():  # its worker was cancelled (the gather is ending)
                idle.pop()
                continue
            state = self._pop_due(now + self._early)
            if state is None:
                break
            self._last_round = now
            idle.pop().set_result(state)

    def _pop_due(self, horizon: float) -> IdState | None:
        """The id due by ``horizon``, counted as sent, if the concurrency limit allows a poll."""
        if self._counts.in_flight >= self._limit():
            return None
        due = self._due.next_due()
        if due is None or due > horizon:
            return None
        self._counts.sent()
        return self._due.pop()

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        state = None
        while not self._closing:
            if state is None:
                assigned: asyncio.Future[IdState | None] = loop.create_future()
                self._idle.append(assigned)
                if self._need_worker:
                    self._wake()
                state = await assigned
                if state is None:
                    return
            sent = loop.time()
            try:
                task = await self._fetch(state.task_id)
            except Exception as exc:
                self._counts.in_flight -= 1
                self._on_error(state, exc)
            else:
                self._counts.in_flight -= 1
                self._on_task(state, task, sent)
            state = None
            if self._counts.pending <= 0 or self._fatal is not None:
                self._wake()
            elif (now := loop.time()) >= self._pacing.paused_until:
                # An overdue id (a backlog) is polled at once by the worker that just finished.
                state = self._pop_due(now)

    # -- results --------------------------------------------------------------------------------

    def _on_task(self, state: IdState, task: Task, sent: float) -> None:
        if state.done:  # discarded while in flight
            return
        now = self._now()
        state.failures = 0
        schedule = self.schedule
        schedule.answered(state, task, sent)
        if task.is_terminal:
            schedule.learn(state, task, now)
            self._complete(state, task)
            return
        self._push(state, now + schedule.next_gap(state, now))

    def _complete(self, state: IdState, item: Task | TaskPollError) -> None:
        state.done = True
        if self._open_ended:  # a long-lived gather keeps only what it polls
            self.known.pop(state.task_id, None)
        self._counts.finished(item)
        try:
            self._send.send_nowait(item)  # type: ignore[union-attr]
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self.stop()
            return
        self._report()

    def _on_error(self, state: IdState, exc: Exception) -> None:
        if state.done:  # discarded while in flight
            return
        now = self._now()
        decision = decide_retry(
            exc,
            failures=state.failures + 1,
            policy=self._source.backoff,
            poll=True,
            rng=self._rng,
        )
        if decision.delay is None:
            if decision.reason == "exhausted":
                logger.warning(
                    "gather_until_done: giving up on %s: %s", state.task_id, decision.detail
                )
            if self._return_exceptions:
                self._complete(state, TaskPollError(state.task_id, exc))
            else:
                state.done = True
                self._fail(exc)
            return
        self._counts.transient_errors += 1
        if isinstance(exc, RateLimitError):
            # The pacing already counted it (the client's transport, or `_paced` for a bare
            # source): one cut per 429 event, for every request of the client.
            self._counts.rate_limited += 1
            paused_until = self._pacing.paused_until
            if paused_until > now and paused_until != self._last_pause:
                self._last_pause = paused_until
                logger.info(
                    "gather_until_done: 429, pausing %.2fs; concurrency %d",
                    paused_until - now,
                    self._limit(),
                )
                self._report()
        else:
            state.failures += 1
            logger.debug(
                "gather_until_done: %s failed (%s); retry in %.2fs",
                state.task_id,
                exc,
                decision.delay,
            )
        # Never due inside a 429's pause (the dispatcher would only hold it back).
        self._push(state, max(now + decision.delay, self._pacing.paused_until))
