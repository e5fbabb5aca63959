"""The poll policy's pure arithmetic, and the single-object wait helpers (with fakes)."""

from __future__ import annotations

import itertools
import math
import time
from datetime import datetime, timezone
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from videogen_async._contract._exceptions import (
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    TaskFailedError,
    WaitTimeoutError,
)
from videogen_async._contract._models import Task, TaskResult
from videogen_async._waiting._polling import (
    FinishWindow,
    PollPolicy,
    aimd_decrease,
    aimd_increase,
    batch_delay,
    dense_interval,
    error_delay,
    estimate_window,
    growth_interval,
    is_transient,
    poll_until,
    probe_count,
    rate_limit_pause,
    recovered_rate,
    sparse_interval,
    wait_for_task,
)

FAST = PollPolicy(
    min_interval=0.005,
    max_interval=0.02,
    error_initial=0.002,
    error_max=0.01,
    rate_limit_initial=0.005,
    rate_limit_max=0.02,
)

rand = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
age = st.floats(min_value=-10.0, max_value=1e6)
positive = st.floats(min_value=0.001, max_value=1000.0)


@st.composite
def policies(draw: st.DrawFn) -> PollPolicy:
    min_interval = draw(positive)
    return PollPolicy(
        first_delay=draw(st.floats(min_value=0, max_value=10)),
        min_interval=min_interval,
        max_interval=min_interval + draw(st.floats(min_value=0, max_value=1000)),
        growth=draw(st.floats(min_value=0, max_value=5)),
        jitter=draw(st.floats(min_value=0, max_value=0.5)),
        dense_interval=draw(positive),
        relative_interval=draw(st.floats(min_value=0, max_value=1)),
        sparse_growth=draw(st.floats(min_value=0, max_value=5)),
        sparse_cap=draw(positive),
        window_quantile=draw(st.floats(min_value=0, max_value=0.5)),
        overdue_growth=draw(st.floats(min_value=0, max_value=5)),
        error_initial=draw(positive),
        error_max=draw(positive),
        rate_limit_initial=draw(positive),
        rate_limit_max=draw(positive),
        rate_decrease=draw(st.floats(min_value=0.01, max_value=1)),
        rate_recovery=draw(positive),
    )


# -- the policy object ------------------------------------------------------------------------


def test_policy_is_frozen_and_has_sane_defaults() -> None:
    policy = PollPolicy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.dense_interval = 2  # type: ignore[misc]
    assert policy.first_delay <= 1
    assert policy.dense_interval <= 1  # inside the finish times, never sparser than 1 s
    assert policy.min_interval <= policy.max_interval


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_interval": 0},
        {"max_interval": 0.5, "min_interval": 1},
        {"jitter": 0.6},
        {"dense_interval": -1},
        {"probes": 0},
        {"max_consecutive_failures": 0},
        {"rate_decrease": 0},
        {"rate_decrease": 1.5},
        {"window_quantile": 0.9},
    ],
)
def test_policy_rejects_bad_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PollPolicy(**kwargs)


# -- delays -----------------------------------------------------------------------------------


@given(policies(), age, rand)
def test_growth_interval_bounds(policy: PollPolicy, a: float, r: float) -> None:
    delay = growth_interval(policy, a, r)
    assert policy.min_interval * (1 - policy.jitter) - 1e-9 <= delay <= policy.max_interval


def test_growth_interval_grows_with_age_up_to_the_cap() -> None:
    policy = PollPolicy(jitter=0.0, min_interval=1.0, growth=0.1, max_interval=15.0)
    assert growth_interval(policy, 0, 0.5) == 1.0
    assert growth_interval(policy, 50, 0.5) == pytest.approx(5.0)
    assert growth_interval(policy, 10_000, 0.5) == 15.0
    jittery = attrs.evolve(policy, jitter=0.2)
    assert growth_interval(jittery, 50, 0.0) == pytest.approx(4.0)
    assert growth_interval(jittery, 50, 0.9999) == pytest.approx(6.0, rel=1e-3)


