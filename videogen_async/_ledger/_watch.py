"""``Ledger.watch``: cooperative watchers that share a ledger's pending entries.

Each watcher claims entries with a lease (decided in SQL: a pending entry whose lease is out),
polls the claimed ids with one :func:`gather_until_done` that lives as long as the watcher
(``open_ended``: each claim's ids join it, so the schedule, what it learned of each class
and its pacing carry over from claim to claim, and nothing is probed twice), writes each
terminal state back and hands the entry to its consumer. While it lives it renews its leases
every third of the lease; when it dies its entries go to the others once the lease is out.

Delivery is at least once: a terminal entry is marked delivered when its consumer asks for the
next one (or leaves the block without an exception). A watcher that dies between writing a
terminal state and that moment leaves the entry, terminal and undelivered, to another watcher,
which yields it again without polling.
"""

from __future__ import annotations

import logging
import math
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from .._contract._exceptions import TaskPollError
from .._waiting._gather import GatherResults, gather_until_done
from ._classes import LedgerFinishTimes
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row, task_to_json
from ._exit import ExitCloses
from ._pacing import SharedPause, shared_source
from ._store import Store

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from .._contract._models import Task
    from .._waiting._policy import PollPolicy

__all__ = ["Signal", "Watch"]

logger = logging.getLogger("videogen_async")

_WRITE_BATCH = 500
"""Terminal states recorded at most per transaction."""


def _state_of(task: Task) -> str:
    status = task.status
    return str(getattr(status, "value", status))


