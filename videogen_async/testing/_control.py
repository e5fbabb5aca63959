"""The control API under ``/_sandbox/``: the sandbox's own endpoints for tests and benchmarks.

Same Bearer key, JSON and envelope as the service; not part of the service, left out of the
request log and the statistics, and described in ``docs/sandbox.md``. Each endpoint is the
HTTP face of a public method of :class:`~videogen_async.testing.SandboxServer`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web

from ._faults import FaultRule
from ._render import envelope_response
from ._routes import ServiceRoutes, read_json_body
from ._scheduling import schedule_project, schedule_task
from ._simulation import INSUFFICIENT_CREDITS, SandboxError
from ._state import SandboxState
from ._truth import ServerTruth

__all__ = ["ControlAPI"]


def _number(body: Mapping[str, Any], name: str, *, required: bool = True) -> float | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SandboxError(400, 400, f"{name}: must be a number")
    return float(value)


@contextlib.contextmanager
def _bad_argument() -> Iterator[None]:
    """A ``ValueError`` of a steering call is the caller's mistake: 400."""
    try:
        yield
    except ValueError as exc:
        raise SandboxError(400, 400, str(exc)) from None


class ControlAPI:
    """The ``/_sandbox/`` endpoints of one sandbox.

    Args:
        server: The sandbox whose public methods the endpoints call.
        state: Its simulated service.
        routes: Its service routes (for the key check and the origin of video URLs).
    """

    def __init__(self, server: ServerTruth, state: SandboxState, routes: ServiceRoutes) -> None:
        self._server = server
        self._state = state
        self._routes = routes

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the control routes to an application's router."""
        r = router
        c = "/_sandbox"
        r.add_get(f"{c}/stats", self._stats)
        r.add_post(f"{c}/reset-stats", self._reset_stats)
        r.add_get(f"{c}/requests", self._requests)
        r.add_get(f"{c}/clock", self._clock)
        r.add_post(f"{c}/clock/advance", self._clock_advance)
        r.add_post(f"{c}/clock/pause", self._clock_pause)
        r.add_post(f"{c}/clock/resume", self._clock_resume)
        r.add_get(f"{c}/credits", self._credits)
        r.add_post(f"{c}/credits", self._set_credits)
        r.add_get(f"{c}/tasks", self._tasks)
        r.add_post(f"{c}/tasks/bulk", self._bulk_tasks)
        r.add_get(f"{c}/tasks/{{task_id}}", self._task)
        r.add_post(f"{c}/tasks/{{task_id}}/schedule", self._schedule_task)
        r.add_get(f"{c}/projects", self._projects)
        r.add_get(f"{c}/projects/{{project_id}}", self._project)
        r.add_post(f"{c}/projects/{{project_id}}/schedule", self._schedule_project)
        r.add_get(f"{c}/faults", self._faults)
        r.add_post(f"{c}/faults", self._set_faults)
        r.add_delete(f"{c}/faults", self._clear_faults)

    async def _control_body(self, request: web.Request) -> dict[str, Any]:
        self._routes.authorize(request)
        return await read_json_body(request)

    def _clock_data(self) -> dict[str, Any]:
        clock = self._server.clock
        now = self._state.settle()
        return {
            "now": now,
            "wall": clock.wall_now(),
            "time_scale": clock.time_scale,
            "paused": clock.paused,
        }

    def _faults_data(self) -> dict[str, Any]:
        faults = self._server.faults
        return {"rules": [r.to_dict() for r in faults.rules], "injected": dict(faults.injected)}

    async def _stats(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        return envelope_response(self._server.stats().to_dict())

    async def _reset_stats(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        self._server.reset_stats()
        return envelope_response(self._server.stats().to_dict())

    async def _requests(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        limit = _query_int(request, "limit", 1000)
        records = list(self._server.request_log)[-limit:] if limit else []
        return envelope_response(
            {"count": len(self._server.request_log), "requests": [r.to_dict() for r in records]}
        )

    async def _clock(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        return envelope_response(self._clock_data())

    async def _clock_advance(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        seconds = _number(body, "seconds")
        try:
            self._server.clock.advance(seconds or 0.0)
        except ValueError as exc:
            raise SandboxError(400, 400, str(exc)) from None
        return envelope_response(self._clock_data())

    async def _clock_pause(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        self._server.clock.pause()
        return envelope_response(self._clock_data())

    async def _clock_resume(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        self._server.clock.resume()
        return envelope_response(self._clock_data())

    async def _credits(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        return envelope_response(self._server.credits())

    async def _set_credits(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        add = _number(body, "add", required=False)
        available = _number(body, "available", required=False)
        total = _number(body, "total", required=False)
        if add is not None:
            self._server.add_credits(add)
        if available is not None or total is not None:
            self._server.set_credits(available=available, total=total)
        return envelope_response(self._server.credits())

    async def _tasks(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        offset = _query_int(request, "offset", 0)
        limit = _query_int(request, "limit", 1000)
        ids = self._server.task_ids
        return envelope_response(
            {"count": len(ids), "task_ids": list(ids[offset : offset + limit])}
        )

    async def _task(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        task_id = request.match_info["task_id"]
        return envelope_response(self._state.describe_task(task_id, self._routes.origin(request)))

    async def _schedule_task(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        task_id = request.match_info["task_id"]
        with _bad_argument():
            schedule_task(
                self._state,
                task_id,
                finish_in=_number(body, "finish_in") or 0.0,
                outcome=body.get("outcome"),
                error_message=body.get("error_message"),
            )
        return envelope_response(self._state.describe_task(task_id, self._routes.origin(request)))

    async def _bulk_tasks(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        unknown = sorted(
            set(body) - {"count", "prompt", "model", "duration", "finish_in", "outcome"}
        )
        if unknown:
            raise SandboxError(400, 400, f"{unknown[0]}: is not a field of this request")
        finish_in = body.get("finish_in")
        if isinstance(finish_in, list):
            finish_in = tuple(finish_in)
        options = {k: body[k] for k in ("prompt", "model", "duration") if body.get(k) is not None}
        try:
            ids = self._server.create_tasks(
                body.get("count"),  # type: ignore[arg-type]  # checked there
                finish_in=finish_in,
                outcome=body.get("outcome"),
                **options,
            )
        except ValueError as exc:
            if str(exc) == INSUFFICIENT_CREDITS:
                raise SandboxError(409, 300111, INSUFFICIENT_CREDITS) from None
            raise SandboxError(400, 400, str(exc)) from None
        return envelope_response({"count": len(ids), "task_ids": ids})

    async def _projects(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        ids = self._server.project_ids
        return envelope_response({"count": len(ids), "project_ids": list(ids)})

    async def _project(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        project_id = request.match_info["project_id"]
        return envelope_response(
            self._state.describe_project(project_id, self._routes.origin(request))
        )

    async def _schedule_project(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        project_id = request.match_info["project_id"]
        with _bad_argument():
            schedule_project(
                self._state,
                project_id,
                script_ready_in=_number(body, "script_ready_in") or 0.0,
                outcome=body.get("outcome") or "succeeded",
                error_message=body.get("error_message"),
            )
        return envelope_response(
            self._state.describe_project(project_id, self._routes.origin(request))
        )

    async def _faults(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        return envelope_response(self._faults_data())

    async def _set_faults(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        replace = bool(body.pop("replace", False))
        rules = body.get("rules", [body])
        if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
            raise SandboxError(400, 400, "rules: must be a list of objects")
        try:
            built = [FaultRule.from_dict(r) for r in rules]
        except ValueError as exc:
            raise SandboxError(400, 400, str(exc)) from None
        if replace:
            self._server.faults.clear()
        for rule in built:
            self._server.faults.add(rule)
        return envelope_response(self._faults_data())

    async def _clear_faults(self, request: web.Request) -> web.StreamResponse:
        self._routes.authorize(request)
        self._server.faults.clear(request.query.get("route"))
        return envelope_response(self._faults_data())


def _query_int(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SandboxError(400, 400, f"{name}: must be an integer") from None
    if value < 0:
        raise SandboxError(400, 400, f"{name}: must be >= 0")
    return value
