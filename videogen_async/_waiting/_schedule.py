"""Finish-time models for ``gather_until_done``: what is known of when tasks end, per class.

Pure. :class:`FinishSketch`: a decaying histogram of durations on 2 % log bins.
:class:`ClassModel`: a class's estimate (a remembered :class:`FinishTimeStats` as bounded prior)
giving the :class:`Support` of expected finishes; :func:`batch_gap`: the gap before an id's
next poll. A :class:`FinishTimeMemory` (default: :class:`InMemoryFinishTimes` per client) keeps
the stats between gathers.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections.abc import Callable
from typing import Protocol

import attrs

from .._contract import _checks as checks
from ._policy import PollPolicy

_RATIO = 1.02
_LOG_RATIO = math.log(_RATIO)
_FLOOR = 0.05  # durations below this share the first bin
_RENORMALIZE = 1e150


def _upper(index: int) -> float:
    """The upper edge of bin ``index`` (its lower edge: ``_RATIO**index``)."""
    return _RATIO ** (index + 1)


@attrs.frozen
class FinishTimeStats:
    """An immutable summary of the durations of one class of tasks.

    Attributes:
        bins: ``(bin, weight)`` pairs: bin ``i`` holds durations in ``[1.02**i, 1.02**(i+1))``
            seconds; weights are relative (their sum is what counts).
        count: Observations the summary rests on (before decay).
    """

    bins: tuple[tuple[int, float], ...]
    count: int

    def __attrs_post_init__(self) -> None:
        checks.whole("count", self.count, minimum=0)


class FinishTimeMemory(Protocol):
    """A store of what was learned about each class of tasks, kept between gathers.

    ``gather_until_done`` loads the entry of each class key it is given before its first poll
    and updates it as tasks finish. Implementations must be quick and must not block (an
    in-memory map, or a write-behind to a durable store).
    """

    def load(self, key: object) -> FinishTimeStats | None:
        """The stats last stored for ``key``, or ``None``."""
        ...

    def update(self, key: object, stats: FinishTimeStats) -> None:
        """Store ``stats`` for ``key`` (it already includes what ``load`` returned)."""
        ...


class InMemoryFinishTimes:
    """A :class:`FinishTimeMemory` in a dict, bounded to ``max_keys`` classes (oldest out)."""

    def __init__(self, max_keys: int = 1024) -> None:
        checks.whole("max_keys", max_keys)
        self._max = max_keys
        self._data: dict[object, FinishTimeStats] = {}

    def load(self, key: object) -> FinishTimeStats | None:
        """The stats last stored for ``key``, or ``None``."""
        return self._data.get(key)

    def update(self, key: object, stats: FinishTimeStats) -> None:
        """Store ``stats`` for ``key``."""
        self._data.pop(key, None)
        self._data[key] = stats
        while len(self._data) > self._max:
            del self._data[next(iter(self._data))]

    def __len__(self) -> int:
        return len(self._data)


class FinishSketch:
    """A decaying histogram of durations on log-spaced bins.

    An observation weighs half as much as a new one after ``half_life`` more; a remembered
    ``prior`` counts for at most ``prior_weight`` observations, so that new ones outweigh it
    soon.
    """

    def __init__(
        self,
        *,
        half_life: float = 256.0,
        prior: FinishTimeStats | None = None,
        prior_weight: float = 16.0,
    ) -> None:
        # ``half_life`` > 0: ``PollPolicy`` checks it (the sketch is built from a policy).
        self._growth = 2.0 ** (1.0 / half_life)
        self._step = 1.0  # the weight of the next observation
        self._bins: dict[int, float] = {}
        self._total = 0.0
        self.count = 0  # own observations
        self.low = math.inf  # the shortest and longest own observations
        self.high = -math.inf
        if prior is not None:
            mass = sum(w for _, w in prior.bins)
            if mass > 0:
                scale = min(prior.count, prior_weight) / mass
                for index, weight in prior.bins:
                    if weight > 0:
                        self._bins[index] = self._bins.get(index, 0.0) + weight * scale
                self._total = sum(self._bins.values())

    @property
    def weight(self) -> float:
        """The total weight, in units of the newest observation."""
        return self._total / self._step

    def add(self, duration: float) -> None:
        """Record one finished task's duration (seconds)."""
        if math.isnan(duration):
            return
        index = math.floor(math.log(max(duration, _FLOOR)) / _LOG_RATIO)
        self._bins[index] = self._bins.get(index, 0.0) + self._step
        self._total += self._step
        self._step *= self._growth
        self.count += 1
        self.low = min(self.low, duration)
        self.high = max(self.high, duration)
        if self._step > _RENORMALIZE:
            scale = 1.0 / self._step
            self._bins = {i: w * scale for i, w in self._bins.items() if w * scale > 1e-12}
            self._total = sum(self._bins.values())
            self._step = 1.0

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (``0 <= q <= 1``); ``nan`` when empty.

        The lower edge of its bin for ``q < 0.5``, the upper edge otherwise, so that the
        support errs wide.
        """
        if self._total <= 0:
            return math.nan
        # Not cached: asked a few times per recomputed support, never per poll.
        indexes = sorted(self._bins)
        # Running sums that reach the target but for rounding count as reaching it, so that a
        # quantile on a bin's edge does not depend on the order the weights were added in.
        # A ``q`` outside [0, 1] finds the first or the last bin, as its clamped value would.
        target = (q - 1e-9) * self._total
        for index, running in zip(
            indexes, itertools.accumulate(self._bins[index] for index in indexes), strict=True
        ):
            if running >= target:
                return _RATIO**index if q < 0.5 else _upper(index)
        return _upper(indexes[-1])

    def cdf_table(self) -> tuple[list[float], list[float], list[float], list[float]] | None:
        """The distribution as a table of its occupied bins (``None`` when empty).

        Per bin: its lower and upper edge, the share of the weight below it and its own share.
        The distribution function is linear inside each bin and flat between bins.
        """
        if self._total <= 0:
            return None
        indexes = sorted(self._bins)
        shares = [self._bins[index] / self._total for index in indexes]
        return (
            [_RATIO**i for i in indexes],
            [_upper(i) for i in indexes],
            list(itertools.accumulate(shares[:-1], initial=0.0)),
            shares,
        )

    def snapshot(self) -> FinishTimeStats:
        """An immutable summary (weights relative to the newest observation)."""
        scale = 1.0 / self._step
        # Own observations, and what is left of the prior's weight (never fewer than its own).
        return FinishTimeStats(
            bins=tuple(sorted((i, w * scale) for i, w in self._bins.items() if w * scale > 1e-9)),
            count=max(round(self.weight), self.count),
        )


@attrs.frozen
class Support:
    """The ages (seconds since creation) between which a class's tasks are expected to end.

    Attributes:
        start: Where frequent polling begins.
        end: Where it ends (``inf`` while too little is known to close it).
        samples: Observations (own and remembered) the estimate rests on.
    """

    start: float
    end: float
    samples: float


class ClassModel:
    """What is known of one class's finish times: its own observations and a prior.

    The support starts at ``low_quantile`` and (once closed) ends at ``high_quantile``; the
    other arguments are those of :class:`FinishSketch`.
    """

    def __init__(
        self,
        *,
        half_life: float = 256.0,
        prior: FinishTimeStats | None = None,
        prior_weight: float = 16.0,
        low_quantile: float = 0.02,
        high_quantile: float = 0.98,
    ) -> None:
        self.sketch = FinishSketch(half_life=half_life, prior=prior, prior_weight=prior_weight)
        self.remembered = prior is not None and prior.count > 0
        # The shape of the distribution (where finishes crowd) is taken from the remembered
        # batches only: the finishes of a gather in progress are the early ones (the later
        # ones are still pending), so they would show a crowd at every id's age.
        self._table = (
            FinishSketch(prior=prior, prior_weight=1.0).cdf_table() if self.remembered else None
        )
        self._low_q = low_quantile
        self._high_q = high_quantile

    def add(self, duration: float) -> None:
        """Record one finished task's duration."""
        self.sketch.add(duration)

    def support(self, pending: int, older: Callable[[float], int] | None = None) -> Support | None:
        """The support, or ``None`` when nothing is known.

        The end stays open while the class's ``pending`` ids outnumber the observations (unless
        a prior was remembered), and while more of its pending ids are overdue for it (``older``
        counts them: durations known to be longer than their ages) than the ``1 -
        high_quantile`` share of the class allows: the finishes seen are then the short ones.
        """
        # Computed on each call: its callers ask once per class and then only as tasks finish
        # (never per poll), each time with new counts.
        sketch = self.sketch
        if sketch.weight <= 0:
            return None
        end = math.inf
        if self.remembered or sketch.count >= max(3, pending):
            end = max(sketch.quantile(self._high_q), sketch.high)
            if older is not None and older(end) > (1.0 - self._high_q) * (sketch.count + pending):
                end = math.inf
        return Support(
            start=min(sketch.quantile(self._low_q), sketch.low), end=end, samples=sketch.weight
        )

    def cdf(self, age: float) -> float:
        """The share of the class finished by ``age`` in what was remembered (0: nothing)."""
        table = self._table
        if table is None:
            return 0.0
        lows, highs, below, shares = table
        j = bisect_right(lows, age) - 1
        if j < 0:
            return 0.0
        return below[j] + shares[j] * min(1.0, (age - lows[j]) / (highs[j] - lows[j]))

    def gap(self, age: float, interval: float) -> float:
        """The gap inside the support at ``age``: ``interval``, shorter where finishes crowd.

        Above a hazard of ``0.25 / interval`` (of the remembered finishes, over the next quarter
        ``interval``) the gap shrinks as ``1 / sqrt(hazard)``, the spacing that minimises the
        expected lag for a number of polls.
        """
        window = 0.25 * interval  # (nothing remembered: ``cdf`` is 0, the gap ``interval``)
        done = self.cdf(age)
        alive = 1.0 - done
        if alive <= 1e-9:
            return interval
        hazard = (self.cdf(age + window) - done) / (window * alive)
        reference = 0.25 / interval
        if hazard <= reference:
            return interval
        return interval * math.sqrt(reference / hazard)


