"""The one retry engine: pure decisions and arithmetic, no I/O.

Every loop of the client (the transport's retries, the single-object waits, the gather, the
download's resumes) asks this module the same questions: is this failure transient
(:func:`is_transient`), may this request be sent again (:func:`may_retry`, by method), how
long to wait (:func:`next_delay`, :func:`backoff_delay` with full jitter and a cap,
:func:`parse_retry_after` for seconds or an HTTP date), and how the AIMD pacing of a client
cuts and recovers after a 429 (:func:`aimd_decrease`, :func:`aimd_increase`,
:func:`recovered_rate`). The pacing *state* shared by a client lives in ``_pacing``.

Retrying (a transient failure of *one request*) is separate from polling (waiting for a task
that is still running, which is not a failure); the polling schedule lives in ``_polling``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import attrs

from .._contract._exceptions import (
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    RateLimitError,
    ServerError,
)
from .._waiting._policy import DEFAULT_POLICY, PollPolicy

__all__ = [
    "DEFAULT_BACKOFF",
    "NO_RETRY",
    "RESUME_POLICY",
    "RETRYABLE_STATUSES",
    "RetryPolicy",
    "aimd_decrease",
    "aimd_increase",
    "backoff_delay",
    "error_delay",
    "is_transient",
    "may_retry",
    "next_delay",
    "parse_retry_after",
    "rate_limit_pause",
    "recovered_rate",
    "retry_after_of",
    "retry_delay",
]


@attrs.frozen
class RetryPolicy:
    """How one request is retried after a transient failure.

    Attributes:
        max_retries: Retries after the first attempt (0 turns retrying off).
        initial_delay: Upper bound of the first backoff, in seconds.
        max_delay: Cap of any backoff, in seconds.
        max_retry_after: The longest ``Retry-After`` the client waits by itself; a longer
            one is raised to the caller as a ``RateLimitError`` with ``retry_after`` set.
    """

    max_retries: int = attrs.field(default=2, validator=attrs.validators.ge(0))
    initial_delay: float = attrs.field(default=0.5, validator=attrs.validators.ge(0))
    max_delay: float = attrs.field(default=8.0, validator=attrs.validators.ge(0))
    max_retry_after: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))

    def with_retries(self, max_retries: int) -> RetryPolicy:
        """The same policy with another number of retries."""
        return attrs.evolve(self, max_retries=max_retries)


#: One attempt only: for loops that own their retrying (waits, gathers).
NO_RETRY = RetryPolicy(max_retries=0)
#: The backoff between the resumes of a download.
RESUME_POLICY = RetryPolicy(initial_delay=0.25, max_delay=4.0)


def backoff_delay(
    attempt: int, *, initial: float, cap: float, rng: random.Random | None = None
) -> float:
    """Exponential backoff with full jitter.

    Args:
        attempt: The retry about to be made, from 1.
        initial: The upper bound of the first delay.
        cap: The largest upper bound.
        rng: The random source (``random`` module's by default).

    Returns:
        A delay drawn uniformly from ``[0, min(cap, initial * 2 ** (attempt - 1))]``.
    """
    exponent = min(max(attempt - 1, 0), 62)
    ceiling = min(cap, initial * (2.0**exponent))
    return (rng or random).uniform(0.0, ceiling)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Read a ``Retry-After`` header: delay-seconds or an HTTP date.

    Args:
        value: The header's value, or ``None``.
        now: The current time, for the HTTP-date form (defaults to now, UTC).

    Returns:
        The delay in seconds (never negative), or ``None`` when the header is absent or
        unreadable.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            return None
        return max(seconds, 0.0)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = now or datetime.now(timezone.utc)
    return max((when - current).total_seconds(), 0.0)


def retry_delay(
    policy: RetryPolicy,
    attempt: int,
    *,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> float | None:
    """The wait before retry ``attempt``, or ``None`` when the service asked for too long.

    Args:
        policy: The retry policy.
        attempt: The retry about to be made, from 1.
        retry_after: The service's ``Retry-After`` in seconds, if it sent one.
        rng: The random source.

    Returns:
        Seconds to wait: the ``Retry-After`` when given and within
        ``policy.max_retry_after``, otherwise the jittered backoff; ``None`` when the
        ``Retry-After`` exceeds ``policy.max_retry_after`` (the caller should give up and
        let its own caller decide).
    """
    if retry_after is not None:
        if retry_after > policy.max_retry_after:
            return None
        return retry_after
    return backoff_delay(attempt, initial=policy.initial_delay, cap=policy.max_delay, rng=rng)


# --------------------------------------------------------------------------------------------
# The decision table: what is transient, what a request may retry
# --------------------------------------------------------------------------------------------

#: HTTP statuses after which a read is retried.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def is_transient(exc: BaseException) -> bool:
    """Whether a failure is worth repeating later (the same answer for every loop).

    Transient: connection errors and timeouts, 5xx, 429, 408, and a garbled body. Permanent:
    everything else (404, 401, 403, 400, ...).

    Args:
        exc: The error a request raised.

    Returns:
        ``True`` for a transient failure.
    """
    if isinstance(exc, (APIConnectionError, ServerError, RateLimitError, APIResponseError)):
        return True
    return isinstance(exc, APIStatusError) and exc.status_code == 408


def may_retry(exc: BaseException, *, method: str) -> bool:
    """Whether one request may be sent again after ``exc``, by its method.

    A read (``GET``) is retried after any transient failure whose status (the HTTP status,
    or the envelope code under HTTP 200) is retryable. A creating call (``POST``) charges
    credits and the service has no idempotency key: it is retried only after a 429 or when
    the connection provably never carried the request.

    Args:
        exc: The error of the attempt.
        method: The request's method.

    Returns:
        ``True`` when a retry is safe.
    """
    if isinstance(exc, RateLimitError):
        return True
    if method != "GET":
        return isinstance(exc, APIConnectionError) and not exc.request_may_have_taken_effect
    if isinstance(exc, APIStatusError):
        status = exc.code if exc.status_code is None or exc.status_code < 400 else exc.status_code
        return status in RETRYABLE_STATUSES
    return isinstance(exc, (APIConnectionError, APIResponseError))


def retry_after_of(exc: BaseException) -> float | None:
    """The ``Retry-After`` an error carries (a 429, or a 503 that sent one), in seconds."""
    value = getattr(exc, "retry_after", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    headers = getattr(exc, "headers", None)
    if isinstance(headers, Mapping):
        raw = headers.get("Retry-After")
        if raw is None:
            raw = headers.get("retry-after")
        return parse_retry_after(raw if isinstance(raw, str) else None)
    return None


def next_delay(
    policy: RetryPolicy,
    exc: BaseException,
    *,
    method: str,
    attempt: int,
    remaining: float = math.inf,
    rng: random.Random | None = None,
) -> float | None:
    """The whole retry decision of one request: the wait before the next attempt, or ``None``.

    Args:
        policy: The retry policy.
        exc: The error of attempt ``attempt``.
        method: The request's method.
        attempt: The attempt that failed, from 1.
        remaining: Seconds left before the call's deadline.
        rng: The random source.

    Returns:
        Seconds to wait before retrying; ``None`` to raise ``exc``: retries are used up, the
        failure is not safe to retry, the ``Retry-After`` is above ``max_retry_after``, or the
        wait would end past the deadline.
    """
    if attempt > policy.max_retries or not may_retry(exc, method=method):
        return None
    delay = retry_delay(policy, attempt, retry_after=retry_after_of(exc), rng=rng)
    if delay is None or delay >= remaining:
        return None
    return delay


# --------------------------------------------------------------------------------------------
# Backoff of the waiting loops, and the AIMD arithmetic of the pacing
# --------------------------------------------------------------------------------------------


#: The backoff settings of a client made without a poll policy: those of ``PollPolicy()``.
DEFAULT_BACKOFF = DEFAULT_POLICY


def error_delay(
    policy: PollPolicy, failures: int, rand: float, retry_after: float | None = None
) -> float:
    """The backoff of one waited object after transient failures.

    Args:
        policy: The backoff settings.
        failures: Transient failures in a row, from 1.
        rand: A random number in ``[0, 1)``.
        retry_after: The service's ``Retry-After``, if it sent one.

    Returns:
        A delay in ``[c / 2, c)`` with ``c = min(error_max, error_initial * 2 ** (failures -
        1))``, or the ``Retry-After`` when that is longer.
    """
    exponent = min(max(failures - 1, 0), 62)
    ceiling = min(policy.error_max, policy.error_initial * 2.0**exponent)
    delay = ceiling * (0.5 + 0.5 * rand)
    if retry_after is not None and retry_after > delay:
        return retry_after
    return delay


def rate_limit_pause(
    policy: PollPolicy, consecutive: int, rand: float, retry_after: float | None = None
) -> float:
    """How long every request pauses after a 429.

    Args:
        policy: The backoff settings.
        consecutive: 429 events in a row, from 1.
        rand: A random number in ``[0, 1)``.
        retry_after: The service's ``Retry-After``, if it sent one.

    Returns:
        The ``Retry-After`` when given; otherwise a delay in ``[c / 2, c)`` with
        ``c = min(rate_limit_max, rate_limit_initial * 2 ** (consecutive - 1))``.
    """
    if retry_after is not None:
        return max(0.0, retry_after)
    exponent = min(max(consecutive - 1, 0), 62)
    ceiling = min(policy.rate_limit_max, policy.rate_limit_initial * 2.0**exponent)
    return ceiling * (0.5 + 0.5 * rand)


def aimd_decrease(limit: float, factor: float) -> float:
    """Multiplicative decrease of an allowed concurrency (or rate) on a 429.

    Args:
        limit: The current limit.
        factor: The decrease factor, in ``(0, 1]``.

    Returns:
        ``max(1, limit * factor)``.
    """
    return max(1.0, limit * factor)


def aimd_increase(limit: float, maximum: float) -> float:
    """Additive increase of an allowed concurrency after a success.

    One call per success adds ``1 / limit``, so the limit grows by about one per round of
    ``limit`` successful requests.

    Args:
        limit: The current limit (at least 1).
        maximum: The ceiling.

    Returns:
        ``min(maximum, limit + 1 / limit)``.
    """
    return min(maximum, limit + 1.0 / max(limit, 1.0))


def recovered_rate(policy: PollPolicy, reduced: float, elapsed: float) -> float:
    """The allowed request rate some time after a 429 cut it.

    Args:
        policy: The backoff settings.
        reduced: The rate (requests per second) set when the 429 arrived.
        elapsed: Seconds since then (after the pause).

    Returns:
        ``reduced * (1 + rate_recovery * elapsed)``, or ``inf`` (no limit) once that is back
        to the rate before the cut (``reduced / rate_decrease``).
    """
    rate = reduced * (1.0 + policy.rate_recovery * max(elapsed, 0.0))
    if rate >= reduced / policy.rate_decrease:
        return math.inf
    return rate
