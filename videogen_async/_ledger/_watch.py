"""``Ledger.watch``: cooperative watchers that share a ledger's pending entries.

A watcher claims entries with a lease (renewed every third of it), polls them with one
open-ended :func:`gather_until_done`, writes each terminal state back and hands the entry on.
At least once: an entry is delivered when its consumer asks for the next one (or leaves the
block without an exception). An id that cannot be polled is marked ``unknown``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from .._contract import _checks as checks
from .._contract._closing import ExitCloses
from .._contract._exceptions import LedgerError, NotFoundError, TaskPollError
from .._waiting._gather import GatherResults, gather_until_done
from . import _claims as claims
from ._cohorts import LedgerFinishTimes
from ._creates import Creator
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row, task_to_json
from ._pacing import SharedPause, shared_source
from ._plans import get, unpollable
from ._protocol import first_of
from ._schema import rows

if TYPE_CHECKING:
    from .._contract._models import Task  # noqa: F401 - named in a stream's type, a string
    from .._waiting._policy import PollPolicy

logger = logging.getLogger("videogen_async")

_WRITE_BATCH = 500
"""Terminal states recorded at most per transaction."""


def _first_error(group: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: the one to hand to the consumer."""
    inner = getattr(group, "exceptions", None)  # an ExceptionGroup (also before Python 3.11)
    return _first_error(inner[0]) if isinstance(inner, tuple) and inner else group


