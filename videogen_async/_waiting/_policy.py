"""The poll policy and its pure delay arithmetic.

Waiting is not retrying: a task that is still running is not a failure, so it is not backed
off like one. The gaps are computed here by pure functions with no I/O (each takes its
randomness as a number in ``[0, 1)`` so that it can be tested on its own):

* :func:`growth_interval`: one object on its own (``tasks.wait``, ``projects.wait``): a first
  poll soon, then gaps that grow with the object's age (a fixed fraction of it, so the expected
  detection lag stays a fixed fraction of the run time), with jitter, up to a cap.
* :func:`probe_count`: how many ids of a class of a batch are probes.
* :func:`estimate_window` and :func:`batch_delay`: the single-window arithmetic of earlier
  versions of the gather, kept for code that uses it (the gather now learns per class, see
  ``_schedule``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

__all__ = [
    "DEFAULT_POLICY",
    "FinishWindow",
    "PollPolicy",
    "batch_delay",
    "dense_interval",
    "estimate_window",
    "growth_interval",
    "probe_count",
    "sparse_interval",
]

_ge0 = attrs.validators.ge(0.0)
_gt0 = attrs.validators.gt(0.0)
_optional_ge1: Any = attrs.validators.optional(attrs.validators.ge(1))


def _fraction(upper: float) -> Any:
    return attrs.validators.and_(attrs.validators.ge(0.0), attrs.validators.le(upper))


@attrs.frozen
class PollPolicy:
    """How waiting helpers and ``gather_until_done`` space their polls.

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
            period) inside the ages at which its class is seen to finish (from up to one gap
            before the ``window_quantile`` of the durations, by the id's random phase, to a
            margin past their ``1 - window_quantile``), and the gap of the probes: a batch is
            polled there exactly as densely as a loop at this gap.
        relative_interval: Lower bound of the dense gap as a fraction of the task's age, so
            that long tasks (minutes) are not polled every second: the dense gap is
            ``max(dense_interval, age * relative_interval)``, at most ``max_interval``.
        probes: Ids of each class of a batch polled densely until the first one finishes
            (``None``: about the square root of the class's size, between 8 and 64, for a
            remembered class; twice that, between 8 and 64, for a class with nothing
            known, all of whose ids also probe at first, fewer and fewer as time passes:
            see ``docs/waiting.md``).
        sparse_growth: A probe's gap before its class's known finish times start, as a
            fraction of its age (so that a service that got faster is noticed), at least
            ``min_interval`` and at most ``max_interval``. While nothing is known of a class,
            its ids other than the probes wait ``max_interval`` between polls.
        sparse_cap: The longest gap before the learned window starts.
        window_quantile: The window starts at this quantile of the finished durations (one
            dense gap early), which keeps a rare fast outlier from widening it.
        overdue_growth: Past the window's end, the gap grows by this fraction of the time
            overdue (at least the dense gap, at most ``max_interval``).
        max_consecutive_failures: Transient failures in a row after which one id is given up
            (a permanent failure); ``None`` never gives up (the deadline still applies).
        error_initial: Ceiling of the first backoff after a transient failure.
        error_max: Cap of the backoff after transient failures.
        rate_limit_initial: Pause after a 429 without ``Retry-After``, doubled for each 429 in
            a row.
        rate_limit_max: Cap of that pause.
        rate_decrease: Factor applied to the allowed concurrency and request rate on a 429.
        rate_recovery: After a 429, the allowed rate grows back by this fraction of the
            reduced rate per second, until the rate limit is lifted.
        coalesce: Polls of a batch due within this many seconds of each other are sent
            together (a little early, never late), so that the event loop wakes once for
            them; at most a fifth of ``dense_interval``.
        half_life: Finished tasks after which an observed duration counts half as much as a
            new one, so that the estimate follows a service that gets faster or slower.
        prior_weight: The most finished tasks a remembered estimate (from an earlier gather
            on the same client, see ``docs/waiting.md``) counts for.

    ``relative_interval`` is no longer used by ``gather_until_done`` (its gaps inside the
    observed finish times are at most ``dense_interval``); it is still accepted.
    """

    first_delay: float = attrs.field(default=0.0, validator=_ge0)
    min_interval: float = attrs.field(default=1.0, validator=_gt0)
    growth: float = attrs.field(default=0.1, validator=_ge0)
    max_interval: float = attrs.field(default=15.0, validator=_gt0)
    jitter: float = attrs.field(default=0.1, validator=_fraction(0.5))
    adaptive: bool = True
    dense_interval: float = attrs.field(default=1.0, validator=_gt0)
    relative_interval: float = attrs.field(default=0.02, validator=_ge0)
    probes: int | None = attrs.field(default=None, validator=_optional_ge1)
    sparse_growth: float = attrs.field(default=2.0, validator=_ge0)
    sparse_cap: float = attrs.field(default=30.0, validator=_gt0)
    window_quantile: float = attrs.field(default=0.02, validator=_fraction(0.5))
    overdue_growth: float = attrs.field(default=0.5, validator=_ge0)
    max_consecutive_failures: int | None = attrs.field(default=8, validator=_optional_ge1)
    error_initial: float = attrs.field(default=1.0, validator=_gt0)
    error_max: float = attrs.field(default=30.0, validator=_gt0)
    rate_limit_initial: float = attrs.field(default=1.0, validator=_gt0)
    rate_limit_max: float = attrs.field(default=60.0, validator=_gt0)
    rate_decrease: float = attrs.field(
        default=0.5, validator=attrs.validators.and_(attrs.validators.gt(0.0), _fraction(1.0))
    )
    rate_recovery: float = attrs.field(default=0.1, validator=_gt0)
    coalesce: float = attrs.field(default=0.02, validator=_ge0)
    half_life: float = attrs.field(default=256.0, validator=_gt0)
    prior_weight: float = attrs.field(default=16.0, validator=_ge0)

    def __attrs_post_init__(self) -> None:
        if self.max_interval < self.min_interval:
            raise ValueError(
                f"max_interval ({self.max_interval}) must be >= min_interval ({self.min_interval})"
            )


DEFAULT_POLICY = PollPolicy()

# ---------------------------------------------------------------------------------------------
# Pure delay arithmetic
# ---------------------------------------------------------------------------------------------


def _jittered(value: float, jitter: float, rand: float) -> float:
    """``value`` scaled by a factor in ``[1 - jitter, 1 + jitter)`` chosen by ``rand``."""
    return value * (1.0 + jitter * (2.0 * rand - 1.0))


def growth_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap before the next poll of a lone object.

    Args:
        policy: The poll policy.
        age: Seconds since the object was created (or since the wait began).
        rand: A random number in ``[0, 1)``.

    Returns:
        ``clamp(age * growth, min_interval, max_interval)`` with jitter, never above
        ``max_interval`` and never below ``min_interval * (1 - jitter)``.
    """
    base = min(policy.max_interval, max(policy.min_interval, max(age, 0.0) * policy.growth))
    return min(policy.max_interval, _jittered(base, policy.jitter, rand))


