"""gather_until_done against an in-memory fake client (no HTTP).

The fake keeps a schedule per id (finish time after the fake's start, final status), counts
requests and polls in flight, and can inject errors per id or 429s for everyone. Time is
real but tiny: the policies below use intervals of milliseconds.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import anyio
import attrs
import pytest

from videogen_async._contract._exceptions import (
    APIConnectionError,
    APIResponseError,
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    RateLimitError,
    ServerError,
    TaskPollError,
    WaitTimeoutError,
)
from videogen_async._contract._models import Task, TaskResult
from videogen_async._http._pacing import Pacing, paced
from videogen_async._http._retry import BackoffPolicy
from videogen_async._waiting._gather import GatherResults, gather_until_done
from videogen_async._waiting._policy import PollPolicy
from videogen_async._waiting._polling import TaskSource
from videogen_async._waiting._progress import GatherProgress

FAST = PollPolicy(min_interval=0.005, max_interval=0.03, dense_interval=0.005, sparse_cap=0.03)
FAST_BACKOFF = BackoffPolicy(
    initial_delay=0.002,
    max_delay=0.01,
    rate_limit_pause=0.01,
    max_retry_after=0.05,
    rate_recovery=100.0,
)


def _ts(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, timezone.utc)


class FakeTasks:
    def __init__(self, owner: FakeClient) -> None:
        self._owner = owner

    async def get(self, task_id: str) -> Task:
        return await self._owner.get(task_id)


class FakeClient:
    """``with_options`` returns itself; ``tasks.get`` answers from a schedule."""

    backoff = FAST_BACKOFF

    def __init__(
        self,
        durations: dict[str, float] | None = None,
        *,
        statuses: dict[str, str] | None = None,
        latency: float = 0.001,
        errors: dict[str, list[BaseException]] | None = None,
        always: dict[str, BaseException] | None = None,
        polls: dict[str, int] | None = None,
    ) -> None:
        self.durations = dict(durations or {})
        # An id here is terminal from its n-th poll on, whatever the time (its duration is
        # then only the finish time it reports).
        self.polls = polls or {}
        self.statuses = statuses or {}
        self.latency = latency
        self.errors = {k: list(v) for k, v in (errors or {}).items()}
        self.always = always or {}
        self.start = time.time()
        self.tasks = FakeTasks(self)
        self.options: list[dict[str, Any]] = []
        self.calls: Counter[str] = Counter()
        self.first_at: dict[str, float] = {}  # each id's first poll, seconds after start
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self.per_id_in_flight: Counter[str] = Counter()
        self.per_id_peak = 0
        self.sent_at: list[float] = []
        self.others_in_flight: list[int] = []  # at each request's start
        self.rate_limit: Callable[[float], float | None] | None = None
        self.rate_limited_at: list[float] = []
        self._changed: anyio.Event | None = None

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds: checked now and as each request starts or ends."""
        while not condition():
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def with_options(self, **options: Any) -> FakeClient:
        self.options.append(options)
        return self

    def finish_of(self, task_id: str) -> float:
        return self.start + self.durations[task_id]

    async def get(self, task_id: str) -> Task:
        self.others_in_flight.append(self.in_flight)
        self.requests += 1
        self.calls[task_id] += 1
        self.first_at.setdefault(task_id, time.time() - self.start)
        self.in_flight += 1
        self.per_id_in_flight[task_id] += 1
        self.peak = max(self.peak, self.in_flight)
        self.per_id_peak = max(self.per_id_peak, self.per_id_in_flight[task_id])
        now = time.monotonic()
        self.sent_at.append(now)
        self._notify()
        try:
            await anyio.sleep(self.latency)
            if self.rate_limit is not None:
                retry_after = self.rate_limit(now)
                if retry_after is not None:
                    self.rate_limited_at.append(time.monotonic())
                    exc = RateLimitError("slow down", status_code=429)
                    exc.retry_after = retry_after if retry_after > 0 else None
                    raise exc
            if task_id in self.always:
                raise self.always[task_id]
            queued = self.errors.get(task_id)
            if queued:
                raise queued.pop(0)
            if task_id not in self.durations:
                raise NotFoundError(f"no task {task_id}", status_code=404)
            finish = self.finish_of(task_id)
            created = _ts(self.start)
            needed = self.polls.get(task_id)
            done = (time.time() >= finish) if needed is None else (self.calls[task_id] >= needed)
            if done:
                status = self.statuses.get(task_id, "succeeded")
                result = TaskResult(
                    video_url="https://v/x.mp4" if status == "succeeded" else None,
                    error_message=None if status == "succeeded" else "boom",
                    finished_at=_ts(finish),
                )
                return Task(task_id=task_id, status=status, created_at=created, result=result)
            return Task(task_id=task_id, status="running", created_at=created)
        finally:
            self.in_flight -= 1
            self.per_id_in_flight[task_id] -= 1
            self._notify()


