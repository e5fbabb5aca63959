"""The service's routes: each endpoint of the statement, answered from the sandbox's state.

Requests are checked with the client's own rules (it refuses exactly what the client refuses);
answers rendered from the statement's shapes (:mod:`._render`). Answers where the spec says
"not shown" are listed in ``docs/sandbox.md``. Project creation (store media, charge the
script, start its steps) and video batches are written here, as the service's desk takes them.
"""

from __future__ import annotations

import hmac
import itertools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from aiohttp import web

from .._contract import _validation as rules
from .._contract._service import ENDPOINTS, PROJECT_REQUEST
from .._http._jsonbody import refuse_constant
from . import _simulation as sim
from ._config import sample_duration
from ._media import SAMPLE_PATH, sample_mp4
from ._middleware import Handler
from ._openapi import build_openapi
from ._render import envelope_response
from ._state import SandboxState

_HOST_HEADER = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
# An id segment is anything but "/" (aiohttp's default also refuses braces), so that every id
# reaches the handler and is judged by the shared ``check_id`` rule.
_ID = "[^/]+"


def _number(text: str) -> float | int:
    """Decode a JSON number with a fraction or exponent: ``4.0`` is the integer 4.

    JSON has one number type; like most JSON services the sandbox takes an integral value
    written ``4.0`` or ``4e0`` where an integer is expected.
    """
    value = float(text)
    return int(value) if value.is_integer() else value


async def read_json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object (an empty body counts as ``{}``).

    Raises:
        SandboxError: 400 for bad JSON or a body that is not an object.
    """
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw, parse_constant=refuse_constant, parse_float=_number)
    except (ValueError, RecursionError):
        raise sim.SandboxError(400, 400, "Request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise sim.SandboxError(400, 400, "Request body must be a JSON object")
    return body


def _checked_id(field: str, value: str | None) -> str:
    """The id of a path or query; a bad one is answered 400 (``InvalidRequestError``)."""
    if value is None:
        raise sim.SandboxError(400, 400, f"{field}: is required (query parameter)")
    return rules.check_id(field, value)


def create_project(state: SandboxState, body: Mapping[str, Any]) -> sim.Project:
    """Create a project from a validated body: store its media, charge the script, start it.

    Raises:
        SandboxError: 409 / 100099 when a media URL cannot be stored, 409 / 300111 when the
            balance does not cover the script charge. Nothing is created or charged.
    """
    now = state.settle()
    # The checked body has no nulls and its integers are ints (``check_body``).
    inputs = {f.name: body.get(f.name, f.default) for f in PROJECT_REQUEST.fields}
    rejects = state.media_rejects
    if any(
        u and (sim.host_is_invalid(u) or (rejects and rejects(u)))
        for u in [
            inputs["reference_video_url"],
            *inputs["product_image_urls"],
            inputs["avatar_image_url"],
        ]
    ):
        raise sim.Conflict(409, 100099, sim.MEDIA_NOT_STORED)
    cost = state.pricing.script_credits
    state.wallet.charge(cost)
    project = sim.Project(
        state.new_id(state.projects),
        inputs,
        now,
        state.clock.wall_now(),
        sim.make_script(inputs),
        script_cost=cost,
    )
    rng = state.rng
    # The steps' ends, each drawn in turn (media, analysis, script) after the one before.
    _, project.media_done_at, project.analysis_done_at, project.script_ready_at = (
        itertools.accumulate(
            (sample_duration(s, rng) for s in attrs.astuple(state.project_timing, recurse=False)),
            initial=now,
        )
    )
    draw = rng.random()
    if state.marked(inputs["reference_video_url"]):
        state.fail_before_script(project, project.analysis_done_at)
    elif draw < state.project_failure_rate:
        state.fail_before_script(
            project, rng.choice((project.analysis_done_at, project.script_ready_at))
        )
    else:
        state.push(project.script_ready_at, state.script_ready, project)
    state.projects[project.project_id] = project
    return project


def create_videos(state: SandboxState, project_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Create a batch of video tasks from a project's script (a validated body).

    Raises:
        SandboxError: 404 for an unknown project; 409 / 409 when the project has failed or
            its script is not generated yet; 409 / 300111 when the balance does not cover the
            batch. Nothing is created or charged on failure.
    """
    now = state.settle()
    project = sim.lookup(state.projects, "Project", project_id)
    if project.failed(now):
        raise sim.Conflict(
            409, 409, f"Project {project_id} has failed; no video tasks can be created"
        )
    if not project.script_ready(now):
        raise sim.Conflict(
            409,
            409,
            f"The script of project {project_id} is not ready yet (current_step:"
            f" {project.phase(now)[1]}); create videos once current_step is script_ready",
        )
    batch = state.create_batch(project, now, body, automatic=False)
    status, step = project.phase(now)
    return {
        "project_id": project_id,
        "project_status": status,
        "current_step": step,
        "task_ids": batch.task_ids,
    }


