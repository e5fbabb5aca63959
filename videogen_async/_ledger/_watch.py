"""``Ledger.watch``: cooperative watchers that share a ledger's pending entries.

Each watcher claims entries with a lease (decided in SQL: a pending entry whose lease is out),
polls the claimed ids with :func:`gather_until_done` (one gather per claim), writes each
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
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from .._exceptions import TaskPollError
from .._gather import gather_until_done
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row, task_to_json
from ._pacing import SharedPause, paced
from ._store import Store

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from .._models import Task
    from .._polling import PollPolicy

__all__ = ["Signal", "Watch"]

logger = logging.getLogger("videogen_async")


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


class Watch:
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
        self._tg: TaskGroup | None = None
        self._send: MemoryObjectSendStream[LedgerEntry | BaseException] | None = None
        self._receive: MemoryObjectReceiveStream[LedgerEntry | BaseException] | None = None
        self._last: LedgerEntry | None = None
        self._gathers = 0
        self._gather_done = anyio.Event()
        self.claimed = 0
        self.finished = 0

    # -- the context manager -----------------------------------------------------------------

    async def __aenter__(self) -> Watch:
        if self._tg is not None:
            raise RuntimeError("this watch() was already entered")
        self._send, self._receive = anyio.create_memory_object_stream[
            "LedgerEntry | BaseException"
        ](max_buffer_size=math.inf)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._guarded_run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                if exc_type is None:
                    await self._ack_last()
                # What is still held goes back to the ledger at once, for the next watcher.
                await self._store.release(self.owner)
                if self._receive is not None:
                    self._receive.close()

    # -- iteration ---------------------------------------------------------------------------

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> LedgerEntry:
        receive = self._receive
        if receive is None:
            raise RuntimeError("use the watch as `async with ledger.watch(client) as finished`")
        await self._ack_last()
        try:
            item = await receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            raise item
        self._last = item
        return item

    async def _ack_last(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            await self._store.ack(last.key, self.owner)

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
        renewed = time.monotonic()
        async with anyio.create_task_group() as tg:
            while True:
                await self._pacing()
                await self._pause.wait()
                claimed_any = False
                while self._max_held is None or self._held < self._max_held:
                    size = self._claim_size
                    if self._max_held is not None:
                        size = min(size, self._max_held - self._held)
                    rows = await store.claim(self.owner, self._lease, size)
                    if rows:
                        renewed = time.monotonic()
                        claimed_any = True
                        self._start(tg, rows)
                    if len(rows) < size:
                        break
                now = time.monotonic()
                if self._gathers and now - renewed >= self._lease / 3:
                    await store.renew(self.owner, self._lease)
                    renewed = now
                if (
                    self._stop_when_idle
                    and not claimed_any
                    and not self._gathers
                    and not await store.has_open(self.owner)
                ):
                    tg.cancel_scope.cancel()
                    return
                await self._sleep()

    async def _pacing(self) -> None:
        report = self._pause.take_report()
        if report > 0:
            await self._store.pause_for(report)
            logger.info("ledger watcher: 429 met, every watcher pauses %.2f s", report)
        self._pause.learn(await self._store.pause_remaining())

    async def _sleep(self) -> None:
        created = self._created.event
        changed = self._pause.changed
        gather_done = self._gather_done
        with anyio.move_on_after(min(self._interval, self._lease / 3)):
            async with anyio.create_task_group() as tg:

                async def one(event: anyio.Event) -> None:
                    await event.wait()
                    tg.cancel_scope.cancel()

                for event in (created, changed, gather_done):
                    tg.start_soon(one, event)

    def _start(self, tg: TaskGroup, rows: list[Any]) -> None:
        send = self._send
        if send is None:  # pragma: no cover - set by __aenter__
            raise RuntimeError("the watch is not entered")
        self.claimed += len(rows)
        self._held += len(rows)
        batch: dict[str, str] = {}
        for row in rows:
            if row["state"] in TERMINAL_STATES:
                tg.start_soon(self._redeliver, row["key"])
            elif row["task_id"]:
                batch[row["task_id"]] = row["key"]
        if batch:
            self._gathers += 1
            tg.start_soon(self._gather, batch)

    async def _redeliver(self, key: str) -> None:
        send = self._send
        if send is None:  # pragma: no cover - set by __aenter__
            raise RuntimeError("the watch is not entered")
        row = await self._store.get(key)
        self._held -= 1
        if row is not None and row["owner"] == self.owner:
            await send.send(entry_from_row(row))

    async def _gather(self, batch: dict[str, str]) -> None:
        send = self._send
        if send is None:  # pragma: no cover - set by __aenter__
            raise RuntimeError("the watch is not entered")
        store = self._store
        try:
            client = paced(self._client, self._pause)
            async with gather_until_done(client, list(batch), **self._gather_options) as results:
                async for item in results:
                    self._held -= 1
                    if isinstance(item, TaskPollError):
                        key = batch[item.task_id]
                        logger.warning("ledger key %r: %s", key, item)
                        await store.poll_failed(key, self.owner, str(item), self._lease)
                        continue
                    row = await store.finish(
                        batch[item.task_id],
                        self.owner,
                        state=_state_of(item),
                        cost=float(item.credits_cost or 0.0),
                        task=task_to_json(item),
                    )
                    if row is not None:
                        self.finished += 1
                        await send.send(entry_from_row(row))
        finally:
            self._gathers -= 1
            self._gather_done.set()
            self._gather_done = anyio.Event()
