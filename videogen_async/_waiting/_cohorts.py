"""The cohorts of ``gather_until_done``: its ids grouped by class key, and what is learned.

A cohort is the ids of a gather that share a class of tasks (the same model and duration,
say), so that the finish times of the first to end tell when the rest will. Held here: each
id's state, each cohort's state (``ClassState``), the clock skew, and the learning.

:class:`BatchSchedule` learns each class's finish times (``_schedule.ClassModel``, a
``FinishTimeMemory`` as prior) and gives each pending id its next due time; no I/O. Ages are on
the service's clock (skew bracketed from finished tasks); growing gaps are capped by the
*local* time waited, so an off service clock can only make polls denser.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable

import attrs

from .._contract._models import Task
from ._policy import PollPolicy, growth_interval, probe_count
from ._schedule import ClassModel, FinishTimeMemory, Support, batch_gap, overdue_after

logger = logging.getLogger("videogen_async")

_PROBING = 0.3
"""A cold class's id probes until ``_PROBING * dense_interval / rank`` seconds have passed:
``n * _PROBING * dense_interval / t`` of its ``n`` ids probe at ``t`` seconds, at a cost of
about ``_PROBING * ln(t)`` polls per id until the first finish."""


@attrs.define(eq=False)
class ClassState:
    """The scheduler's record of one class of ids (one per class key; ``None``: no key).

    Compared and hashed by identity (``eq=False``): a gather groups its joining ids by it.
    """

    key: object
    states: list[IdState] = attrs.Factory(list)
    pending: int = 0
    model: ClassModel | None = None
    support: Support | None = None
    learned: int = 0  # finishes since the memory was last updated


@attrs.define(eq=False, repr=False)
class IdState:
    """The scheduler's record of one distinct id (slotted: a gather holds one per id)."""

    task_id: str
    klass: ClassState
    created: float = math.nan  # server epoch seconds of created_at (nan: not seen yet)
    due: float = 0.0  # monotonic time of the next poll
    entry: int = -1  # counter of its live heap entry (-1: none, e.g. in flight)
    failures: int = 0  # transient failures in a row
    sent: float = math.nan  # wall time of the last poll that found it pending
    probe: bool = False
    done: bool = False
    phase: float = 1.0  # where in its first gap the id enters its class's support, in [0, 1)
    rank: float = 1.0  # a cold class's id probes while rank * elapsed < _PROBING * interval


