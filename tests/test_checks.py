"""The argument checks: one rule per kind of value, one error naming the field and the rule."""

from __future__ import annotations

import math
from typing import Any

import pytest

import videogen_async as vg
from videogen_async._contract import _checks as checks


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, True, "1", None])
def test_positive_refuses_what_is_not_a_finite_number_above_zero(bad: Any) -> None:
    with pytest.raises(vg.InvalidRequestError) as info:
        checks.positive("lease", bad)
    assert info.value.field == "lease"
    assert info.value.rule == "must be a number > 0"
    assert isinstance(info.value, ValueError)


def test_number_bounds_and_infinity() -> None:
    assert checks.number("x", 0) == 0.0
    assert checks.number("x", math.inf, finite=False) == math.inf
    assert checks.number("x", 1.0, above=True, high=1.0) == 1.0
    with pytest.raises(vg.InvalidRequestError, match=r"x: must be a number > 0 and <= 1"):
        checks.number("x", 1.5, above=True, high=1.0)
    with pytest.raises(vg.InvalidRequestError):
        checks.number("x", math.inf)


def test_seconds_or_none() -> None:
    assert checks.seconds_or_none("timeout", None) is None
    assert checks.seconds_or_none("timeout", 0) == 0.0
    assert checks.seconds_or_none("timeout", math.inf) == math.inf
    for bad in (-1, math.nan, False, "3"):
        with pytest.raises(vg.InvalidRequestError, match="timeout: must be seconds >= 0 or None"):
            checks.seconds_or_none("timeout", bad)


def test_whole_numbers_in_range() -> None:
    assert checks.whole("n", 1) == 1
    assert checks.whole("n", 0, minimum=0) == 0
    for bad in (0, 2.0, True, "2", None):
        with pytest.raises(vg.InvalidRequestError, match="n: must be a whole number >= 1"):
            checks.whole("n", bad)
    with pytest.raises(vg.InvalidRequestError, match="and <= 3"):
        checks.whole("n", 4, maximum=3)


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ("", "non-empty"),
        ("   ", "non-empty"),
        (7, "non-empty"),
        ("a" * 501, "at most 500"),
        ("a\x00b", "NUL"),
        ("a\ud800b", "surrogate"),
    ],
)
def test_a_key_is_a_storable_name(bad: Any, rule: str) -> None:
    with pytest.raises(vg.InvalidRequestError, match=rule) as info:
        checks.check_key(bad)
    assert info.value.field == "key"


def test_the_policies_refuse_with_the_same_error() -> None:
    with pytest.raises(vg.InvalidRequestError, match="initial_delay: must be a number >= 0"):
        vg.BackoffPolicy(initial_delay=-1)
    with pytest.raises(vg.InvalidRequestError, match="max_interval: must be >= min_interval"):
        vg.PollPolicy(min_interval=5, max_interval=1)
    assert vg.BackoffPolicy(max_retry_after=math.inf).max_retry_after == math.inf


def test_the_client_configuration_is_a_configuration_error() -> None:
    options: dict[str, Any] = {"api_key": "k", "base_url": "http://127.0.0.1:1"}
    with pytest.raises(vg.ConfigurationError, match="deadline: must be a number > 0"):
        vg.AsyncVideoGen(**options, deadline=0)
    with pytest.raises(vg.ConfigurationError, match="max_retries: must be a whole number >= 0"):
        vg.AsyncVideoGen(**options, max_retries=-1)