def ids(n: int, prefix: str = "t") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


async def collect(results: GatherResults) -> list[Task | TaskPollError]:
    return [item async for item in results]


def other_tasks(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t not in before and not t.done()}


async def no_task_left(before: set[asyncio.Task[Any]], fake: FakeClient) -> None:
    """Assert that nothing of the gather survives, letting what it left behind end first."""
    with anyio.fail_after(2):
        while left := other_tasks(before):
            await asyncio.wait(left)
    assert fake.in_flight == 0


# -- results ----------------------------------------------------------------------------------


async def test_yields_in_order_of_completion() -> None:
    # Terminal from their 3rd, 6th, 10th and 1st poll: an order that no load on the machine
    # can change (every id is polled at the same pace).
    polls = {"a": 3, "b": 6, "c": 10, "d": 1}
    fake = FakeClient(dict.fromkeys(polls, 0.0), polls=polls)
    async with gather_until_done(fake, ["a", "b", "c", "d"], poll_policy=FAST) as results:
        got = [t.task_id for t in await collect(results)]  # type: ignore[union-attr]
    assert got == ["d", "a", "b", "c"]
    assert fake.options == [{"max_retries": 0}] * len(fake.options)
    assert fake.options


async def test_duplicates_polled_once_and_yielded_once() -> None:
    fake = FakeClient({"a": 0.03, "b": 0.01})
    async with gather_until_done(
        fake, ["a", "b", "a", "a", "b"], poll_policy=FAST, max_concurrency=8
    ) as results:
        got = await collect(results)
    assert sorted(t.task_id for t in got) == ["a", "b"]  # type: ignore[union-attr]
    assert fake.per_id_peak == 1
    assert results.progress.total == 2


async def test_failed_and_error_tasks_are_results() -> None:
    fake = FakeClient(
        {"ok": 0.0, "bad": 0.01, "err": 0.02}, statuses={"bad": "failed", "err": "error"}
    )
    async with gather_until_done(fake, ["ok", "bad", "err"], poll_policy=FAST) as results:
        got = {t.task_id: t for t in await collect(results)}  # type: ignore[union-attr]
    assert isinstance(got["bad"], Task)
    assert got["bad"].status == "failed"
    assert got["err"].status == "error"
    progress = results.progress
    assert (progress.succeeded, progress.failed, progress.errors) == (1, 2, 0)


async def test_empty_input_ends_at_once() -> None:
    fake = FakeClient()
    assert await collect(gather_until_done(fake, [])) == []
    async with gather_until_done(fake, iter(())) as results:
        assert await collect(results) == []
    assert fake.requests == 0


async def test_max_concurrency_is_never_exceeded() -> None:
    fake = FakeClient(dict.fromkeys(ids(120), 0.05), latency=0.004)
    async with gather_until_done(fake, ids(120), max_concurrency=5, poll_policy=FAST) as results:
        got = await collect(results)
    assert len(got) == 120
    assert fake.peak == 5  # reached, never exceeded
    assert results.progress.peak_in_flight == 5


