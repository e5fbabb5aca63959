"""The finish-time models of ``gather_until_done`` (``_schedule``) and their wiring."""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from videogen_async import InvalidRequestError, TaskPollError
from videogen_async._contract._models import Task, TaskResult
from videogen_async._waiting._cohorts import _PROBING, BatchSchedule, ClassState, IdState
from videogen_async._waiting._gather import gather_until_done
from videogen_async._waiting._policy import PollPolicy
from videogen_async._waiting._schedule import (
    ClassModel,
    FinishSketch,
    FinishTimeStats,
    InMemoryFinishTimes,
    Support,
    batch_gap,
    overdue_after,
)

from .test_gather import FakeClient, collect, ids

durations_st = st.lists(
    st.floats(min_value=0.1, max_value=10_000, allow_nan=False), min_size=1, max_size=200
)

GAPS = PollPolicy(
    dense_interval=1.0,
    min_interval=1.0,
    sparse_growth=2.0,
    sparse_cap=30.0,
    max_interval=15.0,
    overdue_growth=0.5,
    jitter=0.1,
)


# -- the sketch ---------------------------------------------------------------------------------


@given(durations_st, st.floats(min_value=0.0, max_value=1.0))
def test_sketch_quantile_is_within_one_bin_of_the_exact_one(
    durations: list[float], q: float
) -> None:
    sketch = FinishSketch(half_life=1e12)  # no decay: the exact quantiles apply
    for d in durations:
        sketch.add(d)
    ordered = sorted(durations)
    exact_low = ordered[max(0, math.ceil(q * len(ordered)) - 1)]
    got = sketch.quantile(q)
    assert ordered[0] / 1.021 <= got <= ordered[-1] * 1.021
    assert got == pytest.approx(exact_low, rel=0.05) or ordered[0] < got < ordered[-1] * 1.021


@given(durations_st)
def test_support_spans_every_observation_once_closed(durations: list[float]) -> None:
    model = ClassModel(half_life=1e12)
    for d in durations:
        model.add(d)
    support = model.support(pending=0)
    assert support is not None
    assert support.start <= min(durations)
    assert support.end >= max(durations)
    assert support.samples == pytest.approx(len(durations))


def test_support_stays_open_while_most_of_the_class_is_pending() -> None:
    model = ClassModel()
    model.add(30.0)
    support = model.support(pending=100)
    assert support is not None
    assert support.end == math.inf
    assert ClassModel().support(pending=5) is None


def _ages_older(ages: list[float], start: float) -> Callable[[float], int]:
    """Counts the pending ids (by age) overdue for a given end, as the gather does."""
    return lambda end: sum(1 for age in ages if age > overdue_after(start, end, 1.0))


def test_support_end_stays_open_while_pending_ids_are_older_than_it() -> None:
    # Durations 25-35 s; half the batch has been seen finish, the short half (right-censoring:
    # detection behind). 30 of the 100 still pending are already 31-35 s old, 15 of them
    # past the end the finishes alone give (~30 s) and its margin: that end is too early,
    # and must not send them into the back-off.
    model = ClassModel(half_life=1e12)
    for i in range(100):
        model.add(25.0 + 5.0 * i / 100)
    alone = model.support(pending=100)
    assert alone is not None
    assert alone.end < 31.0  # closed, on the finishes alone
    pending_ages = [31.0 + 4.0 * i / 30 for i in range(30)] + [20.0] * 70
    support = model.support(pending=100, older=_ages_older(pending_ages, 25.0))
    assert support is not None
    assert support.end == math.inf
    assert support.start == alone.start
    # Once those are seen finish, the end closes past them.
    for age in pending_ages[:30]:
        model.add(age)
    closed = model.support(pending=70, older=_ages_older([20.0] * 70, 25.0))
    assert closed is not None
    assert closed.end >= max(pending_ages)


def test_support_end_closes_over_a_few_stragglers() -> None:
    model = ClassModel(half_life=1e12)
    for i in range(200):
        model.add(25.0 + 10.0 * i / 200)
    # One stuck id of the class's 201 (under the 2 % the end leaves out): still closed.
    support = model.support(pending=1, older=_ages_older([300.0], 25.0))
    assert support is not None
    assert 35.0 <= support.end < 40.0


