"""``Ledger.wait`` and ``Ledger.changes``: every process's changes, pushed to this one.

One :class:`Listener` per ledger reads the changes the schema's triggers record, in sequence
order, and hands them to this process's waits, iterators and dispatchers. A sequence number is
taken before its change commits, so numbers passed over (gaps) are read again until they come
or are :data:`GAP_TTL` old: each change is handed on once, each entry's in commit order (its
row stays locked until its change commits). Woken by ``NOTIFY`` (PostgreSQL), ``PRAGMA
data_version`` (SQLite), and this process's commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sqlite3
from collections.abc import Iterable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._contract._exceptions import (
    AmbiguousCreateError,
    InvalidRequestError,
    LedgerError,
    WaitTimeoutError,
)
from .._http._retry import decide_retry
from ._creates import check_key
from ._engines import _DRIVER_ERRORS, PostgresEngine, _terminate
from ._entry import STATES, TERMINAL_STATES, LedgerEntry, entry_from_row
from ._plans import get
from ._schema import CHANNEL, Plan, first, q
from ._store import DATABASE_BACKOFF, Signal, Store

try:
    import asyncpg
except ImportError:  # pragma: no cover - the extra is installed in the test environment
    asyncpg = None

logger = logging.getLogger("videogen_async")

GAP_TTL = 120.0
"""Seconds a sequence number passed over is looked for (twice the longest statement)."""
SQLITE_PERIOD = 0.02
"""Seconds between two reads of SQLite's ``data_version``."""
LISTENER_NAME = "videogen-async change listener"
"""The ``application_name`` of a PostgreSQL listener's connection."""
_PAGE = 1000
_ERRORS: tuple[type[Exception], ...] = (
    *(LedgerError, OSError, asyncio.TimeoutError, sqlite3.Error, *_DRIVER_ERRORS),
)
_Send = MemoryObjectSendStream[LedgerEntry]


