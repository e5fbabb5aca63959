"""The poll policy's pure arithmetic, and the single-object wait helpers (with fakes)."""

from __future__ import annotations

import itertools
import math
import random
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
from videogen_async._http._pacing import Pacing, rate_limit_pause, recovered_rate
from videogen_async._http._retry import DEFAULT_BACKOFF, BackoffPolicy, decide_retry
from videogen_async._waiting._policy import PollPolicy, growth_interval, probe_count
from videogen_async._waiting._polling import poll_until, source_of, wait_on_source

FAST = PollPolicy(min_interval=0.005, max_interval=0.02)
FAST_BACKOFF = BackoffPolicy(
    initial_delay=0.002, max_delay=0.01, rate_limit_pause=0.005, max_retry_after=0.1
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
        sparse_growth=draw(st.floats(min_value=0, max_value=5)),
        sparse_cap=draw(positive),
        window_quantile=draw(st.floats(min_value=0, max_value=0.5)),
        overdue_growth=draw(st.floats(min_value=0, max_value=5)),
    )


@st.composite
def backoffs(draw: st.DrawFn) -> BackoffPolicy:
    return BackoffPolicy(
        initial_delay=draw(positive),
        max_delay=draw(positive),
        max_retry_after=draw(positive),
        rate_limit_pause=draw(positive),
        rate_decrease=draw(st.floats(min_value=0.01, max_value=1)),
        rate_recovery=draw(positive),
        max_consecutive_failures=None,
    )


# -- the policy objects -----------------------------------------------------------------------