@given(policies(), age, rand)
def test_dense_and_sparse_interval_bounds(policy: PollPolicy, a: float, r: float) -> None:
    j = policy.jitter
    dense = dense_interval(policy, a, r)
    assert policy.dense_interval * (1 - j) - 1e-9 <= dense
    assert dense <= max(policy.dense_interval, policy.max_interval) * (1 + j) + 1e-9
    sparse = sparse_interval(policy, a, r)
    assert policy.min_interval * (1 - j) - 1e-9 <= sparse <= policy.max_interval


@given(
    policies(),
    age,
    st.floats(min_value=0, max_value=1e6),
    st.one_of(st.none(), st.tuples(st.floats(0, 1e5), st.floats(0, 1e5), st.booleans())),
    st.booleans(),
    rand,
)
def test_batch_delay_bounds(
    policy: PollPolicy,
    a: float,
    elapsed: float,
    window_spec: tuple[float, float, bool] | None,
    probe: bool,
    r: float,
) -> None:
    window = None
    if window_spec is not None:
        start, width, open_end = window_spec
        window = FinishWindow(start, math.inf if open_end else start + width, 1)
    delay = batch_delay(policy, age=a, elapsed=elapsed, window=window, probe=probe, rand=r)
    assert delay >= 0
    longest = max(policy.max_interval, policy.dense_interval) * (1 + policy.jitter)
    assert delay <= longest + 1e-9
    if window is not None and a < window.start:
        assert delay <= policy.sparse_cap
        assert delay <= window.start - a + 1e-9  # never sleeps past the window's start


def test_batch_delay_phases() -> None:
    policy = PollPolicy(
        jitter=0.0,
        dense_interval=0.8,
        min_interval=1.0,
        max_interval=15.0,
        relative_interval=0,
        sparse_growth=1.0,
    )
    window = FinishWindow(start=24.0, end=45.0, samples=10)
    kw: dict[str, Any] = {"elapsed": 1e9, "probe": False, "rand": 0.5}
    # Before anything finished: probes are dense, the others grow with age.
    assert batch_delay(policy, age=10, window=None, probe=True, elapsed=1e9, rand=0.5) == 0.8
    assert batch_delay(policy, age=10, window=None, **kw) == 10.0
    assert batch_delay(policy, age=1, window=None, **kw) == 1.0
    # Before the window: sleep until it starts (at most the sparse gap).
    assert batch_delay(policy, age=20, window=window, **kw) == pytest.approx(4.0)
    assert batch_delay(policy, age=5, window=window, **kw) == 5.0
    # Inside: dense. Past the end: growing again.
    assert batch_delay(policy, age=30, window=window, **kw) == 0.8
    assert batch_delay(policy, age=45, window=window, **kw) == 0.8
    assert batch_delay(policy, age=55, window=window, **kw) == 5.0
    assert batch_delay(policy, age=500, window=window, **kw) == 15.0


def test_batch_delay_trusts_the_local_clock_for_growth() -> None:
    # A service clock far ahead (or a sandbox running 100x faster) makes ages huge; the
    # growing gaps then follow the local elapsed time instead, so polls only get denser.
    policy = PollPolicy(jitter=0.0, sparse_growth=1.0)
    far = batch_delay(policy, age=1e6, elapsed=2.0, window=None, probe=False, rand=0.5)
    assert far == 2.0
    window = FinishWindow(start=1e6 + 30, end=math.inf, samples=1)
    ahead = batch_delay(policy, age=1e6, elapsed=3.0, window=window, probe=False, rand=0.5)
    assert ahead == 3.0


@given(policies(), st.integers(min_value=1, max_value=10_000), rand, st.none() | positive)
def test_error_delay_bounds(policy: PollPolicy, failures: int, r: float, ra: float | None) -> None:
    delay = error_delay(policy, failures, r, ra)
    ceiling = min(policy.error_max, policy.error_initial * 2.0 ** min(failures - 1, 62))
    assert ceiling / 2 - 1e-9 <= delay
    assert delay <= max(ceiling, ra or 0.0)
    if ra is not None:
        assert delay >= ra


