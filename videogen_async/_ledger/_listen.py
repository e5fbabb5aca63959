"""``Ledger.wait`` and ``Ledger.changes``: the changes of every process, pushed.

**What is read.** The schema's triggers record each change of an entry (its insert, and each
change of its state or metadata, which bumps its ``version``) in ``videogen_ledger_changes``,
with the whole entry, in the change's own transaction. One :class:`Listener` per ledger reads
them in the order of their sequence number ``seq`` and hands each to the waits, the change
iterators and the dispatchers of its process. Nothing is sent to the service.

**Nothing missed, nothing twice.** A sequence number is taken when a change is made, not when
it commits: on PostgreSQL a change may commit after one with a higher number was read. The
listener keeps the numbers it passed over (gaps) and reads them again with each read, in the
same statement, until they come (committed late) or are :data:`GAP_TTL` old (rolled back). A
change is handed on once: when its number is above the last read, or leaves the gaps. Per
entry, a change commits before the next one is made (its row stays locked until then), so its
number is lower and it is handed on first: each entry's changes arrive in commit order. A
listener that was away (a lost connection, a database restart) reads on from where it was;
changes are kept :data:`~._schema.CHANGES_KEPT` seconds, and the awaited entries are read
again after a reconnect.

**Woken, never looping on the database.** PostgreSQL: the triggers ``pg_notify``; one
``LISTEN`` connection per ledger (not a pool's), reconnected with backoff when it is lost (its
termination, a failed ping after 30 quiet seconds), then re-read. SQLite: ``PRAGMA
data_version`` (which changes with each commit of another connection) read on a connection of
its own every :data:`SQLITE_PERIOD` seconds, off the event loop. Both: at once after each
commit of this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import sqlite3
from collections.abc import Iterable
from typing import Any

import anyio
import attrs
from anyio.streams.memory import MemoryObjectSendStream

from .._contract._exceptions import (
    AmbiguousCreateError,
    InvalidRequestError,
    LedgerError,
    WaitTimeoutError,
)
from .._http._retry import backoff_delay
from ._creates import check_key
from ._engines import PostgresEngine, SQLiteEngine
from ._entry import STATES, TERMINAL_STATES, LedgerEntry, entry_from_row
from ._plans import get
from ._schema import CHANNEL, Plan, q
from ._store import Signal, Store

try:
    import asyncpg
except ImportError:  # pragma: no cover - the extra is installed in the test environment
    asyncpg = None

__all__ = ["GAP_TTL", "LISTENER_NAME", "SQLITE_PERIOD", "Changes", "Listener", "Waits"]

logger = logging.getLogger("videogen_async")

GAP_TTL = 120.0
"""Seconds a sequence number passed over is looked for (twice the longest statement)."""
SQLITE_PERIOD = 0.02
"""Seconds between two reads of SQLite's ``data_version``."""
LISTENER_NAME = "videogen-async change listener"
"""The ``application_name`` of a PostgreSQL listener's connection."""
_PAGE = 1000
_MAX_GAPS = 10_000
_DATABASE_ERRORS: tuple[type[Exception], ...] = (
    LedgerError,
    OSError,
    asyncio.TimeoutError,
    sqlite3.Error,
    *(() if asyncpg is None else (asyncpg.PostgresError, asyncpg.InterfaceError)),
)
"""What the listener meets when the database goes away: it connects again."""


