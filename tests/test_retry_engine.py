"""The one retry decision's table and the client's pacing state, tested on their own."""

from __future__ import annotations

import asyncio
import itertools
import math
import random

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

import videogen_async as vg
from videogen_async._http._envelope import make_status_error
from videogen_async._http._pacing import Pacing
from videogen_async._http._retry import (
    DEFAULT_BACKOFF,
    BackoffPolicy,
    backoff_after,
    decide_retry,
    retry_after_of,
)


def status_error(status: int, method: str = "GET", **headers: str) -> vg.APIStatusError:
    return make_status_error(
        status, status, f"HTTP {status}", headers=dict(headers), method=method, path="/x"
    )


def connection_error(*, sent: bool) -> vg.APIConnectionError:
    return vg.APIConnectionError("broke", request_may_have_taken_effect=sent)


def timeout_error(*, sent: bool) -> vg.APITimeoutError:
    return vg.APITimeoutError("slow", request_may_have_taken_effect=sent)


def retries(exc: BaseException, method: str = "GET", **options: object) -> bool:
    """Whether the one decision tries again after a first failure."""
    options.setdefault("policy", DEFAULT_BACKOFF)
    decision = decide_retry(exc, method=method, failures=1, **options)  # type: ignore[arg-type]
    return decision.delay is not None


# The decision table, row by row: (error, may a GET retry, may a POST retry, may a poll
# poll again).
TABLE = [
    (lambda: status_error(429), True, True, True),
    (lambda: status_error(500), True, False, True),
    (lambda: status_error(502), True, False, True),
    (lambda: status_error(503), True, False, True),
    (lambda: status_error(504), True, False, True),
    (lambda: status_error(408), True, False, True),
    (lambda: status_error(400), False, False, False),
    (lambda: status_error(401), False, False, False),
    (lambda: status_error(403), False, False, False),
    (lambda: status_error(404), False, False, False),
    (lambda: status_error(409), False, False, False),
    (lambda: status_error(425), False, False, False),
    (lambda: status_error(501), False, False, True),
    (lambda: status_error(505), False, False, True),
    (lambda: connection_error(sent=False), True, True, True),
    (lambda: connection_error(sent=True), True, False, True),
    (lambda: timeout_error(sent=False), True, True, True),
    (lambda: timeout_error(sent=True), True, False, True),
    (lambda: vg.APIResponseError("garbled"), True, False, True),
    (lambda: ValueError("a bug"), False, False, False),
]


@pytest.mark.parametrize(("make", "get_ok", "post_ok", "poll_ok"), TABLE)
def test_decision_table(make: object, get_ok: bool, post_ok: bool, poll_ok: bool) -> None:
    exc = make()  # type: ignore[operator]
    assert retries(exc, "GET") is get_ok
    assert retries(exc, "POST") is post_ok
    assert retries(exc, poll=True) is poll_ok


def test_the_callers_differences_are_parameters() -> None:
    # A media host's 425 (a download); a failure that is not HTTP is not the decision's.
    assert retries(status_error(425), extra_statuses={425})
    assert not retries(status_error(404), extra_statuses={425})
    assert not retries(ConnectionRefusedError())


def test_a_loop_that_only_backs_off_asks_the_delay_alone() -> None:
    # The ledger's database retries and dispatcher: no classification, the one backoff.
    policy = BackoffPolicy(initial_delay=0.5, max_delay=2.0, max_consecutive_failures=3)
    for failures in (1, 2):
        delay = backoff_after(failures, policy).delay
        assert delay is not None
        assert 0 <= delay <= 0.5 * 2 ** (failures - 1)
    exhausted = backoff_after(3, policy)
    assert (exhausted.delay, exhausted.reason) == (None, "exhausted")
    # A 429 is not counted against a loop, and its Retry-After is honoured.
    assert backoff_after(3, policy, exc=status_error(429, **{"Retry-After": "1"})).delay == 1.0
    bounded = backoff_after(1, BackoffPolicy(initial_delay=10), remaining=0.0)
    assert (bounded.delay, bounded.reason) == (None, "too long")
    never = BackoffPolicy(max_consecutive_failures=None)
    assert backoff_after(1000, never).delay is not None


def test_envelope_code_under_http_200_decides() -> None:
    exc = make_status_error(200, 503, "busy", method="GET", path="/x")
    assert retries(exc)
    exc = make_status_error(200, 404, "gone", method="GET", path="/x")
    assert not retries(exc)


@given(
    failures=st.integers(min_value=1, max_value=40), limit=st.integers(min_value=1, max_value=20)
)
def test_a_poll_gives_up_after_its_failures_in_a_row_but_never_on_a_429(
    failures: int, limit: int
) -> None:
    policy = BackoffPolicy(max_consecutive_failures=limit, max_retries=0)
    server = decide_retry(
        status_error(502), method="GET", failures=failures, policy=policy, poll=True
    )
    assert (server.delay is None) is (failures >= limit)
    if server.delay is None:
        assert server.reason == "exhausted"
    limited = decide_retry(
        status_error(429), method="GET", failures=failures, policy=policy, poll=True
    )
    assert limited.delay is not None


@given(
    seconds=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    attempt=st.integers(min_value=1, max_value=50),
    remaining=st.floats(min_value=0, max_value=1e7, allow_nan=False),
)
def test_the_decision_honours_retry_after_and_the_deadline(
    seconds: float, attempt: int, remaining: float
) -> None:
    policy = BackoffPolicy(max_retries=100)
    exc = status_error(429, **{"Retry-After": repr(seconds)})
    assert retry_after_of(exc) == pytest.approx(seconds)
    decision = decide_retry(
        exc, method="POST", failures=attempt, policy=policy, remaining=remaining
    )
    if seconds > policy.max_retry_after or seconds >= remaining:
        assert decision.delay is None
        assert decision.reason == "too long"
    else:
        assert decision.delay == pytest.approx(seconds)