async def test_a_backlog_keeps_every_worker_busy() -> None:
    # 200 ids all due at once, 8 in flight: a worker that finishes takes the next overdue id
    # at once, while the 7 others are still in flight (not at the next coalesced round of the
    # dispatcher, when several workers would be idle together: with the default policy the
    # backlog would then take ~2 s instead of ~0.25 s).
    fake = FakeClient(dict.fromkeys(ids(200), 0.0), latency=0.01)
    got = await collect(gather_until_done(fake, ids(200), max_concurrency=8))
    assert len(got) == 200
    assert fake.peak == 8
    assert fake.others_in_flight[:8] == list(range(8))
    assert min(fake.others_in_flight[8:]) == 7


async def test_max_concurrency_one_is_sequential() -> None:
    fake = FakeClient(dict.fromkeys(ids(10), 0.0))
    got = await collect(gather_until_done(fake, ids(10), max_concurrency=1, poll_policy=FAST))
    assert len(got) == 10
    assert fake.peak == 1


async def test_plain_async_for_collects_everything() -> None:
    fake = FakeClient({i: 0.001 * n for n, i in enumerate(ids(30))})
    got = [t async for t in gather_until_done(fake, ids(30), poll_policy=FAST)]
    assert sorted(t.task_id for t in got) == ids(30)  # type: ignore[union-attr]
    assert fake.in_flight == 0


async def test_a_batch_of_similar_tasks_is_polled_less_than_a_fixed_loop() -> None:
    # 150 tasks finishing 3.0-4.2 s after creation. A fixed loop at the dense gap would poll
    # each about 30 times; the learned window must halve that at a similar lag. (Times are
    # long enough that a loaded machine's scheduling delays, tenths of a second, do not
    # decide the test.)
    names = ids(150)
    durations = {name: 3.0 + 1.2 * (n * 37 % 150) / 150 for n, name in enumerate(names)}
    fake = FakeClient(durations, latency=0.0005)
    policy = PollPolicy(
        min_interval=0.12, max_interval=1.8, dense_interval=0.12, sparse_cap=3.6, jitter=0.1
    )
    lags = []
    async with gather_until_done(fake, names, poll_policy=policy, max_concurrency=16) as results:
        async for task in results:
            lags.append(time.time() - fake.finish_of(task.task_id))  # type: ignore[union-attr]
    fixed_loop_polls = sum(math.ceil(d / 0.12) + 1 for d in durations.values())
    assert fake.requests < 0.5 * fixed_loop_polls
    lags.sort()
    # Polled at the 1.8 s gaps of an id whose window is unknown, the 90th percentile lag
    # would be near 1.6 s; inside the learned window it is a few dense gaps (0.12 s).
    assert lags[int(0.9 * len(lags))] < 0.9


async def test_the_first_finish_pulls_the_other_ids_forward() -> None:
    # Non-probe ids sleep on a sparse schedule (first poll at once, the next 8 s later); once
    # a probe finishes, those past the learned window's start are polled at once instead of
    # at their next sparse poll. The two outcomes are seconds apart, so a loaded machine's
    # scheduling delays (tenths of a second) cannot decide the test.
    names = ids(40)
    durations = dict.fromkeys(names, 0.3)
    fake = FakeClient(durations, latency=0.0005)
    policy = PollPolicy(
        probes=2, min_interval=8.0, max_interval=10.0, dense_interval=0.01, sparse_cap=10.0
    )
    lags = []
    async with gather_until_done(fake, names, poll_policy=policy) as results:
        async for task in results:
            lags.append(time.time() - fake.finish_of(task.task_id))  # type: ignore[union-attr]
    assert len(lags) == 40
    assert max(lags) < 4.0  # the sparse schedule alone would leave them ~7.7 s


# -- errors -----------------------------------------------------------------------------------


async def test_transient_errors_never_end_the_batch() -> None:
    names = ids(12)
    errors: dict[str, list[BaseException]] = {
        name: [
            ServerError("502", status_code=502),
            APIConnectionError("reset"),
            APIResponseError("<html>", status_code=200),
        ]
        for name in names
    }
    fake = FakeClient(dict.fromkeys(names, 0.0), errors=errors)
    async with gather_until_done(fake, names, poll_policy=FAST) as results:
        got = await collect(results)
    assert all(isinstance(t, Task) for t in got)
    assert len(got) == 12
    assert results.progress.transient_errors == 36
    assert results.progress.errors == 0