def _read_changes(top: int, gaps: list[int]) -> Plan[list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = yield q(
        "SELECT seq, key, state, entry FROM videogen_ledger_changes"
        " WHERE seq > $1 OR seq IN (numbers($2)) ORDER BY seq LIMIT $3",
        *(top, json.dumps(gaps), _PAGE),
    )
    return rows


def _newest() -> Plan[list[int]]:
    rows = yield q("SELECT seq FROM videogen_ledger_changes ORDER BY seq DESC LIMIT 1000")
    return [int(row["seq"]) for row in rows]


def _data_version() -> Plan[Any]:
    return (yield from first("PRAGMA data_version"))


class _Notices:
    """PostgreSQL: a ``LISTEN`` connection of its own; a notice fires ``changed``."""

    def __init__(self, engine: PostgresEngine, changed: Signal) -> None:
        self._url, self._changed = engine.url, changed
        self._conn: Any = None
        self.lost = False

    async def open(self) -> None:
        self.lost = False
        settings = {"application_name": LISTENER_NAME}  # for operators: which backend listens
        self._conn = await asyncpg.connect(self._url, timeout=10, server_settings=settings)
        self._conn.add_termination_listener(self._lose)
        await self._conn.add_listener(CHANNEL, self._notice)

    # Both async: asyncpg runs them in a task, where anyio knows the event loop (a plain
    # callback runs outside any task, and older anyio cannot set an Event there).
    async def _notice(self, *_: Any) -> None:
        self._changed.fire()

    async def _lose(self, *_: Any) -> None:
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
        if conn is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(5), contextlib.suppress(Exception):
            await conn.close()
        _terminate(conn)  # still open: closing it timed out


class _Versions:
    """SQLite: ``PRAGMA data_version``, read every :data:`SQLITE_PERIOD` s off the loop."""

    lost = False

    def __init__(self, store: Store) -> None:
        self._store = store
        self._version: Any = None

    async def open(self) -> None:
        self._version = await self._store.read(_data_version)

    async def wait(self, event: anyio.Event) -> None:
        while not event.is_set():
            with anyio.move_on_after(SQLITE_PERIOD):
                await event.wait()
                return
            version = await self._store.read(_data_version)
            if version != self._version:
                self._version = version
                return

    async def close(self) -> None:
        return None


class Listener:
    """The change listener of one ledger (see the module docstring).

    Attributes:
        terminal: Fired when a change to a terminal state was read (for dispatchers).
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._top: int | None = None
        self._gaps: dict[int, float] = {}  # sequence number -> when first missed
        self._by_key: dict[str | None, dict[_Send, frozenset[str] | None]] = {}
        self.terminal = Signal()
        self._ready = anyio.Event()
        self._task: asyncio.Task[None] | None = None
        # Stopped through its own cancel scope, not Task.cancel(): on Python 3.10 an anyio
        # scope whose deadline passes as the task is cancelled can take that cancellation for
        # its own and swallow it (no Task.uncancel), and the listener would never end.
        self._scope = anyio.CancelScope()

    def subscribe(
        self, keys: frozenset[str] | None, states: frozenset[str] | None
    ) -> tuple[_Send, MemoryObjectReceiveStream[LedgerEntry]]:
        """A stream of the changes of ``keys`` (``None``: all) to ``states`` (``None``: any)."""
        send, receive = anyio.create_memory_object_stream[LedgerEntry](math.inf)
        for key in (None,) if keys is None else keys:
            self._by_key.setdefault(key, {})[send] = states
        return send, receive

    def unsubscribe(self, keys: frozenset[str] | None, send: _Send) -> None:
        """Close a stream of :meth:`subscribe` (its ``keys``) and forget it."""
        send.close()
        for key in (None,) if keys is None else keys:
            streams = self._by_key.get(key, {})
            streams.pop(send, None)
            if not streams:
                self._by_key.pop(key, None)

    async def start(self) -> None:
        """Start listening (once); return when every change from now on will be read."""
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._scope = anyio.CancelScope()
            self._task = loop.create_task(self._guarded(), name="videogen_async.ledger.listen")
        await self._ready.wait()

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        task, self._task = self._task, None
        self._scope.cancel()
        if task is not None and not task.done():
            with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError):
                await task

    async def _guarded(self) -> None:
        try:
            with self._scope:
                await self._run()
        except Exception:  # a bug: end every wait and iteration rather than leave them hanging
            logger.exception("ledger %r: the change listener stopped", self._store.where)
            self._ready.set()
            for streams in self._by_key.values():
                for send in streams:
                    send.close()

    async def _run(self) -> None:
        engine, changed = self._store.engine, self._store.changed
        source = (
            _Notices(engine, changed)
            if isinstance(engine, PostgresEngine)
            else _Versions(self._store)
        )
        failures = 0
        try:
            while True:
                error: Exception = LedgerError("its connection was lost")
                try:
                    await source.open()
                    if not self._ready.is_set():
                        self._start_after(await self._store.read(_newest))
                        self._ready.set()
                    failures = 0
                    while not source.lost:
                        event = changed.event
                        await self._read()
                        await source.wait(event)
                except _ERRORS as exc:
                    error, failures = exc, failures + 1
                    logger.warning(
                        "ledger %r: the change listener lost the database (%s: %s); again soon",
                        *(self._store.where, type(exc).__name__, exc),
                    )
                await source.close()
                decision = decide_retry(
                    error, method="GET", failures=max(failures, 1), policy=DATABASE_BACKOFF,
                    poll=True, transient=True,
                )  # fmt: skip
                await anyio.sleep(decision.delay or 0.0)
        finally:
            await source.close()

    def _start_after(self, newest: list[int]) -> None:
        if newest:  # the numbers missing among the newest may still commit
            self._top = newest[0]
            present, now = set(newest), anyio.current_time()
            self._gaps = {n: now for n in range(newest[-1], newest[0]) if n not in present}

    async def _read(self) -> None:
        while True:
            top = -1 if self._top is None else self._top
            rows = await self._store.read(_read_changes, top, sorted(self._gaps))
            now, terminal = anyio.current_time(), False
            for row in rows:
                seq = int(row["seq"])
                if self._top is None:  # the first change of an empty log: a few below may come
                    self._top = max(seq - 100, 0)
                if seq > self._top:
                    self._gaps.update((n, now) for n in range(max(self._top + 1, seq - 1000), seq))
                    self._top = seq
                elif self._gaps.pop(seq, None) is None:
                    continue
                self._hand_on(row)
                terminal |= row["state"] in TERMINAL_STATES
            if terminal:
                self.terminal.fire()
            for n in [n for n, since in self._gaps.items() if now - since > GAP_TTL]:
                del self._gaps[n]
            if len(rows) < _PAGE:
                return

    def _hand_on(self, row: dict[str, Any]) -> None:
        key, state = row["key"], row["state"]
        streams = {**self._by_key.get(None, {}), **self._by_key.get(key, {})}
        wanted = [send for send, states in streams.items() if states is None or state in states]
        if wanted:
            entry = entry_from_row(json.loads(row["entry"]))
            for send in wanted:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    send.send_nowait(entry)


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
        """Wait until an entry is terminal, whichever process records it; nothing is sent.

        Args:
            key: The entry's key (a task's).
            timeout: Seconds to wait at most (``None``: no limit).

        Returns:
            The entry, ``succeeded``, ``failed`` or ``error``.

        Raises:
            WaitTimeoutError: Not terminal in time (``last``: the entry as last seen).
            LedgerError: No such key, or an entry that never becomes terminal (a project, a
                video batch, a create the service refused).
            AmbiguousCreateError: The entry is (or becomes) ``unknown``.
        """
        key = check_key(key)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or math.isnan(timeout)
            or timeout < 0
        ):
            raise InvalidRequestError("timeout", "must be seconds >= 0 or None")
        listener, keys, entry = self._listening(), frozenset({key}), None
        send, receive = listener.subscribe(keys, None)
        try:
            with receive, anyio.move_on_after(math.inf if timeout is None else timeout):
                await listener.start()
                row = await self._store.read(get, key)
                if row is None:
                    raise LedgerError(f"ledger key {key!r}: no such entry")
                entry = entry_from_row(row)
                while not entry.is_terminal:
                    if entry.state == "unknown":
                        raise AmbiguousCreateError(key, entry, entry.error)
                    if entry.state != "creating" and entry.task_id is None:
                        raise LedgerError(f"ledger key {key!r}: never terminal (no task id)")
                    try:
                        change = await receive.receive()
                    except anyio.EndOfStream:
                        raise LedgerError("the ledger's change listener stopped") from None
                    entry = change if change.version > entry.version else entry
                return entry
        finally:
            listener.unsubscribe(keys, send)
        raise WaitTimeoutError(
            f"ledger key {key!r}: not terminal after {timeout:g} s"
            f" (last seen: {entry.state if entry else 'nothing'})",
            last=entry,
            pending=(key,),
            timeout=timeout,
        )

    def changes(
        self, *, keys: Iterable[str] | None = None, states: Iterable[str] | None = None
    ) -> Changes:
        """Every change of the ledger's entries, from every process, as each is committed.

        It starts at its first step, or on entering (``async with ledger.changes() as c:``).
        Each entry's changes come once each, in commit order (``version`` counts them).

        Args:
            keys: Only the changes of these keys.
            states: Only changes to these states (``pending``, ``succeeded``...).

        Returns:
            An async iterator of :class:`LedgerEntry`, each as it was at its change.

        Raises:
            InvalidRequestError: A bad key, or an unknown state.
        """
        wanted_keys = None if keys is None else frozenset(check_key(key) for key in keys)
        wanted_states = None if states is None else frozenset(states)
        if wanted_states is not None and (unknown := wanted_states.difference(STATES)):
            listed = ", ".join(sorted(map(repr, unknown)))
            raise InvalidRequestError("states", f"unknown states {listed}")
        return Changes(self._listening(), wanted_keys, wanted_states)


class Changes:
    """What ``Ledger.changes`` returns: an async iterator, and an async context manager."""

    def __init__(
        self, listener: Listener, keys: frozenset[str] | None, states: frozenset[str] | None
    ) -> None:
        self._listener, self._keys, self._states = listener, keys, states
        self._streams: tuple[_Send, MemoryObjectReceiveStream[LedgerEntry]] | None = None

    async def __aenter__(self) -> Changes:
        if self._streams is None:
            self._streams = self._listener.subscribe(self._keys, self._states)
            await self._listener.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Changes:
        return self

    async def __anext__(self) -> LedgerEntry:
        await self.__aenter__()
        assert self._streams is not None  # noqa: S101 - entered above
        try:
            return await self._streams[1].receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving changes. Idempotent."""
        self.__del__()

    def __del__(self) -> None:
        if self._streams is not None:
            self._listener.unsubscribe(self._keys, self._streams[0])
            self._streams[1].close()