@attrs.define
class BatchSchedule:
    """What one gather knows of its classes (by key), and when each pending id is polled next.

    ``memory`` remembers each class's estimate between gathers; ``push`` schedules an id's next
    poll at a monotonic time (on the coordinator's heap). The fields after ``rng`` are its
    own state, never passed.
    """

    classes: dict[object, ClassState]
    _policy: PollPolicy
    _memory: FinishTimeMemory | None
    _push: Callable[[IdState, float], None]
    _rng: random.Random
    _start_age: float = 0.0  # the oldest age at the start seen among the answered ids
    _started: float = 0.0
    _skew_low: float = -math.inf  # bounds of (local wall clock - server clock)
    _skew_high: float = math.inf
    _skew: float = 0.0
    wall_offset: float = 0.0  # wall clock - monotonic clock

    def start(self, now: float, wall_offset: float) -> None:
        """Build each class's model (from the memory, if any) and push every id's first poll.

        Every id polls at once, but those of a remembered class other than its probes, which
        wait for the class's support (as if just created: a probe that shows them older
        brings them forward, see :meth:`next_gap`).
        """
        self._started = now
        self.wall_offset = wall_offset
        for klass in self.classes.values():
            klass.pending = len(klass.states)
            self._model(klass)
            self._first_polls(klass, klass.states, 0, now)

    def _model(self, klass: ClassState) -> None:
        policy = self._policy
        if policy.adaptive:
            klass.model = ClassModel(
                half_life=policy.half_life,
                prior=self._memory.load(klass.key) if self._memory is not None else None,
                prior_weight=policy.prior_weight,
                low_quantile=policy.window_quantile,
                high_quantile=1.0 - policy.window_quantile,
            )
            klass.support = klass.model.support(klass.pending)

    def _first_polls(
        self, klass: ClassState, states: list[IdState], before: int, now: float
    ) -> None:
        """Push the first poll of ``states``, the ids of ``klass`` after its first ``before``."""
        policy = self._policy
        first = now + policy.first_delay
        rand = self._rng.random
        # The probes of a class are its first ids, up to the count its size asks for. With
        # nothing known, every id also probes at first, fewer as time passes (`_PROBING`).
        support = klass.support
        cold = support is None
        probes = probe_count(policy, len(klass.states), cold=cold) - probe_count(
            policy, before, cold=cold
        )
        for index, state in enumerate(states):
            state.probe = index < probes
            state.phase = rand()
            state.rank = rand()
            due = first
            if support is not None and not state.probe:
                due = first + min(
                    policy.sparse_cap,
                    max(0.0, support.start - state.phase * policy.dense_interval),
                )
            self._push(state, due)

    def add(self, states: list[IdState], now: float) -> None:
        """Schedule ids that join a running gather (their classes are new or known).

        Ids of a known class are scheduled on what it has learned (no new probes beyond its
        size's count); a new class starts as the classes of :meth:`start` do.
        """
        joining: dict[ClassState, list[IdState]] = {}
        for state in states:
            joining.setdefault(state.klass, []).append(state)
        for klass, new in joining.items():
            # Finished ids leave the class as ids join, so that a long-lived gather holds (and
            # scans) only what it still polls.
            klass.states = [s for s in klass.states if not s.done]
            before = len(klass.states)
            fresh = self.classes.get(klass.key) is not klass
            self.classes[klass.key] = klass
            klass.states.extend(new)
            klass.pending += len(new)
            if fresh:
                self._model(klass)
            self._first_polls(klass, new, before, now)

    def age(self, state: IdState, now: float) -> float:
        """The id's age (seconds since its creation, on the service's clock) at ``now``."""
        return (now + self.wall_offset - self._skew) - state.created

    def answered(self, state: IdState, task: Task, sent: float) -> None:
        """Note what an answer shows of the id: its creation time (first answer)."""
        if state.created != state.created:
            created = task.created_at
            state.created = created.timestamp() if created is not None else sent + self.wall_offset
        if not task.is_terminal:
            state.sent = sent + self.wall_offset

    def next_gap(self, state: IdState, now: float) -> float:
        """The gap before the next poll of a pending id (see :func:`batch_gap`)."""
        policy = self._policy
        elapsed = now - self._started
        age = self.age(state, now)
        if not policy.adaptive:
            return growth_interval(policy, min(age, elapsed), self._rng.random())
        self._saw_age(age - elapsed, now)
        support = state.klass.support
        model = state.klass.model  # not None: the policy is adaptive
        # The dispatcher sends a poll up to `coalesce` seconds before it is due, so no gap
        # from an answer to the next send is longer than this, a loop's sleep: the longest
        # gap sets the tail of the lag (the mean gap is shorter by half of `coalesce`).
        return batch_gap(
            policy,
            age=age,
            elapsed=elapsed,
            support=support,
            probe=state.probe,
            # A class with nothing known yet: the probes thin out as ~1/elapsed (many at
            # first, when a finish would be early, few later), so that few ids finish before
            # the first finish is seen, whenever it comes (see `_PROBING`).
            probing=support is None and state.rank * elapsed < _PROBING * policy.dense_interval,
            # Where finishes crowd (``batch_gap`` reads it only inside a support).
            dense=None
            if model is None or support is None
            else model.gap(age, policy.dense_interval),
            rand=self._rng.random(),
            phase=state.phase,
        )

    def _saw_age(self, start_age: float, now: float) -> None:
        """Note an id's age at the gather's start; ids older than assumed come forward."""
        if start_age > self._start_age + 0.5 * self._policy.dense_interval:
            # The deferred first polls of remembered classes assumed younger ids.
            self._start_age = start_age
            for klass in self.classes.values():
                if klass.support is not None:
                    self._pull_forward(klass, now)

    def learn(self, state: IdState, task: Task, now: float) -> None:
        """Learn the clock skew and the class's finish times from a terminal task (any end).

        The support is recomputed for a class's first 64 finishes, then every 1/32 more (and
        at its last): a pass over a few hundred bins, never per poll, and, once its end would
        close, over the class's ids to count the overdue (:meth:`ClassModel.support`).
        """
        klass = state.klass
        klass.pending -= 1
        result = task.result
        finished = result.finished_at if result is not None else None
        model = klass.model  # None: the policy is not adaptive (nothing is learned)
        if finished is None or task.created_at is None or model is None:
            return
        finished_ts = finished.timestamp()
        # Bracket (local wall - server) between the last pending poll and this answer.
        high = now + self.wall_offset - finished_ts
        low = state.sent - finished_ts if state.sent == state.sent else -math.inf
        # Narrowed while the brackets overlap; a clock that jumped starts them over.
        if high >= self._skew_low and low <= self._skew_high:
            low = max(self._skew_low, low)
            high = min(self._skew_high, high)
        self._skew_low, self._skew_high = low, high
        self._skew = min(max(0.0, low), high)
        self._saw_age(self.age(state, now) - (now - self._started), now)
        model.add(finished_ts - task.created_at.timestamp())
        klass.learned += 1
        count = model.sketch.count
        if count > 64 and klass.learned * 32 < count and klass.pending > 0:
            return
        klass.learned = 0
        old = klass.support
        server_now = now + self.wall_offset - self._skew
        start = min(model.sketch.quantile(self._policy.window_quantile), model.sketch.low)

        def older(end: float) -> int:  # pending ids overdue for `end`: censored durations
            cutoff = server_now - overdue_after(start, end, self._policy.dense_interval)
            return sum(1 for s in klass.states if s.created <= cutoff and not s.done) - (
                state.created <= cutoff
            )

        new = model.support(klass.pending, older)
        klass.support = new
        if self._memory is not None:
            self._memory.update(klass.key, model.sketch.snapshot())
        if new is None:
            return
        half = 0.5 * self._policy.dense_interval
        if old is None or new.start < old.start - half or new.end > old.end + half:
            self._pull_forward(klass, now)

    def _pull_forward(self, klass: ClassState, now: float) -> None:
        """Bring forward the ids of a class whose support starts before their next poll.

        O(k log n) over the class's k ids, only when its support is first known or widens,
        never per poll. An id inside it is polled one gap after its last poll (at once if
        past): no gap longer than a loop's, no poll sooner.
        """
        support = klass.support
        if support is None:
            return
        moved = 0
        assumed = self._start_age + now - self._started  # the age of an id not answered yet
        interval = self._policy.dense_interval
        start = support.start
        for state in klass.states:
            if state.entry < 0:  # in flight or done (a done id has no live entry)
                continue
            age = self.age(state, now) if state.created == state.created else assumed
            wait = start - state.phase * interval - age
            due = now + max(0.0, wait)
            if wait <= 0.0 and state.sent == state.sent:  # inside: one gap after the last
                due = max(due, state.sent - self.wall_offset + interval)
            if due < state.due:
                self._push(state, due)
                moved += 1
        logger.debug(
            "gather_until_done: class %r finishes from %.2fs of age (%.0f samples); %d ids"
            " moved up",
            klass.key,
            support.start,
            support.samples,
            moved,
        )