def test_remembered_support_end_opens_when_the_class_got_slower() -> None:
    memory = InMemoryFinishTimes()
    earlier = FinishSketch()
    for i in range(100):
        earlier.add(10.0 + i / 100)
    memory.update("k", earlier.snapshot())
    model = ClassModel(prior=memory.load("k"))
    support = model.support(pending=50)
    assert support is not None
    assert support.end < 12.0
    # Nothing finished yet, and 40 of the 50 ids are already 15 s old: stale.
    opened = model.support(pending=50, older=_ages_older([15.0] * 40 + [5.0] * 10, 10.0))
    assert opened is not None
    assert opened.end == math.inf


@given(durations_st)
# Half the weight on one bin: the median lies on that bin's edge.
@example([2.0, 1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 3.0, 1.0, 2.0, 2.0, 1.0])
@example([3.0, 1.0, 2.0, 3.0, 1.0, 3.0, 3.0, 1.0, 3.0, 1.0, 1.0, 3.0])
def test_snapshot_round_trip_keeps_the_quantiles(durations: list[float]) -> None:
    sketch = FinishSketch(half_life=1e12)
    for d in durations:
        sketch.add(d)
    stats = sketch.snapshot()
    assert stats.count == len(durations)
    again = FinishSketch(half_life=1e12, prior=stats, prior_weight=math.inf)
    for q in (0.02, 0.5, 0.98):
        assert again.quantile(q) == pytest.approx(sketch.quantile(q))


def test_prior_counts_for_at_most_prior_weight_observations() -> None:
    old = FinishSketch()
    for _ in range(1000):
        old.add(30.0)
    sketch = FinishSketch(prior=old.snapshot(), prior_weight=16)
    assert sketch.weight == pytest.approx(16, rel=0.01)
    assert sketch.count == 0
    assert FinishTimeStats(bins=(), count=0).count == 0
    with pytest.raises(ValueError, match="count"):
        FinishTimeStats(bins=(), count=-1)


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_memory_follows_a_service_that_gets_slower_or_faster(factor: float) -> None:
    """After many runs at 30 s, the service takes ``factor`` times as long: the remembered
    median follows within 20 observations of the new kind, across gathers too."""
    memory = InMemoryFinishTimes()
    for _ in range(5):  # five earlier gathers of 300 tasks at 30 s
        model = ClassModel(prior=memory.load("k"))
        for _ in range(300):
            model.add(30.0)
        memory.update("k", model.sketch.snapshot())
    new = 30.0 * factor
    seen = 0
    while True:  # gathers of 10 tasks each, each starting from the memory
        model = ClassModel(prior=memory.load("k"))
        for _ in range(10):
            model.add(new)
            seen += 1
        memory.update("k", model.sketch.snapshot())
        median = ClassModel(prior=memory.load("k")).sketch.quantile(0.5)
        if median == pytest.approx(new, rel=0.03):
            break
        assert seen < 40, f"still {median:.1f}s after {seen} observations at {new:g}s"
    support = ClassModel(prior=memory.load("k")).support(pending=300)
    assert support is not None
    assert support.end < math.inf
    assert support.start <= new <= support.end


def test_decay_follows_a_change_within_one_run() -> None:
    model = ClassModel(half_life=32)
    for _ in range(500):
        model.add(10.0)
    for _ in range(40):
        model.add(20.0)
    assert model.sketch.quantile(0.5) == pytest.approx(20.0, rel=0.03)


def test_in_memory_store_is_bounded() -> None:
    memory = InMemoryFinishTimes(max_keys=2)
    stats = FinishTimeStats(bins=((1, 1.0),), count=1)
    for key in ("a", "b", "c"):
        memory.update(key, stats)
    assert memory.load("a") is None
    assert memory.load("c") == stats
    assert len(memory) == 2
    with pytest.raises(ValueError, match="max_keys"):
        InMemoryFinishTimes(max_keys=0)