def test_policy_is_frozen_and_has_sane_defaults() -> None:
    policy = PollPolicy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.dense_interval = 2  # type: ignore[misc]
    assert policy.first_delay <= 1
    assert policy.dense_interval <= 1  # inside the finish times, never sparser than 1 s
    assert policy.min_interval <= policy.max_interval


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (PollPolicy, {"min_interval": 0}),
        (PollPolicy, {"max_interval": 0.5, "min_interval": 1}),
        (PollPolicy, {"jitter": 0.6}),
        (PollPolicy, {"dense_interval": -1}),
        (PollPolicy, {"probes": 0}),
        (PollPolicy, {"window_quantile": 0.9}),
        (BackoffPolicy, {"max_consecutive_failures": 0}),
        (BackoffPolicy, {"rate_decrease": 0}),
        (BackoffPolicy, {"rate_decrease": 1.5}),
        (BackoffPolicy, {"max_retries": -1}),
        (BackoffPolicy, {"rate_limit_pause": 0}),
    ],
)
def test_policies_reject_bad_values(cls: type[Any], kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        cls(**kwargs)


def test_each_setting_lives_in_one_policy() -> None:
    poll = {f.name for f in attrs.fields(PollPolicy)}
    backoff = {f.name for f in attrs.fields(BackoffPolicy)}
    assert not poll & backoff
    assert "relative_interval" not in poll


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


class _Highest(random.Random):
    """A random source whose draws are the top of their range."""

    def uniform(self, a: float, b: float) -> float:
        return b


def _poll_delay(
    policy: BackoffPolicy, failures: int, exc: Exception | None = None, **options: Any
) -> float | None:
    error = exc if exc is not None else ServerError("502", status_code=502)
    decision = decide_retry(
        error, method="GET", failures=failures, policy=policy, poll=True, **options
    )
    return decision.delay


@given(backoffs(), st.integers(min_value=1, max_value=10_000), st.none() | positive)
def test_a_polls_backoff_bounds(policy: BackoffPolicy, failures: int, ra: float | None) -> None:
    error = ServerError("503", status_code=503)
    error.headers = {} if ra is None else {"Retry-After": repr(ra)}
    delay = _poll_delay(policy, failures, error)
    assert delay is not None
    ceiling = min(policy.max_delay, policy.initial_delay * 2.0 ** min(failures - 1, 62))
    if ra is not None and ra <= policy.max_retry_after:
        assert delay == pytest.approx(ra)
    else:
        assert 0 <= delay <= ceiling


def test_a_polls_backoff_doubles_up_to_the_cap() -> None:
    policy = BackoffPolicy(initial_delay=0.5, max_delay=30.0, max_consecutive_failures=None)
    delays = [_poll_delay(policy, n, rng=_Highest()) for n in (1, 2, 3, 6, 7, 50)]
    assert delays == pytest.approx([0.5, 1, 2, 16, 30, 30])


@given(backoffs(), st.integers(min_value=1, max_value=10_000), rand, st.none() | positive)
def test_rate_limit_pause_follows_retry_after(
    policy: BackoffPolicy, n: int, r: float, ra: float | None
) -> None:
    pause = rate_limit_pause(policy, n, r, ra)
    if ra is not None:
        assert pause == min(ra, policy.max_retry_after)
    else:
        assert 0 < pause <= policy.max_retry_after


async def test_aimd() -> None:
    # A 429 halves the allowed concurrency, never below one request...
    pacing = Pacing()
    sent = await pacing.acquire()
    pacing.rate_limited(0.0, sent)
    assert pacing.limit == 1
    # ...and each success adds about one per round of `limit` requests, up to where it was.
    pacing = Pacing()
    sents = [await pacing.acquire() for _ in range(8)]
    pacing.rate_limited(0.0, sents[0])
    assert pacing.limit == 4
    steps = 0
    while pacing.limit != math.inf:
        pacing.succeeded()
        steps += 1
    assert 15 <= steps <= 30


@given(backoffs(), positive, st.floats(min_value=0, max_value=1e5))
def test_recovered_rate_grows_then_lifts(policy: BackoffPolicy, reduced: float, t: float) -> None:
    rate = recovered_rate(policy, reduced, t)
    assert rate >= reduced
    later = recovered_rate(policy, reduced, t + 1)
    assert later >= rate
    if rate != math.inf:
        assert rate < reduced / policy.rate_decrease


def test_recovered_rate_example() -> None:
    policy = BackoffPolicy(rate_decrease=0.5, rate_recovery=0.1)
    assert recovered_rate(policy, 100, 0) == 100
    assert recovered_rate(policy, 100, 5) == pytest.approx(150)
    assert recovered_rate(policy, 100, 10) == math.inf


# -- the probes -------------------------------------------------------------------------------


def test_probe_count() -> None:
    policy = PollPolicy()
    assert probe_count(policy, 1) == 1
    assert probe_count(policy, 10) == 8
    assert probe_count(policy, 300) == 17
    assert probe_count(policy, 100_000) == 64
    assert probe_count(attrs.evolve(policy, probes=3), 100) == 3
    assert probe_count(attrs.evolve(policy, adaptive=False), 100) == 0


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
def test_a_poll_tries_again_after_transient_failures(error: Exception, transient: bool) -> None:
    assert (_poll_delay(DEFAULT_BACKOFF, 1, error) is not None) is transient


# -- wait helpers -----------------------------------------------------------------------------


class _Tasks:
    def __init__(self, owner: OneTaskClient) -> None:
        self._owner = owner

    async def get(self, task_id: str) -> Task:
        return self._owner.next(task_id)


class OneTaskClient:
    """Answers a script of results (a Task, an exception, or a status string) in order."""

    def __init__(
        self,
        script: list[Any],
        *,
        created: datetime | None = None,
        backoff: BackoffPolicy = FAST_BACKOFF,
    ) -> None:
        self.script = list(script)
        self.backoff = backoff
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


async def wait_for_task(client: OneTaskClient, task_id: str, **options: Any) -> Task:
    return await wait_on_source(source_of(client), task_id, **options)


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


async def test_a_wait_fails_fast_when_a_retry_after_passes_its_deadline() -> None:
    limited = RateLimitError("slow down", status_code=429)
    limited.retry_after = 0.09  # honoured (within max_retry_after), but past the deadline
    client = OneTaskClient([limited, "succeeded"])
    with pytest.raises(WaitTimeoutError) as caught:
        await wait_for_task(client, "t1", timeout=0.05, raise_on_failure=False, poll_policy=FAST)
    assert caught.value.__cause__ is limited
    assert "0.09 s (Retry-After)" in str(caught.value)
    assert caught.value.pending == ("t1",)
    assert len(client.calls) == 1


async def test_wait_for_task_raises_permanent_errors() -> None:
    client = OneTaskClient([NotFoundError("no such task", status_code=404)])
    with pytest.raises(NotFoundError):
        await wait_for_task(client, "t1", timeout=5, raise_on_failure=False, poll_policy=FAST)
    assert len(client.calls) == 1


async def test_wait_for_task_gives_up_after_repeated_failures() -> None:
    backoff = attrs.evolve(FAST_BACKOFF, max_consecutive_failures=3)
    client = OneTaskClient([ServerError("503", status_code=503)], backoff=backoff)
    with pytest.raises(ServerError):
        await wait_for_task(client, "t1", timeout=5, raise_on_failure=False, poll_policy=FAST)
    assert len(client.calls) == 3


async def test_wait_for_task_timeout_carries_the_last_state() -> None:
    client = OneTaskClient(["running"])
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError) as caught:
        await wait_for_task(client, "t1", timeout=0.05, raise_on_failure=False, poll_policy=FAST)
    assert 0.045 <= time.monotonic() - started < 1
    assert isinstance(caught.value.last, Task)
    assert caught.value.__cause__ is None
    assert caught.value.last.status == "running"
    assert caught.value.pending == ("t1",)
    assert caught.value.timeout == 0.05
    assert "t1" in str(caught.value)


