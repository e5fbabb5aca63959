"""The sandbox's JSON: the envelope, and every object of the service as the statement shapes it.

Each answer is written as a literal, its keys in the order of the statement's shapes
(:data:`videogen_async._contract._service.SHAPES`); ``tests/sandbox/test_shapes.py`` checks
every answer's keys against those shapes, so a field added to the statement without its value
here (or the reverse) fails there.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import attrs
from aiohttp import web

from .._contract._validation import json_text
from ._clock import SandboxClock
from ._simulation import SUCCEEDED, TASK_OUTCOMES, Project, Task, iso, num


def envelope_response(
    data: Any,
    *,
    status: int = 200,
    code: int = 200,
    message: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """An answer in the service's envelope, with a fresh ``trace_id`` (also ``X-Trace-Id``)."""
    trace_id = uuid.uuid4().hex
    return web.Response(
        text=json_text(
            {"code": code, "trace_id": trace_id, "message": message, "data": data},
            "",
            separators=(",", ":"),
            ensure_ascii=False,
        ),
        status=status,
        content_type="application/json",
        headers={"X-Trace-Id": trace_id, **(headers or {})},
    )


class Renderer:
    """The ``data`` of each answer of the service, stamped with the times the clock reached."""

    def __init__(self, clock: SandboxClock) -> None:
        self.clock = clock

    def stamp(self, sim: float, floor: float) -> str:
        """Format the real time of a past simulated instant, as the sandbox reports it."""
        wall = self.clock.wall_time_of(sim)
        return iso(floor if wall is None or wall < floor else wall)

    def task(self, task: Task, now: float, origin: str) -> dict[str, Any]:
        """``GET /v1/tasks``: ``origin`` is the ``scheme://host:port`` of the video URL."""
        status = task.status(now)
        succeeded = status == SUCCEEDED
        return {
            "task_id": task.task_id,
            "status": status,
            "model": task.model,
            "created_at": iso(task.created_wall),
            "updated_at": self.stamp(task.updated_at(now), task.created_wall),
            "credits_cost": num(task.credits_cost(now)),
            "result": {
                "video_url": f"{origin}/media/{task.task_id}.mp4" if succeeded else None,
                "error_message": None if succeeded else task.error_message,
                "finished_at": self.stamp(task.finished_at, task.created_wall),
                "status": status,
            }
            if status in TASK_OUTCOMES
            else None,
        }

    def project(self, project: Project, now: float, origin: str) -> dict[str, Any]:
        """``GET /v1/video/viral-ads-clone/{project_id}``."""
        status, step = project.phase(now)
        script, video = (
            project.script_cost,
            round(sum(t.credits_cost(now) for t in project.tasks), 2),
        )
        return {
            "project_id": project.project_id,
            "status": status,
            "current_step": step,
            "mode": project.mode,
            "error_message": project.fail_message if project.failed(now) else None,
            "view_script": project.script if project.script_ready(now) else None,
            "billing": {
                "script_credits_cost": num(script),
                "video_credits_cost": num(video),
                "total_credits_cost": num(round(script + video, 2)),
            },
            "task_ids": [t.task_id for t in project.tasks],
            "tasks": [
                {
                    **self.task(t, now, origin),
                    "batch": t.batch,
                    "aspect_ratio": t.aspect_ratio,
                    "resolution": t.resolution,
                }
                for t in project.tasks
            ],
            "created_at": iso(project.created_wall),
            "updated_at": self.stamp(project.updated_at(now), project.created_wall),
        }

    def describe_task(self, task: Task, now: float, origin: str) -> dict[str, Any]:
        """Everything the sandbox knows about a task, for tests and benchmarks."""
        return {
            **self.task(task, now, origin),
            "project_id": task.project_id,
            "prompt": task.prompt,
            "batch": task.batch or None,
            "charged": num(task.cost),
            "refunded": task.refunded,
            "now": now,
            "schedule": {
                "created_at": task.created_at,
                "started_at": task.started_at,
                "finish_at": task.finished_at,
                "finish_at_wall": self.clock.wall_time_of(task.finished_at),
                "outcome": task.outcome,
                "error_message": task.error_message,
            },
        }

    def describe_project(self, project: Project, now: float, origin: str) -> dict[str, Any]:
        """Everything the sandbox knows about a project, for tests and benchmarks."""
        ready = None if project.fails_before_script else project.script_ready_at
        fail_at = project.fail_at
        return {
            **self.project(project, now, origin),
            "inputs": dict(project.inputs),
            "script": project.script,
            "batches": [attrs.asdict(b) for b in project.batches],
            "now": now,
            "schedule": {
                "created_at": project.created_at,
                "media_ready_at": project.media_done_at,
                "analysis_done_at": project.analysis_done_at,
                "script_ready_at": ready,
                "script_ready_at_wall": None if ready is None else self.clock.wall_time_of(ready),
                "fail_at": fail_at,
                "fail_at_wall": None if fail_at is None else self.clock.wall_time_of(fail_at),
            },
        }
