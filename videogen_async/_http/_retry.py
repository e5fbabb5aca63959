"""Whether and when to try again: one backoff policy, one decision, ``Retry-After`` read once.

Two questions, each answered once: what a failure is (:func:`is_transient`: worth another
try, from its kind, status and method) and how long to wait (:func:`backoff_after`: the one
backoff policy and ``Retry-After``). A request loop (transport, waits, gathers, downloads)
asks both through :func:`decide_retry`; a loop that only means "back off" (the ledger's
database retries, its listener and dispatcher) asks :func:`backoff_after` alone. A caller's
deliberate difference is a parameter (``poll``, ``extra_statuses``, ``request``), never a
table of its own. Pure, no I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Literal

import attrs

from .._contract import _exceptions as err
from .._contract._checks import is_number, number, validator, whole

# The policies' validators (``PollPolicy`` takes them too): the argument checks' rules, with
# ``inf`` allowed (a policy's "no limit").
GE0 = validator(number, finite=False)
GT0 = validator(number, above=True, finite=False)
OPTIONAL_GE1 = validator(whole, optional=True)

#: The HTTP statuses (or envelope codes under HTTP 200) after which a request may be tried
#: again: the one list of what is transient.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@attrs.frozen
class BackoffPolicy:
    """How the client slows down under failure: retries, backoff, ``Retry-After``, 429 pacing.

    One policy per client (``AsyncVideoGen(backoff=...)``, ``with_options(backoff=...)``),
    for its requests, its waits and gathers, and its downloads. All times are in seconds.

    Attributes:
        max_retries: Retries of one request after its first attempt (0 turns them off);
            ``AsyncVideoGen(max_retries=...)`` sets it.
        initial_delay: Upper bound of the first backoff after a transient failure; each
            further failure in a row doubles it. The delay is drawn uniformly below that
            bound (full jitter).
        max_delay: The cap of that bound.
        max_retry_after: The longest ``Retry-After`` the client waits by itself, and the
            longest client-wide pause after a 429. A request asked to wait longer raises its
            ``RateLimitError`` at once (``retry_after`` says how long the service asked
            for); a poll treats it as absent. An unreadable value is absent too.
        rate_limit_pause: The client-wide pause after a 429 without a usable ``Retry-After``,
            doubled for each 429 in a row (jittered down to half), at most
            ``max_retry_after``.
        rate_decrease: Factor applied on a 429 to the allowed concurrency and request rate.
        rate_recovery: After a 429, the allowed rate grows back by this fraction of the
            reduced rate per second, until the limit is lifted.
        max_consecutive_failures: Transient failures in a row after which a wait or a gather
            gives up on one id (``None``: never; the wait's deadline still applies). 429s do
            not count: the pacing answers them.
    """

    max_retries: int = attrs.field(default=2, validator=validator(whole, minimum=0))
    initial_delay: float = attrs.field(default=0.5, validator=GE0)
    max_delay: float = attrs.field(default=30.0, validator=GE0)
    max_retry_after: float = attrs.field(default=60.0, validator=GE0)
    rate_limit_pause: float = attrs.field(default=1.0, validator=GT0)
    rate_decrease: float = attrs.field(
        default=0.5, validator=validator(number, above=True, high=1.0)
    )
    rate_recovery: float = attrs.field(default=0.1, validator=GT0)
    max_consecutive_failures: int | None = attrs.field(default=10, validator=OPTIONAL_GE1)


DEFAULT_BACKOFF = BackoffPolicy()


@attrs.frozen
class RetryDecision:
    """The answer of :func:`decide_retry`: the ``delay`` before trying again, or why not.

    ``delay`` ``None``: raise the failure; ``reason`` then says why (``"unsafe"``: a create
    that may have taken effect), and ``detail`` says it in words.
    """

    delay: float | None
    reason: Literal["", "permanent", "unsafe", "exhausted", "too long"] = ""
    detail: str = ""


def decide_retry(
    exc: BaseException,
    *,
    failures: int,
    method: str = "GET",
    policy: BackoffPolicy,
    poll: bool = False,
    extra_statuses: Collection[int] = (),
    remaining: float = math.inf,
    rng: random.Random | None = None,
) -> RetryDecision:
    """Whether and when to send a request again after ``exc``: the SDK's one retry decision.

    First what the failure is (:func:`is_transient`; a non-``GET`` only after a 429 or when
    provably never sent, since a create may have taken effect), then how long to wait
    (:func:`backoff_after`).

    Args:
        exc: The failure.
        failures: Failures in a row of this request (its attempt number) or of this polled
            id, this one included.
        method: The request's method (``GET``, the default, for anything safe to repeat: a
            poll, a download).
        policy: The backoff policy.
        poll: A waiting loop's poll ("poll this id later"): any 5xx is transient, and the
            wait is a loop's (see :func:`backoff_after`, ``request``).
        extra_statuses: Statuses also transient for this caller (a media host's 425).
        remaining: Seconds left before the caller's bound (a deadline).
        rng: The random source of the jitter.

    Returns:
        The decision.
    """
    if not is_transient(exc, poll=poll, extra_statuses=extra_statuses):
        return RetryDecision(None, "permanent", f"{type(exc).__name__} is not transient")
    never_sent = isinstance(exc, err.APIConnectionError) and not exc.request_may_have_taken_effect
    if method != "GET" and not isinstance(exc, err.RateLimitError) and not never_sent:
        return RetryDecision(None, "unsafe", f"a {method} that may have taken effect")
    return backoff_after(failures, policy, exc=exc, request=not poll, remaining=remaining, rng=rng)


def is_transient(
    exc: BaseException, *, poll: bool = False, extra_statuses: Collection[int] = ()
) -> bool:
    """Whether another try may meet something else than ``exc``: the classification alone.

    Transient: connection errors, timeouts, a non-envelope body, :data:`TRANSIENT_STATUSES`
    and ``extra_statuses``; for a ``poll``, any 5xx too (a poll is always safe to repeat, and
    a server error on a read is worth waiting out). An envelope's failure code under HTTP 200
    decides as a status would.
    """
    if isinstance(exc, (err.APIConnectionError, err.APIResponseError)):
        return True
    if not isinstance(exc, err.APIStatusError):
        return False
    status = exc.status_code
    if (status is None or status < 400) and exc.code is not None:
        status = exc.code
    if status is None:
        return False
    return (
        status in TRANSIENT_STATUSES or status in extra_statuses or (poll and 500 <= status < 600)
    )


def backoff_after(
    failures: int,
    policy: BackoffPolicy,
    *,
    exc: BaseException | None = None,
    request: bool = False,
    remaining: float = math.inf,
    rng: random.Random | None = None,
) -> RetryDecision:
    """How long to wait after ``failures`` failures in a row: the one backoff of the SDK.

    For any loop that only means "back off" (a database that did not answer, a delivery that
    failed, a listener that lost its connection) as well as for :func:`decide_retry`. The
    wait is the honoured ``Retry-After`` of ``exc``, else :func:`backoff_delay`.

    Args:
        failures: Failures in a row, this one included (from 1).
        policy: The backoff policy.
        exc: The failure, when it may carry a ``Retry-After``.
        request: One request's retries: at most ``max_retries`` of them, and a
            ``Retry-After`` longer than ``max_retry_after`` ends them (``"too long"``: the
            caller raises at once rather than sleep past what it allows). Otherwise a
            loop's: ``max_consecutive_failures`` in a row (429s uncounted, the pacing
            answers those), and a too long ``Retry-After`` is ignored for the backoff (the
            loop polls again later anyway).
        remaining: Seconds left before the caller's bound: a wait that would end past it
            is ``"too long"``.
        rng: The random source of the jitter.

    Returns:
        The decision: a ``delay``, or ``None`` with ``"exhausted"`` or ``"too long"``.
    """
    limit = policy.max_retries + 1 if request else policy.max_consecutive_failures
    uncounted = not request and isinstance(exc, err.RateLimitError)
    if limit is not None and failures >= limit and not uncounted:
        return RetryDecision(None, "exhausted", f"{failures} failures in a row")
    delay = honoured_retry_after(exc, policy)
    source = "Retry-After"
    if delay is None:
        source = "backoff"
        asked = retry_after_of(exc)
        if asked is not None and request:
            return RetryDecision(
                None,
                "too long",
                f"the service asked to wait {asked:.3g} s (Retry-After), longer than the"
                f" {policy.max_retry_after:g} s the client waits by itself (max_retry_after)",
            )
        delay = backoff_delay(failures, initial=policy.initial_delay, cap=policy.max_delay, rng=rng)
    if delay >= remaining:
        return RetryDecision(
            None,
            "too long",
            f"waiting {delay:.3g} s ({source}) before trying again would pass the"
            f" call's bound ({max(remaining, 0.0):.3g} s left)",
        )
    return RetryDecision(delay)


def backoff_delay(
    attempt: int, *, initial: float, cap: float, rng: random.Random | None = None
) -> float:
    """Exponential backoff with full jitter, after ``attempt`` failures (from 1).

    A delay drawn uniformly from ``[0, min(cap, initial * 2 ** (attempt - 1))]``.
    """
    return (rng or random).uniform(0.0, doubled(initial, attempt, cap))


def doubled(initial: float, times: int, cap: float) -> float:
    """``initial`` doubled for each of ``times`` events in a row after the first, at most ``cap``.

    The one growth of every backoff (a retry's bound, the client's pause after 429s); the
    exponent is bounded so that a long run of failures never overflows a float.
    """
    return min(cap, initial * 2.0 ** min(max(times - 1, 0), 62))


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Read a ``Retry-After`` header: delay-seconds or an HTTP date (against ``now``).

    Returns:
        The delay in seconds (0 for a past date or a negative number), or ``None`` when the
        header is absent, empty, not a number or a date, or not finite.
    """
    text = (value or "").strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max((when - (now or datetime.now(timezone.utc))).total_seconds(), 0.0)


def retry_after_of(exc: BaseException | None) -> float | None:
    """The ``Retry-After`` a failure carries (a 429, or a 503 that sent one), in seconds."""
    value = getattr(exc, "retry_after", None)
    if is_number(value):
        return float(value) if value >= 0 and math.isfinite(value) else None
    headers = getattr(exc, "headers", None)
    if isinstance(headers, Mapping):
        raw = headers.get("Retry-After", headers.get("retry-after"))
        return parse_retry_after(raw if isinstance(raw, str) else None)
    return None


def honoured_retry_after(exc: BaseException | None, policy: BackoffPolicy) -> float | None:
    """The ``Retry-After`` of ``exc`` the client waits by itself, in seconds.

    ``None`` when there is none, or it is unreadable or longer than ``max_retry_after``: such a
    value never becomes a pause.
    """
    asked = retry_after_of(exc)
    return asked if asked is not None and asked <= policy.max_retry_after else None
