"""The sandbox's JSON: the envelope, and every object of the service as the statement shapes it.

Answers are built from producers keyed by field name, in the statement's order; the table is
checked against the shapes of :mod:`videogen_async._contract._service` at import, so a field
without its producer (or the reverse) fails at import, in every test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from aiohttp import web

from .._contract._service import SHAPES
from .._contract._validation import json_text
from ._clock import SandboxClock
from ._simulation import SUCCEEDED, TASK_OUTCOMES, Project, Task, iso, num

_Producer = Callable[[Any, Any], Any]
_Render = Callable[[Any, Any], dict[str, Any]]


def _table(shape: str, producers: Mapping[str, _Producer]) -> _Render:
    """A function building the shape's JSON object from its producers, in the statement's order.

    Refuses a table that does not fit the shape. (A dict comprehension over the pairs costs
    under a microsecond more per object than a hand-written literal: nothing beside a request.)
    """
    names = SHAPES[shape].names
    if set(names) != set(producers):
        missing = sorted(set(names) - set(producers))
        unknown = sorted(set(producers) - set(names))
        raise RuntimeError(f"{shape}: no producer for {missing}, not in the statement {unknown}")
    pairs = [(name, producers[name]) for name in names]
    return lambda o, c: {name: produce(o, c) for name, produce in pairs}


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
    envelope = {"code": code, "trace_id": trace_id, "message": message, "data": data}
    body = json_text(envelope, "", separators=(",", ":"), ensure_ascii=False)
    all_headers = {"X-Trace-Id": trace_id, **(headers or {})}
    kind = "application/json"
    return web.Response(text=body, status=status, content_type=kind, headers=all_headers)


@attrs.define
class _TaskView:
    """What a task's answer needs besides the task: its status now, and the stamps."""

    renderer: Renderer
    status: str
    now: float
    origin: str


_RESULT = _table(
    "TaskResult",
    {
        "video_url": lambda t, v: (
            f"{v.origin}/media/{t.task_id}.mp4" if v.status == SUCCEEDED else None
        ),
        "error_message": lambda t, v: t.error_message if v.status != SUCCEEDED else None,
        "finished_at": lambda t, v: v.renderer.stamp(t.finished_at, t.created_wall),
        "status": lambda t, v: v.status,
    },
)
_TASK_PRODUCERS: dict[str, _Producer] = {
    "task_id": lambda t, v: t.task_id,
    "status": lambda t, v: v.status,
    "model": lambda t, v: t.model,
    "created_at": lambda t, v: iso(t.created_wall),
    "updated_at": lambda t, v: v.renderer.stamp(t.updated_at(v.now), t.created_wall),
    "credits_cost": lambda t, v: num(t.credits_cost(v.now)),
    "result": lambda t, v: _RESULT(t, v) if v.status in TASK_OUTCOMES else None,
}
_TASK = _table("Task", _TASK_PRODUCERS)
_PROJECT_TASK = _table(
    "ProjectTask",
    {
        **_TASK_PRODUCERS,
        "batch": lambda t, v: t.batch,
        "aspect_ratio": lambda t, v: t.aspect_ratio,
        "resolution": lambda t, v: t.resolution,
    },
)
# The data of a create's answer: ``CREATED_TASK(task, now)``.
CREATED_TASK = _table(
    "CreatedTask",
    {
        "task_id": lambda t, now: t.task_id,
        "status": lambda t, now: t.status(now),
        "created_at": lambda t, now: iso(t.created_wall),
        "credits_cost": lambda t, now: num(t.cost),
    },
)
# ``GET /v1/credits``: ``CREDITS(wallet, None)``.
CREDITS = _table(
    "CreditBalance",
    {
        "api_available_credits": lambda w, _: num(w.available),
        "api_total_credits": lambda w, _: num(w.total),
    },
)
# ``CREATED_PROJECT(project, project.phase(now))``.
CREATED_PROJECT = _table(
    "CreatedProject",
    {
        "project_id": lambda p, phase: p.project_id,
        "status": lambda p, phase: phase[0],
        "current_step": lambda p, phase: phase[1],
        "mode": lambda p, phase: p.mode,
        "credits_cost": lambda p, phase: num(p.script_cost),
        "created_at": lambda p, phase: iso(p.created_wall),
    },
)
_BILLING = _table(
    "Billing",
    {
        "script_credits_cost": lambda p, video: num(p.script_cost),
        "video_credits_cost": lambda p, video: num(video),
        "total_credits_cost": lambda p, video: num(round(p.script_cost + video, 2)),
    },
)
# ``POST .../{project_id}/videos``: ``VIDEO_BATCH(project, batch)``.
VIDEO_BATCH = _table(
    "VideoBatch",
    {
        "project_id": lambda p, b: p.project_id,
        "project_status": lambda p, b: p.phase(b.created_at)[0],
        "current_step": lambda p, b: p.phase(b.created_at)[1],
        "task_ids": lambda p, b: list(b.task_ids),
    },
)


class _ProjectView:
    __slots__ = ("now", "origin", "phase", "renderer", "tasks", "video_cost")

    def __init__(self, renderer: Renderer, project: Project, now: float, origin: str) -> None:
        self.renderer, self.now, self.origin = renderer, now, origin
        self.phase = project.phase(now)
        self.tasks = [renderer.project_task(t, now, origin) for t in project.tasks]
        self.video_cost = round(sum(t.credits_cost(now) for t in project.tasks), 2)


_PROJECT = _table(
    "Project",
    {
        "project_id": lambda p, v: p.project_id,
        "status": lambda p, v: v.phase[0],
        "current_step": lambda p, v: v.phase[1],
        "mode": lambda p, v: p.mode,
        "error_message": lambda p, v: p.fail_message if p.failed(v.now) else None,
        "view_script": lambda p, v: p.script if p.script_ready(v.now) else None,
        "billing": lambda p, v: _BILLING(p, v.video_cost),
        "task_ids": lambda p, v: [t.task_id for t in p.tasks],
        "tasks": lambda p, v: v.tasks,
        "created_at": lambda p, v: iso(p.created_wall),
        "updated_at": lambda p, v: v.renderer.stamp(p.updated_at(v.now), p.created_wall),
    },
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
        return _TASK(task, _TaskView(self, task.status(now), now, origin))

    def project_task(self, task: Task, now: float, origin: str) -> dict[str, Any]:
        """One element of a project's ``tasks``."""
        return _PROJECT_TASK(task, _TaskView(self, task.status(now), now, origin))

    def project(self, project: Project, now: float, origin: str) -> dict[str, Any]:
        """``GET /v1/video/viral-ads-clone/{project_id}``."""
        return _PROJECT(project, _ProjectView(self, project, now, origin))

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
        clock = self.clock
        no_script, fail_at = project.fails_before_script, project.fail_at
        return {
            **self.project(project, now, origin),
            "inputs": dict(project.inputs),
            "script": project.script,
            "batches": [
                {"batch": b.index, **attrs.asdict(b, filter=lambda a, _: a.name != "index")}
                for b in project.batches
            ],
            "now": now,
            "schedule": {
                "created_at": project.created_at,
                "media_ready_at": project.media_done_at,
                "analysis_done_at": project.analysis_done_at,
                "script_ready_at": None if no_script else project.script_ready_at,
                "script_ready_at_wall": None
                if no_script
                else clock.wall_time_of(project.script_ready_at),
                "fail_at": fail_at,
                "fail_at_wall": None if fail_at is None else clock.wall_time_of(fail_at),
            },
        }
