"""Fault injection: each kind, route matching, limits, seeding, run-time changes."""

from __future__ import annotations

import time

import aiohttp
import pytest

from videogen_async.testing import FaultRule, SandboxServer

from .conftest import Api, exact_options

CREATE = "POST /v1/video/videomodel-2"


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_error_envelope(api: Api, sandbox: SandboxServer, status: int) -> None:
    sandbox.faults.set("GET /v1/credits", error_rate=1.0, error_statuses=[status], times=1)
    reply = await api.call("GET", "/v1/credits")
    assert "sandbox fault injection" in reply.error(status)
    assert (await api.call("GET", "/v1/credits")).status == 200  # times=1: used up
    assert sandbox.faults.rules == ()


async def test_html_error_page(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set("/v1/credits", html_rate=1.0)
    reply = await api.call("GET", "/v1/credits")
    assert reply.status == 502
    assert reply.headers["Content-Type"].startswith("text/html")
    assert "<center><h1>502 Bad Gateway</h1></center>" in reply.body
    assert "nginx" in reply.body


async def test_rate_limit_with_retry_after(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set(CREATE, rate_limit_rate=1.0, retry_after=2)
    reply = await api.call("POST", "/v1/video/videomodel-2", json={"prompt": "x"})
    reply.error(429)
    assert reply.headers["Retry-After"] == "2"
    assert sandbox.task_ids == ()  # a 429 never takes effect
    sandbox.faults.set(CREATE, rate_limit_rate=1.0, retry_after=None)
    reply = await api.call("POST", "/v1/video/videomodel-2", json={"prompt": "x"})
    assert "Retry-After" not in reply.headers


async def test_latency_fixed_and_range(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set("GET /v1/credits", latency=0.15)
    t0 = time.perf_counter()
    assert (await api.call("GET", "/v1/credits")).status == 200
    assert time.perf_counter() - t0 >= 0.15
    sandbox.faults.set("GET /v1/credits", latency=(0.05, 0.1))
    t0 = time.perf_counter()
    await api.call("GET", "/v1/credits")
    assert time.perf_counter() - t0 >= 0.05
    assert sandbox.request_log[-1].fault == "latency"
    assert sandbox.stats().faults["latency"] == 2


async def test_drop_before_takes_no_effect(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set(CREATE, drop_before_rate=1.0)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await api.call("POST", "/v1/video/videomodel-2", json={"prompt": "x"})
    assert sandbox.task_ids == ()
    assert await api.available() == 10_000
    assert sandbox.request_log[-2].status is None
    assert sandbox.request_log[-2].fault == "drop_before"
    sandbox.faults.clear(CREATE)
    await api.create_task()
    assert len(sandbox.task_ids) == 1


async def test_drop_after_takes_effect_without_an_answer(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set(CREATE, drop_after_rate=1.0, times=1)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await api.call("POST", "/v1/video/videomodel-2", json={"prompt": "x"})
    assert len(sandbox.task_ids) == 1  # created and charged, the client never heard
    assert await api.available() == 10_000 - 10
    assert sandbox.stats().by_status["dropped"] == 1
    assert sandbox.stats().faults["drop_after"] == 1


async def test_most_specific_rule_wins(api: Api, sandbox: SandboxServer) -> None:
    sandbox.faults.set("*", error_rate=1.0, error_statuses=[500])
    sandbox.faults.set("/v1/video/*", error_rate=1.0, error_statuses=[502])
    sandbox.faults.set("GET /v1/credits")  # exact route: no fault
    assert (await api.call("GET", "/v1/credits")).status == 200
    assert (await api.call("GET", "/v1/tasks?task_id=x")).status == 500
    assert (await api.call("GET", "/v1/video/viral-ads-clone/abc")).status == 502
    sandbox.faults.set(
        "GET /v1/video/viral-ads-clone/{project_id}", error_rate=1.0, error_statuses=[503]
    )
    assert (await api.call("GET", "/v1/video/viral-ads-clone/abc")).status == 503
    assert (await api.call("POST", "/v1/video/videomodel-2", json={})).status == 502
    sandbox.faults.clear()
    assert (await api.call("GET", "/v1/tasks?task_id=x")).status == 404


async def test_control_and_openapi_routes_are_never_faulted(
    api: Api, sandbox: SandboxServer
) -> None:
    sandbox.faults.set("*", error_rate=1.0)
    assert (await api.call("GET", "/_sandbox/stats")).status == 200
    assert (await api.call("GET", "/openapi.json", auth=False)).status == 200


async def test_faults_are_seeded() -> None:
    async def statuses() -> list[int]:
        rule = FaultRule(error_rate=0.3, rate_limit_rate=0.2, error_statuses=(500, 503))
        async with SandboxServer(**exact_options(faults=[rule])) as server:
            async with aiohttp.ClientSession() as session:
                api = Api(session, server)
                return [(await api.call("GET", "/v1/credits")).status for _ in range(40)]

    first = await statuses()
    assert {200, 429, 500, 503} <= set(first)
    assert await statuses() == first


def test_rule_checks() -> None:
    with pytest.raises(ValueError, match="add up"):
        FaultRule(error_rate=0.6, drop_after_rate=0.6)
    with pytest.raises(ValueError, match="5xx"):
        FaultRule(error_statuses=(404,))
    with pytest.raises(ValueError, match="html_rate: must be a number >= 0 and <= 1"):
        FaultRule(html_rate=2)
    with pytest.raises(ValueError, match="times"):
        FaultRule(times=0)
    with pytest.raises(ValueError, match="unexpected keyword argument 'eror_rate'"):
        FaultRule.from_dict({"eror_rate": 1})
    assert FaultRule(route="get /v1/tasks").route == "GET /v1/tasks"


async def test_faults_over_http(api: Api, sandbox: SandboxServer) -> None:
    reply = await api.call(
        "POST",
        "/_sandbox/faults",
        json={"route": "GET /v1/credits", "error_rate": 1, "error_statuses": [503], "times": 2},
    )
    assert reply.data["rules"][0]["route"] == "GET /v1/credits"
    assert (await api.call("GET", "/v1/credits")).status == 503
    listed = (await api.call("GET", "/_sandbox/faults")).data
    assert listed["injected"]["error"] == 1
    reply = await api.call(
        "POST",
        "/_sandbox/faults",
        json={"replace": True, "rules": [{"route": "*", "latency": [0.0, 0.01]}]},
    )
    assert [r["route"] for r in reply.data["rules"]] == ["*"]
    assert reply.data["rules"][0]["latency"] == [0.0, 0.01]
    bad = await api.call("POST", "/_sandbox/faults", json={"error_rate": 5})
    assert "error_rate" in bad.error(400)
    cleared = await api.call("DELETE", "/_sandbox/faults")
    assert cleared.data["rules"] == []
    assert (await api.call("GET", "/v1/credits")).status == 200
