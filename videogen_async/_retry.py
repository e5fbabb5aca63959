"""Retry arithmetic for single requests: pure functions, no I/O.

Retrying (a transient failure of *one request*) is separate from polling (waiting for a task
that is still running, which is not a failure); the polling policy lives in ``_polling``.
"""

from __future__ import annotations

import math
import random
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import attrs

__all__ = ["RetryPolicy", "backoff_delay", "parse_retry_after", "retry_delay"]


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
