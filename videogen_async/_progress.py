"""``GatherProgress``: a snapshot of a gather's progress (a frozen attrs class)."""

from __future__ import annotations

import attrs

__all__ = ["GatherProgress"]


@attrs.frozen
class GatherProgress:
    """A snapshot of a gather's progress, readable at any time without consuming results.

    Attributes:
        total: Distinct ids being waited on.
        succeeded: Ids seen succeeded.
        failed: Ids seen failed or error (a result, not an exception).
        errors: Ids that could not be polled (permanent failure or timeout).
        pending: Ids not finished yet.
        requests: Polls sent so far.
        transient_errors: Polls that failed transiently (including 429s).
        rate_limited: Polls answered 429.
        in_flight: Polls in flight now.
        peak_in_flight: The most polls that were in flight at once.
        concurrency_limit: Polls allowed in flight now (lowered by 429s, recovering).
        paused: Whether polling is paused by a 429.
        elapsed: Seconds since the gather started (0 before).
    """

    total: int
    succeeded: int = 0
    failed: int = 0
    errors: int = 0
    pending: int = 0
    requests: int = 0
    transient_errors: int = 0
    rate_limited: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    concurrency_limit: int = 0
    paused: bool = False
    elapsed: float = 0.0

    @property
    def done(self) -> int:
        """Ids finished: succeeded, failed or could not be polled."""
        return self.succeeded + self.failed + self.errors
