"""The one timer of an attempt: its ``total`` and ``read`` timeouts, without a task of its own.

A handle on the event loop (not a cancel scope) so that an attempt costs one timer, and it
tells its own cancellation from a caller's (``Task.uncancel`` on Python 3.11 and later).
"""

from __future__ import annotations

import asyncio
import math
import sys

import aiohttp


class Bound:
    """The one timer of an attempt, for its ``total`` and ``read`` timeouts (``None``: none).

    It cancels the attempt's task at its end, or after ``read`` seconds without a byte
    (checked every quarter of ``read``); :meth:`expired` tells that from other cancellations.
    """

    def __init__(self, total: float | None, read: float | None) -> None:
        self.response: aiohttp.ClientResponse | None = None
        self.fired = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task(self._loop)
        self._cancelling = 0
        if sys.version_info >= (3, 11) and self._task is not None:
            self._cancelling = self._task.cancelling()
        self._since = now = self._loop.time()
        self._end = now + (math.inf if total is None else total)
        self._read = math.inf if read is None else read
        self._seen = -1
        self.handle = self._loop.call_at(min(self._end, now + self._read / 4), self._check)

    def _check(self) -> None:
        now = self._loop.time()
        seen = -1 if self.response is None else self.response.content.total_bytes
        if seen != self._seen:
            self._seen, self._since = seen, now
        if now < self._end and now - self._since < self._read:
            self.handle = self._loop.call_at(min(self._end, now + self._read / 4), self._check)
        elif self._task is not None:
            self.fired = True
            self._task.cancel()

    def expired(self) -> bool:
        """Whether the attempt's cancellation is this timer's (and none from outside)."""
        if sys.version_info >= (3, 11) and self.fired and self._task is not None:
            return self._task.uncancel() <= self._cancelling
        return self.fired
