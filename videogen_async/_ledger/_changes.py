"""``Ledger.wait`` and ``Ledger.changes``: the consumers of the change listener (``_listen``).

``changes(after=position)`` reads the table up to the listener's top first, then takes the
listener's changes after it: each change once, in ``position`` order, whichever process made it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from .._contract import _checks as checks
from .._contract import _exceptions as err
from .._contract._checks import check_key
from ._entry import STATES, LedgerEntry, entry_from_row
from ._listen import _PAGE, Listener, _as_entry, _read_changes, _Send, _Wanted
from ._plans import get
from ._schema import CHANGES_KEPT
from ._store import Store


async def wait(
    store: Store,
    listener: Listener,
    key: str,
    timeout: float | None,  # noqa: ASYNC109
) -> LedgerEntry:
    """``Ledger.wait``."""
    key = check_key(key)
    checks.seconds_or_none("timeout", timeout)
    entry = None
    # Subscribed before the entry is read: no change after the read is missed.
    changes = Changes(store, listener, frozenset({key}), None)
    with anyio.move_on_after(math.inf if timeout is None else timeout):
        async with changes:
            row = await store.read(get, key)
            if row is None:
                raise err.LedgerError(f"ledger key {key!r}: no such entry")
            entry = entry_from_row(row)
            while not entry.is_terminal:
                if entry.state == "unknown":
                    raise err.AmbiguousCreateError(key, entry, entry.error)
                if entry.state != "creating" and entry.task_id is None:
                    raise err.LedgerError(f"ledger key {key!r}: never terminal (no task id)")
                async for change in changes:  # pragma: no branch - one at a time
                    entry = change if change.version > entry.version else entry
                    break
                else:
                    raise err.LedgerError("the ledger's change listener stopped")
            return entry
    raise err.WaitTimeoutError(
        f"ledger key {key!r}: not terminal after {timeout:g} s"
        f" (last seen: {entry.state if entry else 'nothing'})",
        last=entry,
        pending=(key,),
        timeout=timeout,
    )


def changes(
    store: Store,
    listener: Listener,
    keys: Iterable[str] | None,
    states: Iterable[str] | None,
    after: int | None,
) -> Changes:
    """``Ledger.changes``: the arguments checked, nothing read yet."""
    if after is not None:
        checks.whole("after", after, minimum=0)
    wanted_keys = None if keys is None else frozenset(check_key(key) for key in keys)
    wanted_states = None if states is None else frozenset(states)
    if wanted_states is not None and (unknown := wanted_states.difference(STATES)):
        listed = ", ".join(sorted(map(repr, unknown)))
        raise err.InvalidRequestError("states", f"unknown states {listed}")
    return Changes(store, listener, wanted_keys, wanted_states, after)


class Changes:
    """What ``Ledger.changes`` returns: an async iterator, and an async context manager."""

    def __init__(
        self,
        store: Store,
        listener: Listener,
        keys: _Wanted,
        states: _Wanted,
        after: int | None = None,
    ) -> None:
        self._store = store
        self._listener = listener
        self._keys = keys
        self._states = states
        self._streams: tuple[_Send, MemoryObjectReceiveStream[LedgerEntry]] | None = None
        # Read from the table: the changes in (_read, _until]; from the listener: after _skip.
        self._after = after
        self._read = after or 0
        self._until = 0
        self._skip = -1
        self._kept: deque[LedgerEntry] = deque()

    async def __aenter__(self) -> Changes:
        if self._streams is None:
            self._streams = self._listener.subscribe(self._keys, self._states)
            await self._listener.start()
            if self._after is not None:  # the table up to the top read, then the listener's
                self._until = self._listener.top
                self._skip = max(self._after, self._until)
                while self._listener.handed_on < self._until:  # every change below is in
                    await self._listener.moved.event.wait()
                await self._read_kept()
        return self

    async def _read_kept(self) -> None:
        rows = await self._store.read(_read_changes, self._read, [], self._until)
        seen = rows[0]  # the pruned and the oldest positions, as this read saw them
        if seen["pruned"] is not None and int(seen["pruned"]) > self._read:
            raise err.LedgerError(
                f"ledger changes after position {self._read} were pruned (kept {CHANGES_KEPT:g}"
                f" s): the oldest position still kept is {seen['oldest'] or 'none'}"
            )
        self._read = self._until if len(rows) < _PAGE else int(rows[-1]["seq"])
        for row in rows:
            if (
                row["seq"] is not None
                and (self._keys is None or row["key"] in self._keys)
                and (self._states is None or row["state"] in self._states)
            ):
                self._kept.append(_as_entry(row))

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Changes:
        return self

    async def __anext__(self) -> LedgerEntry:
        await self.__aenter__()
        assert self._streams is not None  # noqa: S101 - entered above
        while not self._kept and self._read < self._until:
            await self._read_kept()
        if self._kept:
            return self._kept.popleft()
        try:
            while True:
                entry = await self._streams[1].receive()
                if (entry.position or 0) > self._skip:
                    return entry
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving changes. Idempotent."""
        self.__del__()

    def __del__(self) -> None:
        if self._streams is not None:
            self._listener.unsubscribe(self._keys, self._streams[0])
            self._streams[1].close()