def test_error_delay_doubles_up_to_the_cap() -> None:
    policy = PollPolicy(error_initial=1.0, error_max=30.0)
    assert [error_delay(policy, n, 0.999999) for n in (1, 2, 3, 6, 50)] == pytest.approx(
        [1, 2, 4, 30, 30], rel=1e-5
    )


@given(policies(), st.integers(min_value=1, max_value=10_000), rand, st.none() | positive)
def test_rate_limit_pause_follows_retry_after(
    policy: PollPolicy, n: int, r: float, ra: float | None
) -> None:
    pause = rate_limit_pause(policy, n, r, ra)
    if ra is not None:
        assert pause == ra
    else:
        assert 0 < pause <= policy.rate_limit_max


def test_aimd() -> None:
    assert aimd_decrease(32, 0.5) == 16
    assert aimd_decrease(1.5, 0.5) == 1
    limit = 4.0
    steps = 0
    while limit < 8:
        limit = aimd_increase(limit, 8)
        steps += 1
    assert limit == 8
    assert 15 <= steps <= 30  # about one per round of `limit` successes
    assert aimd_increase(8, 8) == 8


@given(policies(), positive, st.floats(min_value=0, max_value=1e5))
def test_recovered_rate_grows_then_lifts(policy: PollPolicy, reduced: float, t: float) -> None:
    rate = recovered_rate(policy, reduced, t)
    assert rate >= reduced
    later = recovered_rate(policy, reduced, t + 1)
    assert later >= rate
    if rate != math.inf:
        assert rate < reduced / policy.rate_decrease


def test_recovered_rate_example() -> None:
    policy = PollPolicy(rate_decrease=0.5, rate_recovery=0.1)
    assert recovered_rate(policy, 100, 0) == 100
    assert recovered_rate(policy, 100, 5) == pytest.approx(150)
    assert recovered_rate(policy, 100, 10) == math.inf


# -- the finish window ------------------------------------------------------------------------


def test_probe_count() -> None:
    policy = PollPolicy()
    assert probe_count(policy, 1) == 1
    assert probe_count(policy, 10) == 8
    assert probe_count(policy, 300) == 17
    assert probe_count(policy, 100_000) == 64
    assert probe_count(attrs.evolve(policy, probes=3), 100) == 3
    assert probe_count(attrs.evolve(policy, adaptive=False), 100) == 0


def test_estimate_window() -> None:
    policy = PollPolicy(dense_interval=1.0, window_quantile=0.02)
    assert estimate_window(policy, [], 100) is None
    assert estimate_window(attrs.evolve(policy, adaptive=False), [30.0], 100) is None
    one = estimate_window(policy, [26.0], 100)
    assert one == FinishWindow(start=25.0, end=math.inf, samples=1)
    half = [25.0 + i * 0.1 for i in range(50)]
    window = estimate_window(policy, half, 100)
    assert window is not None
    assert window.start == pytest.approx(25.0 - 1.0 + 0.1)  # the 2 % quantile, one gap early
    high = half[-1]
    assert window.end == pytest.approx(high + max(high - half[1], 0.25 * high))


@given(
    st.lists(st.floats(min_value=0, max_value=1e5), min_size=1, max_size=200),
    st.integers(min_value=1, max_value=400),
)
def test_estimate_window_properties(durations: list[float], total: int) -> None:
    durations.sort()
    policy = PollPolicy()
    window = estimate_window(policy, durations, total)
    assert window is not None
    assert 0 <= window.start <= durations[0] + (durations[-1] - durations[0])
    assert window.start <= durations[-1]
    assert window.end >= durations[-1]
    assert window.samples == len(durations)


