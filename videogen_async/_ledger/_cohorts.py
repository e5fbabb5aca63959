"""The ledger's memory of finish times per class of tasks, shared by its watchers.

The gather updates a :class:`LedgerFinishTimes` in memory; the watcher loads the classes at
start and writes changed ones back each round with their read version: one written meanwhile
by another watcher is merged and written again, so no update is lost.
"""

from __future__ import annotations

import json
import logging

from .._contract._validation import json_text
from .._waiting._schedule import FinishTimeStats
from ._claims import load_classes, save_class
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
        bins = tuple((int(index), float(weight)) for index, weight in data["bins"])
        return FinishTimeStats(bins=bins, count=int(data["count"]))
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
    for index, weight in _normalized(theirs).items():
        merged[index] = merged.get(index, 0.0) + weight * theirs.count / total
    for index, weight in _normalized(mine).items():
        merged[index] = merged.get(index, 0.0) + weight * added / total
    return FinishTimeStats(bins=tuple(sorted(merged.items())), count=total)


class LedgerFinishTimes:
    """A ``FinishTimeMemory`` kept in the ledger (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._data: dict[str, FinishTimeStats] = {}
        self._base: dict[str, tuple[FinishTimeStats | None, int]] = {}
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
        for text, (encoded, version) in (await self._store.read(load_classes)).items():
            stats = _decode(encoded)
            if stats is None:
                logger.warning("ledger class %r: unreadable stats, ignored", text)
                continue
            if text not in self._dirty:
                self._data[text] = stats
                self._base[text] = (stats, version)

    async def flush(self) -> None:
        """Write the changed classes, each with a version check, merging on a conflict."""
        dirty, self._dirty = self._dirty, set()
        for text in sorted(dirty):
            mine = self._data[text]
            for _attempt in range(8):
                base, version = self._base.get(text, (None, 0))
                if await self._store.write(save_class, text, _encode(mine), version):
                    self._base[text] = (mine, version + 1)
                    break
                current = (await self._store.read(load_classes)).get(text)
                if current is None:  # pragma: no cover - classes are never deleted
                    self._base.pop(text, None)
                    continue
                theirs = _decode(current[0])
                if theirs is None:  # pragma: no cover - written by this module
                    break
                mine = merge_stats(theirs, mine, base)
                self._data[text] = mine
                self._base[text] = (theirs, current[1])
