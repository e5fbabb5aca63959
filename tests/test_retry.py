"""The retry arithmetic, on its own (pure functions)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from videogen_async._http._retry import RetryPolicy, backoff_delay, parse_retry_after, retry_delay


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
    for bad in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(bad) is None


def test_retry_delay_prefers_retry_after_within_cap() -> None:
    policy = RetryPolicy(max_retry_after=10)
    assert retry_delay(policy, 1, retry_after=4) == 4
    assert retry_delay(policy, 1, retry_after=11) is None
    assert 0 <= (retry_delay(policy, 3) or 0) <= 2.0
