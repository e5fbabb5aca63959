"""The control API under ``/_sandbox/``: the sandbox's own endpoints for tests and benchmarks.

Same key, JSON and envelope as the service, outside its request log and statistics
(``docs/sandbox.md``). Each endpoint is the HTTP face of a public method of
:class:`~videogen_async.testing.SandboxServer`, whose ``ValueError`` is a 400.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from ._config import is_number
from ._faults import FaultRule
from ._render import envelope_response
from ._routes import ServiceRoutes, read_json_body
from ._simulation import SandboxError
from ._state import SandboxState
from ._truth import ServerTruth, create_tasks, reschedule_project, reschedule_task

# A handler takes the request and its JSON body ({} for a GET or DELETE).
_Handler = Callable[[web.Request, Any], Any]
_BULK_FIELDS = frozenset({"count", "prompt", "model", "duration", "finish_in", "outcome"})


def _number(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is not None and not is_number(value):
        raise SandboxError(400, 400, f"{name}: must be a number")
    return value


def _nothing() -> None:
    pass


def _query_int(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name, str(default))
    if not raw.isdigit():
        raise SandboxError(400, 400, f"{name}: must be an integer >= 0")
    return int(raw)


def _ids(name: str, ids: Sequence[str], offset: int = 0, limit: int | None = None) -> Any:
    """A listing: how many there are, and the ids from ``offset`` (``limit`` of them)."""
    end = None if limit is None else offset + limit
    return {"count": len(ids), name: list(ids[offset:end])}


class ControlAPI:
    """The ``/_sandbox/`` endpoints of one sandbox."""

    def __init__(self, server: ServerTruth, state: SandboxState, routes: ServiceRoutes) -> None:
        self._server, self._state, self._routes = server, state, routes

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the control routes to an application's router.

        Each handler takes the request and its JSON body (``{}`` for a GET). The schedules and
        the bulk create call the functions behind ``ServerTruth``'s methods, which answer
        404 and 409 as the service would, where the methods raise ``KeyError``/``ValueError``.
        """
        server = self._server
        clock, faults = server.clock, server.faults
        endpoints: list[tuple[str, str, _Handler]] = [
            ("GET", "stats", lambda r, b: self._stats()),
            ("POST", "reset-stats", lambda r, b: self._stats(server.reset_stats)),
            ("GET", "requests", self._requests),
            ("GET", "clock", lambda r, b: self._clock()),
            (
                "POST",
                "clock/advance",
                lambda r, b: self._clock(lambda: clock.advance(b.get("seconds"))),
            ),
            ("POST", "clock/pause", lambda r, b: self._clock(clock.pause)),
            ("POST", "clock/resume", lambda r, b: self._clock(clock.resume)),
            ("GET", "credits", lambda r, b: server.credits()),
            ("POST", "credits", self._set_credits),
            ("GET", "tasks", self._tasks),
            ("POST", "tasks/bulk", self._bulk_tasks),
            ("GET", "tasks/{task_id}", self._task),
            ("POST", "tasks/{task_id}/schedule", self._schedule_task),
            ("GET", "projects", lambda r, b: _ids("project_ids", server.project_ids)),
            ("GET", "projects/{project_id}", self._project),
            ("POST", "projects/{project_id}/schedule", self._schedule_project),
            ("GET", "faults", lambda r, b: self._faults()),
            ("POST", "faults", self._set_faults),
            (
                "DELETE",
                "faults",
                lambda r, b: self._faults(lambda: faults.clear(r.query.get("route"))),
            ),
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

    def _requests(self, request: web.Request, body: dict[str, Any]) -> Any:
        log = self._server.request_log
        limit = _query_int(request, "limit", 1000)
        return {"count": len(log), "requests": [r.to_dict() for r in log[-limit:]] if limit else []}

    def _stats(self, action: Callable[[], object] = _nothing) -> Any:
        action()
        return self._server.stats().to_dict()

    def _clock(self, action: Callable[[], object] = _nothing) -> Any:
        """The clock after ``action`` (an advance, a pause...), as ``GET`` shows it."""
        action()
        clock = self._server.clock
        return {
            "now": self._state.settle(),
            "wall": clock.wall_now(),
            "time_scale": clock.time_scale,
            "paused": clock.paused,
        }

    def _set_credits(self, request: web.Request, body: dict[str, Any]) -> Any:
        add, available, total = (_number(body, name) for name in ("add", "available", "total"))
        if add is not None:
            self._server.add_credits(add)
        if available is not None or total is not None:
            self._server.set_credits(available=available, total=total)
        return self._server.credits()

    def _tasks(self, request: web.Request, body: dict[str, Any]) -> Any:
        offset = _query_int(request, "offset", 0)
        limit = _query_int(request, "limit", 1000)
        return _ids("task_ids", self._server.task_ids, offset, limit)

    def _task(self, request: web.Request, body: dict[str, Any]) -> Any:
        state, task_id = self._state, request.match_info["task_id"]
        return state.show("Task", task_id, state.render.describe_task, self._routes.origin(request))

    def _schedule_task(self, request: web.Request, body: dict[str, Any]) -> Any:
        task_id, message = request.match_info["task_id"], body.get("error_message")
        reschedule_task(self._state, task_id, body.get("finish_in"), body.get("outcome"), message)
        return self._task(request, body)

    def _bulk_tasks(self, request: web.Request, body: dict[str, Any]) -> Any:
        unknown = sorted(set(body) - _BULK_FIELDS)
        if unknown:
            raise SandboxError(400, 400, f"{unknown[0]}: is not a field of this request")
        # A null field takes the method's default, as an omitted one does; a missing count is
        # refused by create_tasks (400), as a bad one is.
        fields = {k: v for k, v in body.items() if v is not None}
        count, finish_in, outcome = (fields.pop(k, None) for k in ("count", "finish_in", "outcome"))
        ids = create_tasks(self._state, count, finish_in, outcome, fields)
        return _ids("task_ids", ids)

    def _project(self, request: web.Request, body: dict[str, Any]) -> Any:
        state, project_id = self._state, request.match_info["project_id"]
        origin = self._routes.origin(request)
        return state.show("Project", project_id, state.render.describe_project, origin)

    def _schedule_project(self, request: web.Request, body: dict[str, Any]) -> Any:
        span, message = body.get("script_ready_in"), body.get("error_message")
        outcome = body.get("outcome") or "succeeded"
        project_id = request.match_info["project_id"]
        reschedule_project(self._state, project_id, span, outcome, message)
        return self._project(request, body)

    def _faults(self, action: Callable[[], object] = _nothing) -> Any:
        action()
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
        return self._faults()