async def test_wait_for_task_timeout_before_any_answer() -> None:
    # No bound on failures in a row: only the timeout ends this wait.
    backoff = attrs.evolve(FAST_BACKOFF, max_consecutive_failures=None)
    client = OneTaskClient([APIConnectionError("down")], backoff=backoff)
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
        await poll_until(
            fetch, lambda v: True, timeout=1, poll_policy=FAST, what="x", backoff=FAST_BACKOFF
        )
    assert script == []


@settings(max_examples=25)
@given(st.integers(min_value=1, max_value=10))
def test_max_consecutive_failures_is_exact(limit: int) -> None:
    import anyio

    backoff = BackoffPolicy(max_consecutive_failures=limit, initial_delay=1e-4, max_delay=1e-4)
    calls = []

    async def fetch() -> int:
        calls.append(1)
        raise ServerError("500", status_code=500)

    async def main() -> None:
        with pytest.raises(ServerError):
            await poll_until(
                fetch, lambda v: True, timeout=5, poll_policy=FAST, what="x", backoff=backoff
            )

    anyio.run(main)
    assert len(calls) == limit


async def test_watch_polls_an_old_task_on_the_same_schedule_as_wait() -> None:
    # One wait for both: a task created an hour ago is watched at the cap, as it is waited
    # for (the gaps never restart from min_interval at each new state).
    from videogen_async import AsyncVideoGen

    policy = PollPolicy(min_interval=0.001, growth=0.1, max_interval=0.05, jitter=0.0)
    old = datetime.fromtimestamp(time.time() - 3600, timezone.utc)
    fake = OneTaskClient(["queued", "running", "running", "succeeded"], created=old)

    async def fetch_once(task_id: str, options: Any = None) -> Task:
        return fake.next(task_id)

    async with AsyncVideoGen(api_key="k" * 16, base_url="http://127.0.0.1:9") as client:
        client.tasks._fetch_once = fetch_once  # type: ignore[method-assign]
        states = [t.status async for t in client.tasks.watch("t1", poll_policy=policy)]
    assert states == ["queued", "running", "succeeded"]
    gaps = [b - a for a, b in itertools.pairwise(fake.calls)]
    assert min(gaps) >= 0.045