@pytest.mark.parametrize(
    "error", [NotFoundError("gone", status_code=404), AuthenticationError("no", status_code=401)]
)
async def test_permanent_error_raises_and_stops_everything(error: Exception) -> None:
    names = ids(20)
    fake = FakeClient({**dict.fromkeys(names, 5.0), "t0000": 0.0}, always={"t0003": error})
    before = set(asyncio.all_tasks())
    got: list[Task | TaskPollError] = []

    async def consume() -> None:
        async with gather_until_done(fake, names, poll_policy=FAST) as results:
            async for task in results:
                got.append(task)

    with pytest.raises(type(error)) as caught:
        await consume()
    assert caught.value is error
    assert [t.task_id for t in got] == ["t0000"]  # type: ignore[union-attr]
    await no_task_left(before, fake)
    requests = fake.requests
    await asyncio.sleep(0.05)
    assert fake.requests == requests


async def test_permanent_error_with_return_exceptions_yields_task_poll_error() -> None:
    names = ids(6)
    fake = FakeClient(dict.fromkeys(names, 0.01))
    got = await collect(
        gather_until_done(fake, [*names, "missing"], poll_policy=FAST, return_exceptions=True)
    )
    errors = [e for e in got if isinstance(e, TaskPollError)]
    assert len(got) == 7
    assert len(errors) == 1
    assert errors[0].task_id == "missing"
    assert isinstance(errors[0].__cause__, NotFoundError)
    assert errors[0].status_code == 404


@pytest.mark.parametrize("return_exceptions", [False, True])
async def test_repeated_transient_failures_become_permanent(return_exceptions: bool) -> None:
    fake = FakeClient(
        {"ok": 0.0, "flaky": 0.0}, always={"flaky": ServerError("503", status_code=503)}
    )
    fake.backoff = BackoffPolicy(initial_delay=0.001, max_delay=0.002, max_consecutive_failures=3)
    results = gather_until_done(
        fake, ["ok", "flaky"], poll_policy=FAST, return_exceptions=return_exceptions
    )
    if return_exceptions:
        got = await collect(results)
        error = next(e for e in got if isinstance(e, TaskPollError))
        assert isinstance(error.__cause__, ServerError)
    else:
        with pytest.raises(ServerError):
            await collect(results)
    assert fake.calls["flaky"] == 3


async def test_rate_limit_pauses_everyone_then_recovers() -> None:
    names = ids(40)
    fake = FakeClient(dict.fromkeys(names, 0.15), latency=0.002)
    answered = 0

    def limiter(now: float) -> float | None:
        # The 20th to 23rd answers are 429s (counted, not timed: a loaded machine cannot
        # miss the window).
        nonlocal answered
        answered += 1
        return 0.1 if 20 <= answered < 24 else None

    fake.rate_limit = limiter
    snapshots: list[GatherProgress] = []
    # One pacing per client: a Retry-After is honoured up to `max_retry_after`.
    fake.backoff = attrs.evolve(FAST_BACKOFF, max_retry_after=0.5)
    async with gather_until_done(
        fake, names, poll_policy=FAST, max_concurrency=8, on_progress=snapshots.append
    ) as results:
        got = await collect(results)
    assert len(got) == 40
    first_429 = min(fake.rate_limited_at)
    # Nothing was sent during the pause asked for by Retry-After (0.1 s), except the
    # requests already in flight when the first 429 came back.
    during = [t for t in fake.sent_at if first_429 + 0.005 < t < first_429 + 0.095]
    assert during == []
    assert any(s.paused for s in snapshots)
    assert min(s.concurrency_limit for s in snapshots) < 8
    assert results.progress.rate_limited >= 1
    assert results.progress.errors == 0
    assert results.progress.concurrency_limit == 8  # recovered (additive increase)
    assert not results.progress.paused


