"""The control API under ``/_sandbox/``: the sandbox's own endpoints for tests and benchmarks.

Same key, JSON and envelope as the service, outside its request log and statistics
(``docs/sandbox.md``). Each endpoint is the HTTP face of a public method of
:class:`~videogen_async.testing.SandboxServer`, whose ``ValueError`` is a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from ._faults import FaultRule
from ._render import envelope_response
from ._routes import ServiceRoutes, read_json_body
from ._simulation import INSUFFICIENT_CREDITS, SandboxError
from ._state import SandboxState
from ._truth import ServerTruth, reschedule_project, reschedule_task

_Handler = Callable[[web.Request, dict[str, Any]], Any]
_BULK_FIELDS = frozenset({"count", "prompt", "model", "duration", "finish_in", "outcome"})


def _number(body: Mapping[str, Any], name: str, *, required: bool = True) -> float | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SandboxError(400, 400, f"{name}: must be a number")
    return float(value)


def _query_int(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name, str(default))
    if not raw.isdigit():
        raise SandboxError(400, 400, f"{name}: must be an integer >= 0")
    return int(raw)


class ControlAPI:
    """The ``/_sandbox/`` endpoints of one sandbox."""

    def __init__(self, server: ServerTruth, state: SandboxState, routes: ServiceRoutes) -> None:
        self._server, self._state, self._routes = server, state, routes

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the control routes to an application's router."""
        endpoints: list[tuple[str, str, _Handler]] = [
            ("GET", "stats", self._stats),
            ("POST", "reset-stats", self._reset_stats),
            ("GET", "requests", self._requests),
            ("GET", "clock", self._clock),
            ("POST", "clock/advance", self._clock_advance),
            ("POST", "clock/pause", self._clock_pause),
            ("POST", "clock/resume", self._clock_resume),
            ("GET", "credits", self._credits),
            ("POST", "credits", self._set_credits),
            ("GET", "tasks", self._tasks),
            ("POST", "tasks/bulk", self._bulk_tasks),
            ("GET", "tasks/{task_id}", self._task),
            ("POST", "tasks/{task_id}/schedule", self._schedule_task),
            ("GET", "projects", self._projects),
            ("GET", "projects/{project_id}", self._project),
            ("POST", "projects/{project_id}/schedule", self._schedule_project),
            ("GET", "faults", self._faults),
            ("POST", "faults", self._set_faults),
            ("DELETE", "faults", self._clear_faults),
        ]
        for method, path, handler in endpoints:
            router.add_route(method, f"/_sandbox/{path}", self._endpoint(handler))

    def _endpoint(self, handler: _Handler) -> Callable[[web.Request], Any]:
        async def endpoint(request: web.Request) -> web.StreamResponse:
            self._routes.authorize(request)
            body = await read_json_body(request) if request.method == "POST" else {}
            try:
                return envelope_response(handler(request, body))
            except ValueError as exc:
                raise SandboxError(400, 400, str(exc)) from None

        return endpoint

    def _stats(self, request: web.Request, body: dict[str, Any]) -> Any:
        return self._server.stats().to_dict()

    def _reset_stats(self, request: web.Request, body: dict[str, Any]) -> Any:
        self._server.reset_stats()
        return self._server.stats().to_dict()

    def _requests(self, request: web.Request, body: dict[str, Any]) -> Any:
        log = self._server.request_log
        limit = _query_int(request, "limit", 1000)
        return {"count": len(log), "requests": [r.to_dict() for r in log[-limit:]] if limit else []}

    def _clock(self, request: web.Request, body: dict[str, Any]) -> Any:
        clock = self._server.clock
        return {
            "now": self._state.settle(),
            "wall": clock.wall_now(),
            "time_scale": clock.time_scale,
            "paused": clock.paused,
        }

    def _clock_advance(self, request: web.Request, body: dict[str, Any]) -> Any:
        self._server.clock.advance(_number(body, "seconds") or 0.0)
        return self._clock(request, body)

    def _clock_pause(self, request: web.Request, body: dict[str, Any]) -> Any:
        self._server.clock.pause()
        return self._clock(request, body)

    def _clock_resume(self, request: web.Request, body: dict[str, Any]) -> Any:
        self._server.clock.resume()
        return self._clock(request, body)

    def _credits(self, request: web.Request, body: dict[str, Any]) -> Any:
        return self._server.credits()

    def _set_credits(self, request: web.Request, body: dict[str, Any]) -> Any:
        add = _number(body, "add", required=False)
        available = _number(body, "available", required=False)
        total = _number(body, "total", required=False)
        if add is not None:
            self._server.add_credits(add)
        if available is not None or total is not None:
            self._server.set_credits(available=available, total=total)
        return self._server.credits()

    def _tasks(self, request: web.Request, body: dict[str, Any]) -> Any:
        offset = _query_int(request, "offset", 0)
        limit = _query_int(request, "limit", 1000)
        ids = self._server.task_ids
        return {"count": len(ids), "task_ids": list(ids[offset : offset + limit])}

    def _task(self, request: web.Request, body: dict[str, Any]) -> Any:
        task_id = request.match_info["task_id"]
        return self._state.describe_task(task_id, self._routes.origin(request))

    def _schedule_task(self, request: web.Request, body: dict[str, Any]) -> Any:
        finish_in = _number(body, "finish_in") or 0.0
        task_id, message = request.match_info["task_id"], body.get("error_message")
        reschedule_task(self._state, task_id, finish_in, body.get("outcome"), message)
        return self._task(request, body)

    def _bulk_tasks(self, request: web.Request, body: dict[str, Any]) -> Any:
        unknown = sorted(set(body) - _BULK_FIELDS)
        if unknown:
            raise SandboxError(400, 400, f"{unknown[0]}: is not a field of this request")
        finish_in = body.get("finish_in")
        options = {k: body[k] for k in ("prompt", "model", "duration") if body.get(k) is not None}
        try:
            ids = self._server.create_tasks(
                body.get("count"),  # type: ignore[arg-type]  # checked there
                finish_in=tuple(finish_in) if isinstance(finish_in, list) else finish_in,
                outcome=body.get("outcome"),
                **options,
            )
        except ValueError as exc:
            if str(exc) == INSUFFICIENT_CREDITS:
                raise SandboxError(409, 300111, INSUFFICIENT_CREDITS) from None
            raise
        return {"count": len(ids), "task_ids": ids}

    def _projects(self, request: web.Request, body: dict[str, Any]) -> Any:
        ids = self._server.project_ids
        return {"count": len(ids), "project_ids": list(ids)}

    def _project(self, request: web.Request, body: dict[str, Any]) -> Any:
        project_id = request.match_info["project_id"]
        return self._state.describe_project(project_id, self._routes.origin(request))

    def _schedule_project(self, request: web.Request, body: dict[str, Any]) -> Any:
        span = _number(body, "script_ready_in") or 0.0
        outcome = body.get("outcome") or "succeeded"
        project_id = request.match_info["project_id"]
        reschedule_project(self._state, project_id, span, outcome, body.get("error_message"))
        return self._project(request, body)

    def _faults(self, request: web.Request, body: dict[str, Any]) -> Any:
        faults = self._server.faults
        return {"rules": [r.to_dict() for r in faults.rules], "injected": dict(faults.injected)}

    def _set_faults(self, request: web.Request, body: dict[str, Any]) -> Any:
        replace = bool(body.pop("replace", False))
        rules = body.get("rules", [body])
        if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
            raise SandboxError(400, 400, "rules: must be a list of objects")
        built = [FaultRule.from_dict(r) for r in rules]
        if replace:
            self._server.faults.clear()
        for rule in built:
            self._server.faults.add(rule)
        return self._faults(request, body)

    def _clear_faults(self, request: web.Request, body: dict[str, Any]) -> Any:
        self._server.faults.clear(request.query.get("route"))
        return self._faults(request, body)
