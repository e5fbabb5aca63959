"""One pacing state per client: a 429 slows every request of the client, then AIMD recovery.

A client and its ``with_options`` views share one :class:`Pacing`; each request holds a slot
while in flight. A 429 pauses *every* request and cuts concurrency and rate once per 429
*event*; successes grow them back. Without 429s a slot costs a counter increment. Settings are
the ``BackoffPolicy`` of the request that met the 429 (``docs/errors.md``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from .._contract._exceptions import RateLimitError
from ._retry import DEFAULT_BACKOFF, BackoffPolicy, doubled, honoured_retry_after

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")


class Pacing:
    """The pacing state shared by a client and its views (see the module docstring)."""

    def __init__(self) -> None:
        self._policy = DEFAULT_BACKOFF  # the policy of the last cut, for the recovery
        self.paused_until = -math.inf
        self.limit = math.inf  # allowed requests in flight (inf: no limit)
        self._ceiling = math.inf  # the concurrency before the first cut
        self.in_flight = 0
        self.rate = math.inf  # allowed requests per second (inf: no limit)
        self._reduced_rate, self._last_cut, self._next_send = math.inf, -math.inf, -math.inf
        self._events = 0  # 429 events in a row
        self._window_start, self._window_sent, self._measured_rate = -math.inf, 0, 0.0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def try_acquire(self) -> float | None:
        """Take a slot at once when nothing limits the client (the common case): its time.

        ``None`` when :meth:`acquire` must wait.
        """
        if self.limit == math.inf and self.rate == math.inf:
            now = _now()
            if now >= self.paused_until:
                self._taken(now)
                return now
        return None

    async def acquire(self) -> float:
        """Wait for the client's pacing to allow one more request and take a slot.

        Returns the time it was taken (``anyio.current_time()``), for :meth:`rate_limited`.
        """
        while True:
            now = _now()
            if now < self.paused_until:
                await anyio.sleep(self.paused_until - now)
                continue
            if self.limit != math.inf and self.in_flight >= max(1, int(self.limit)):
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                except BaseException:
                    if waiter.done() and not waiter.cancelled():
                        self._wake()  # pass the wake-up on to the next waiter
                    else:
                        waiter.cancel()
                    raise
                continue
            if self.rate != math.inf:
                self.rate = recovered_rate(
                    self._policy, self._reduced_rate, now - max(self._last_cut, self.paused_until)
                )
                if self.rate == math.inf and self.limit == math.inf:
                    self._ceiling = math.inf
                if self.rate != math.inf and now < self._next_send:
                    await anyio.sleep(self._next_send - now)
                    continue
            self._taken(now)
            return now

    def release(self) -> None:
        """Give a slot back (the request's answer or failure is in)."""
        self.in_flight -= 1
        if self._waiters:
            self._wake()

    def succeeded(self) -> None:
        """Record a successful answer: the additive increase of the allowed concurrency."""
        self._events = 0
        if self.limit != math.inf:
            # Additive increase: about one more request in flight per round of `limit`.
            self.limit = min(self._ceiling, self.limit + 1.0 / max(self.limit, 1.0))
            if self.limit >= self._ceiling:
                self.limit = math.inf
                if self.rate == math.inf:
                    self._ceiling = math.inf
                self._wake(every=True)

    def rate_limited(
        self, retry_after: float | None, sent: float, policy: BackoffPolicy = DEFAULT_BACKOFF
    ) -> float:
        """Record a 429: pause every request of the client and cut the allowed load.

        ``retry_after`` is the one the client honours (``_retry.honoured_retry_after``),
        ``sent`` when the limited request took its slot, ``policy`` its backoff policy.
        Returns the seconds until the client's pause ends (0 when it is over).
        """
        now = _now()
        if sent >= self._last_cut:  # one cut per 429 event, not per answer
            self._policy = policy
            self._events += 1
            self._last_cut = now
            if self._ceiling == math.inf:
                self._ceiling = max(2.0, float(self.in_flight))
            # Multiplicative decrease of the allowed concurrency and rate.
            self.limit = max(
                1.0,
                (self.in_flight if self.limit == math.inf else self.limit) * policy.rate_decrease,
            )
            partial = self._window_sent / max(now - self._window_start, 0.1)
            measured = max(self._measured_rate, partial, 1.0)
            base = measured if self.rate == math.inf else min(self.rate, measured)
            self.rate = self._reduced_rate = max(1.0, base * policy.rate_decrease)
            pause = rate_limit_pause(policy, self._events, random.random(), retry_after)
            self.paused_until = max(self.paused_until, now + pause)
            logger.info(
                "rate limited (429): every request of the client pauses %.2fs; concurrency %.0f,"
                " rate %.1f/s",
                pause,
                self.limit,
                self.rate,
            )
        return max(0.0, self.paused_until - now)

    def pause_until(self, until: float) -> None:
        """Hold every request of the client until ``until`` (``anyio.current_time()`` clock).

        A pause decided elsewhere (e.g. a 429 met by another process sharing a ledger); it
        never shortens a pause already in force and does not cut the allowed load.
        """
        self.paused_until = max(self.paused_until, until)

    def _taken(self, now: float) -> None:
        self.in_flight += 1
        if now - self._window_start >= 1.0:
            if self._window_start != -math.inf:
                self._measured_rate = self._window_sent / (now - self._window_start)
            self._window_start, self._window_sent = now, 0
        self._window_sent += 1
        if self.rate != math.inf:
            self._next_send = max(self._next_send, now) + 1.0 / self.rate

    def _wake(self, *, every: bool = False) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                if not every:
                    return


# The event loop's clock, as ``anyio.current_time()`` reads it: asyncio's is ``time.monotonic``
# (the pacing is asyncio's: its waiters are futures), read without finding the running loop.
_now = time.monotonic


def paced(
    fetch: Callable[[str], Awaitable[_T]], pacing: Pacing, policy: BackoffPolicy
) -> Callable[[str], Awaitable[_T]]:
    """``fetch`` taking a slot of ``pacing`` per call, for a reader below no transport.

    A 429 (:class:`RateLimitError`) is recorded in ``pacing`` as the transport records it.
    """

    async def call(key: str) -> _T:
        sent = await pacing.acquire()
        try:
            value = await fetch(key)
        except BaseException as exc:
            pacing.release()
            if isinstance(exc, RateLimitError):
                pacing.rate_limited(honoured_retry_after(exc, policy), sent, policy)
            raise
        pacing.release()
        pacing.succeeded()
        return value

    return call


def rate_limit_pause(
    policy: BackoffPolicy, consecutive: int, rand: float, retry_after: float | None = None
) -> float:
    """How long every request of a client pauses after ``consecutive`` 429s (from 1).

    The honoured ``retry_after`` when given (at most ``max_retry_after``), else a delay in
    ``[c / 2, c)`` by ``rand`` in ``[0, 1)``, with
    ``c = min(max_retry_after, rate_limit_pause * 2 ** (consecutive - 1))``.
    """
    if retry_after is not None:
        return min(max(0.0, retry_after), policy.max_retry_after)
    ceiling = doubled(policy.rate_limit_pause, consecutive, policy.max_retry_after)
    return ceiling * (0.5 + 0.5 * rand)


def recovered_rate(policy: BackoffPolicy, reduced: float, elapsed: float) -> float:
    """The allowed rate ``elapsed`` seconds after a 429 cut it to ``reduced`` (per second).

    ``reduced * (1 + rate_recovery * elapsed)``, or ``inf`` (no limit) once that is back to
    the rate before the cut (``reduced / rate_decrease``).
    """
    rate = reduced * (1.0 + policy.rate_recovery * max(elapsed, 0.0))
    return math.inf if rate >= reduced / policy.rate_decrease else rate