# -- the next poll ------------------------------------------------------------------------------

supports = st.builds(
    lambda start, width, closed: Support(
        start=start, end=start + width if closed else math.inf, samples=10
    ),
    st.floats(min_value=0.0, max_value=500),
    st.floats(min_value=0.0, max_value=500),
    st.booleans(),
)


@given(
    st.one_of(st.none(), supports),
    st.floats(min_value=0.0, max_value=2000),
    st.floats(min_value=0.0, max_value=2000),
    st.booleans(),
    st.floats(min_value=0.0, max_value=0.999),
)
@settings(max_examples=300)
def test_batch_gap_bounds(
    support: Support | None, age: float, elapsed: float, probe: bool, rand: float
) -> None:
    delay = batch_gap(GAPS, age=age, elapsed=elapsed, support=support, probe=probe, rand=rand)
    assert 0.0 <= delay <= max(GAPS.sparse_cap, GAPS.max_interval) * 1.1
    if support is None:
        return
    if support.start - GAPS.dense_interval <= age <= support.end:
        # Inside the observed finish times: never sparser than a loop at `interval`.
        assert delay <= GAPS.dense_interval
    if age < support.start - GAPS.dense_interval:
        # Before them: never past the start.
        assert age + delay <= support.start


def test_batch_gap_spends_nothing_before_a_known_support() -> None:
    support = Support(start=30.0, end=32.0, samples=300)
    delay = batch_gap(GAPS, age=0.5, elapsed=0.5, support=support, probe=False, rand=0.0)
    assert delay == pytest.approx(28.5)
    probe = batch_gap(GAPS, age=0.5, elapsed=0.5, support=support, probe=True, rand=0.0)
    assert probe == pytest.approx(1.0)  # a probe keeps looking on the growing schedule
    late = batch_gap(GAPS, age=200.0, elapsed=200.0, support=support, probe=False, rand=0.0)
    assert late == GAPS.max_interval  # long overdue: the gaps grew


# -- wiring into gather_until_done ------------------------------------------------------------

SLOW_START = PollPolicy(
    min_interval=0.01,
    max_interval=0.1,
    dense_interval=0.01,
    sparse_cap=1.0,
)


async def test_classes_are_validated_before_any_request() -> None:
    fake = FakeClient({"a": 0.0})
    with pytest.raises(InvalidRequestError, match="hashable"):
        gather_until_done(fake, ["a"], classes={"a": ["unhashable"]})  # type: ignore[dict-item]
    with pytest.raises(InvalidRequestError, match="classes: must be a mapping"):
        gather_until_done(fake, ["a"], classes=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="hashable"):
        gather_until_done(fake, ["a"], classes=lambda _i: {})
    assert fake.requests == 0


async def test_a_failed_batch_is_learned_like_a_succeeded_one() -> None:
    """All tasks end `failed` at the same time: the first failure pulls every id forward."""
    names = ids(30)
    fake = FakeClient(dict.fromkeys(names, 0.3), statuses=dict.fromkeys(names, "failed"))
    policy = PollPolicy(min_interval=0.01, max_interval=5.0, dense_interval=0.01, sparse_cap=5.0)
    started = time.time()
    async with gather_until_done(fake, names, poll_policy=policy) as results:
        got = await collect(results)
    seen_all = time.time()
    assert {t.status for t in got} == {"failed"}  # type: ignore[union-attr]
    # Without learning from failures the non-probes would sleep on gaps growing toward 5 s.
    assert seen_all - started < 2.0


