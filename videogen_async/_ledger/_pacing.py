"""Shared pacing: a 429 seen by one watcher pauses every watcher of the ledger.

The pause lives in the database (``videogen_ledger_pacing.pause_until``); before each round a
watcher applies it to its client's own ``Pacing``, which holds every request of the client.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import attrs

from .._contract._exceptions import RateLimitError
from .._contract._models import Task
from .._http._retry import honoured_retry_after
from .._waiting._polling import TaskSource, source_of

logger = logging.getLogger("videogen_async")


class SharedPause:
    """This process's view of the ledger's shared pause.

    Attributes:
        until: ``time.monotonic()`` until which polls wait.
        reported: The longest pause met by this watcher since the last write (0: none).
    """

    def __init__(self) -> None:
        self.until = self.reported = 0.0
        self.changed = anyio.Event()

    def learn(self, remaining: float) -> None:
        """Take the pause read from the database (seconds from now)."""
        if remaining > 0:
            self.until = max(self.until, time.monotonic() + remaining)

    def report(self, seconds: float) -> None:
        """A poll of this watcher was answered 429: pause here at once, write it soon."""
        self.reported = max(self.reported, seconds)
        self.learn(seconds)
        self.changed.set()

    def take_report(self) -> float:
        """The pause to write to the database (0: none), and forget it."""
        value, self.reported = self.reported, 0.0
        if self.changed.is_set():
            self.changed = anyio.Event()
        return value

    async def wait(self) -> None:
        """Wait out the pause, if any."""
        while (left := self.until - time.monotonic()) > 0:  # noqa: ASYNC110 - a deadline
            await anyio.sleep(left)


def shared_source(client: Any, pause: SharedPause) -> TaskSource:
    """The client's own task source, each 429 it meets reported to ``pause``.

    The pause reported is the ``Retry-After`` the client honours, else its
    ``rate_limit_pause``: a value unreadable or beyond ``max_retry_after`` never becomes the
    shared pause. A client without a pacing of its own waits out ``pause`` before each poll.
    """
    source = source_of(client)
    fetch = source.fetch
    backoff = source.backoff
    own_pacing = source.pacing is not None

    async def shared_fetch(task_id: str) -> Task:
        if not own_pacing:
            await pause.wait()
        try:
            return await fetch(task_id)
        except RateLimitError as exc:
            pause.report(honoured_retry_after(exc, backoff) or backoff.rate_limit_pause)
            raise

    return attrs.evolve(source, fetch=shared_fetch)
