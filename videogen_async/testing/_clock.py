"""The sandbox's clock: simulated seconds that tests can speed up, pause and move forward.

It runs ``1 / time_scale`` times real time, can pause, and jumps with
:meth:`SandboxClock.advance`, so tests never sleep. Reported timestamps are the real times the
clock reached each instant (:meth:`SandboxClock.wall_time_of`), agreeing with a client's clock.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable

from .._contract import _checks as checks

_MAX_HISTORY = 65_536


class SandboxClock:
    """Simulated time of one sandbox.

    Args:
        time_scale: Real seconds per simulated second (> 0; ``0.01``: 100 times faster).
        paused: Start paused: moved only by :meth:`advance` (until :meth:`resume`).
        timer: The monotonic real-time source in seconds (default ``time.monotonic``).

    Raises:
        ValueError: ``time_scale`` is not a positive number.
    """

    __slots__ = (
        "_epoch_unix",
        "_history",
        "_mono_at_epoch",
        "_time_scale",
        "_timer",
    )

    def __init__(
        self,
        *,
        time_scale: float = 1.0,
        paused: bool = False,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._time_scale, self._timer = checks.positive("time_scale", time_scale), timer
        self._mono_at_epoch = timer()
        self._epoch_unix = time.time()
        # Segments of the mapping simulated time -> real time, one per change (advance,
        # pause, resume): where each starts (simulated, monotonic), and whether the clock ran
        # during it. Ordered by simulated start: the clock never goes back. The last one is
        # the clock now.
        self._history = [(0.0, self._mono_at_epoch, not paused)]

    def __repr__(self) -> str:
        return (
            f"<SandboxClock now={self.now():.3f}s time_scale={self._time_scale:g}"
            f" {'paused' if self.paused else 'running'}>"
        )

    @property
    def time_scale(self) -> float:
        """Real seconds per simulated second."""
        return self._time_scale

    @property
    def paused(self) -> bool:
        """Whether the clock is paused (moves only through :meth:`advance`)."""
        return not self._history[-1][2]

    @property
    def epoch(self) -> float:
        """The Unix time of simulated second 0 (when the clock was created)."""
        return self._epoch_unix

    def now(self) -> float:
        """Return the simulated seconds since the clock was created."""
        sim, mono, running = self._history[-1]
        return sim + (self._timer() - mono) / self._time_scale if running else sim

    def advance(self, seconds: float) -> float:
        """Skip ``seconds`` of simulated time at once; return the new time.

        Everything due in the skipped span (tasks finishing, project steps) is seen as done by
        the next request, exactly as if that much time had passed.

        Raises:
            ValueError: ``seconds`` is negative or not a number.
        """
        now = self.now() + checks.number("seconds", seconds)
        self._rebase(now, running=not self.paused)
        return now

    def pause(self) -> None:
        """Stop the clock; it then moves only through :meth:`advance`."""
        if not self.paused:
            self._rebase(self.now(), running=False)

    def resume(self) -> None:
        """Let the clock run again at its time scale."""
        if self.paused:
            self._rebase(self.now(), running=True)

    def _rebase(self, sim: float, running: bool) -> None:
        self._history.append((sim, self._timer(), running))
        if len(self._history) > _MAX_HISTORY:
            del self._history[: len(self._history) - _MAX_HISTORY]

    def wall_now(self) -> float:
        """Return the current real time (Unix seconds) as this clock's timer sees it."""
        return self._mono_to_unix(self._timer())

    def wall_time_of(self, sim: float) -> float | None:
        """Return the real (Unix) time at which the clock reaches ``sim`` simulated seconds.

        For a past instant this is when the clock passed it (the moment of the :meth:`advance`
        that jumped over it, if one did); for a future one a forecast at the time scale, or
        ``None`` while the clock is paused (it is reached only once someone moves the clock).
        """
        history = self._history
        # The last segment starting at or before ``sim`` (a later one at the same instant
        # wins: ``inf`` sorts after every monotonic time).
        index = bisect.bisect_right(history, (sim, math.inf, True)) - 1
        if index < 0:
            return self._mono_to_unix(history[0][1])
        start_sim, start_mono, ran = history[index]
        following = history[index + 1][1] if index + 1 < len(history) else None
        if ran:
            mono = start_mono + (sim - start_sim) * self._time_scale
            return self._mono_to_unix(mono if following is None else min(mono, following))
        if sim <= start_sim:
            return self._mono_to_unix(start_mono)
        return None if following is None else self._mono_to_unix(following)

    def _mono_to_unix(self, mono: float) -> float:
        return self._epoch_unix + (mono - self._mono_at_epoch)
