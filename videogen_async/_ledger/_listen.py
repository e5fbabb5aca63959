"""The change listener: every process's changes, pushed to this one (``_changes``).

One :class:`Listener` per ledger hands the triggers' changes to this process's waits, iterators
and dispatchers in sequence (``position``) order. A number is taken before its change commits,
so a gap holds back later changes until it comes, is known never to come or is
:data:`GAP_TTL` old: each change is handed on once, in order, and a resumed consumer misses
nothing. Woken by the engine (``NOTIFY``; SQLite's ``PRAGMA data_version``) and by this
process's commits.

A number is known never to come once every transaction that was running when it was first
missed has ended (``{in_progress}``, read by the same statement as the changes) and one more
read has not found it. That read is needed because the list of running transactions is taken
a moment after the statement's snapshot: a transaction that commits in between is absent from
both the changes read and the list, and only the next read sees its change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._contract import _exceptions as err
from .._http._retry import backoff_after
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row
from ._protocol import Signal
from ._schema import Plan, Row, q
from ._store import DATABASE_BACKOFF, Store

logger = logging.getLogger("videogen_async")

GAP_TTL = 120.0
"""Seconds a sequence number passed over is waited for at most (twice the longest statement)."""
_PAGE = 1000
_ERRORS = (err.LedgerError, OSError, asyncio.TimeoutError)
_Send = MemoryObjectSendStream[LedgerEntry]
_Wanted = frozenset[str] | None
"""The keys (or states) a subscriber wants; ``None``: every one."""


def _read_changes(after: int, gaps: list[int], until: int = 2**62) -> Plan[list[Row]]:
    rows: list[Row] = yield q(  # one row at least: what the statement saw
        "SELECT c.seq, c.key, c.state, c.entry, s.* FROM (SELECT {in_progress} AS busy,"
        " (SELECT value FROM videogen_ledger_meta WHERE name = 'changes_pruned') AS pruned,"
        " (SELECT min(seq) FROM videogen_ledger_changes) AS oldest) AS s"
        " LEFT JOIN (SELECT seq, key, state, entry FROM videogen_ledger_changes WHERE seq > $1"
        " AND seq <= $2 UNION ALL SELECT seq, key, state, entry FROM videogen_ledger_changes"
        " WHERE seq IN (numbers($3))) AS c ON true ORDER BY c.seq LIMIT $4",  # the index, twice
        *(after, until, json.dumps(gaps), _PAGE),
    )
    return rows


def _newest() -> Plan[list[int]]:
    rows = yield q("SELECT seq FROM videogen_ledger_changes ORDER BY seq DESC LIMIT 1000")
    return [int(row["seq"]) for row in rows]


def _as_entry(row: Row) -> LedgerEntry:
    return entry_from_row({**json.loads(row["entry"]), "position": int(row["seq"])})


class Listener:
    """The change listener of one ledger (see the module docstring).

    Attributes:
        terminal: Fired when a change to a terminal state was read (for dispatchers).
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self.top = 0  # the highest position read (0: none)
        # A number passed over -> when first missed, and the transactions that may still
        # commit it (None: not read since).
        self._gaps: dict[int, tuple[float, frozenset[int] | None]] = {}
        self._held: dict[int, Row] = {}  # changes read after a gap, by number
        self._by_key: dict[str | None, dict[_Send, _Wanted]] = {}
        self.terminal, self.moved = Signal(), Signal()  # moved: handed_on may have grown
        self._ready = anyio.Event()
        self._task: asyncio.Task[None] | None = None
        # Stopped through its own cancel scope, not Task.cancel(): on Python 3.10 an anyio
        # scope whose deadline passes as the task is cancelled can take that cancellation for
        # its own and swallow it (no Task.uncancel), and the listener would never end.
        self._scope = anyio.CancelScope()

    @property
    def handed_on(self) -> int:
        """The position up to which every change is known (read, or never coming)."""
        return min(self._gaps) - 1 if self._gaps else self.top

    def subscribe(
        self, keys: _Wanted, states: _Wanted
    ) -> tuple[_Send, MemoryObjectReceiveStream[LedgerEntry]]:
        """A stream of the changes of ``keys`` (``None``: all) to ``states`` (``None``: any)."""
        send, receive = anyio.create_memory_object_stream[LedgerEntry](math.inf)
        for key in (None,) if keys is None else keys:
            self._by_key.setdefault(key, {})[send] = states
        return send, receive

    def unsubscribe(self, keys: _Wanted, send: _Send) -> None:
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
            self._gaps.clear()
            self.moved.fire()
            for streams in self._by_key.values():
                for send in streams:
                    send.close()

    async def _run(self) -> None:
        changed = self._store.changed
        source = self._store.engine.listen(changed)
        failures = 0
        try:
            while True:
                error: Exception = err.LedgerError("its connection was lost")
                try:
                    await source.open()
                    if not self._ready.is_set():
                        self._start_after(await self._store.read(_newest))
                        self._ready.set()
                    failures = 0
                    while not source.lost:
                        event = changed.event
                        await self._read()
                        # Changes held back by a number passed over: read again soon.
                        await source.wait(event, 0.05 if self._gaps else math.inf)
                except _ERRORS as exc:
                    error, failures = exc, failures + 1
                    logger.warning(
                        "ledger %r: the change listener lost the database (%s: %s); again soon",
                        *(self._store.where, type(exc).__name__, exc),
                    )
                await source.close()
                await anyio.sleep(
                    backoff_after(max(failures, 1), DATABASE_BACKOFF, exc=error).delay or 0.0
                )
        finally:
            await source.close()

    def _start_after(self, newest: list[int]) -> None:
        if newest:  # the numbers missing among the newest may still commit
            self.top = newest[0]
            present, now = set(newest), anyio.current_time()
            self._gaps = {n: (now, None) for n in range(newest[-1], newest[0]) if n not in present}

    async def _read(self) -> None:
        while True:
            rows = await self._store.read(_read_changes, self.top, sorted(self._gaps))
            now = anyio.current_time()
            for row in rows:
                if row["seq"] is None:  # no change: the transactions running only
                    continue
                seq = int(row["seq"])
                if not self.top:  # the first change of an empty log: a few below may come
                    self.top = max(seq - 100, 0)
                if seq > self.top:
                    self._gaps.update(
                        (n, (now, None)) for n in range(max(self.top + 1, seq - 1000), seq)
                    )
                    self.top = seq
                elif self._gaps.pop(seq, None) is None:
                    continue
                self._held[seq] = row
            # A number still missing is never coming once every transaction that was running
            # when it was first missed had ended by the previous read (it would be in this one).
            running = frozenset(rows[0]["busy"] or ()) if rows else frozenset()
            for n, (since, was) in list(self._gaps.items()):
                if (was is not None and not was) or now - since > GAP_TTL:
                    del self._gaps[n]
                else:
                    self._gaps[n] = (since, running if was is None else was & running)
            self._hand_on()
            if len(rows) < _PAGE:
                return

    def _hand_on(self) -> None:
        terminal, until = False, self.handed_on
        for seq in sorted(n for n in self._held if n <= until):
            row = self._held.pop(seq)
            key, state = row["key"], row["state"]
            terminal |= state in TERMINAL_STATES
            streams = {**self._by_key.get(None, {}), **self._by_key.get(key, {})}
            wanted = [send for send, states in streams.items() if states is None or state in states]
            if not wanted:
                continue
            entry = _as_entry(row)
            for send in wanted:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    send.send_nowait(entry)
        if terminal:
            self.terminal.fire()
        self.moved.fire()
