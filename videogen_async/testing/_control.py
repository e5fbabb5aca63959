"""The control API under ``/_sandbox/``: the sandbox's own endpoints for tests and benchmarks.

Same key, JSON and envelope as the service, outside its request log and statistics
(``docs/sandbox.md``). Each endpoint is the HTTP face of a public method of
:class:`~videogen_async.testing.SandboxServer`: a JSON body's fields are the method's keyword
arguments (a ``null`` one is left to the method's default), its ``KeyError`` a 404 and its
``ValueError`` a 409 or a 400, as the method raises them (``SandboxError``'s ``NotFound`` and
``Conflict`` keep their status and code; any other ``ValueError`` or ``TypeError``, such as an
argument the method does not take, is a 400).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from ._faults import FaultRule
from ._routes import ServiceRoutes
from ._simulation import SandboxError
from ._truth import ServerTruth

# A handler takes the request and its JSON body ({} for a GET or DELETE).
_Handler = Callable[[web.Request, Any], Any]


def _given(body: dict[str, Any]) -> dict[str, Any]:
    """A body's fields as keyword arguments: a ``null`` one is left out (its default)."""
    return {name: value for name, value in body.items() if value is not None}


def _query_int(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name, str(default))
    if not raw.isdigit():
        raise SandboxError(400, 400, f"{name}: must be an integer >= 0")
    return int(raw)


def _ids(name: str, ids: Sequence[str]) -> Any:
    """A listing: how many there are, and the ids."""
    return {"count": len(ids), name: list(ids)}


def _call(method: Callable[..., Any]) -> _Handler:
    """A handler calling ``method`` with the path's ids, then the body's fields by name.

    A field the method does not take, or a missing one, is its ``TypeError``: a 400.
    """
    return lambda request, body: method(*request.match_info.values(), **_given(body))


def _then(action: _Handler, view: _Handler) -> _Handler:
    """A handler that runs ``action``, then answers what ``view`` shows (its ``GET``)."""

    def handler(request: web.Request, body: Any) -> Any:
        action(request, body)
        return view(request, body)

    return handler


class ControlAPI:
    """The ``/_sandbox/`` endpoints of one sandbox: each a handler ``(request, body) -> data``."""

    def __init__(self, server: ServerTruth) -> None:
        self._server = server

    def register(self, router: web.UrlDispatcher, routes: ServiceRoutes) -> None:
        """Add the control routes to an application's router, behind ``routes.answer``."""
        server = self._server
        clock, faults = server.clock, server.faults
        for method, path, handler in [
            ("GET", "stats", self._stats),
            ("POST", "reset-stats", _then(_call(server.reset_stats), self._stats)),
            ("GET", "requests", self._requests),
            ("GET", "clock", self._clock),
            ("POST", "clock/advance", _then(_call(clock.advance), self._clock)),
            ("POST", "clock/pause", _then(_call(clock.pause), self._clock)),
            ("POST", "clock/resume", _then(_call(clock.resume), self._clock)),
            ("GET", "credits", _call(server.credits)),
            ("POST", "credits", self._set_credits),
            ("GET", "tasks", self._tasks),
            ("POST", "tasks/bulk", lambda r, b: _ids("task_ids", server.create_tasks(**_given(b)))),
            ("GET", "tasks/{task_id}", _call(server.describe_task)),
            ("POST", "tasks/{task_id}/schedule", _call(server.schedule_task)),
            ("GET", "projects", lambda r, b: _ids("project_ids", server.project_ids)),
            ("GET", "projects/{project_id}", _call(server.describe_project)),
            ("POST", "projects/{project_id}/schedule", _call(server.schedule_project)),
            ("GET", "faults", self._faults),
            ("POST", "faults", _then(self._set_faults, self._faults)),
            (
                "DELETE",
                "faults",
                _then(lambda r, b: faults.clear(r.query.get("route")), self._faults),
            ),
        ]:
            router.add_route(
                method, f"/_sandbox/{path}", routes.answer(handler, refused=(ValueError, TypeError))
            )

    def _stats(self, request: web.Request, body: Any) -> Any:
        return self._server.stats().to_dict()

    def _clock(self, request: web.Request, body: Any) -> Any:
        clock = self._server.clock
        return {
            "now": clock.now(),
            "wall": clock.wall_now(),
            "time_scale": clock.time_scale,
            "paused": clock.paused,
        }

    def _requests(self, request: web.Request, body: Any) -> Any:
        log = self._server.request_log
        limit = _query_int(request, "limit", 1000)
        return {"count": len(log), "requests": [r.to_dict() for r in log[-limit:]] if limit else []}

    def _set_credits(self, request: web.Request, body: Any) -> Any:
        given = _given(body)
        add = given.pop("add", None)
        if add is not None:
            self._server.add_credits(add)
        if given:
            self._server.set_credits(**given)
        return self._server.credits()

    def _tasks(self, request: web.Request, body: Any) -> Any:
        offset = _query_int(request, "offset", 0)
        ids = self._server.task_ids
        return {
            "count": len(ids),
            "task_ids": list(ids[offset : offset + _query_int(request, "limit", 1000)]),
        }

    def _faults(self, request: web.Request, body: Any) -> Any:
        faults = self._server.faults
        return {"rules": [r.to_dict() for r in faults.rules], "injected": dict(faults.injected)}

    def _set_faults(self, request: web.Request, body: Any) -> None:
        replace = body.pop("replace", False)
        rules = body.get("rules", [body])
        if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
            raise SandboxError(400, 400, "rules: must be a list of objects")
        built = [FaultRule.from_dict(r) for r in rules]
        if replace:
            self._server.faults.clear()
        for rule in built:
            self._server.faults.add(rule)
