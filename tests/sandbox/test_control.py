"""Server-side truth: request log, counters, in-flight peaks, and the /_sandbox/ endpoints."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import anyio
import pytest

from videogen_async.testing import SandboxServer

from .conftest import SCRIPT_READY, TASK_SECONDS, Api


async def test_request_log_and_counters(api: Api, sandbox: SandboxServer) -> None:
    t0 = time.time()
    created = await api.create_task()
    await api.task(created["task_id"])
    await api.call("GET", "/v1/tasks?task_id=missing")
    log = sandbox.request_log
    assert [(r.method, r.path, r.status) for r in log] == [
        ("POST", "/v1/video/videomodel-2", 200),
        ("GET", "/v1/tasks", 200),
        ("GET", "/v1/tasks", 404),
    ]
    assert log[1].route == "GET /v1/tasks"
    assert all(t0 <= r.started_at <= time.time() for r in log)
    assert all(r.duration >= 0 for r in log)
    assert all(r.trace_id for r in log)
    stats = sandbox.stats()
    assert stats.requests == 3
    assert stats.by_route == {"POST /v1/video/videomodel-2": 1, "GET /v1/tasks": 2}
    assert stats.by_status == {"200": 2, "404": 1}
    assert stats.tasks_created == 1
    assert stats.projects_created == 0
    assert stats.in_flight == 0
    sandbox.reset_stats()
    assert sandbox.request_log == ()
    assert sandbox.stats().requests == 0
    assert sandbox.stats().tasks_created == 0
    assert sandbox.task_ids == (created["task_id"],)  # state survives a stats reset


async def test_peak_in_flight_as_the_server_saw_it(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set("GET /v1/credits", latency=0.2)
    await asyncio.gather(*(api.call("GET", "/v1/credits") for _ in range(7)))
    await asyncio.gather(*(api.call("GET", "/v1/tasks?task_id=x") for _ in range(3)))
    stats = sandbox.stats()
    assert stats.peak_in_flight == 7
    assert stats.peak_in_flight_by_route["GET /v1/credits"] == 7
    assert stats.peak_in_flight_by_route["GET /v1/tasks"] >= 1
    assert stats.in_flight == 0


async def test_wait_until_wakes_as_requests_come_and_go(api: Api, sandbox: SandboxServer) -> None:
    with anyio.fail_after(1):  # already true: returns without any request
        await sandbox.wait_until(lambda: sandbox.stats().in_flight == 0)
    sandbox.faults.set("GET /v1/credits", latency=0.3)
    calls = [asyncio.ensure_future(api.call("GET", "/v1/credits")) for _ in range(3)]
    with anyio.fail_after(10):
        await sandbox.wait_until(lambda: sandbox.stats().in_flight == 3)
    assert sandbox.stats().requests == 0  # woken while all three were still in flight
    with anyio.fail_after(10):
        await sandbox.wait_until(lambda: sandbox.stats().requests == 3)
    assert sandbox.stats().in_flight == 0
    await asyncio.gather(*calls)
    with pytest.raises(TimeoutError), anyio.fail_after(0.2):  # nothing more arrives
        await sandbox.wait_until(lambda: sandbox.stats().requests > 3)


async def test_control_endpoints_need_the_key(api: Api) -> None:
    (await api.call("GET", "/_sandbox/stats", auth=False)).error(401)


async def test_stats_over_http_excludes_control_traffic(api: Api) -> None:
    await api.create_task()
    await api.call("GET", "/_sandbox/requests")
    stats = (await api.call("GET", "/_sandbox/stats")).data
    assert stats["requests"] == 1
    assert stats["tasks_created"] == 1
    assert stats["by_route"] == {"POST /v1/video/videomodel-2": 1}
    requests = (await api.call("GET", "/_sandbox/requests?limit=5")).data
    assert requests["count"] == 1
    assert requests["requests"][0]["path"] == "/v1/video/videomodel-2"
    reset = (await api.call("POST", "/_sandbox/reset-stats")).data
    assert reset["requests"] == 0
    (await api.call("GET", "/_sandbox/requests?limit=x")).error(400)


async def test_clock_over_http(api: Api, sandbox: SandboxServer) -> None:
    clock = (await api.call("GET", "/_sandbox/clock")).data
    assert clock["now"] == 0
    assert clock["paused"] is True
    moved = (await api.call("POST", "/_sandbox/clock/advance", json={"seconds": 12.5})).data
    assert moved["now"] == 12.5
    assert moved["wall"] == pytest.approx(time.time(), abs=5)
    (await api.call("POST", "/_sandbox/clock/advance", json={"seconds": -1})).error(400)
    (await api.call("POST", "/_sandbox/clock/advance", json={})).error(400)
    assert (await api.call("POST", "/_sandbox/clock/resume")).data["paused"] is False
    assert (await api.call("POST", "/_sandbox/clock/pause")).data["paused"] is True


async def test_task_inspection_and_scheduling_over_http(api: Api, sandbox: SandboxServer) -> None:
    created = await api.create_task()
    tid = created["task_id"]
    info = (await api.call("GET", f"/_sandbox/tasks/{tid}")).data
    assert info["status"] == "running"
    assert info["schedule"]["finish_at"] == TASK_SECONDS
    assert info["schedule"]["finish_at_wall"] is None  # paused clock: not forecastable
    assert info["charged"] == 10
    reply = await api.call(
        "POST",
        f"/_sandbox/tasks/{tid}/schedule",
        json={"finish_in": 1, "outcome": "error", "error_message": "GPU fell over"},
    )
    assert reply.data["schedule"]["outcome"] == "error"
    await api.call("POST", "/_sandbox/clock/advance", json={"seconds": 1})
    task = await api.task(tid)
    assert (task["status"], task["result"]["error_message"]) == ("error", "GPU fell over")
    wall = (await api.call("GET", f"/_sandbox/tasks/{tid}")).data["schedule"]["finish_at_wall"]
    assert wall == pytest.approx(time.time(), abs=5)
    bad = await api.call("POST", f"/_sandbox/tasks/{tid}/schedule", json={"finish_in": 1})
    bad.error(409)
    bad = await api.call(
        "POST", "/_sandbox/tasks/nope/schedule", json={"finish_in": 1, "outcome": "failed"}
    )
    bad.error(404)
    other = (await api.create_task())["task_id"]
    bad = await api.call(
        "POST", f"/_sandbox/tasks/{other}/schedule", json={"finish_in": 1, "outcome": "meh"}
    )
    assert "outcome" in bad.error(400)
    (await api.call("GET", "/_sandbox/tasks/nope")).error(404)
    listed = (await api.call("GET", "/_sandbox/tasks?limit=1&offset=1")).data
    assert listed == {"count": 2, "task_ids": [other]}


async def test_running_clock_forecasts_wall_finish() -> None:
    async with SandboxServer(time_scale=0.01, task_duration=30) as server:
        async with aiohttp.ClientSession() as http:
            api = Api(http, server)
            before = time.time()
            tid = (await api.create_task())["task_id"]
            wall = server.describe_task(tid)["schedule"]["finish_at_wall"]
            assert before + 0.2 < wall < time.time() + 0.4


async def test_project_inspection_and_scheduling_over_http(
    api: Api, sandbox: SandboxServer
) -> None:
    pid = (await api.create_project(mode="manual"))["project_id"]
    info = (await api.call("GET", f"/_sandbox/projects/{pid}")).data
    assert info["schedule"]["script_ready_at"] == SCRIPT_READY
    assert info["inputs"]["mode"] == "manual"
    reply = await api.call(
        "POST",
        f"/_sandbox/projects/{pid}/schedule",
        json={"script_ready_in": 0, "outcome": "failed", "error_message": "unusable reference"},
    )
    assert reply.data["status"] == "failed"
    assert (await api.project(pid))["error_message"] == "unusable reference"
    assert (await api.call("GET", "/_sandbox/projects")).data == {
        "count": 1,
        "project_ids": [pid],
    }
    (await api.call("GET", "/_sandbox/projects/nope")).error(404)
    again = await api.call(
        "POST", f"/_sandbox/projects/{pid}/schedule", json={"script_ready_in": 1}
    )
    again.error(409)


async def test_credits_over_http(api: Api) -> None:
    data = (await api.call("POST", "/_sandbox/credits", json={"available": 5, "total": 50})).data
    assert data == {"api_available_credits": 5, "api_total_credits": 50}
    data = (await api.call("POST", "/_sandbox/credits", json={"add": 10})).data
    assert data == {"api_available_credits": 15, "api_total_credits": 60}
    assert (await api.call("GET", "/_sandbox/credits")).data == data
    (await api.call("POST", "/_sandbox/credits", json={"add": "lots"})).error(400)


async def test_several_servers_at_once() -> None:
    async with SandboxServer(credits=1) as one, SandboxServer(credits=2) as two:
        assert one.port != two.port
        async with aiohttp.ClientSession() as http:
            assert (await Api(http, one).credits())["api_total_credits"] == 1
            assert (await Api(http, two).credits())["api_total_credits"] == 2


async def test_life_cycle_errors() -> None:
    server = SandboxServer()
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.base_url
    async with server:
        assert server.started
        assert repr(server).startswith(f"<SandboxServer {server.base_url}")
        assert "sandbox-key" not in repr(server)
        with pytest.raises(RuntimeError, match="once"):
            await server.start()
    assert not server.started
    await server.aclose()  # idempotent


async def test_given_port_and_wildcard_host() -> None:
    first = SandboxServer()
    async with first:
        port = first.port
    async with SandboxServer(host="0.0.0.0", port=port) as server:  # noqa: S104
        assert server.base_url == f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    "options",
    [
        {"api_key": ""},
        {"api_key": " k"},
        {"port": 70000},
        {"credits": -1},
        {"failure_rate": 0.7, "error_rate": 0.7},
        {"task_duration": (5, 1)},
        {"task_duration": "long"},
        {"time_scale": 0},
    ],
)
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SandboxServer(**options)  # type: ignore[arg-type]


async def test_state_is_lazy_and_cheap_for_many_pending_tasks() -> None:
    # Laziness is checked by structure, not by time (the speed is bench/sandbox_rps.py's).
    server = SandboxServer(manual_clock=True, seed=1, credits=10**9, task_duration=(20, 40))
    state = server._state
    for _ in range(20_000):
        state.create_task({"prompt": "x"})
    assert not state._events  # no timer, no event for a task that will succeed
    server.clock.advance(10)
    state.settle()  # nothing is due yet
    assert not state._events
    server.clock.advance(40)
    state.settle()
    assert state.wallet.available == 10**9 - 10 * 20_000
