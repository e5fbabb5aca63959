"""The ledger's memory of finish times per class of tasks, shared by its watchers.

The gather updates a :class:`LedgerFinishTimes` in memory; the watcher loads the classes at
start and writes changed ones back each round, each merged in its write transaction with what
the ledger holds then (``merge_class``): what another watcher wrote meanwhile is kept, so no
update is lost. The ``version`` column still counts the writes, as earlier versions check it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .._contract._validation import json_text
from .._waiting._schedule import FinishTimeStats
from ._claims import load_classes
from ._schema import Plan, first, q
from ._store import Store

logger = logging.getLogger("videogen_async")


def class_text(key: object) -> str | None:
    """The text a class key is stored under (``model/duration``); ``None`` for no class."""
    if key is None:
        return None
    if isinstance(key, tuple):
        return "/".join(str(part) for part in key)
    return str(key)


def _encode(stats: FinishTimeStats) -> str:
    return json_text({"bins": [list(p) for p in stats.bins], "count": stats.count}, "stats")


def _decode(text: str) -> FinishTimeStats | None:
    try:
        data = json.loads(text)
        return FinishTimeStats(
            bins=tuple((int(index), float(weight)) for index, weight in data["bins"]),
            count=int(data["count"]),
        )
    except (ValueError, TypeError, KeyError):
        return None


def _normalized(stats: FinishTimeStats) -> dict[int, float]:
    total = sum(weight for _, weight in stats.bins)
    if total <= 0:
        return {}
    return {index: weight / total for index, weight in stats.bins}


def merge_stats(
    theirs: FinishTimeStats, mine: FinishTimeStats, base: FinishTimeStats | None
) -> FinishTimeStats:
    """``theirs`` (the ledger's now) with the observations ``mine`` added to ``base``.

    The new observations are mixed in by their count (``base`` ``None``: nothing loaded).
    """
    added = mine.count - (base.count if base is not None else 0)
    if added <= 0 or not mine.bins:
        return theirs
    total = theirs.count + added
    merged: dict[int, float] = {}
    for stats, count in ((theirs, theirs.count), (mine, added)):
        for index, weight in _normalized(stats).items():
            merged[index] = merged.get(index, 0.0) + weight * count / total
    return FinishTimeStats(bins=tuple(sorted(merged.items())), count=total)


def merge_class(key: str, mine: FinishTimeStats, base: FinishTimeStats | None) -> Plan[Any]:
    """Write a class's stats, merged with those the ledger holds (locked until the commit).

    Returns what was written.
    """
    added = yield q(
        "INSERT INTO videogen_ledger_classes (class_key, stats, version) VALUES ($1, $2, 1)"
        " ON CONFLICT (class_key) DO NOTHING RETURNING class_key",
        key,
        _encode(mine),
    )
    if added:
        return mine
    row = yield from first(
        "SELECT stats FROM videogen_ledger_classes WHERE class_key = $1{lock}", key
    )
    theirs = None if row is None else _decode(row["stats"])
    merged = mine if theirs is None else merge_stats(theirs, mine, base)
    yield q(
        "UPDATE videogen_ledger_classes SET stats = $2, version = version + 1 WHERE class_key = $1",
        key,
        _encode(merged),
    )
    return merged


class LedgerFinishTimes:
    """A ``FinishTimeMemory`` kept in the ledger (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._data: dict[str, FinishTimeStats] = {}
        # Per class, the snapshot this process last wrote: the next one's new observations are
        # its count above it. Never what the ledger holds: a gather's snapshot counts its own
        # observations and at most `prior_weight` of the prior it loaded, so against the
        # ledger's total (which grows with every process's) it would add nothing, ever.
        self._base: dict[str, FinishTimeStats] = {}
        self._dirty: set[str] = set()

    def load(self, key: object) -> FinishTimeStats | None:
        """The stats of a class, as last loaded or learned."""
        text = class_text(key)
        return None if text is None else self._data.get(text)

    def update(self, key: object, stats: FinishTimeStats) -> None:
        """Record new stats of a class (written to the ledger by :meth:`flush`)."""
        text = class_text(key)
        if text is not None:
            self._data[text] = stats
            self._dirty.add(text)

    async def refresh(self) -> None:
        """Read every class the ledger remembers (classes changed here are kept)."""
        for text, encoded in (await self._store.read(load_classes)).items():
            stats = _decode(encoded)
            if stats is None:
                logger.warning("ledger class %r: unreadable stats, ignored", text)
            elif text not in self._dirty:
                self._data[text] = stats

    async def flush(self) -> None:
        """Write the changed classes, each merged with what the ledger holds."""
        dirty, self._dirty = self._dirty, set()
        for text in sorted(dirty):
            mine = self._data[text]
            merged = await self._store.write(merge_class, text, mine, self._base.get(text))
            self._base[text] = mine
            if self._data[text] is mine:  # else a newer snapshot came meanwhile: kept, dirty
                self._data[text] = merged
