"""Direct video tasks: creation, the life cycle on the clock, results, refunds."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

import aiohttp
import pytest

from videogen_async.testing import SandboxServer

from .conftest import TASK_SECONDS, Api, exact_options


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_create_returns_running_task_and_charges(api: Api) -> None:
    before = await api.available()
    created = await api.create_task(duration=5)
    assert set(created) == {"task_id", "status", "created_at", "credits_cost"}
    assert created["status"] == "running"
    assert created["credits_cost"] == 10  # videomodel_2_0: 2 credits per second
    assert parse(created["created_at"]).tzinfo is not None
    assert await api.available() == before - 10
    assert api.server.task_ids == (created["task_id"],)


@pytest.mark.parametrize(
    ("model", "duration", "cost"),
    [("videomodel_2_0", 4, 8), ("videomodel_2_0", 15, 30), ("videomodel_2_0_fast", 10, 10)],
)
async def test_price_by_model_and_duration(api: Api, model: str, duration: int, cost: int) -> None:
    created = await api.create_task(model=model, duration=duration)
    assert created["credits_cost"] == cost


async def test_life_cycle_on_the_clock(api: Api, sandbox: SandboxServer) -> None:
    created = await api.create_task()
    task = await api.task(created["task_id"])
    assert task["status"] == "running"
    assert task["result"] is None
    assert task["model"] == "videomodel_2_0"
    assert task["created_at"] == created["created_at"]
    sandbox.clock.advance(TASK_SECONDS - 0.5)
    assert (await api.task(created["task_id"]))["status"] == "running"
    sandbox.clock.advance(0.5)
    done = await api.task(created["task_id"])
    assert done["status"] == "succeeded"
    assert done["credits_cost"] == 10
    result = done["result"]
    assert result["error_message"] is None
    assert result["video_url"] == sandbox.url(f"/media/{created['task_id']}.mp4")
    # Timestamps are real times: the jump of the clock is when the task finished.
    assert parse(done["created_at"]) <= parse(result["finished_at"])
    assert abs(parse(result["finished_at"]).timestamp() - time.time()) < 5
    assert done["updated_at"] == result["finished_at"]
    assert (await api.task(created["task_id"]))["result"] == result  # stable on every read


async def test_queue_delay_shows_queued_first() -> None:
    async with SandboxServer(**exact_options(queue_delay=5.0)) as server:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server)
            created = await api.create_task()
            assert created["status"] == "queued"
            server.clock.advance(5)
            assert (await api.task(created["task_id"]))["status"] == "running"
            server.clock.advance(TASK_SECONDS)
            assert (await api.task(created["task_id"]))["status"] == "succeeded"


@pytest.mark.parametrize("outcome", ["failed", "error"])
async def test_scheduled_failure_is_refunded(
    api: Api, sandbox: SandboxServer, outcome: str
) -> None:
    start = await api.available()
    created = await api.create_task(duration=10)
    sandbox.schedule_task(
        created["task_id"], finish_in=3, outcome=outcome, error_message="moderation said no"
    )
    sandbox.clock.advance(2.9)
    assert (await api.task(created["task_id"]))["credits_cost"] == 20
    assert await api.available() == start - 20
    sandbox.clock.advance(0.1)
    task = await api.task(created["task_id"])
    assert task["status"] == outcome
    assert task["credits_cost"] == 0
    assert task["result"]["error_message"] == "moderation said no"
    assert task["result"]["video_url"] is None
    assert await api.available() == start


async def test_schedule_finish_now_and_early_success(api: Api, sandbox: SandboxServer) -> None:
    created = await api.create_task()
    info = sandbox.schedule_task(created["task_id"], finish_in=0)
    assert info["status"] == "succeeded"
    assert (await api.task(created["task_id"]))["status"] == "succeeded"
    with pytest.raises(ValueError, match="already ended"):
        sandbox.schedule_task(created["task_id"], finish_in=1)
    with pytest.raises(KeyError):
        sandbox.schedule_task("no-such-task", finish_in=1)


async def test_reschedule_failure_to_success_keeps_the_charge(
    api: Api, sandbox: SandboxServer
) -> None:
    start = await api.available()
    created = await api.create_task()
    sandbox.schedule_task(created["task_id"], finish_in=5, outcome="failed")
    sandbox.schedule_task(created["task_id"], finish_in=10, outcome="succeeded")
    sandbox.clock.advance(60)
    task = await api.task(created["task_id"])
    assert task["status"] == "succeeded"
    assert task["credits_cost"] == 10
    assert await api.available() == start - 10


async def test_failure_rate_and_error_rate_are_seeded_and_refunded() -> None:
    async def run() -> list[str]:
        async with SandboxServer(**exact_options(failure_rate=0.3, error_rate=0.2)) as server:
            async with aiohttp.ClientSession() as session:
                api = Api(session, server)
                start = await api.available()
                ids = [(await api.create_task())["task_id"] for _ in range(40)]
                server.clock.advance(TASK_SECONDS)
                tasks = [await api.task(i) for i in ids]
                ok = [t for t in tasks if t["status"] == "succeeded"]
                assert await api.available() == start - 10 * len(ok)
                for t in tasks:
                    if t["status"] != "succeeded":
                        assert t["credits_cost"] == 0
                        assert t["result"]["error_message"]
                return [t["status"] for t in tasks]

    first = await run()
    assert set(first) == {"succeeded", "failed", "error"}
    assert await run() == first  # the same seed draws the same outcomes


async def test_random_durations_within_range() -> None:
    async with SandboxServer(manual_clock=True, seed=3, task_duration=(20, 40)) as server:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server)
            ids = [(await api.create_task())["task_id"] for _ in range(20)]
            finishes = [server.describe_task(i)["schedule"]["finish_at"] for i in ids]
            assert all(20 <= f <= 40 for f in finishes)
            assert len(set(finishes)) == 20
            server.clock.advance(19.99)
            assert [(await api.task(i))["status"] for i in ids] == ["running"] * 20
            server.clock.advance(20.01)
            assert [(await api.task(i))["status"] for i in ids] == ["succeeded"] * 20


async def test_callable_duration() -> None:
    server = SandboxServer(manual_clock=True, task_duration=lambda rng: 12.5)
    task = server._state.create_task({"prompt": "x"})
    assert task.finished_at - task.created_at == 12.5


async def test_invalid_media_url_and_marker_fail_the_task(api: Api, sandbox: SandboxServer) -> None:
    start = await api.available()
    bad_media = await api.create_task(image_urls=["https://images.invalid/cat.png"])
    marked = await api.create_task(prompt="please sandbox-fail this one")
    sandbox.clock.advance(TASK_SECONDS)
    task = await api.task(bad_media["task_id"])
    assert task["status"] == "failed"
    assert "https://images.invalid/cat.png" in task["result"]["error_message"]
    assert (await api.task(marked["task_id"]))["status"] == "failed"
    assert await api.available() == start


async def test_insufficient_credits_creates_nothing(api: Api, sandbox: SandboxServer) -> None:
    sandbox.set_credits(available=15, total=100)
    await api.create_task(duration=5)
    reply = await api.call("POST", "/v1/video/videomodel-2", json={"prompt": "x", "duration": 5})
    assert reply.error(409, 300111) == "Insufficient API credits"
    assert len(sandbox.task_ids) == 1
    assert await api.credits() == {"api_available_credits": 5, "api_total_credits": 100}
    sandbox.add_credits(50)
    assert await api.credits() == {"api_available_credits": 55, "api_total_credits": 150}


async def test_time_scale_runs_the_clock_fast() -> None:
    async with SandboxServer(time_scale=0.001, task_duration=90) as server:
        async with aiohttp.ClientSession() as http:
            api = Api(http, server)
            created = await api.create_task()
            deadline = time.monotonic() + 5
            while (task := await api.task(created["task_id"]))["status"] != "succeeded":
                assert time.monotonic() < deadline, "a 90 s task at time_scale 0.001 took > 5 s"
                await asyncio.sleep(0.01)
            # Real timestamps: the 90 simulated seconds took about 90 ms.
            took = parse(task["result"]["finished_at"]) - parse(task["created_at"])
            assert 0.085 <= took.total_seconds() <= 0.2