class Signal:
    """An event fired again and again: each :meth:`fire` wakes whoever waits on :attr:`event`."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    def fire(self) -> None:
        """Wake the waiters of the current event and start a new one."""
        self.event.set()
        self.event = anyio.Event()


class Watch(ExitCloses):
    """A watcher of a ledger: an async context manager giving an async iterator of entries.

    Attributes:
        owner: This watcher's id in the ledger's ``owner`` column.
        claimed: Entries claimed so far.
        finished: Terminal states written so far.
    """

    def __init__(
        self,
        created: Signal,
        store: Store,
        client: Any,
        *,
        lease: float,
        claim_size: int,
        claim_interval: float,
        max_concurrency: int | None,
        poll_policy: PollPolicy | None,
        stop_when_idle: bool,
        max_held: int | None = None,
    ) -> None:
        if not lease > 0 or not math.isfinite(lease):
            raise ValueError(f"lease must be > 0 seconds, got {lease!r}")
        if not claim_interval > 0:
            raise ValueError(f"claim_interval must be > 0 seconds, got {claim_interval!r}")
        if isinstance(claim_size, bool) or not isinstance(claim_size, int) or claim_size < 1:
            raise ValueError(f"claim_size must be an int >= 1, got {claim_size!r}")
        self._created = created
        self._store = store
        self._client = client
        self._lease = lease
        self._claim_size = claim_size
        self._interval = claim_interval
        self._gather_options: dict[str, Any] = {"return_exceptions": True}
        if max_concurrency is not None:
            self._gather_options["max_concurrency"] = max_concurrency
        if poll_policy is not None:
            self._gather_options["poll_policy"] = poll_policy
        self._stop_when_idle = stop_when_idle
        self._max_held = max_held
        self._held = 0
        self.owner = f"watcher:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._pause = SharedPause()
        self._source = shared_source(client, self._pause)
        self._memory = LedgerFinishTimes(store)
        self._classes: dict[str, tuple[str, int]] = {}
        self._polling: dict[str, tuple[str, float]] = {}  # task id -> (key, claimed at)
        self._results: GatherResults | None = None
        self._tg: TaskGroup | None = None
        self._send: MemoryObjectSendStream[LedgerEntry | BaseException] | None = None
        self._receive: MemoryObjectReceiveStream[LedgerEntry | BaseException] | None = None
        self._last: LedgerEntry | None = None
        self._drained = anyio.Event()
        self._acks: list[str] = []
        self._writing = False
        self.claimed = 0
        self.finished = 0

    # -- the context manager -----------------------------------------------------------------

    async def __aenter__(self) -> Watch:
        if self._tg is not None:
            raise RuntimeError("this watch() was already entered")
        self._send, self._receive = anyio.create_memory_object_stream[
            "LedgerEntry | BaseException"
        ](max_buffer_size=math.inf)
        self._finished_send, self._finished_receive = anyio.create_memory_object_stream[
            "tuple[str, Task]"
        ](max_buffer_size=math.inf)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._guarded_run)
        return self

    async def _exit(self, ok: bool) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                if ok:
                    self._ack_last()
                await self._flush_acks()
                # What is still held goes back to the ledger at once, for the next watcher.
                await self._store.release(self.owner)
                if self._receive is not None:
                    self._receive.close()
                self._finished_send.close()
                self._finished_receive.close()

    # -- iteration ---------------------------------------------------------------------------

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> LedgerEntry:
        receive = self._receive
        if receive is None:
            raise RuntimeError("use the watch as `async with ledger.watch(client) as finished`")
        self._ack_last()
        try:
            item = await receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            raise item
        self._last = item
        return item

    def _ack_last(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            self._acks.append(last.key)

    async def _flush_acks(self) -> None:
        acks, self._acks = self._acks, []
        if acks:
            await self._store.finish_many(self.owner, (), acks)

    # -- the work ----------------------------------------------------------------------------

    async def _guarded_run(self) -> None:
        send = self._send
        if send is None:  # pragma: no cover - set by __aenter__
            raise RuntimeError("the watch is not entered")
        try:
            await self._run()
        except Exception as exc:  # handed to the consumer, who raises it
            send.send_nowait(exc)
        finally:
            send.close()

    async def _run(self) -> None:
        store = self._store
        await store.register(self.owner, self._lease)
        await self._memory.refresh()
        renewed = time.monotonic()
        results = gather_until_done(
            self._source,
            (),
            classes=self._classes,
            finish_times=self._memory,
            open_ended=True,
            **self._gather_options,
        )
        self._results = results
        async with anyio.create_task_group() as tg, results:
            tg.start_soon(self._writer)
            tg.start_soon(self._collect, results)
            while True:
                if self._acks and not self._polling:
                    await self._flush_acks()
                await self._pacing()
                await self._wait_out_pause()
                claimed_any = False
                while self._max_held is None or self._held < self._max_held:
                    size = self._claim_size
                    if self._max_held is not None:
                        size = min(size, self._max_held - self._held)
                    rows = await store.claim(self.owner, self._lease, size)
                    if rows:
                        # A claim sets the lease of what it claims only: the renewal of what
                        # was held before is not put off by it.
                        claimed_any = True
                        self._start(tg, rows)
                    if len(rows) < size:
                        break
                if not claimed_any and self._polling:
                    await self._shed()
                now = time.monotonic()
                if now - renewed >= self._lease / 3:
                    await store.renew(self.owner, self._lease)
                    renewed = now
                await self._memory.flush()
                if (
                    self._stop_when_idle
                    and not claimed_any
                    and not self._polling
                    and self._finished_receive.statistics().current_buffer_used == 0
                    and not self._writing
                    and not await store.has_open(self.owner)
                ):
                    tg.cancel_scope.cancel()
                    return
                await self._sleep()

    async def _shed(self) -> None:
        """Give back what this watcher holds over its share when other watchers joined.

        The ids claimed last go back (never below the share, and never ids claimed less than
        a renewal period ago: what was just handed on is not handed back at once). They leave
        the gather first, so that no id is polled by this watcher once another may claim it.
        """
        share, held = await self._store.share(self.owner)
        excess = held - share
        if excess <= 0 or self._results is None:
            return
        young = time.monotonic() - self._lease / 3
        newest = sorted(self._polling.items(), key=lambda item: item[1][1], reverse=True)
        candidates = [task_id for task_id, (_key, since) in newest if since <= young][:excess]
        if not candidates:
            return
        keys = []
        for task_id in self._results.discard(candidates):
            keys.append(self._polling.pop(task_id)[0])
            self._classes.pop(task_id, None)
        if not keys:
            return
        await self._store.release_keys(self.owner, keys)
        self._held -= len(keys)
        logger.info("ledger watcher: %d entries given back to the other watchers", len(keys))

    async def _pacing(self) -> None:
        report = self._pause.take_report()
        if report > 0:
            await self._store.pause_for(report)
            logger.info("ledger watcher: 429 met, every watcher pauses %.2f s", report)
        remaining = await self._store.pause_remaining()
        self._pause.learn(remaining)
        pacing = self._source.pacing
        if pacing is not None and remaining > 0:
            # The client's own pacing holds every request of the client, the gather's too.
            pacing.pause_until(anyio.current_time() + remaining)

    async def _wait_out_pause(self) -> None:
        """Wait out the shared pause; a 429 this watcher meets meanwhile is written at once.

        (Waiting the pause out first would tell the other watchers of a new 429 only when
        this watcher's own pause had ended.)
        """
        pause = self._pause
        while (left := pause.until - time.monotonic()) > 0:
            with anyio.move_on_after(left):
                await pause.changed.wait()
            await self._pacing()

    async def _sleep(self) -> None:
        created = self._created.event
        changed = self._pause.changed
        drained = self._drained
        with anyio.move_on_after(min(self._interval, self._lease / 3)):
            async with anyio.create_task_group() as tg:

                async def one(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                for event in (created, changed, drained):
                    tg.start_soon(one, event)

    def _start(self, tg: TaskGroup, rows: list[Any]) -> None:
        self.claimed += len(rows)
        self._held += len(rows)
        now = time.monotonic()
        batch: list[str] = []
        for row in rows:
            if row["state"] in TERMINAL_STATES:
                tg.start_soon(self._redeliver, row["key"])
            elif row["task_id"]:
                batch.append(row["task_id"])
                self._polling[row["task_id"]] = (row["key"], now)
                if row.get("model") and row.get("duration"):
                    self._classes[row["task_id"]] = (row["model"], int(row["duration"]))
        if batch and self._results is not None:
            self._results.add(batch)

    async def _redeliver(self, key: str) -> None:
        send = self._send
        if send is None:  # pragma: no cover - set by __aenter__
            raise RuntimeError("the watch is not entered")
        row = await self._store.get(key)
        self._held -= 1
        if row is not None and row["owner"] == self.owner:
            await send.send(entry_from_row(row))

    async def _collect(self, results: GatherResults) -> None:
        """Take the gather's results: terminal tasks to the writer, failed polls released."""
        store = self._store
        async for item in results:
            found = self._polling.pop(item.task_id, None)
            self._classes.pop(item.task_id, None)
            if found is None:  # pragma: no cover - discarded ids are never yielded
                continue
            key = found[0]
            self._held -= 1
            if isinstance(item, TaskPollError):
                logger.warning("ledger key %r: %s", key, item)
                await store.poll_failed(key, self.owner, str(item), self._lease)
            else:
                self._finished_send.send_nowait((key, item))
            if not self._polling:
                self._drained.set()
                self._drained = anyio.Event()

    async def _writer(self) -> None:
        """Record terminal states (and the consumer's acks) in batches, one transaction each."""
        send = self._send
        if send is None:  # pragma: no cover - set by __aenter__
            raise RuntimeError("the watch is not entered")
        receive = self._finished_receive
        async for first in receive:
            self._writing = True
            found = [first]
            while len(found) < _WRITE_BATCH:
                try:
                    found.append(receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            items = [
                (key, _state_of(task), float(task.credits_cost or 0.0), task_to_json(task))
                for key, task in found
            ]
            acks, self._acks = self._acks, []
            rows = await self._store.finish_many(self.owner, items, acks)
            self.finished += len(rows)
            tasks = dict(found)
            for row in rows:
                await send.send(entry_from_row(row, tasks[row["key"]]))
            self._writing = False
