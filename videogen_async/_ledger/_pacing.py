"""Shared pacing: a 429 seen by one watcher pauses every watcher of the ledger.

The pause lives in the database (``videogen_ledger_pacing.pause_until``). A watcher polls
through :func:`paced`, a thin view of the client whose ``tasks.get`` waits out the shared pause
before each poll and reports each 429 it meets. This is the one place that would hook into the
client's own pacing.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio

from .._exceptions import RateLimitError
from .._models import Task

__all__ = ["DEFAULT_PAUSE", "SharedPause", "paced"]

logger = logging.getLogger("videogen_async")

DEFAULT_PAUSE = 1.0
"""Seconds every watcher pauses after a 429 that named no ``Retry-After``."""


class SharedPause:
    """This process's view of the ledger's shared pause.

    Attributes:
        until: ``time.monotonic()`` until which polls wait.
        reported: The longest pause met by this watcher since the last write (0: none).
    """

    def __init__(self) -> None:
        self.until = 0.0
        self.reported = 0.0
        self.changed = anyio.Event()

    def learn(self, remaining: float) -> None:
        """Take the pause read from the database (seconds from now)."""
        if remaining > 0:
            self.until = max(self.until, time.monotonic() + remaining)

    def report(self, seconds: float | None) -> None:
        """A poll of this watcher was answered 429: pause here at once, write it soon."""
        pause = seconds if seconds and seconds > 0 else DEFAULT_PAUSE
        self.reported = max(self.reported, pause)
        self.learn(pause)
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


class _PacedTasks:
    def __init__(self, tasks: Any, pause: SharedPause) -> None:
        self._tasks = tasks
        self._pause = pause

    async def get(self, task_id: str) -> Task:
        await self._pause.wait()
        try:
            task: Task = await self._tasks.get(task_id)
        except RateLimitError as exc:
            self._pause.report(exc.retry_after)
            raise
        return task


class _PacedClient:
    """What ``gather_until_done`` needs of a client, with the shared pause in front."""

    def __init__(self, client: Any, pause: SharedPause) -> None:
        self._client = client
        self._pause = pause
        self.tasks = _PacedTasks(client.tasks, pause)
        self.poll_policy = getattr(client, "poll_policy", None)

    def with_options(self, **options: Any) -> _PacedClient:
        return _PacedClient(self._client.with_options(**options), self._pause)


def paced(client: Any, pause: SharedPause) -> Any:
    """A view of ``client`` whose task reads honour and report the shared pause.

    Args:
        client: The client.
        pause: The watcher's shared pause.

    Returns:
        An object ``gather_until_done`` polls through.
    """
    return _PacedClient(client, pause)
