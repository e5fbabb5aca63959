"""The waiting policy (:class:`PollPolicy`: when to poll) and its pure arithmetic.

Waiting is not retrying: a task that is still running is not a failure, so it is not backed
off like one (that is ``_http._retry.BackoffPolicy``). Pure functions, no I/O:
:func:`growth_interval` spaces the polls of one object on its own (``tasks.wait``): a first
poll soon, then gaps that grow with its age (so the expected detection lag stays a fixed
fraction of the run time); :func:`probe_count` says how many ids of a class of a batch probe.
"""

from __future__ import annotations

import math

import attrs

from .._contract._checks import fail, number, validator
from .._http._retry import GE0, GT0, OPTIONAL_GE1

_AT_MOST_HALF = validator(number, high=0.5)


@attrs.frozen
class PollPolicy:
    """When the wait helpers and ``gather_until_done`` poll.

    The defaults were chosen by ``bench/gather.py`` (see ``docs/waiting.md``). All times are in
    seconds.

    Attributes:
        first_delay: Wait before the first poll of an object (0: poll at once, which also
            returns at once for an object that is already finished).
        min_interval: The shortest gap of the growing schedule (single waits, and ids of a
            batch whose finish window is not known yet).
        growth: Gap of a single wait as a fraction of the object's age (time since its
            ``created_at``, or since the wait began): ``0.1`` keeps the expected detection lag
            near 5 % of the run time.
        max_interval: The cap of every growing gap.
        jitter: Relative jitter applied to gaps (``0.1``: +-10 %), so that ids do not march in
            step.
        adaptive: Learn the batch's finish window (``gather_until_done``); ``False`` polls every
            id on the growing schedule of a single wait.
        dense_interval: The gap of a batch's id (from the previous answer, like a loop's
            period) inside the ages at which its class is seen to finish, and of the probes.
        probes: Ids of each class of a batch polled densely until the first one finishes
            (``None``: the square root of the class's size, twice that while nothing is known
            of the class, between 8 and 64; see ``docs/waiting.md``).
        sparse_growth: A probe's gap before its class's known finish times start, as a
            fraction of its age (so that a service that got faster is noticed), at least
            ``min_interval``.
        sparse_cap: The longest gap before the learned window starts (at most twice
            ``max_interval`` while nothing is known of the class).
        window_quantile: The window starts at this quantile of the finished durations (one
            dense gap early), which keeps a rare fast outlier from widening it.
        overdue_growth: Past the window's end, the gap grows by this fraction of the time
            overdue (at least the dense gap, at most ``max_interval``).
        coalesce: Polls of a batch due within this many seconds of each other are sent
            together (a little early, never late), so that the event loop wakes once for
            them; at most a fifth of ``dense_interval``.
        half_life: Finished tasks after which an observed duration counts half as much as a
            new one, so that the estimate follows a service that gets faster or slower.
        prior_weight: The most finished tasks a remembered estimate (from an earlier gather
            on the same client, see ``docs/waiting.md``) counts for.
    """

    first_delay: float = attrs.field(default=0.0, validator=GE0)
    min_interval: float = attrs.field(default=1.0, validator=GT0)
    growth: float = attrs.field(default=0.1, validator=GE0)
    max_interval: float = attrs.field(default=15.0, validator=GT0)
    jitter: float = attrs.field(default=0.1, validator=_AT_MOST_HALF)
    adaptive: bool = True
    dense_interval: float = attrs.field(default=1.0, validator=GT0)
    probes: int | None = attrs.field(default=None, validator=OPTIONAL_GE1)
    sparse_growth: float = attrs.field(default=2.0, validator=GE0)
    sparse_cap: float = attrs.field(default=30.0, validator=GT0)
    window_quantile: float = attrs.field(default=0.02, validator=_AT_MOST_HALF)
    overdue_growth: float = attrs.field(default=0.5, validator=GE0)
    coalesce: float = attrs.field(default=0.02, validator=GE0)
    half_life: float = attrs.field(default=256.0, validator=GT0)
    prior_weight: float = attrs.field(default=16.0, validator=GE0)

    def __attrs_post_init__(self) -> None:
        if self.max_interval < self.min_interval:
            raise fail(
                "max_interval",
                f"must be >= min_interval ({self.min_interval:g})",
                self.max_interval,
            )


DEFAULT_POLICY = PollPolicy()


def growth_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap before the next poll of a lone object of ``age`` seconds.

    ``clamp(age * growth, min_interval, max_interval)`` scaled by a jitter factor in
    ``[1 - jitter, 1 + jitter)`` (by ``rand`` in ``[0, 1)``), never above ``max_interval``.
    """
    # A negative age (an off clock) gives ``min_interval``, as an age of 0 would.
    return min(
        policy.max_interval,
        min(policy.max_interval, max(policy.min_interval, age * policy.growth))
        * (1.0 + policy.jitter * (2.0 * rand - 1.0)),
    )


def probe_count(policy: PollPolicy, total: int, *, cold: bool = False) -> int:
    """How many of the ``total`` ids of a class of a batch are probes.

    ``policy.probes`` if set, otherwise ``isqrt(total)`` between 8 and 64, never more than
    ``total``; 0 when not adaptive. With nothing known of the class (``cold``), twice the
    square root: about ``sqrt(total) / 2`` of its ids then finish before the first probe does
    (found late, when it is), under 5 % of a class of 100 or more.
    """
    if not policy.adaptive:
        return 0
    wanted = policy.probes
    if wanted is None:
        wanted = min(64, max(8, round(2.0 * math.sqrt(total)) if cold else math.isqrt(total)))
    return min(total, wanted)  # both >= 0