async def test_rate_limit_without_retry_after_backs_off() -> None:
    fake = FakeClient({"a": 0.0})
    seen = []

    def limiter(now: float) -> float | None:
        seen.append(now)
        return 0.0 if len(seen) <= 2 else None  # two 429s without Retry-After

    fake.rate_limit = limiter
    got = await collect(gather_until_done(fake, ["a"], poll_policy=FAST))
    assert len(got) == 1
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert gaps[0] >= 0.004  # rate_limit_pause 0.01 with jitter in [0.5, 1)
    assert gaps[1] >= 0.009  # doubled


# -- deadline ---------------------------------------------------------------------------------


async def test_timeout_raises_wait_timeout_error_with_pending_ids() -> None:
    # The deadline is generous enough for the first poll of "fast" on a loaded machine; the
    # slow ones finish far beyond it. Only the lower bound of the elapsed time is checked
    # (the upper one just guards against a hang): speed is for the benchmarks.
    fake = FakeClient({"fast": 0.0, "slow1": 600.0, "slow2": 600.0})
    got = []
    before = set(asyncio.all_tasks())
    started = time.monotonic()

    async def consume() -> None:
        async for task in gather_until_done(
            fake, ["slow1", "fast", "slow2"], timeout=0.5, poll_policy=FAST
        ):
            got.append(task)

    with pytest.raises(WaitTimeoutError) as caught:
        await consume()
    assert 0.49 < time.monotonic() - started < 60
    assert [t.task_id for t in got] == ["fast"]  # type: ignore[union-attr]
    assert caught.value.pending == ("slow1", "slow2")
    assert caught.value.timeout == 0.5
    assert isinstance(caught.value, TimeoutError)
    await no_task_left(before, fake)


async def test_timeout_with_return_exceptions_yields_an_error_per_pending_id() -> None:
    fake = FakeClient({"fast": 0.0, "slow1": 600.0, "slow2": 600.0})
    async with gather_until_done(
        fake, ["slow1", "fast", "slow2"], timeout=0.5, poll_policy=FAST, return_exceptions=True
    ) as results:
        got = await collect(results)
    assert isinstance(got[0], Task)
    errors = got[1:]
    assert [e.task_id for e in errors] == ["slow1", "slow2"]  # type: ignore[union-attr]
    for error in errors:
        assert isinstance(error, TaskPollError)
        assert isinstance(error.__cause__, WaitTimeoutError)
        assert error.__cause__.pending == (error.task_id,)
    assert results.progress.errors == 2
    assert results.progress.pending == 0


async def test_zero_timeout_times_out_without_polling_everything() -> None:
    fake = FakeClient(dict.fromkeys(ids(5), 10.0))
    with pytest.raises(WaitTimeoutError) as caught:
        await collect(gather_until_done(fake, ids(5), timeout=0, poll_policy=FAST))
    assert caught.value.pending == tuple(ids(5))


# -- clean-up ---------------------------------------------------------------------------------


async def test_break_out_of_the_structured_form_leaves_nothing_behind() -> None:
    names = ids(50)
    fake = FakeClient({**dict.fromkeys(names, 10.0), "t0000": 0.0}, latency=0.01)
    before = set(asyncio.all_tasks())
    async with gather_until_done(fake, names, poll_policy=FAST, max_concurrency=8) as results:
        async for _task in results:
            break
        assert fake.in_flight > 0 or fake.requests > 0
    assert other_tasks(before) == set()
    assert fake.in_flight == 0


async def test_break_out_of_plain_iteration_with_aclose() -> None:
    names = ids(50)
    fake = FakeClient({**dict.fromkeys(names, 10.0), "t0000": 0.0}, latency=0.01)
    before = set(asyncio.all_tasks())
    results = gather_until_done(fake, names, poll_policy=FAST, max_concurrency=8)
    async for _task in results:
        break
    assert other_tasks(before)  # the background runner is still there ...
    await results.aclose()
    assert other_tasks(before) == set()  # ... until closed
    assert fake.in_flight == 0
    await results.aclose()  # idempotent
    assert [t async for t in results] == []


