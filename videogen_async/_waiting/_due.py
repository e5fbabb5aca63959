"""When each pending id of a gather polls next: one heap with lazy deletion (:class:`DueHeap`)."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from ._cohorts import IdState


@attrs.define
class DueHeap:
    """The next poll of every pending id, as entries of one heap.

    Scheduling a poll costs O(log n) and nothing scans all ids. An id holds the counter of its
    live entry (``IdState.entry``); rescheduling pushes a new entry, and the entries it made
    stale are skipped when they reach the top (lazy deletion).
    """

    _heap: list[tuple[float, int, IdState]] = attrs.Factory(list)
    _counter: int = 0

    def push(self, state: IdState, due: float) -> None:
        """Schedule ``state``'s next poll at ``due`` (replacing any earlier schedule)."""
        self._counter += 1
        state.due = due
        state.entry = self._counter
        heapq.heappush(self._heap, (due, self._counter, state))

    def next_due(self) -> float | None:
        """When the earliest scheduled poll is due; ``None`` when nothing is scheduled."""
        heap = self._heap
        while heap and heap[0][2].entry != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop(self) -> IdState:
        """Take the earliest scheduled id (call :meth:`next_due` first); it is unscheduled."""
        state = heapq.heappop(self._heap)[2]
        state.entry = -1
        return state