def dense_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap inside a batch's finish window, and of the probes.

    Args:
        policy: The poll policy.
        age: Seconds since the task was created.
        rand: A random number in ``[0, 1)``.

    Returns:
        ``max(dense_interval, min(max_interval, age * relative_interval))`` with jitter.
    """
    base = max(
        policy.dense_interval, min(policy.max_interval, max(age, 0.0) * policy.relative_interval)
    )
    return _jittered(base, policy.jitter, rand)


def sparse_interval(policy: PollPolicy, age: float, rand: float) -> float:
    """The gap of a batch's non-probe id while the finish window is not known yet.

    Args:
        policy: The poll policy.
        age: Seconds since the task was created.
        rand: A random number in ``[0, 1)``.

    Returns:
        ``clamp(age * sparse_growth, min_interval, max_interval)`` with jitter, at most
        ``max_interval``.
    """
    base = min(policy.max_interval, max(policy.min_interval, max(age, 0.0) * policy.sparse_growth))
    return min(policy.max_interval, _jittered(base, policy.jitter, rand))


@attrs.frozen
class FinishWindow:
    """When, by age, the pending tasks of a batch are expected to finish.

    Attributes:
        start: Age (seconds since creation) at which dense polling begins.
        end: Age after which the gaps grow again (``inf`` while too few tasks have finished
            to tell).
        samples: How many finished durations the estimate rests on.
    """

    start: float
    end: float
    samples: int


def probe_count(policy: PollPolicy, total: int) -> int:
    """How many ids of a batch are probes.

    Args:
        policy: The poll policy.
        total: Distinct ids in the batch.

    Returns:
        ``policy.probes`` if set, otherwise ``isqrt(total)`` between 8 and 64; never more
        than ``total``.
    """
    if not policy.adaptive:
        return 0
    wanted = policy.probes if policy.probes is not None else min(64, max(8, math.isqrt(total)))
    return max(0, min(total, wanted))


def estimate_window(
    policy: PollPolicy, durations: Sequence[float], total: int
) -> FinishWindow | None:
    """Estimate a batch's finish window from the durations of its finished tasks.

    Args:
        policy: The poll policy.
        durations: ``finished_at - created_at`` of the tasks that finished, sorted ascending.
        total: Distinct ids in the batch.

    Returns:
        ``None`` when nothing has finished (or the policy is not adaptive). Otherwise the
        window: it starts one dense gap before the ``window_quantile`` of the durations; its
        end stays open (``inf``) until half the batch has finished, then lies past the longest
        duration by the larger of the spread, a quarter of that duration, and two dense gaps.
    """
    count = len(durations)
    if count == 0 or not policy.adaptive:
        return None
    low = durations[min(count - 1, int(count * policy.window_quantile))]
    start = max(0.0, low - policy.dense_interval)
    end = math.inf
    if count >= max(3, math.ceil(total * 0.5)):
        high = durations[-1]
        end = high + max(high - low, 0.25 * high, 2.0 * policy.dense_interval)
    return FinishWindow(start=start, end=end, samples=count)


def batch_delay(
    policy: PollPolicy,
    *,
    age: float,
    elapsed: float,
    window: FinishWindow | None,
    probe: bool,
    rand: float,
) -> float:
    """The gap before the next poll of one pending id of a batch.

    Two ages are used. ``age`` comes from the service's timestamps (``created_at``, with the
    clock skew removed) and places the task against the finish window, which is also measured
    on the service's clock. The growing gaps use ``min(age, elapsed)``, where ``elapsed`` is
    measured on the local clock: a service clock that runs at another rate (the sandbox with a
    ``time_scale``) or far off can then only make the polls denser, never sparser.

    Args:
        policy: The poll policy.
        age: Seconds since the task was created, on the service's clock.
        elapsed: Local seconds since the gather began.
        window: The batch's finish window, if known.
        probe: Whether the id is a probe.
        rand: A random number in ``[0, 1)``.

    Returns:
        Before the window is known: the dense gap for a probe, the sparse gap otherwise.
        Before the window: the time until it starts (a little less, by up to ``jitter``),
        at most the sparse gap and ``sparse_cap``. Inside it: the dense gap. Past its end: a
        gap growing with the time overdue, between the dense gap and ``max_interval``.
    """
    local_age = max(0.0, min(age, elapsed))
    if window is None:
        if probe:
            return dense_interval(policy, local_age, rand)
        return sparse_interval(policy, local_age, rand)
    if age < window.start:
        wait = (window.start - age) * (1.0 - policy.jitter * rand)
        cap = min(policy.sparse_cap, sparse_interval(policy, local_age, rand))
        return max(0.0, min(cap, wait))
    dense = dense_interval(policy, local_age, rand)
    if age <= window.end:
        return dense
    overdue = min(age - window.end, elapsed)
    return max(dense, min(policy.max_interval, overdue * policy.overdue_growth))