# -- classification ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (APIConnectionError("reset"), True),
        (APITimeoutError("slow"), True),
        (ServerError("x", status_code=502), True),
        (RateLimitError("x", status_code=429), True),
        (APIResponseError("<html>"), True),
        (APIStatusError("x", status_code=408), True),
        (NotFoundError("x", status_code=404), False),
        (AuthenticationError("x", status_code=401), False),
        (PermissionDeniedError("x", status_code=403), False),
        (BadRequestError("x", status_code=400), False),
        (ValueError("bug"), False),
    ],
)
def test_is_transient(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


# -- wait helpers -----------------------------------------------------------------------------


class _Tasks:
    def __init__(self, owner: OneTaskClient) -> None:
        self._owner = owner

    async def get(self, task_id: str) -> Task:
        return self._owner.next(task_id)


class OneTaskClient:
    """Answers a script of results (a Task, an exception, or a status string) in order."""

    def __init__(self, script: list[Any], *, created: datetime | None = None) -> None:
        self.script = list(script)
        self.created = created or datetime.now(timezone.utc)
        self.calls: list[float] = []
        self.options: list[dict[str, Any]] = []
        self.tasks = _Tasks(self)

    def with_options(self, **options: Any) -> OneTaskClient:
        self.options.append(options)
        return self

    def next(self, task_id: str) -> Task:
        self.calls.append(time.monotonic())
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, str):
            result = None
            if step in ("succeeded", "failed", "error"):
                result = TaskResult(error_message="bad" if step != "succeeded" else None)
            return Task(task_id=task_id, status=step, created_at=self.created, result=result)
        return step  # type: ignore[no-any-return]


async def test_wait_for_task_returns_the_terminal_task() -> None:
    client = OneTaskClient(["running", "running", "succeeded"])
    task = await wait_for_task(client, "t1", timeout=5, raise_on_failure=True, poll_policy=FAST)
    assert task.status == "succeeded"
    assert len(client.calls) == 3
    assert client.options == [{"max_retries": 0}]


async def test_wait_for_task_transient_errors_back_off_and_continue() -> None:
    client = OneTaskClient(
        [
            ServerError("502", status_code=502),
            APIConnectionError("reset"),
            APIResponseError("<html>"),
            "succeeded",
        ]
    )
    task = await wait_for_task(client, "t1", timeout=5, raise_on_failure=False, poll_policy=FAST)
    assert task.is_succeeded
    assert len(client.calls) == 4


async def test_wait_for_task_honours_retry_after() -> None:
    limited = RateLimitError("slow down", status_code=429)
    limited.retry_after = 0.05
    client = OneTaskClient([limited, "succeeded"])
    await wait_for_task(client, "t1", timeout=5, raise_on_failure=False, poll_policy=FAST)
    assert client.calls[1] - client.calls[0] >= 0.045


async def test_wait_for_task_raises_permanent_errors() -> None:
    client = OneTaskClient([NotFoundError("no such task", status_code=404)])
    with pytest.raises(NotFoundError):
        await wait_for_task(client, "t1", timeout=5, raise_on_failure=False, poll_policy=FAST)
    assert len(client.calls) == 1


async def test_wait_for_task_gives_up_after_repeated_failures() -> None:
    policy = attrs.evolve(FAST, max_consecutive_failures=3)
    client = OneTaskClient([ServerError("503", status_code=503)])
    with pytest.raises(ServerError):
        await wait_for_task(client, "t1", timeout=5, raise_on_failure=False, poll_policy=policy)
    assert len(client.calls) == 3


async def test_wait_for_task_timeout_carries_the_last_state() -> None:
    client = OneTaskClient(["running"])
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as caught:
        await wait_for_task(client, "t1", timeout=0.05, raise_on_failure=False, poll_policy=FAST)
    assert 0.045 <= time.monotonic() - started < 1
    assert isinstance(caught.value.last, Task)
    assert caught.value.last.status == "running"
    assert caught.value.pending == ("t1",)
    assert caught.value.timeout == 0.05
    assert "t1" in str(caught.value)


async def test_wait_for_task_timeout_before_any_answer() -> None:
    client = OneTaskClient([APIConnectionError("down")])
    with pytest.raises(WaitTimeoutError) as caught:
        await wait_for_task(client, "t1", timeout=0.03, raise_on_failure=False, poll_policy=FAST)
    assert caught.value.last is None