class ServiceRoutes:
    """The service's endpoints, the media stand-in and ``/openapi.json``."""

    def __init__(
        self, state: SandboxState, api_key: str, base_url: Callable[[], str | None]
    ) -> None:
        self._state = state
        self._key_bytes = api_key.encode()
        self.base_url = base_url

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the statement's endpoints, the media stand-in and ``/openapi.json``."""
        handlers = {
            "createVideoTask": self._create_task,
            "getTask": self._get_task,
            "getCredits": lambda request, body: self._state.balance(),
            "createProject": self._create_project,
            "getProject": self._get_project,
            "createProjectVideos": self._create_videos,
        }
        for endpoint in ENDPOINTS:
            router.add_route(
                endpoint.method,
                re.sub(r"\{(\w+)\}", rf"{{\1:{_ID}}}", endpoint.path),
                self.answer(handlers[endpoint.operation_id]),
            )
        router.add_get("/media/{file_name}", self._media)
        router.add_get("/openapi.json", self._openapi)

    def authorize(self, request: web.Request) -> None:
        """Check the ``Authorization: Bearer`` header.

        Raises:
            SandboxError: 401 with a ``WWW-Authenticate`` challenge; the key is never echoed.
        """
        header = request.headers.get("Authorization", "").strip()
        challenge = {"WWW-Authenticate": 'Bearer realm="videogen-sandbox"'}
        if not header:
            raise sim.SandboxError(
                401,
                401,
                "Missing API key: send the header 'Authorization: Bearer <API_KEY>'",
                challenge,
            )
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode("utf-8", "surrogateescape"), self._key_bytes
        ):
            raise sim.SandboxError(401, 401, "Invalid API key", challenge)

    def origin(self, request: web.Request | None = None) -> str:
        """``scheme://host:port`` as the request names the server (video URLs use it)."""
        if request is not None:
            host = request.host
            if host and _HOST_HEADER.match(host):
                return f"{request.scheme}://{host}"
        return self.base_url() or "http://127.0.0.1"

    def answer(self, handler: Callable[[web.Request, Any], Any], refused: Any = ()) -> Handler:
        """An endpoint: the key checked, then ``handler(request, body)``'s data enveloped.

        ``body`` is the JSON object of a ``POST`` (``{}`` for other methods). A ``refused``
        exception (the control API's ``ValueError``) is answered 400, unless it is already a
        :class:`SandboxError` (a 409 is also a ``ValueError``), which keeps its status.
        """

        async def endpoint(request: web.Request) -> web.StreamResponse:
            self.authorize(request)
            body = await read_json_body(request) if request.method == "POST" else {}
            try:
                return envelope_response(handler(request, body))
            except sim.SandboxError:
                raise
            except refused as exc:
                raise sim.SandboxError(400, 400, str(exc)) from None

        return endpoint

    def _create_task(self, request: web.Request, body: Any) -> Any:
        task = self._state.create_task(rules.validate_task_request(body))
        return {
            "task_id": task.task_id,
            "status": task.status(task.created_at),
            "created_at": sim.iso(task.created_wall),
            "credits_cost": sim.num(task.cost),
        }

    def _get_task(self, request: web.Request, body: Any) -> Any:
        return self._state.show(
            "Task",
            _checked_id("task_id", request.query.get("task_id")),
            self._state.render.task,
            self.origin(request),
        )

    def _create_project(self, request: web.Request, body: Any) -> Any:
        project = create_project(self._state, rules.validate_project_request(body))
        status, step = project.phase(project.created_at)
        return {
            "project_id": project.project_id,
            "status": status,
            "current_step": step,
            "mode": project.mode,
            "credits_cost": sim.num(project.script_cost),
            "created_at": sim.iso(project.created_wall),
        }

    def _get_project(self, request: web.Request, body: Any) -> Any:
        return self._state.show(
            "Project",
            _checked_id("project_id", request.match_info["project_id"]),
            self._state.render.project,
            self.origin(request),
        )

    def _create_videos(self, request: web.Request, body: Any) -> Any:
        return create_videos(
            self._state,
            _checked_id("project_id", request.match_info["project_id"]),
            rules.validate_videos_request(body),
        )

    async def _media(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["file_name"]
        now = self._state.settle()
        task = self._state.tasks.get(name[:-4]) if name.endswith(".mp4") else None
        if task is None or task.status(now) != sim.SUCCEEDED:
            raise sim.NotFound(404, 404, f"No video at /media/{name[:80]}")
        headers = {"Cache-Control": "public, max-age=86400", "Accept-Ranges": "bytes"}
        try:
            _ = request.http_range  # one range aiohttp reads: its file answer serves it
        except ValueError:  # several ranges, another unit, a reversed one: ignored (RFC 9110)
            return web.Response(body=sample_mp4(), content_type="video/mp4", headers=headers)
        return web.FileResponse(SAMPLE_PATH, headers=headers)

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(build_openapi(self.origin(request)))