async def test_break_out_of_plain_iteration_is_cleaned_up_when_collected() -> None:
    names = ids(50)
    fake = FakeClient({**dict.fromkeys(names, 10.0), "t0000": 0.0}, latency=0.005)
    before = set(asyncio.all_tasks())
    async for _task in gather_until_done(fake, names, poll_policy=FAST):
        break
    gc.collect()
    await no_task_left(before, fake)
    requests = fake.requests
    await asyncio.sleep(0.05)
    assert fake.requests == requests


@pytest.mark.parametrize("form", ["structured", "plain"])
async def test_exception_in_the_loop_body_leaves_nothing_behind(form: str) -> None:
    names = ids(30)
    fake = FakeClient({**dict.fromkeys(names, 10.0), "t0005": 0.0}, latency=0.005)
    before = set(asyncio.all_tasks())

    async def consume() -> None:
        if form == "structured":
            async with gather_until_done(fake, names, poll_policy=FAST) as results:
                async for _task in results:
                    1 / 0  # noqa: B018
        else:
            async for _task in gather_until_done(fake, names, poll_policy=FAST):
                1 / 0  # noqa: B018

    with pytest.raises(ZeroDivisionError):
        await consume()
    gc.collect()
    await no_task_left(before, fake)


@pytest.mark.parametrize("form", ["structured", "plain"])
async def test_cancelling_the_consumer_leaves_nothing_behind(form: str) -> None:
    names = ids(30)
    fake = FakeClient(dict.fromkeys(names, 10.0), latency=0.005)
    before = set(asyncio.all_tasks())
    started = asyncio.Event()

    async def consume() -> None:
        if form == "structured":
            async with gather_until_done(fake, names, poll_policy=FAST) as results:
                started.set()
                async for _task in results:
                    pass
        else:
            results = gather_until_done(fake, names, poll_policy=FAST)
            started.set()
            async for _task in results:
                pass

    consumer = asyncio.get_running_loop().create_task(consume())
    await started.wait()
    with anyio.fail_after(2):
        await fake.wait_until(lambda: fake.requests >= 40)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert other_tasks(before) == set()
    assert fake.in_flight == 0


async def test_cancelling_through_an_anyio_scope() -> None:
    names = ids(30)
    fake = FakeClient(dict.fromkeys(names, 10.0), latency=0.005)
    before = set(asyncio.all_tasks())
    with anyio.move_on_after(0.05) as scope:
        async with gather_until_done(fake, names, poll_policy=FAST) as results:
            async for _task in results:
                pass
    assert scope.cancelled_caught
    assert other_tasks(before) == set()
    assert fake.in_flight == 0


async def test_a_gather_starts_once() -> None:
    fake = FakeClient({"a": 0.0})
    results = gather_until_done(fake, ["a"], poll_policy=FAST)
    async with results:
        with pytest.raises(RuntimeError):
            await results.__aenter__()
        assert len(await collect(results)) == 1


async def test_closing_before_starting_does_nothing() -> None:
    fake = FakeClient({"a": 0.0})
    results = gather_until_done(fake, ["a"], poll_policy=FAST)
    await results.aclose()
    assert [t async for t in results] == []
    assert fake.requests == 0


def test_a_gather_that_never_starts_warns_about_nothing() -> None:
    results = gather_until_done(FakeClient({"a": 0.0}), ["a"])
    del results
    gc.collect()


# -- progress ---------------------------------------------------------------------------------


async def test_progress_is_readable_without_consuming() -> None:
    fake = FakeClient({"a": 0.0, "b": 0.0, "c": 10.0}, statuses={"b": "failed"})
    async with gather_until_done(fake, ["a", "b", "c"], poll_policy=FAST) as results:
        assert results.progress.total == 3
        with anyio.fail_after(2):
            await fake.wait_until(lambda: results.progress.done >= 2)
        progress = results.progress
        assert progress.succeeded == 1
        assert progress.failed == 1
        assert progress.pending == 1
        assert progress.requests >= 3
        assert progress.concurrency_limit == 32
        assert progress.elapsed > 0
        assert not progress.paused


