"""Every answer of the sandbox has the fields of the statement's shape, in the statement's order.

The sandbox writes its answers as literals (``testing/_render.py``, ``testing/_routes.py``); this
is what catches a field added to the statement (``_contract/_service.py``'s ``SHAPES``) without
its value in the sandbox, or the reverse. A task is shown running and ended, a project before
its script and with a batch of tasks, so that every nested object is there.
"""

from __future__ import annotations

from typing import Any

from videogen_async._contract._service import SHAPES
from videogen_async.testing import SandboxServer

from .conftest import SCRIPT_READY, TASK_SECONDS, Api


def keys(data: dict[str, Any]) -> tuple[str, ...]:
    return tuple(data)


async def test_every_answer_follows_its_shape(api: Api, sandbox: SandboxServer) -> None:
    assert keys(await api.credits()) == SHAPES["CreditBalance"].names
    created = await api.create_task()
    assert keys(created) == SHAPES["CreatedTask"].names
    running = await api.task(created["task_id"])
    assert keys(running) == SHAPES["Task"].names
    assert running["result"] is None
    project = await api.create_project(mode="manual")
    assert keys(project) == SHAPES["CreatedProject"].names
    sandbox.clock.advance(SCRIPT_READY)
    batch = (await api.create_videos(project["project_id"])).data
    assert keys(batch) == SHAPES["VideoBatch"].names
    sandbox.clock.advance(TASK_SECONDS)
    ended = await api.task(created["task_id"])
    assert keys(ended["result"]) == SHAPES["TaskResult"].names
    shown = await api.project(project["project_id"])
    assert keys(shown) == SHAPES["Project"].names
    assert keys(shown["billing"]) == SHAPES["Billing"].names
    assert [keys(t) for t in shown["tasks"]] == [SHAPES["ProjectTask"].names]
    assert keys(shown["tasks"][0]["result"]) == SHAPES["TaskResult"].names