@given(
    attempt=st.integers(min_value=1, max_value=200),
    retries=st.integers(min_value=0, max_value=20),
    seed=st.integers(),
)
def test_the_decision_backs_off_with_full_jitter_under_a_cap(
    attempt: int, retries: int, seed: int
) -> None:
    policy = BackoffPolicy(max_retries=retries, initial_delay=0.5, max_delay=8.0)
    delay = decide_retry(
        status_error(503), method="GET", failures=attempt, policy=policy, rng=random.Random(seed)
    ).delay
    if attempt > retries:
        assert delay is None
    else:
        assert delay is not None
        assert 0 <= delay <= min(8.0, 0.5 * 2 ** (attempt - 1))


def test_no_retries_never_retries() -> None:
    no_retry = BackoffPolicy(max_retries=0)
    assert decide_retry(status_error(503), method="GET", failures=1, policy=no_retry).delay is None


def test_retry_after_of_an_http_date_on_a_503() -> None:
    exc = status_error(503, **{"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert retry_after_of(exc) == 0.0  # in the past: at once
    assert retry_after_of(ValueError()) is None


# ---------------------------------------------------------------------------------------------
# The pacing state
# ---------------------------------------------------------------------------------------------


async def test_pacing_costs_nothing_when_never_limited() -> None:
    pacing = Pacing()
    sent = [await pacing.acquire() for _ in range(50)]
    assert pacing.in_flight == 50
    for _ in sent:
        pacing.release()
        pacing.succeeded()
    assert pacing.in_flight == 0
    assert (pacing.limit, pacing.rate, pacing.paused_until) == (math.inf, math.inf, -math.inf)


async def test_a_429_pauses_halves_and_recovers_additively() -> None:
    pacing = Pacing()
    sents = [await pacing.acquire() for _ in range(8)]
    pause = pacing.rate_limited(0.05, sents[0])
    assert 0 < pause <= 0.05 + 1e-9
    assert pacing.limit == 4  # 8 in flight, halved
    # An answer to a request sent before the cut does not cut again.
    pacing.rate_limited(0.05, sents[1])
    assert pacing.limit == 4
    for _ in sents:
        pacing.release()
    started = anyio.current_time()
    await pacing.acquire()
    assert anyio.current_time() >= started  # waited for the pause (no sooner than its end)
    assert anyio.current_time() >= pacing.paused_until
    pacing.release()
    limits = []
    for _ in range(100):
        pacing.succeeded()
        limits.append(pacing.limit)
    assert limits[0] > 4
    assert all(b >= a for a, b in itertools.pairwise(limits) if b != math.inf)
    assert limits[-1] == math.inf  # back to the concurrency before the cut: lifted


async def test_the_allowed_concurrency_holds_requests_back() -> None:
    pacing = Pacing()
    sents = [await pacing.acquire() for _ in range(4)]
    pacing.rate_limited(0.0, sents[0])
    assert pacing.limit == 2
    pacing.rate = math.inf  # look at the concurrency alone
    pacing._reduced_rate = math.inf
    for _ in range(3):
        pacing.release()
    assert pacing.in_flight == 1
    first = await pacing.acquire()
    assert first >= 0
    assert pacing.in_flight == 2
    blocked = asyncio.ensure_future(pacing.acquire())
    await _queued(pacing, 1)
    assert not blocked.done()
    pacing.release()
    with anyio.fail_after(5):
        await blocked
    assert pacing.in_flight == 2


async def test_a_cancelled_waiter_passes_its_wake_up_on() -> None:
    pacing = Pacing()
    sents = [await pacing.acquire() for _ in range(2)]
    pacing.rate_limited(0.0, sents[0])
    pacing.rate = math.inf
    pacing._reduced_rate = math.inf
    assert pacing.limit == 1
    pacing.release()  # one in flight: the limit is reached
    first = asyncio.ensure_future(pacing.acquire())
    second = asyncio.ensure_future(pacing.acquire())
    await _queued(pacing, 2)
    pacing.release()  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    with anyio.fail_after(5):
        await second
    assert first.cancelled()


async def _queued(pacing: Pacing, count: int) -> None:
    """Return once ``count`` callers wait in ``pacing``'s queue (each queues on its first step)."""
    with anyio.fail_after(5):
        while len(pacing._waiters) < count:
            await asyncio.sleep(0)


# ---------------------------------------------------------------------------------------------
# The client's one backoff policy
# ---------------------------------------------------------------------------------------------


def test_the_client_takes_one_backoff_policy() -> None:
    options = {"api_key": "vg-test-backoff-key", "base_url": "http://127.0.0.1:1"}
    patient = BackoffPolicy(max_retries=5, max_retry_after=120.0)
    client = vg.AsyncVideoGen(**options, backoff=patient)
    assert client.backoff is patient
    assert client.max_retries == 5
    assert vg.AsyncVideoGen(**options).backoff == DEFAULT_BACKOFF
    # max_retries, when given, overrides the policy's own; a view keeps the rest.
    assert vg.AsyncVideoGen(**options, backoff=patient, max_retries=1).backoff == BackoffPolicy(
        max_retries=1, max_retry_after=120.0
    )
    assert client.with_options(max_retries=0).backoff.max_retry_after == 120.0
    assert client.with_options(backoff=BackoffPolicy()).max_retries == 2
    with pytest.raises(vg.ConfigurationError, match="backoff: must be a BackoffPolicy"):
        vg.AsyncVideoGen(**options, backoff=vg.PollPolicy())  # type: ignore[arg-type]
    with pytest.raises(vg.ConfigurationError, match="max_retries"):
        client.with_options(max_retries=-1)