@pytest.mark.parametrize("status", ["failed", "error"])
async def test_wait_for_task_failure(status: str) -> None:
    client = OneTaskClient([status])
    task = await wait_for_task(client, "t1", timeout=1, raise_on_failure=False, poll_policy=FAST)
    assert task.status == status
    with pytest.raises(TaskFailedError) as caught:
        await wait_for_task(client, "t1", timeout=1, raise_on_failure=True, poll_policy=FAST)
    assert caught.value.task.status == status


async def test_wait_for_task_uses_the_client_policy_by_default() -> None:
    client = OneTaskClient(["running", "succeeded"])
    client.poll_policy = attrs.evolve(FAST, first_delay=0.05)  # type: ignore[attr-defined]
    started = time.monotonic()
    await wait_for_task(client, "t1", timeout=1, raise_on_failure=False, poll_policy=None)
    assert client.calls[0] - started >= 0.045


async def test_wait_for_task_gaps_grow_with_the_task_age() -> None:
    # A task created an hour ago is polled at the cap, not every min_interval.
    policy = PollPolicy(min_interval=0.001, growth=0.1, max_interval=0.05, jitter=0.0)
    old = datetime.fromtimestamp(time.time() - 3600, timezone.utc)
    client = OneTaskClient(["running", "running", "succeeded"], created=old)
    await wait_for_task(client, "t1", timeout=2, raise_on_failure=False, poll_policy=policy)
    gaps = [b - a for a, b in itertools.pairwise(client.calls)]
    assert min(gaps) >= 0.045


async def test_poll_until_returns_the_done_value() -> None:
    values = iter([1, 2, 3, 4])

    async def fetch() -> int:
        return next(values)

    assert await poll_until(fetch, lambda v: v >= 3, timeout=1, poll_policy=FAST, what="x") == 3


async def test_poll_until_timeout_carries_the_last_value() -> None:
    async def fetch() -> str:
        return "draft"

    with pytest.raises(WaitTimeoutError) as caught:
        await poll_until(fetch, lambda v: False, timeout=0.03, poll_policy=FAST, what="project p1")
    assert caught.value.last == "draft"
    assert caught.value.pending == ("project p1",)
    assert "project p1" in str(caught.value)


async def test_poll_until_without_timeout_and_default_policy() -> None:
    calls = []

    async def fetch() -> int:
        calls.append(1)
        return len(calls)

    assert await poll_until(fetch, lambda v: v >= 1, timeout=None, poll_policy=None, what="x") == 1


async def test_poll_until_lets_done_raise() -> None:
    async def fetch() -> int:
        return 1

    def done(value: int) -> bool:
        raise LookupError("project failed")

    with pytest.raises(LookupError):
        await poll_until(fetch, done, timeout=1, poll_policy=FAST, what="x")


async def test_poll_until_transient_then_permanent() -> None:
    script: list[BaseException] = [
        APITimeoutError("slow"),
        APIStatusError("timeout", status_code=408),
        PermissionDeniedError("no", status_code=403),
    ]

    async def fetch() -> int:
        raise script.pop(0)

    with pytest.raises(PermissionDeniedError):
        await poll_until(fetch, lambda v: True, timeout=1, poll_policy=FAST, what="x")
    assert script == []


@settings(max_examples=25)
@given(st.integers(min_value=1, max_value=10))
def test_max_consecutive_failures_is_exact(limit: int) -> None:
    import anyio

    policy = attrs.evolve(FAST, max_consecutive_failures=limit, error_initial=1e-4, error_max=1e-4)
    calls = []

    async def fetch() -> int:
        calls.append(1)
        raise ServerError("500", status_code=500)

    async def main() -> None:
        with pytest.raises(ServerError):
            await poll_until(fetch, lambda v: True, timeout=5, poll_policy=policy, what="x")

    anyio.run(main)
    assert len(calls) == limit