async def test_second_batch_of_a_known_class_starts_from_memory() -> None:
    memory = InMemoryFinishTimes()
    requests = []
    for _ in range(2):
        names = ids(40)
        fake = FakeClient(dict.fromkeys(names, 0.5))
        async with gather_until_done(
            fake,
            names,
            poll_policy=SLOW_START,
            classes=dict.fromkeys(names, ("model-a", 5)),
            finish_times=memory,
        ) as results:
            got = await collect(results)
        assert len(got) == 40
        requests.append(fake.requests)
        first_at = fake.first_at
    assert memory.load(("model-a", 5)) is not None
    assert requests[1] < requests[0], requests
    # The second time, the ids other than the probes (the first 8) wait for the remembered
    # finish times instead of probing: a first poll just before 0.5 s (without the memory:
    # polls at 0, 0.01, 0.03, 0.09, 0.19, 0.29, ... of age). Asked of the first poll's time,
    # which a busy machine only makes later, not of a count of polls, which it can raise.
    assert min(first_at[i] for i in names[8:]) >= 0.25, first_at


async def test_each_class_is_probed_and_learned_on_its_own() -> None:
    fast, slow = ids(20, "f"), ids(20, "s")
    durations = {**dict.fromkeys(fast, 0.05), **dict.fromkeys(slow, 0.4)}
    fake = FakeClient(durations)
    memory = InMemoryFinishTimes()
    async with gather_until_done(
        fake,
        fast + slow,
        poll_policy=SLOW_START,
        classes=lambda i: i[0],
        finish_times=memory,
    ) as results:
        got = await collect(results)
    assert len(got) == 40
    fast_stats, slow_stats = memory.load("f"), memory.load("s")
    assert fast_stats is not None
    assert slow_stats is not None
    assert ClassModel(prior=fast_stats).sketch.quantile(0.5) < 0.1
    assert ClassModel(prior=slow_stats).sketch.quantile(0.5) > 0.3
    per_id = Counter(fake.calls)
    assert max(per_id[i] for i in slow) < 60  # the slow class was not polled at the fast pace


async def test_remembered_class_of_old_finished_ids_is_not_deferred() -> None:
    """The memory says 3 s, so fresh ids would first be polled near 3 s of age; but these ids
    finished long ago, which the probes show: the others are polled at once, well before."""
    memory = InMemoryFinishTimes()
    model = ClassModel()
    for _ in range(50):
        model.add(3.0)
    memory.update(None, model.sketch.snapshot())
    names = ids(40)
    fake = FakeClient(dict.fromkeys(names, 3.0))
    fake.start -= 60.0  # created a minute ago, finished at 3 s
    policy = PollPolicy(min_interval=0.01, max_interval=0.1, dense_interval=0.01, sparse_cap=30)
    async with gather_until_done(
        fake, names, poll_policy=policy, finish_times=memory, timeout=1.5, return_exceptions=True
    ) as results:
        got = await collect(results)
    assert all(not isinstance(t, TaskPollError) for t in got), got
    assert fake.requests == 40


# -- where finishes crowd, and a class with nothing known ---------------------------------------


def _remembered(durations: list[float]) -> ClassModel:
    sketch = FinishSketch(half_life=1e12)
    for d in durations:
        sketch.add(d)
    return ClassModel(prior=sketch.snapshot())


def test_gap_shrinks_where_remembered_finishes_crowd() -> None:
    model = _remembered([30.0] * 300)  # all at once: one 2 % bin around 30 s
    crowd = model.gap(30.0, 1.0)
    assert 0.25 <= crowd < 0.6
    assert model.gap(20.0, 1.0) == 1.0  # nothing finishes there
    assert model.gap(40.0, 1.0) == 1.0  # nothing left to finish
    assert ClassModel().gap(30.0, 1.0) == 1.0  # nothing remembered: a loop's gap


def test_gap_of_a_uniform_spread_is_the_interval_but_at_its_end() -> None:
    model = _remembered([5.0 + 55.0 * i / 999 for i in range(1000)])
    assert all(model.gap(age, 1.0) == 1.0 for age in (5.0, 20.0, 40.0, 50.0))
    assert model.gap(59.5, 1.0) < 1.0  # the last few pending ids are about to finish


@given(st.lists(st.floats(min_value=0.5, max_value=500), min_size=1, max_size=100))
def test_gap_is_between_a_quarter_and_one_interval(durations: list[float]) -> None:
    model = _remembered(durations)
    for age in (0.0, min(durations), sum(durations) / len(durations), max(durations)):
        assert 0.25 - 1e-9 <= model.gap(age, 1.0) <= 1.0