def _read_changes(top: int, gaps: list[int]) -> Plan[list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = yield q(
        "SELECT seq, key, state, entry FROM videogen_ledger_changes"
        " WHERE seq > $1 OR seq IN (numbers($2)) ORDER BY seq LIMIT $3",
        *(top, json.dumps(gaps), _PAGE),
    )
    return rows


def _newest_changes() -> Plan[list[int]]:
    rows = yield q("SELECT seq FROM videogen_ledger_changes ORDER BY seq DESC LIMIT 1000")
    return [int(row["seq"]) for row in rows]


def _rows(keys: list[str]) -> Plan[list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = yield q(
        "SELECT * FROM {E} WHERE key IN (items($1))", json.dumps(keys)
    )
    return rows


@attrs.define(eq=False)
class _Waiter:
    """One ``wait``: the newest entry of its key the listener has seen."""

    key: str
    entry: LedgerEntry | None = None
    event: anyio.Event = attrs.field(factory=anyio.Event)

    def offer(self, entry: LedgerEntry) -> None:
        if self.entry is None or entry.version > self.entry.version:
            self.entry = entry
            self.event.set()


@attrs.define(eq=False)
class _Subscriber:
    """One ``changes()`` iteration."""

    keys: frozenset[str] | None
    states: frozenset[str] | None
    send: MemoryObjectSendStream[LedgerEntry]

    def wants(self, key: str, state: str) -> bool:
        return (self.keys is None or key in self.keys) and (
            self.states is None or state in self.states
        )


class _Notices:
    """PostgreSQL: a ``LISTEN`` connection of its own; a notice fires ``changed``."""

    def __init__(self, engine: PostgresEngine, changed: Signal) -> None:
        self._url = engine.url
        self._changed = changed
        self._conn: Any = None
        self.lost = False

    async def open(self) -> None:
        self.lost = False
        settings = {"application_name": LISTENER_NAME}  # for operators: which backend listens
        self._conn = await asyncpg.connect(self._url, timeout=10, server_settings=settings)
        self._conn.add_termination_listener(self._lose)
        await self._conn.add_listener(CHANNEL, lambda *_: self._changed.fire())

    def _lose(self, *_: Any) -> None:
        self.lost = True
        self._changed.fire()

    async def wait(self, event: anyio.Event) -> None:
        while True:
            with anyio.move_on_after(30.0):
                await event.wait()
                return
            await self._conn.execute("SELECT 1", timeout=10)  # quiet: is it still there?

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(5),
                contextlib.suppress(Exception),
            ):
                await conn.close()
                return
            conn.terminate()


class _Versions:
    """SQLite: ``PRAGMA data_version`` on a connection of its own, read off the loop."""

    def __init__(self, engine: SQLiteEngine, changed: Signal) -> None:
        self._path = engine.path
        self._conn: sqlite3.Connection | None = None
        self._version = -1
        self._limiter = anyio.CapacityLimiter(1)
        self.lost = False

    async def _call(self, call: Any) -> Any:
        return await anyio.to_thread.run_sync(call, limiter=self._limiter)

    async def open(self) -> None:
        self._conn = await self._call(
            functools.partial(
                sqlite3.connect, self._path, isolation_level=None, check_same_thread=False
            )
        )

    def _read(self) -> int:
        assert self._conn is not None  # noqa: S101 - opened first
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    async def wait(self, event: anyio.Event) -> None:
        while not event.is_set():
            with anyio.move_on_after(SQLITE_PERIOD):
                await event.wait()
                return
            version = await self._call(self._read)
            if version != self._version:
                self._version = version
                return

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._call(conn.close)


class Listener:
    """The change listener of one ledger (see the module docstring).

    Attributes:
        terminal: Fired when a change to a terminal state was read.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._top: int | None = None
        self._gaps: dict[int, float] = {}
        self.waiters: dict[str, set[_Waiter]] = {}
        self.subscribers: set[_Subscriber] = set()
        self.terminal = Signal()
        self._ready = anyio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None

    async def start(self) -> None:
        """Start listening (once), and wait until every change from now on will be read."""
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._guarded(), name="videogen_async.ledger.listen")
        await self._ready.wait()
        if self.failure is not None:
            raise LedgerError(f"the ledger's change listener stopped: {self.failure}")

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError):
                await task

    async def _guarded(self) -> None:
        try:
            await self._run()
        except Exception as exc:  # a bug: tell every wait rather than leave it hanging
            logger.exception("ledger %r: the change listener stopped", self._store.where)
            self.failure = exc
            self._ready.set()
            for waiters in self.waiters.values():
                for waiter in waiters:
                    waiter.event.set()

    async def _run(self) -> None:
        engine, changed = self._store.engine, self._store.changed
        source = (
            _Notices(engine, changed)
            if isinstance(engine, PostgresEngine)
            else _Versions(engine, changed)  # type: ignore[arg-type]
        )
        failures = 0
        try:
            while True:
                try:
                    await source.open()
                    if self._ready.is_set():  # back after a loss: what may have been missed
                        await self._resync()
                    else:
                        self._start_at(await self._store.read(_newest_changes))
                        self._ready.set()
                    failures = 0
                    while not source.lost:
                        event = changed.event
                        await self._read()
                        await source.wait(event)
                except _DATABASE_ERRORS as exc:
                    failures += 1
                    logger.warning(
                        "ledger %r: the change listener lost the database (%s: %s); again soon",
                        *(self._store.where, type(exc).__name__, exc),
                    )
                await source.close()
                await anyio.sleep(backoff_delay(failures, initial=0.05, cap=2.0))
        finally:
            await source.close()

    def _start_at(self, newest: list[int]) -> None:
        """Start after the newest change; the numbers missing among the last are gaps."""
        if newest:
            self._top = newest[0]
            now = anyio.current_time()
            present = set(newest)
            self._gaps = {n: now for n in range(newest[-1], newest[0]) if n not in present}

    async def _read(self) -> None:
        while True:
            top = self._top if self._top is not None else -1
            rows = await self._store.read(_read_changes, top, sorted(self._gaps))
            now = anyio.current_time()
            terminal = False
            for row in rows:
                seq = int(row["seq"])
                if self._top is None:  # the first change of an empty log: a few below may come
                    self._top = max(seq - 100, 0)
                if seq > self._top:
                    self._gaps.update((n, now) for n in range(max(self._top + 1, seq - 1000), seq))
                    self._top = seq
                elif self._gaps.pop(seq, None) is None:
                    continue
                terminal |= self._hand_on(row)
            if terminal:
                self.terminal.fire()
            stale = [n for n, since in self._gaps.items() if now - since > GAP_TTL]
            if len(self._gaps) - len(stale) > _MAX_GAPS:
                stale = sorted(self._gaps)[: len(self._gaps) - _MAX_GAPS]
            for n in stale:
                del self._gaps[n]
            if len(rows) < _PAGE:
                return

    def _hand_on(self, row: dict[str, Any]) -> bool:
        key, state = row["key"], row["state"]
        waiters = self.waiters.get(key)
        wanted = [s for s in self.subscribers if s.wants(key, state)]
        if waiters or wanted:
            entry = entry_from_row(json.loads(row["entry"]))
            for waiter in waiters or ():
                waiter.offer(entry)
            for subscriber in wanted:
                subscriber.send.send_nowait(entry)
        return state in TERMINAL_STATES

    async def _resync(self) -> None:
        keys = sorted(self.waiters)
        for start in range(0, len(keys), _PAGE):
            for row in await self._store.read(_rows, keys[start : start + _PAGE]):
                for waiter in self.waiters.get(row["key"], ()):
                    waiter.offer(entry_from_row(row))
        self.terminal.fire()  # dispatchers look again too

    def add_waiter(self, key: str) -> _Waiter:
        waiter = _Waiter(key)
        self.waiters.setdefault(key, set()).add(waiter)
        return waiter

    def remove_waiter(self, waiter: _Waiter) -> None:
        waiters = self.waiters.get(waiter.key, set())
        waiters.discard(waiter)
        if not waiters:
            self.waiters.pop(waiter.key, None)


class Waits:
    """The waits of :class:`~videogen_async.Ledger` on changes made by any process."""

    _store: Store
    _listener: Listener | None

    def _listening(self) -> Listener:
        if self._listener is None:
            self._listener = Listener(self._store)
        return self._listener

    async def wait(
        self,
        key: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the documented signature
    ) -> LedgerEntry:
        """Wait until an entry is terminal, whichever process records it; no request is sent.

        Args:
            key: The entry's key (of a task: ``task`` or ``project_task``).
            timeout: Seconds to wait at most (``None``: no limit).

        Returns:
            The entry, in a terminal state (``succeeded``, ``failed`` or ``error``).

        Raises:
            WaitTimeoutError: Still not terminal after ``timeout`` seconds; ``last`` is the
                entry as last seen.
            LedgerError: No such key, or an entry that never becomes terminal (a project,
                a video batch, a create the service refused).
            AmbiguousCreateError: The entry is (or becomes) ``unknown``: whether its create
                took effect cannot be known by waiting (see ``Ledger.resend``).
            InvalidRequestError: A bad key or timeout.
        """
        key = check_key(key)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0
        ):
            raise InvalidRequestError("timeout", "must be seconds >= 0 or None")
        listener = self._listening()
        waiter = listener.add_waiter(key)
        try:
            with anyio.move_on_after(math.inf if timeout is None else timeout):
                await listener.start()
                row = await self._store.read(get, key)
                if row is None:
                    raise LedgerError(f"ledger key {key!r}: no such entry")
                waiter.offer(entry_from_row(row))
                while True:
                    entry = waiter.entry
                    assert entry is not None  # noqa: S101 - offered above
                    if entry.is_terminal:
                        return entry
                    _check_waitable(entry, listener)
                    waiter.event = anyio.Event()
                    await waiter.event.wait()
        finally:
            listener.remove_waiter(waiter)
        last = waiter.entry
        raise WaitTimeoutError(
            f"ledger key {key!r}: not terminal after {timeout:g} s"
            f" (last seen: {last.state if last else 'nothing'})",
            last=last,
            pending=(key,),
            timeout=timeout,
        )

    def changes(
        self, *, keys: Iterable[str] | None = None, states: Iterable[str] | None = None
    ) -> Changes:
        """Every change of the ledger's entries, from every process, as each is committed.

        Use it as ``async for entry in ledger.changes(): ...`` (it starts with the changes
        committed after its first step), or as ``async with ledger.changes() as changes:``
        (it starts on entering, so that what the block does next is seen). Each entry's
        changes come in the order they were committed (its ``version`` grows by one with
        each change of its state or metadata), each once. The consumer's pace holds nobody
        up: what it has not taken yet is kept in memory.

        Args:
            keys: Only the changes of these keys.
            states: Only changes to these states (``creating``, ``pending``, ``succeeded``...).

        Returns:
            An async iterator of :class:`LedgerEntry`, each as it was at its change (also an
            async context manager; ``aclose()`` stops it).

        Raises:
            InvalidRequestError: A bad key, or an unknown state.
        """
        wanted_keys = None if keys is None else frozenset(check_key(key) for key in keys)
        wanted_states = None if states is None else frozenset(states)
        if wanted_states is not None and not wanted_states <= STATES:
            unknown = ", ".join(sorted(map(repr, wanted_states - STATES)))
            raise InvalidRequestError("states", f"unknown states {unknown}")
        return Changes(self._listening(), wanted_keys, wanted_states)


class Changes:
    """What ``Ledger.changes`` returns: an async iterator, and an async context manager."""

    def __init__(
        self, listener: Listener, keys: frozenset[str] | None, states: frozenset[str] | None
    ) -> None:
        self._listener = listener
        self._send, self._receive = anyio.create_memory_object_stream[LedgerEntry](math.inf)
        self._subscriber = _Subscriber(keys, states, self._send)
        self._started = False

    async def _start(self) -> None:
        if not self._started:
            self._started = True
            self._listener.subscribers.add(self._subscriber)
            await self._listener.start()

    async def __aenter__(self) -> Changes:
        await self._start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Changes:
        return self

    async def __anext__(self) -> LedgerEntry:
        await self._start()
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving changes. Idempotent."""
        self._close()

    def _close(self) -> None:
        self._listener.subscribers.discard(self._subscriber)
        self._send.close()
        self._receive.close()

    def __del__(self) -> None:
        self._close()


def _check_waitable(entry: LedgerEntry, listener: Listener) -> None:
    """Raise where waiting longer cannot give a terminal entry."""
    if listener.failure is not None:
        raise LedgerError(f"the ledger's change listener stopped: {listener.failure}")
    if entry.state == "unknown":
        raise AmbiguousCreateError(entry.key, entry, entry.error)
    if entry.kind in ("project", "videos"):
        raise LedgerError(
            f"ledger key {entry.key!r}: a {entry.kind} entry never becomes terminal"
            " (wait for the keys of its tasks)"
        )
    if entry.state == "refused":
        raise LedgerError(f"ledger key {entry.key!r}: its create was refused; nothing to wait for")
