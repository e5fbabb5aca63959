"""The retry arithmetic, on its own (pure functions)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from videogen_async._http._envelope import make_status_error
from videogen_async._http._retry import (
    BackoffPolicy,
    backoff_delay,
    decide_retry,
    honoured_retry_after,
    parse_retry_after,
)


@given(
    attempt=st.integers(min_value=-5, max_value=10_000),
    initial=st.floats(min_value=0, max_value=100),
    cap=st.floats(min_value=0, max_value=1000),
    seed=st.integers(),
)
def test_backoff_within_bounds(attempt: int, initial: float, cap: float, seed: int) -> None:
    delay = backoff_delay(attempt, initial=initial, cap=cap, rng=random.Random(seed))
    assert 0 <= delay <= min(cap, initial * 2 ** min(max(attempt - 1, 0), 62)) + 1e-9


def test_backoff_grows_and_caps() -> None:
    rng = random.Random(1)
    firsts = [backoff_delay(1, initial=0.5, cap=8, rng=rng) for _ in range(200)]
    lates = [backoff_delay(10, initial=0.5, cap=8, rng=rng) for _ in range(200)]
    assert max(firsts) <= 0.5
    assert max(lates) <= 8
    assert max(lates) > 4  # full jitter spreads over the whole range


def test_parse_retry_after_forms() -> None:
    now = datetime(2026, 11, 21, 10, tzinfo=timezone.utc)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert (
        parse_retry_after(format_datetime(now + timedelta(seconds=20), usegmt=True), now=now) == 20
    )
    assert (
        parse_retry_after(format_datetime(now - timedelta(seconds=20), usegmt=True), now=now) == 0
    )
    for bad in (None, "", "soon", "nan", "inf", "1e309", "Fri, 31 Dec 99999 23:59:59 GMT"):
        assert parse_retry_after(bad) is None


def _limited(retry_after: str) -> Exception:
    headers = {"Retry-After": retry_after}
    return make_status_error(429, None, "slow down", headers=headers, method="GET", path="/x")


def test_the_decision_prefers_retry_after_within_the_cap() -> None:
    policy = BackoffPolicy(max_retry_after=10, max_retries=5)
    decide = {"method": "GET", "failures": 1, "policy": policy}
    assert decide_retry(_limited("4"), **decide).delay == 4
    beyond = decide_retry(_limited("11"), **decide)
    assert (beyond.delay, beyond.reason) == (None, "too long")
    assert "11 s (Retry-After)" in beyond.detail
    assert "max_retry_after" in beyond.detail
    # A poll treats a Retry-After beyond the cap as absent: the backoff, and never gives up.
    poll = decide_retry(_limited("11"), poll=True, **decide)
    assert poll.delay is not None
    assert 0 <= poll.delay <= policy.initial_delay
    later = decide_retry(_limited("soon"), **{**decide, "failures": 3})
    assert later.delay is not None
    assert 0 <= later.delay <= 2.0


@pytest.mark.parametrize(
    "value", ["Fri, 31 Dec 9999 23:59:59 GMT", "soon", "", "1e309", "nan", "61", "-1e400"]
)
def test_an_unusable_retry_after_is_never_honoured(value: str) -> None:
    # Unreadable, overflowing or beyond the cap: never a pause, never a wait.
    assert honoured_retry_after(_limited(value), BackoffPolicy()) is None