def overdue_after(start: float, end: float, interval: float) -> float:
    """The age past which an id of a class whose support is ``start``-``end`` is overdue.

    The end plus a margin: a quarter of the support's width, a tenth of its end, at least two
    gaps of ``interval``.
    """
    return end + max(2.0 * interval, 0.1 * end, 0.25 * (end - start))


def batch_gap(
    policy: PollPolicy,
    *,
    age: float,
    elapsed: float,
    support: Support | None,
    probe: bool,
    rand: float,
    phase: float = 1.0,
    dense: float | None = None,
    probing: bool = False,
) -> float:
    """The gap (seconds, at least 0) before the next poll of one pending id of a gather.

    Inside the class's ``support`` (from ``phase`` gaps before its start to a margin past its
    end) it is ``dense_interval`` (``dense`` where finishes crowd); before it, the wait for its
    start (a ``probe`` keeps its growing gaps); past it, a gap growing with the time overdue.
    With nothing known a probe (or an id still ``probing``) polls every ``dense_interval``, the
    others every ``sparse_cap``, shortened by up to ``jitter`` (by ``rand``). ``age`` is on the
    service's clock; growing gaps use ``min(age, elapsed)``. See ``docs/waiting.md``.
    """
    interval = policy.dense_interval
    if support is None:
        wait = interval if probe or probing else min(policy.sparse_cap, policy.max_interval * 2.0)
        return wait * (1.0 - policy.jitter * rand)
    start = support.start - phase * interval
    if age < start:
        wait = min(policy.sparse_cap, start - age)  # > 0
        if probe:  # a probe keeps looking on the growing schedule: the service may be faster
            # (A negative age gives ``min_interval``, as an age of 0 would.)
            wait = min(wait, max(policy.min_interval, min(age, elapsed) * policy.sparse_growth))
        return wait
    past = overdue_after(support.start, support.end, interval)
    if age <= past:
        return interval if dense is None else min(interval, dense)
    return max(interval, min(policy.max_interval, min(age - past, elapsed) * policy.overdue_growth))
