"""``POST /_sandbox/tasks/bulk`` and ``SandboxServer.create_tasks``: many ids at once."""

from __future__ import annotations

import pytest

from videogen_async.testing import SandboxServer

from .conftest import Api


async def test_bulk_over_http_creates_charges_and_schedules(
    api: Api, sandbox: SandboxServer
) -> None:
    before = await api.available()
    reply = await api.call(
        "POST", "/_sandbox/tasks/bulk", json={"count": 5, "finish_in": [10, 20], "duration": 4}
    )
    data = reply.data
    assert data["count"] == 5
    assert list(sandbox.task_ids) == data["task_ids"]
    assert len(set(data["task_ids"])) == 5
    assert await api.available() == before - 5 * 8  # charged as created tasks (2 credits/s)
    assert sandbox.request_log[-1].route == "GET /v1/credits"  # control calls are not logged
    assert sandbox.stats().tasks_created == 5
    assert {(await api.task(t))["status"] for t in data["task_ids"]} == {"running"}
    sandbox.clock.advance(20)
    assert {(await api.task(t))["status"] for t in data["task_ids"]} == {"succeeded"}


async def test_bulk_outcome_and_pending_for_good(api: Api, sandbox: SandboxServer) -> None:
    failed = sandbox.create_tasks(2, finish_in=0, outcome="failed")
    pending = sandbox.create_tasks(3, finish_in=1e9)
    assert [(await api.task(t))["status"] for t in failed] == ["failed", "failed"]
    sandbox.clock.advance(3600)
    assert {(await api.task(t))["status"] for t in pending} == {"running"}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"count": 0}, 400, 400),
        ({}, 400, 400),
        ({"count": None}, 400, 400),
        ({"count": "3"}, 400, 400),
        ({"count": 2_000_000}, 400, 400),
        ({"count": 2, "finish_in": -1}, 400, 400),
        ({"count": 2, "outcome": "maybe"}, 400, 400),
        ({"count": 2, "duration": 99}, 400, 400),
        ({"count": 2, "colour": "red"}, 400, 400),
        ({"count": 10_000_000 // 10}, 409, 300111),
    ],
)
async def test_bulk_refusals_create_nothing(
    api: Api, sandbox: SandboxServer, body: dict[str, object], status: int, code: int
) -> None:
    sandbox.set_credits(available=1000, total=1000)
    (await api.call("POST", "/_sandbox/tasks/bulk", json=body)).error(status, code)
    assert sandbox.task_ids == ()
    assert await api.available() == 1000


async def test_bulk_needs_the_key(api: Api, sandbox: SandboxServer) -> None:
    (await api.call("POST", "/_sandbox/tasks/bulk", json={"count": 1}, auth=False)).error(401)
    assert sandbox.task_ids == ()


def test_create_tasks_checks_its_arguments() -> None:
    server = SandboxServer()
    with pytest.raises(ValueError, match="count"):
        server.create_tasks(True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prompt"):
        server.create_tasks(1, prompt=" ")