def test_gap_is_used_inside_the_support_only() -> None:
    support = Support(start=29.5, end=30.5, samples=300)
    inside = batch_gap(
        GAPS, age=30.0, elapsed=30.0, support=support, probe=False, rand=0.5, dense=0.3
    )
    assert inside == pytest.approx(0.3)
    before = batch_gap(
        GAPS, age=10.0, elapsed=10.0, support=support, probe=False, rand=0.5, dense=0.3
    )
    assert before > 1.0


def test_a_cold_id_probes_while_it_is_probing() -> None:
    cold = {"age": 5.0, "elapsed": 5.0, "support": None, "rand": 0.0}
    assert batch_gap(GAPS, probe=False, probing=True, **cold) == GAPS.dense_interval
    waiting = batch_gap(GAPS, probe=False, probing=False, **cold)
    assert waiting == min(GAPS.sparse_cap, 2 * GAPS.max_interval)


def test_a_cold_class_probes_with_fewer_ids_as_time_passes() -> None:
    """Every id probes at first; after `t` seconds about `_PROBING / t` of them, and
    `2 sqrt(n)` of the class (at most 64) throughout: the polls until a late first finish
    grow as the log of its time, plus the fixed probes'."""
    policy = PollPolicy(jitter=0.0)
    klass = ClassState("k")
    klass.states = [IdState(f"id{i}", klass) for i in range(2000)]
    pushed: dict[str, float] = {}
    schedule = BatchSchedule(
        {"k": klass},
        policy=policy,
        memory=None,
        push=lambda state, due: pushed.__setitem__(state.task_id, due),
        rng=random.Random(7),
    )
    schedule.start(0.0, 0.0)
    assert set(pushed.values()) == {0.0}  # everyone is polled at once
    for state in klass.states:
        state.created = 0.0

    def probing(elapsed: float) -> float:
        gaps = [schedule.next_gap(s, elapsed) for s in klass.states]
        return sum(g <= policy.dense_interval for g in gaps) / len(gaps)

    fixed = 64 / 2000
    assert probing(0.2) == 1.0
    share = _PROBING / 2.0
    assert probing(2.0) == pytest.approx(share + fixed * (1 - share), abs=0.04)
    share = _PROBING / 20.0
    assert probing(20.0) == pytest.approx(share + fixed * (1 - share), abs=0.01)
    assert probing(1000.0) == pytest.approx(fixed, abs=0.002)


def test_pull_forward_keeps_a_loops_gap_from_each_ids_last_poll() -> None:
    """The first finish brings the class in: an id polled long ago is polled at once, one
    polled half a gap ago one gap after that poll (not again at once)."""
    policy = PollPolicy(jitter=0.0)
    klass = ClassState("k")
    first, recent, old = (IdState(name, klass) for name in ("first", "recent", "old"))
    klass.states = [first, recent, old]
    pushed: dict[str, float] = {}

    def push(state: IdState, due: float) -> None:
        state.due, state.entry = due, 1
        pushed[state.task_id] = due

    wall = 1000.0  # wall clock - monotonic clock
    schedule = BatchSchedule(
        {"k": klass}, policy=policy, memory=None, push=push, rng=random.Random(3)
    )
    schedule.start(0.0, wall)
    for state, sent in ((first, 9.0), (recent, 9.5), (old, 0.0)):
        state.created = wall  # all created as the gather began
        state.sent = sent + wall  # the last poll that saw it running
        push(state, 30.0)  # asleep until well past the class's first finish
    pushed.clear()
    finished = Task(
        task_id="first",
        status="succeeded",
        created_at=datetime.fromtimestamp(wall, timezone.utc),
        result=TaskResult(
            video_url="https://v/1.mp4", finished_at=datetime.fromtimestamp(wall + 10, timezone.utc)
        ),
    )
    first.entry = -1  # its poll is the one being answered
    schedule.learn(first, finished, 10.0)
    assert pushed == {"recent": pytest.approx(10.5), "old": pytest.approx(10.0)}
