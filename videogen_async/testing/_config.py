"""Settings of the sandbox: simulated durations, rates and a project's step timings.

Its prices are the reference prices of the service statement (``Pricing``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs

from .._contract import _checks as checks

DEFAULT_API_KEY = "sandbox-key"
"""The API key a sandbox accepts unless it is given another."""

Duration = float | tuple[float, float] | Callable[[random.Random], float]
"""A simulated duration in seconds: a fixed number, a ``(low, high)`` range drawn uniformly,
or a callable that draws one from the sandbox's seeded ``random.Random``."""


def check_duration(value: Any, name: str) -> Duration:
    """A :data:`Duration` setting as the sandbox keeps it (a list range becomes a tuple).

    Raises:
        ValueError: Not a number ``>= 0``, an ordered ``(low, high)`` pair of such numbers,
            or a callable; the message names the setting (the shared number rule's error).
    """
    if callable(value):
        return value  # type: ignore[no-any-return]
    if isinstance(value, (tuple, list)) and len(value) == 2:
        low, high = (checks.number(name, bound) for bound in value)
        if low > high:
            raise checks.fail(name, "must be a (low, high) range with low <= high", value)
        return (low, high)
    return checks.number(name, value)


def sample_duration(spec: Duration, rng: random.Random) -> float:
    """Draw simulated seconds (never negative) from a checked :data:`Duration`."""
    if isinstance(spec, tuple):
        low, high = spec
        return low if low == high else rng.uniform(low, high)
    if callable(spec):
        return max(0.0, float(spec(rng)))
    return spec


def duration_field(name: str, default: Any = attrs.NOTHING) -> Any:
    """An attrs field of a :data:`Duration` setting, checked as ``name``."""
    return attrs.field(default=default, converter=lambda value: check_duration(value, name))


def rate_field(name: str) -> Any:
    """An attrs field of a probability setting (0 by default), checked as ``name``."""
    return attrs.field(default=0.0, converter=lambda value: checks.number(name, value, high=1))


@attrs.frozen
class ProjectTiming:
    """Simulated durations of a project's steps before its script is ready.

    Attributes:
        preparing_media: Storing the input media (status ``draft``).
        analyzing: Analysing the reference video (status ``running``).
        generating_script: Writing the script (status ``running``).
    """

    preparing_media: Duration = duration_field("preparing_media", (1.0, 3.0))  # noqa: RUF009 - an attrs field
    analyzing: Duration = duration_field("analyzing", (8.0, 15.0))  # noqa: RUF009 - an attrs field
    generating_script: Duration = duration_field("generating_script", (8.0, 15.0))  # noqa: RUF009 - an attrs field