class Watch(ExitCloses):
    """A watcher of a ledger: an async context manager giving an async iterator of entries.

    Attributes:
        owner: This watcher's id in the ledger's ``owner`` column.
    """

    def __init__(
        self,
        creator: Creator,
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
        checks.positive("lease", lease)
        checks.positive("claim_interval", claim_interval)
        checks.whole("claim_size", claim_size)
        self._creator = creator
        self._store = store = creator.store
        self._lease = lease
        self._claim_size = claim_size
        self._interval = claim_interval
        self._gather_options: dict[str, Any] = {"poll_policy": poll_policy}
        if max_concurrency is not None:  # else the gather's default
            self._gather_options["max_concurrency"] = max_concurrency
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
        self._last: LedgerEntry | None = None
        self._entered = False
        self._drained = anyio.Event()
        self._acks: list[str] = []
        # Finished tasks taken from the gather and not yet handed to the consumer. Counted
        # where they leave `_polling` (no await between), not read from the writer's channel:
        # an item handed straight to a writer waiting in receive() is in neither the channel's
        # buffer nor the writer's batch until that task runs, and a watcher that stops when
        # idle must not end (cancelling the writer mid-write) in that moment.
        self._unwritten = 0

    async def __aenter__(self) -> Watch:
        if self._entered:
            raise RuntimeError("this watch() was already entered")
        self._entered = True
        # Made here, not with the watch: one never entered leaves no stream open.
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
            # Closed here too, first: a runner cancelled before it ran (as asyncio.run does
            # to the tasks left at its end) never closed the send end.
            for stream in (self._send, self._receive, self._finished_send, self._finished_receive):
                stream.close()
            with anyio.CancelScope(shield=True):
                if ok:
                    self._ack_last()
                # Once, not retried: what this misses, the leases settle (a redelivery).
                with contextlib.suppress(LedgerError):
                    await self._flush_acks(once=True)
                    # What is still held goes back to the ledger at once, for the next watcher.
                    await self._store.write_once(claims.release, self.owner)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> LedgerEntry:
        if not self._entered:
            raise RuntimeError("use the watch as `async with ledger.watch(client) as finished`")
        self._ack_last()
        try:
            item = await self._receive.receive()
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

    async def _flush_acks(self, *, once: bool = False) -> None:
        acks, self._acks = self._acks, []
        if acks:
            write = self._store.write_once if once else self._store.write
            await write(claims.finish_many, self.owner, (), acks)

    async def _guarded_run(self) -> None:
        try:
            await self._run()
        except Exception as exc:  # handed to the consumer, who raises it
            self._send.send_nowait(_first_error(exc))
        finally:
            self._send.close()

    async def _run(self) -> None:
        store = self._store
        await store.write(claims.register, self.owner, self._lease)
        await self._memory.refresh()
        renewed = time.monotonic()
        self._results = results = gather_until_done(
            self._source,
            (),
            classes=self._classes,
            finish_times=self._memory,
            open_ended=True,
            return_exceptions=True,
            **self._gather_options,
        )
        async with anyio.create_task_group() as tg, results:
            tg.start_soon(self._writer)
            tg.start_soon(self._collect, results)
            while True:
                if self._acks and not self._polling:
                    await self._flush_acks()
                await self._creator.repair()  # answers kept while the database was away
                await self._pacing()
                await self._wait_out_pause()
                claimed_any = await self._claim(tg)
                if not claimed_any and self._polling:
                    await self._shed()
                now = time.monotonic()
                if now - renewed >= self._lease / 3:
                    await store.write(claims.renew, self.owner, self._lease)
                    # A dead creator's creates are told unknown within a third of a lease by
                    # any watcher (not only by one about to stop), so that a key is never left
                    # creating until its create lease of ten minutes runs out.
                    await self._store.expire_creating(alive=self._creator.owner)
                    renewed = now
                await self._memory.flush()
                if self._stop_when_idle and not claimed_any and await self._idle():
                    tg.cancel_scope.cancel()
                    return
                await self._sleep()

    async def _claim(self, tg: TaskGroup) -> bool:
        """Claim entries up to ``max_held`` (and the fair share) and poll them; whether any."""
        claimed_any = False
        while self._max_held is None or self._held < self._max_held:
            size = self._claim_size
            if self._max_held is not None:
                size = min(size, self._max_held - self._held)
            claimed = []
            if await self._store.read(rows, claims.CLAIMABLE):
                claimed = await self._store.write(claims.claim, self.owner, self._lease, size)
            if claimed:
                # A claim sets the lease of what it claims only: the renewal of what was held
                # before is not put off by it.
                claimed_any = True
                await self._start(tg, claimed)
            if len(claimed) < size:
                return claimed_any
        return claimed_any

    async def _idle(self) -> bool:
        """Whether nothing is left to do here nor in the ledger (``stop_when_idle``)."""
        return (
            not self._polling
            and not self._unwritten
            and not await self._store.expire_creating(alive=self._creator.owner)
            and not await self._store.read(rows, claims.HAS_OPEN, self.owner)
        )

    async def _shed(self) -> None:
        """Give back what this watcher holds over its share when other watchers joined.

        The last claimed go back (never below the share, nor ids claimed within a renewal
        period); they leave the gather first, so no id is polled here once another may claim it.
        """
        share, held = await self._store.read(claims.share, self.owner)
        excess = held - share
        if excess <= 0 or self._results is None:
            return
        young = time.monotonic() - self._lease / 3
        # ``_polling`` holds the ids in the order they were claimed: reversed, the newest first.
        old = (
            task_id for task_id, (_key, since) in reversed(self._polling.items()) if since <= young
        )
        candidates = list(itertools.islice(old, excess))  # stops at the excess
        if not candidates:
            return
        keys = []
        for task_id in self._results.discard(candidates):
            keys.append(self._polling.pop(task_id)[0])
            self._classes.pop(task_id, None)
        if not keys:
            return
        await self._store.write(claims.release_keys, self.owner, keys)
        self._held -= len(keys)
        logger.info("ledger watcher: %d entries given back to the other watchers", len(keys))

    async def _pacing(self) -> None:
        report = self._pause.take_report()
        if report > 0:
            await self._store.write(claims.pause_for, report)
            logger.info("ledger watcher: 429 met, every watcher pauses %.2f s", report)
        remaining = await self._store.read(claims.pause_remaining)
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
        await first_of(
            (self._creator.settled.event, self._pause.changed, self._drained),
            min(self._interval, self._lease / 3),
        )

    async def _start(self, tg: TaskGroup, rows: list[Any]) -> None:
        self._held += len(rows)
        now = time.monotonic()
        batch: list[str] = []
        problems: list[tuple[str, str]] = []
        for row in rows:
            task_id = row["task_id"]
            if row["state"] in TERMINAL_STATES:
                tg.start_soon(self._redeliver, row["key"])
            elif task_id:
                problem = unpollable("task_id", task_id)
                if problem is not None:
                    problems.append((row["key"], problem))
                    continue
                batch.append(task_id)
                self._polling[task_id] = (row["key"], now)
                if row.get("model") and row.get("duration"):
                    self._classes[task_id] = (row["model"], int(row["duration"]))
        if batch and self._results is not None:
            self._results.add(batch)
        if problems:  # a problem the user can see, never polled: one bad id stops nobody
            logger.error("ledger: ids that cannot be polled, marked unknown: %s", problems)
            await self._store.write(claims.give_up, self.owner, problems)
            self._held -= len(problems)

    async def _redeliver(self, key: str) -> None:
        row = await self._store.read(get, key)
        self._held -= 1
        if row is not None and row["owner"] == self.owner:
            await self._send.send(entry_from_row(row))

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
                # The service does not know the id: after a lease, the entry ends ``unknown``
                # (a batch waiting on it ends), never polled again nor its create sent again.
                gone = isinstance(item.__cause__, NotFoundError)
                logger.warning("ledger key %r: %s", key, item)
                await store.write(claims.poll_failed, key, self.owner, str(item), self._lease, gone)
            else:
                self._unwritten += 1
                self._finished_send.send_nowait((key, item))
            if not self._polling:
                self._drained.set()
                self._drained = anyio.Event()

    async def _writer(self) -> None:
        """Record terminal states (and the consumer's acks) in batches, one transaction each."""
        receive = self._finished_receive
        async for first in receive:
            found = [first]
            while len(found) < _WRITE_BATCH:
                try:
                    found.append(receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            items = [
                (key, task.status.value, float(task.credits_cost or 0.0), task_to_json(task))
                for key, task in found
            ]
            acks, self._acks = self._acks, []
            rows = await self._store.write(claims.finish_many, self.owner, items, acks)
            tasks = dict(found)
            for row in rows:
                await self._send.send(entry_from_row(row, tasks[row["key"]]))
            self._unwritten -= len(found)