async def test_on_progress_is_called_and_ends_with_the_final_figures() -> None:
    snapshots: list[GatherProgress] = []
    fake = FakeClient({"a": 0.0, "b": 0.02})
    await collect(
        gather_until_done(
            fake,
            ["a", "b"],
            poll_policy=FAST,
            on_progress=snapshots.append,
            progress_interval=0.005,
        )
    )
    assert snapshots[-1].done == 2
    assert snapshots[-1].pending == 0
    assert snapshots[-1].requests == fake.requests
    assert [s.done for s in snapshots] == sorted(s.done for s in snapshots)


async def test_a_failing_on_progress_ends_the_gather() -> None:
    def explode(progress: GatherProgress) -> None:
        raise ValueError("callback bug")

    fake = FakeClient({"a": 0.0, "b": 10.0})
    with pytest.raises(ValueError, match="callback bug"):
        await collect(gather_until_done(fake, ["a", "b"], poll_policy=FAST, on_progress=explode))


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"progress_interval": 0}, "progress_interval"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any], field: str) -> None:
    # One error for a bad argument, naming the field.
    with pytest.raises(InvalidRequestError) as info:
        gather_until_done(FakeClient(), ["a"], **kwargs)
    assert info.value.field == field


@pytest.mark.parametrize("bad", ["abc", [1, 2]])
def test_invalid_ids(bad: Iterable[Any]) -> None:
    with pytest.raises(InvalidRequestError):
        gather_until_done(FakeClient(), bad)


async def test_the_client_poll_policy_is_the_default() -> None:
    fake = FakeClient({"a": 0.0})
    fake.poll_policy = FAST  # type: ignore[attr-defined]
    results = gather_until_done(fake, ["a"])
    assert results._core._policy is FAST
    await collect(results)


async def test_non_adaptive_policy_still_finishes() -> None:
    policy = PollPolicy(adaptive=False, min_interval=0.005, max_interval=0.02)
    fake = FakeClient({i: 0.002 * n for n, i in enumerate(ids(20))})
    assert len(await collect(gather_until_done(fake, ids(20), poll_policy=policy))) == 20


async def test_a_bug_in_the_coordinator_reaches_the_consumer() -> None:
    class Broken:
        task_id = "a"
        created_at = None

        @property
        def is_terminal(self) -> bool:
            raise RuntimeError("boom")

    fake = FakeClient({"a": 0.0})

    async def get(task_id: str) -> Any:
        return Broken()

    fake.tasks.get = get  # type: ignore[method-assign]
    with pytest.raises(Exception, match=r"unhandled errors|boom"):
        await collect(gather_until_done(fake, ["a"], poll_policy=FAST))


async def test_a_429_cuts_the_one_pacing_of_the_client_once() -> None:
    # A source with a pacing (as a client's, whose transport takes a slot per request and
    # records each 429 in it): the gather keeps no overload state of its own, its concurrency
    # limit is the pacing's, and one 429 event is one cut.
    names = ids(40)
    fake = FakeClient(dict.fromkeys(names, 0.15), latency=0.002)
    answered = 0

    def limiter(now: float) -> float | None:
        # The 20th to 23rd answers are 429s (counted, not timed: how long the first requests
        # take to start depends on the machine and the Python).
        nonlocal answered
        answered += 1
        return 0.05 if 20 <= answered < 24 else None

    fake.rate_limit = limiter
    backoff = attrs.evolve(FAST_BACKOFF, max_retry_after=0.5)
    pacing = Pacing()
    source = TaskSource(fetch=paced(fake.get, pacing, backoff), pacing=pacing, backoff=backoff)
    seen: list[tuple[int, float]] = []
    async with gather_until_done(
        source,
        names,
        poll_policy=FAST,
        max_concurrency=8,
        on_progress=lambda p: seen.append((p.concurrency_limit, pacing.limit)),
    ) as results:
        got = await collect(results)
    assert len(got) == 40
    assert fake.rate_limited_at
    throttled = [(mine, theirs) for mine, theirs in seen if theirs != math.inf]
    assert throttled
    for mine, theirs in seen:
        assert mine == (8 if theirs == math.inf else max(1, min(8, int(theirs))))
    assert results.progress.concurrency_limit == 8  # recovered
