"""The timers of attempts: their ``total`` and ``read`` timeouts, one loop timer for them all.

An attempt registers a :class:`Bound` with its client's :class:`Watch` (a set insert), not a
timer of its own: an ``asyncio`` timer handle costs more than the rest of an attempt's own work
(its cancellation and the heap's clean-up run Python code), so one handle serves every attempt
of a client, due at the earliest check any of them needs. A bound tells its own cancellation
from a caller's (``Task.uncancel`` on Python 3.11 and later).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time

import aiohttp


class Bound:
    """An attempt's ``total`` and ``read`` timeouts (``None``: none), checked by ``watch``.

    Its task is cancelled at its end, or after ``read`` seconds without a byte (checked at
    least every quarter of ``read``); :meth:`expired` tells that from other cancellations.
    """

    # Slots: an attempt's state, made for every request, without a dict of its own.
    __slots__ = (
        "_cancelling",
        "_end",
        "_read",
        "_seen",
        "_since",
        "_task",
        "fired",
        "next",
        "response",
    )

    def __init__(self, watch: Watch, total: float | None, read: float | None) -> None:
        self.response: aiohttp.ClientResponse | None = None
        self.fired = False
        self._task = asyncio.current_task()
        self._cancelling = 0
        if sys.version_info >= (3, 11) and self._task is not None:
            self._cancelling = self._task.cancelling()
        self._since = now = time.monotonic()
        self._end = now + (math.inf if total is None else total)
        self._read = math.inf if read is None else read
        self._seen = -1
        #: When it must be checked next (the monotonic clock, as the loop's).
        self.next = min(self._end, now + self._read / 4)
        watch.add(self)  # until the attempt discards it
        if self.next < watch.at:
            watch.schedule(asyncio.get_running_loop(), self.next)

    def check(self, now: float) -> float:
        """Note the bytes read so far; cancel the task when a bound is passed. The next check."""
        seen = -1 if self.response is None else self.response.content.total_bytes
        if seen != self._seen:
            self._seen, self._since = seen, now
        if now < self._end and now - self._since < self._read:
            self.next = min(self._end, now + self._read / 4)
        elif self._task is not None and not self.fired:
            self.fired = True
            self._task.cancel()
            self.next = math.inf
        return self.next

    def expired(self) -> bool:
        """Whether the attempt's cancellation is this timer's (and none from outside)."""
        if sys.version_info >= (3, 11) and self.fired and self._task is not None:
            return self._task.uncancel() <= self._cancelling
        return self.fired


class Watch(set[Bound]):
    """The attempts in flight of a client and its views, and the one loop timer checking them.

    The timer is due at the earliest ``next`` of the bounds; each check sets the next, so every
    bound is checked at least as often as it asks. An attempt that ends is discarded and leaves
    the timer as it is: it then finds fewer bounds, or none, and stops until an attempt starts.
    A client runs in one event loop (its session's), so one timer serves it.
    """

    #: When the timer is due (``inf``: none is).
    at = math.inf

    def schedule(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        """Arm the timer for ``at`` (``inf``: none), replacing the one due later."""
        self.at = at
        if at < math.inf:
            loop.call_at(at, self._tick, loop, at)

    def _tick(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        # A timer that an earlier one replaced (an attempt asked for an earlier check) stops
        # here: it is left in the loop's heap rather than cancelled, which costs more.
        if at == self.at:
            now = time.monotonic()
            self.schedule(loop, min([b.check(now) for b in self], default=math.inf))
