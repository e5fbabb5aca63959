"""A gather's progress: its counts and their snapshot (``GatherProgress``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .._contract._exceptions import TaskPollError
from .._contract._serial import Serializable

if TYPE_CHECKING:
    from .._contract._models import Task


@attrs.define
class _Counts:
    """The counts of a gather: the fields of its snapshot that its coordinator keeps."""

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


@attrs.frozen
class GatherProgress(_Counts, Serializable):
    """A snapshot of a gather's progress, readable at any time without consuming results.

    ``to_dict()`` and ``to_json()`` give its fields, for a dashboard or a log line.

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

    concurrency_limit: int = 0
    paused: bool = False
    elapsed: float = 0.0

    @property
    def done(self) -> int:
        """Ids finished: succeeded, failed or could not be polled."""
        return self.succeeded + self.failed + self.errors


@attrs.define
class GatherCounts(_Counts):
    """The running counts of one gather, kept by its coordinator."""

    def sent(self) -> None:
        """Count a poll sent."""
        self.requests += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def finished(self, item: Task | TaskPollError) -> None:
        """Count an id finished: a terminal task, or an error that ends the id."""
        self.pending -= 1
        if isinstance(item, TaskPollError):
            self.errors += 1
        elif item.is_succeeded:
            self.succeeded += 1
        else:
            self.failed += 1
