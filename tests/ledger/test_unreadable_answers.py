"""A create whose answer names what it created but is otherwise unreadable loses nothing.

A real ``aiohttp.web`` service answers each create with the id and a field of the wrong type:
the caller gets ``APIResponseError`` carrying the id, and the ledger records the entry with
that id, ``pending``, which the watchers then poll to its end. An answer whose charged ids
cannot be read stays ``unknown``, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from aiohttp import web

from videogen_async import AmbiguousCreateError, APIResponseError, AsyncVideoGen, Ledger

WHEN = "2026-11-21T10:00:00Z"
DONE = {"video_url": "https://cdn.example.com/v.mp4", "error_message": None, "finished_at": WHEN}


@asynccontextmanager
async def service(created: dict[str, Any]) -> AsyncIterator[AsyncVideoGen]:
    """Answer every create with ``created``, every poll with a succeeded task of its id."""

    def answer(data: Any) -> web.Response:
        return web.json_response({"code": 200, "trace_id": "tr-1", "data": data})

    async def create(request: web.Request) -> web.Response:
        return answer(created)

    async def status(request: web.Request) -> web.Response:
        task_id = request.query["task_id"]
        return answer(
            {"task_id": task_id, "status": "succeeded", "credits_cost": 8, "result": DONE}
        )

    app = web.Application()
    app.router.add_post("/v1/video/videomodel-2", create)
    app.router.add_post("/v1/video/viral-ads-clone", create)
    app.router.add_post("/v1/video/viral-ads-clone/{project_id}/videos", create)
    app.router.add_get("/v1/tasks", status)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with AsyncVideoGen(api_key="test-key", base_url=base) as client:
            yield client
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    "bad", [{"credits_cost": "lots"}, {"created_at": "yesterday"}, {"status": ["running"]}]
)
async def test_a_task_create_read_in_part_is_recorded_and_watched(
    ledger_url: str, bad: dict[str, Any]
) -> None:
    created = {"task_id": "t-1", "status": "running", "credits_cost": 8, **bad}
    async with service(created) as client, Ledger.open(ledger_url) as ledger:
        with pytest.raises(APIResponseError) as caught:
            await ledger.create_task(client, "a fox", key="fox")
        assert caught.value.task_id == "t-1"
        assert caught.value.request_may_have_taken_effect
        assert f"CreatedTask.{next(iter(bad))}: " in caught.value.message
        entry = await ledger.get("fox")
        assert entry is not None
        assert (entry.state, entry.task_id) == ("pending", "t-1")
        with anyio.fail_after(30):
            async with ledger.watch(client, claim_interval=0.05, stop_when_idle=True) as done:
                finished = [e async for e in done]
    assert [(e.key, e.state, e.task_id, e.credits_cost) for e in finished] == [
        ("fox", "succeeded", "t-1", 8.0)
    ]


async def test_a_project_and_a_batch_read_in_part_are_recorded(ledger_url: str) -> None:
    project = {"project_id": "p-1", "status": "draft", "mode": 7, "credits_cost": 10}
    async with service(project) as client, Ledger.open(ledger_url) as ledger:
        with pytest.raises(APIResponseError) as caught:
            await ledger.create_project(client, "https://cdn.example.com/r.mp4", ["https://x/p"])
        assert caught.value.project_id == "p-1"
        entries = [e async for e in ledger.entries()]
        assert [(e.kind, e.state, e.project_id) for e in entries] == [("project", "pending", "p-1")]
    batch = {"project_id": "p-1", "project_status": 3, "task_ids": ["t-1", "t-2"]}
    async with service(batch) as client, Ledger.open(ledger_url) as ledger:
        with pytest.raises(APIResponseError) as caught:
            await ledger.create_videos(client, entries[0].key, batch_key="b")
        assert caught.value.readable["task_ids"] == ("t-1", "t-2")
        tasks = {e.task_id: e.state async for e in ledger.entries() if e.kind == "project_task"}
        assert tasks == {"t-1": "pending", "t-2": "pending"}


async def test_a_batch_whose_task_ids_cannot_be_read_stays_unknown(sqlite_url: str) -> None:
    async with service({"project_id": "p-1", "status": "draft"}) as client:
        async with Ledger.open(sqlite_url) as ledger:
            project = await ledger.create_project(client, "https://x/r.mp4", ["https://x/p"])
    async with service({"project_id": "p-1", "task_ids": "t-1"}) as client:
        async with Ledger.open(sqlite_url) as ledger:
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_videos(client, project.key, batch_key="b")
            entry = await ledger.get("b")
    assert entry is not None
    assert entry.state == "unknown"
