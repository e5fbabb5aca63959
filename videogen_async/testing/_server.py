"""``SandboxServer``: the whole video generation service, in memory, over real HTTP on loopback.

The sandbox answers every endpoint of the service spec with the spec's envelope
``{code, trace_id, message, data}`` (a fresh ``trace_id`` per response, also sent as the
``X-Trace-Id`` header) and checks requests with the same rule functions the client uses
(:mod:`videogen_async._validation`).

Where the spec says "not shown", the sandbox does what a careful service would, as follows:

* **Missing or invalid key**: HTTP 401, code 401, a ``WWW-Authenticate: Bearer`` header; the
  key is never echoed. The ``Bearer`` scheme word is case-insensitive.
* **Unknown task or project id**: HTTP 404, code 404. Blank id: 400.
* **Omitted ``task_id`` query parameter**: HTTP 400, code 400, ``task_id: is required``.
* **Bad JSON, a body that is not a JSON object**: HTTP 400, code 400. An empty body counts as
  ``{}`` (so a missing required field is named). ``NaN``/``Infinity`` are not JSON. JSON has
  one number type, so an integral number written ``4.0`` counts as the integer 4.
* **Unknown body fields** (including the ``functionMode`` alias): HTTP 400 naming the field:
  the shared rules accept the documented names only.
* **Videos requested before the script is ready**, or for a failed project: HTTP 409,
  code 409, with the current step in the message. 409 because the request is valid but
  conflicts with the project's present state; repeating it later succeeds.
* **Unknown route / wrong method**: 404 / 405 with the error envelope.
* **Task statuses**: ``queued`` (only with a ``queue_delay``), ``running``, then ``succeeded``,
  ``failed`` or ``error``. A direct task is ``running`` right after creation (no queue delay
  by default). ``result`` is ``null`` until the task ends; then it carries ``video_url``
  (succeeded), ``error_message`` (failed/error), ``finished_at`` and, like one example of the
  spec, ``status``.
* **Task prices** (not published): a per-second rate by model (2 credits/s for
  ``videomodel_2_0``, 1 for ``videomodel_2_0_fast``; a 5 s task costs 10 or 5), charged at
  creation; a project video task costs 2 credits per second of the project's duration (x1.5 at
  1080), charged per task when its batch is created. See :class:`Pricing`.
* **Refunds**: a task that ends ``failed`` or ``error`` is refunded at that moment and shows
  ``credits_cost`` 0. A project that fails before its script is generated is refunded its 10
  credits. A project's ``billing`` is always script + the non-failed video tasks.
* **Insufficient credits** on a direct task or a videos batch: HTTP 409 / 300111
  ``Insufficient API credits``, as on project creation; nothing is created.
* **Project status**: ``draft`` while ``preparing_media``; ``running`` while ``analyzing`` and
  ``generating_script``; then auto mode creates its one batch (``running`` /
  ``generating_video``) and manual mode is ``succeeded`` / ``script_ready``. While any task of
  any batch is pending the project is ``running`` / ``generating_video``; once every task has
  ended it is ``succeeded`` / ``script_ready`` (a failed video task does not fail the project,
  which can still make more batches). ``view_script`` is ``null`` until generated.
* **Project failure**: a ``reference_video_url`` containing the failure marker
  (``sandbox-fail`` by default), a ``project_failure_rate`` draw, or
  :meth:`SandboxServer.schedule_project` moves the project to ``failed`` / ``failed`` with an
  ``error_message``. An auto project whose balance cannot pay for its automatic batch fails
  the same way when its script gets ready (its script stays visible and paid for).
* **Media**: a project media URL whose host is under ``.invalid`` (or rejected by
  ``media_rejects``) cannot be stored: 409 / 100099, nothing charged. The sandbox never
  fetches a URL. A *direct task* given such a URL is created but ends ``failed`` ("Failed to
  fetch media from URL"); a prompt containing the failure marker ends ``failed`` too.
* **Timestamps** are real times: the moment the sandbox clock reached the instant (see
  :class:`SandboxClock`), so a client's own clock agrees with them at any time scale.

Control endpoints for tests and benchmarks live under ``/_sandbox/`` (same Bearer key, JSON,
same envelope); they are not part of the service, are left out of the request log and the
statistics, and are described in ``docs/sandbox.md``.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import http
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
from aiohttp import web

from .._exceptions import InvalidRequestError
from .._validation import (
    check_id,
    validate_project_request,
    validate_task_request,
    validate_videos_request,
)
from ._clock import SandboxClock
from ._config import (
    DEFAULT_API_KEY,
    Duration,
    Pricing,
    ProjectTiming,
    check_duration,
    check_rate,
)
from ._faults import FaultInjector, FaultRule
from ._media import parse_range, sample_mp4
from ._openapi import build_openapi
from ._state import INSUFFICIENT_CREDITS, SUCCEEDED, SandboxError, SandboxState

if TYPE_CHECKING:
    from .._client import AsyncVideoGen

__all__ = ["RequestRecord", "SandboxServer", "SandboxStats"]

logger = logging.getLogger("videogen_async.testing")

_T = TypeVar("_T")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTML_PAGE = (
    "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n"
    "<center><h1>{status} {reason}</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
_HOST_HEADER = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$")
_MEDIA_ETAG = '"videogen-sandbox-sample"'
_BULK_MAX = 1_000_000


@attrs.frozen
class RequestRecord:
    """One request as the sandbox saw it.

    Attributes:
        method: The HTTP method.
        path: The path (without the query).
        route: ``METHOD /route/{pattern}`` (``<unmatched>`` for an unknown path).
        status: The status sent, or ``None`` when the connection was dropped.
        started_at: When the request arrived (Unix seconds, real time).
        duration: Seconds spent handling it (real time, including injected latency).
        fault: The injected fault kind, if any (``latency`` when only latency was added).
        trace_id: The ``trace_id`` of the answer, if it had one.
        query: The query string (``task_id=...`` of a status query).
        user_agent: The ``User-Agent`` header, which tells clients apart.
    """

    method: str
    path: str
    route: str
    status: int | None
    started_at: float
    duration: float
    fault: str | None = None
    trace_id: str | None = None
    query: str = ""
    user_agent: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen
class SandboxStats:
    """Counters of the requests a sandbox has served since its last statistics reset.

    Attributes:
        requests: Requests received (control endpoints excluded).
        by_route: Requests per ``METHOD /route``.
        by_status: Requests per status sent (``"dropped"`` for a closed connection).
        in_flight: Requests being handled now.
        peak_in_flight: The most requests handled at once.
        peak_in_flight_by_route: The same, per route.
        tasks_created: Video tasks created (direct and project batches).
        projects_created: Projects created.
        faults: Injected faults per kind.
        since: When the counters started (Unix seconds, real time).
    """

    requests: int
    by_route: Mapping[str, int]
    by_status: Mapping[str, int]
    in_flight: int
    peak_in_flight: int
    peak_in_flight_by_route: Mapping[str, int]
    tasks_created: int
    projects_created: int
    faults: Mapping[str, int]
    since: float

    def to_dict(self) -> dict[str, Any]:
        """The statistics as JSON-ready data."""
        return {
            "requests": self.requests,
            "by_route": dict(self.by_route),
            "by_status": dict(self.by_status),
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "peak_in_flight_by_route": dict(self.peak_in_flight_by_route),
            "tasks_created": self.tasks_created,
            "projects_created": self.projects_created,
            "faults": dict(self.faults),
            "since": self.since,
        }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _number(text: str) -> float | int:
    """Decode a JSON number with a fraction or exponent: ``4.0`` is the integer 4.

    JSON has one number type; like most JSON services the sandbox takes an integral value
    written ``4.0`` or ``4e0`` where an integer is expected.
    """
    value = float(text)
    return int(value) if value.is_integer() else value


def _as_rules(faults: FaultRule | Iterable[FaultRule] | None) -> list[FaultRule]:
    if faults is None:
        return []
    if isinstance(faults, FaultRule):
        return [faults]
    rules = list(faults)
    if not all(isinstance(r, FaultRule) for r in rules):
        raise TypeError("faults must be a FaultRule or an iterable of FaultRule")
    return rules


class SandboxServer:
    """An in-memory emulator of the whole video generation service, served over HTTP.

    Use it as an async context manager (or call :meth:`start` and :meth:`aclose`)::

        async with SandboxServer(time_scale=0.001, seed=1) as server:
            async with server.client() as client:
                task = await client.tasks.create("a red fox in the snow")

    Several servers can run at once in one process; each has its own state, clock and port.

    Args:
        host: Interface to listen on.
        port: Port to listen on; ``0`` picks a free one.
        api_key: The key the sandbox accepts (``Authorization: Bearer <key>``).
        credits: Starting balance: ``api_total_credits`` and ``api_available_credits``.
        time_scale: Real seconds per simulated second; ``0.001`` turns a 30 s generation into
            30 ms. Every simulated duration below is in simulated seconds.
        manual_clock: Start with the clock paused: simulated time then moves only through
            ``server.clock.advance(...)`` (or after ``server.clock.resume()``), so tests are
            exact and never sleep.
        seed: Seed of every random draw (durations, outcomes, ids, faults); ``None`` draws
            from the OS.
        task_duration: How long a video task runs: seconds, a ``(low, high)`` uniform range,
            or a callable ``(rng) -> seconds``.
        queue_delay: How long a video task is ``queued`` before it runs (same forms).
        failure_rate: Probability that a task ends ``failed`` (refunded).
        error_rate: Probability that a task ends ``error`` (refunded).
        project_timing: Durations of a project's steps before its script is ready.
        project_failure_rate: Probability that a project fails before its script.
        failure_marker: Text that makes a project fail when it appears in its
            ``reference_video_url``, and a task fail when it appears in its prompt or batch
            script; ``None`` disables it.
        media_rejects: A predicate on project media URLs: ``True`` means the URL cannot be
            stored (409 / 100099), in addition to hosts under ``.invalid``.
        pricing: What tasks and projects cost.
        faults: Fault rules active from the start (see :class:`FaultRule`).
        request_log_size: How many recent requests the request log keeps.

    Raises:
        ValueError: A setting is out of range.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str = DEFAULT_API_KEY,
        credits: float = 10_000,
        time_scale: float = 1.0,
        manual_clock: bool = False,
        seed: int | str | None = None,
        task_duration: Duration = (20.0, 40.0),
        queue_delay: Duration = 0.0,
        failure_rate: float = 0.0,
        error_rate: float = 0.0,
        project_timing: ProjectTiming | None = None,
        project_failure_rate: float = 0.0,
        failure_marker: str | None = "sandbox-fail",
        media_rejects: Callable[[str], bool] | None = None,
        pricing: Pricing | None = None,
        faults: FaultRule | Iterable[FaultRule] | None = None,
        request_log_size: int = 100_000,
    ) -> None:
        if not isinstance(api_key, str) or not api_key.strip() or api_key != api_key.strip():
            raise ValueError("api_key must be a non-empty string without surrounding spaces")
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be from 0 to 65535, got {port!r}")
        if isinstance(credits, bool) or not isinstance(credits, (int, float)) or credits < 0:
            raise ValueError(f"credits must be a number >= 0, got {credits!r}")
        failure_rate = check_rate(failure_rate, "failure_rate")
        error_rate = check_rate(error_rate, "error_rate")
        if failure_rate + error_rate > 1:
            raise ValueError("failure_rate + error_rate must not exceed 1")
        if request_log_size < 0:
            raise ValueError("request_log_size must be >= 0")
        self._host = host
        self._port = port
        self._api_key = api_key
        self._key_bytes = api_key.encode()
        self.clock = SandboxClock(time_scale=time_scale, paused=manual_clock)
        self.faults = FaultInjector(seed, _as_rules(faults))
        self._state = SandboxState(
            clock=self.clock,
            seed=seed,
            credits=credits,
            pricing=pricing or Pricing(),
            task_duration=check_duration(task_duration, "task_duration"),
            queue_delay=check_duration(queue_delay, "queue_delay"),
            failure_rate=failure_rate,
            error_rate=error_rate,
            project_timing=project_timing or ProjectTiming(),
            project_failure_rate=check_rate(project_failure_rate, "project_failure_rate"),
            failure_marker=failure_marker or None,
            media_rejects=media_rejects,
        )
        self._runner: web.AppRunner | None = None
        self._bound_port: int | None = None
        self._closed = False
        self._log: collections.deque[RequestRecord] = collections.deque(maxlen=request_log_size)
        self._in_flight_by_route: dict[str, int] = {}
        self._peak_by_route: dict[str, int] = {}
        self._reset_counters()

    def __repr__(self) -> str:
        where = self._base_url_or_none() or "not started"
        return f"<SandboxServer {where} tasks={len(self._state.tasks)}>"

    # ----------------------------------------------------------------------------------------
    # Life cycle
    # ----------------------------------------------------------------------------------------

    async def start(self) -> SandboxServer:
        """Start listening.

        Returns:
            The server itself.

        Raises:
            RuntimeError: The server was already started or closed.
            OSError: The port could not be bound.
        """
        if self._runner is not None or self._closed:
            raise RuntimeError("a SandboxServer can be started once")
        app = web.Application(middlewares=[self._middleware])
        self._add_routes(app)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self._host, self._port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._bound_port = int(runner.addresses[0][1])
        logger.debug("sandbox listening on %s", self.base_url)
        return self

    async def aclose(self) -> None:
        """Stop listening and close every connection. Safe to call more than once."""
        self._closed = True
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
            logger.debug("sandbox on port %s closed", self._bound_port)

    async def __aenter__(self) -> SandboxServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def started(self) -> bool:
        """Whether the server is listening."""
        return self._runner is not None

    @property
    def host(self) -> str:
        """The interface the server listens on."""
        return self._host

    @property
    def port(self) -> int:
        """The bound port.

        Raises:
            RuntimeError: The server is not started.
        """
        if self._bound_port is None:
            raise RuntimeError("the SandboxServer is not started")
        return self._bound_port

    @property
    def base_url(self) -> str:
        """``http://host:port`` to give a client (a wildcard host is shown as loopback).

        Raises:
            RuntimeError: The server is not started.
        """
        url = self._base_url_or_none()
        if url is None:
            raise RuntimeError("the SandboxServer is not started")
        return url

    def _base_url_or_none(self) -> str | None:
        if self._bound_port is None:
            return None
        host = self._host
        if host in ("", "0.0.0.0"):  # noqa: S104 - shown as loopback, not bound
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self._bound_port}"

    @property
    def api_key(self) -> str:
        """The key the sandbox accepts."""
        return self._api_key

    def url(self, path: str) -> str:
        """Return the absolute URL of a path on this server.

        Args:
            path: A path starting with ``/``.

        Returns:
            ``base_url + path``.
        """
        return self.base_url + path

    def client(self, **options: Any) -> AsyncVideoGen:
        """Return an ``AsyncVideoGen`` client of this sandbox.

        Args:
            **options: Passed on to ``AsyncVideoGen`` (``timeout``, ``max_retries``,
                ``session``, ...).

        Returns:
            A new client; close it (``async with`` or ``aclose()``) when done.

        Raises:
            RuntimeError: The server is not started.
        """
        from .._client import AsyncVideoGen

        return AsyncVideoGen(api_key=self.api_key, base_url=self.base_url, **options)

    # ----------------------------------------------------------------------------------------
    # Server-side truth for tests
    # ----------------------------------------------------------------------------------------

    @property
    def task_ids(self) -> tuple[str, ...]:
        """Every task created (direct and project batches), in creation order."""
        return tuple(self._state.tasks)

    @property
    def project_ids(self) -> tuple[str, ...]:
        """Every project created, in creation order."""
        return tuple(self._state.projects)

    def describe_task(self, task_id: str) -> dict[str, Any]:
        """Return what the status query would show, plus the sandbox's own view.

        Args:
            task_id: The task.

        Returns:
            The ``GET /v1/tasks`` data plus ``project_id``, ``batch``, ``charged``,
            ``refunded``, ``now`` and ``schedule`` (``created_at``, ``started_at`` and
            ``finish_at`` in simulated seconds; ``finish_at_wall``, the real Unix time at which
            it ends or ended, ``None`` while a paused clock has not reached it; ``outcome``,
            ``error_message``).

        Raises:
            KeyError: No such task.
        """
        return self._wrap_lookup(lambda: self._state.describe_task(task_id, self._origin()))

    def describe_project(self, project_id: str) -> dict[str, Any]:
        """Return what the project endpoint would show, plus inputs, batches and schedule.

        Args:
            project_id: The project.

        Returns:
            The project data plus ``inputs``, ``script``, ``batches``, ``now`` and
            ``schedule``.

        Raises:
            KeyError: No such project.
        """
        return self._wrap_lookup(lambda: self._state.describe_project(project_id, self._origin()))

    def schedule_task(
        self,
        task_id: str,
        *,
        finish_in: float,
        outcome: str | None = None,
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when and how a pending task ends.

        Args:
            task_id: The task.
            finish_in: Simulated seconds from now until it ends; ``0`` ends it now.
            outcome: ``"succeeded"``, ``"failed"`` or ``"error"``; unchanged when omitted.
            error_message: The failure text of a failed/error outcome.

        Returns:
            The task as :meth:`describe_task` shows it.

        Raises:
            KeyError: No such task.
            ValueError: The task has already ended, or a bad argument.
        """
        self._wrap_lookup(
            lambda: self._state.schedule_task(
                task_id, finish_in=finish_in, outcome=outcome, error_message=error_message
            )
        )
        return self.describe_task(task_id)

    def create_tasks(
        self,
        count: int,
        *,
        prompt: str = "a sandbox bulk task",
        model: str | None = None,
        duration: int | None = None,
        finish_in: Duration | None = None,
        outcome: str | None = None,
    ) -> list[str]:
        """Create many direct tasks at once, each as if created through the service.

        For benchmarks and soak runs that need many ids quickly (``POST
        /_sandbox/tasks/bulk`` over HTTP). Each task is charged like a created task and
        appears in :attr:`task_ids` and in the statistics' ``tasks_created``; no request is
        logged.

        Args:
            count: How many tasks, 1 to 1,000,000.
            prompt: Their prompt (the failure marker works as usual).
            model: Their model (default ``videomodel_2_0``).
            duration: Their duration in seconds, 4 to 15 (default 5).
            finish_in: When each ends, in simulated seconds from now: a number, a
                ``(low, high)`` range drawn per task, or a callable(rng); the sandbox's task
                duration when ``None``. A very large value keeps them pending.
            outcome: ``"succeeded"``, ``"failed"`` or ``"error"`` for all; drawn from the
                failure rates when ``None``.

        Returns:
            The new ids, in creation order.

        Raises:
            ValueError: A bad argument, or a balance that does not cover them all (then
                none is created).
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _BULK_MAX:
            raise ValueError(f"count must be an integer from 1 to {_BULK_MAX}, got {count!r}")
        spec = None if finish_in is None else check_duration(finish_in, "finish_in")
        try:
            body = validate_task_request({"prompt": prompt, "model": model, "duration": duration})
        except InvalidRequestError as exc:
            raise ValueError(str(exc)) from None
        tasks = self._wrap_lookup(
            lambda: self._state.create_tasks(body, count, finish_in=spec, outcome=outcome)
        )
        return [task.task_id for task in tasks]

    def schedule_project(
        self,
        project_id: str,
        *,
        script_ready_in: float,
        outcome: str = "succeeded",
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when a project's script gets ready, or when it fails instead.

        Args:
            project_id: The project (its script must not be ready yet).
            script_ready_in: Simulated seconds from now until the script is ready, or with
                ``outcome="failed"`` until the project fails.
            outcome: ``"succeeded"`` or ``"failed"``.
            error_message: The project's ``error_message`` when it fails.

        Returns:
            The project as :meth:`describe_project` shows it.

        Raises:
            KeyError: No such project.
            ValueError: The script is already ready or the project failed; a bad argument.
        """
        self._wrap_lookup(
            lambda: self._state.schedule_project(
                project_id,
                script_ready_in=script_ready_in,
                outcome=outcome,
                error_message=error_message,
            )
        )
        return self.describe_project(project_id)

    @staticmethod
    def _wrap_lookup(call: Callable[[], _T]) -> _T:
        try:
            return call()
        except SandboxError as exc:
            if exc.status == 404:
                raise KeyError(exc.message) from None
            raise ValueError(exc.message) from None

    def credits(self) -> dict[str, float | int]:
        """Return the balance as ``GET /v1/credits`` shows it."""
        return self._state.credits_data()

    def set_credits(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set the balance.

        Args:
            available: New ``api_available_credits``.
            total: New ``api_total_credits`` (raised to ``available`` if lower).
        """
        self._state.set_credits(available=available, total=total)

    def add_credits(self, amount: float) -> None:
        """Top the balance up (both total and available).

        Args:
            amount: Credits to add.
        """
        state = self._state
        state.set_credits(
            available=state.available_credits + amount, total=state.total_credits + amount
        )

    @property
    def request_log(self) -> tuple[RequestRecord, ...]:
        """The recent requests (control endpoints excluded), oldest first."""
        return tuple(self._log)

    def stats(self) -> SandboxStats:
        """Return the counters since the last :meth:`reset_stats`."""
        return SandboxStats(
            requests=self._requests,
            by_route=dict(self._by_route),
            by_status=dict(self._by_status),
            in_flight=self._in_flight,
            peak_in_flight=self._peak,
            peak_in_flight_by_route=dict(self._peak_by_route),
            tasks_created=len(self._state.tasks) - self._tasks_base,
            projects_created=len(self._state.projects) - self._projects_base,
            faults=dict(self.faults.injected),
            since=self._since,
        )

    def reset_stats(self) -> None:
        """Zero the counters, the peaks and the request log (tasks and projects stay)."""
        self._reset_counters()
        self.faults.reset_counts()
        self._log.clear()

    def _reset_counters(self) -> None:
        self._requests = 0
        self._by_route: collections.Counter[str] = collections.Counter()
        self._by_status: collections.Counter[str] = collections.Counter()
        # Requests in flight now stay counted (they will leave), and seed the new peaks.
        in_flight = {k: v for k, v in self._in_flight_by_route.items() if v}
        self._in_flight_by_route = in_flight
        self._in_flight = sum(in_flight.values())
        self._peak = self._in_flight
        self._peak_by_route = dict(in_flight)
        self._tasks_base = len(self._state.tasks)
        self._projects_base = len(self._state.projects)
        self._since = time.time()

    def openapi(self) -> dict[str, Any]:
        """Return the OpenAPI 3.1 document of the service, with this server's URL."""
        return build_openapi(self._base_url_or_none())

    # ----------------------------------------------------------------------------------------
    # HTTP plumbing
    # ----------------------------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/v1/video/videomodel-2", self._create_task)
        r.add_get("/v1/tasks", self._get_task)
        r.add_get("/v1/credits", self._get_credits)
        r.add_post("/v1/video/viral-ads-clone", self._create_project)
        r.add_get("/v1/video/viral-ads-clone/{project_id}", self._get_project)
        r.add_post("/v1/video/viral-ads-clone/{project_id}/videos", self._create_videos)
        r.add_get("/media/{file_name}", self._media)
        r.add_get("/openapi.json", self._openapi)
        c = "/_sandbox"
        r.add_get(f"{c}/stats", self._c_stats)
        r.add_post(f"{c}/reset-stats", self._c_reset_stats)
        r.add_get(f"{c}/requests", self._c_requests)
        r.add_get(f"{c}/clock", self._c_clock)
        r.add_post(f"{c}/clock/advance", self._c_clock_advance)
        r.add_post(f"{c}/clock/pause", self._c_clock_pause)
        r.add_post(f"{c}/clock/resume", self._c_clock_resume)
        r.add_get(f"{c}/credits", self._c_credits)
        r.add_post(f"{c}/credits", self._c_set_credits)
        r.add_get(f"{c}/tasks", self._c_tasks)
        r.add_post(f"{c}/tasks/bulk", self._c_bulk_tasks)
        r.add_get(f"{c}/tasks/{{task_id}}", self._c_task)
        r.add_post(f"{c}/tasks/{{task_id}}/schedule", self._c_schedule_task)
        r.add_get(f"{c}/projects", self._c_projects)
        r.add_get(f"{c}/projects/{{project_id}}", self._c_project)
        r.add_post(f"{c}/projects/{{project_id}}/schedule", self._c_schedule_project)
        r.add_get(f"{c}/faults", self._c_faults)
        r.add_post(f"{c}/faults", self._c_set_faults)
        r.add_delete(f"{c}/faults", self._c_clear_faults)

    def _reply(
        self,
        data: Any,
        *,
        status: int = 200,
        code: int = 200,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        trace_id = uuid.uuid4().hex
        body = json.dumps(
            {"code": code, "trace_id": trace_id, "message": message, "data": data},
            separators=(",", ":"),
            ensure_ascii=False,
        )
        all_headers = {"X-Trace-Id": trace_id}
        if headers:
            all_headers.update(headers)
        return web.Response(
            text=body, status=status, content_type="application/json", headers=all_headers
        )

    def _error(
        self, status: int, code: int, message: str, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        return self._reply(None, status=status, code=code, message=message, headers=headers)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if path.startswith("/_sandbox/"):
            return await self._guarded(request, handler)
        method = request.method
        resource = request.match_info.route.resource
        pattern = resource.canonical if resource is not None else "<unmatched>"
        route = f"{method} {pattern}"
        self._enter(route)
        started = time.time()
        t0 = time.perf_counter()
        status: int | None = None
        fault: str | None = None
        trace_id: str | None = None
        try:
            decision = None
            if path != "/openapi.json":
                decision = self.faults.decide(method, pattern, path)
            response: web.StreamResponse | None = None
            if decision is not None:
                if decision.latency > 0:
                    fault = "latency"
                    await asyncio.sleep(decision.latency)
                if decision.kind is not None:
                    fault = decision.kind
                if decision.kind == "drop_before":
                    self._drop(request)
                    return web.Response(status=503)
                response = self._fault_response(decision.kind, decision.status, decision)
            if response is None:
                # Yield once, as a real service waiting on its database would: requests that
                # arrived together are then in flight together, and the peak shows a client's
                # concurrency rather than the sandbox's speed.
                await asyncio.sleep(0)
                response = await self._guarded(request, handler)
                if fault == "drop_after":
                    self._drop(request)
                    return response
            status = response.status
            trace_id = response.headers.get("X-Trace-Id")
            return response
        finally:
            self._leave(route)
            self._requests += 1
            self._by_route[route] += 1
            self._by_status["dropped" if status is None else str(status)] += 1
            if self._log.maxlen:
                self._log.append(
                    RequestRecord(
                        method,
                        path,
                        route,
                        status,
                        started,
                        time.perf_counter() - t0,
                        fault,
                        trace_id,
                        request.query_string,
                        request.headers.get("User-Agent"),
                    )
                )

    def _fault_response(
        self, kind: str | None, status: int, decision: Any
    ) -> web.StreamResponse | None:
        if kind == "rate_limit":
            headers = {}
            if decision.retry_after is not None:
                headers["Retry-After"] = f"{decision.retry_after:g}"
            return self._error(
                429, 429, "Too many requests (sandbox fault injection)", headers=headers
            )
        if kind == "error":
            reason = http.HTTPStatus(status).phrase if status in _STATUSES else "Server Error"
            return self._error(status, status, f"{reason} (sandbox fault injection)")
        if kind == "html":
            reason = http.HTTPStatus(status).phrase if status in _STATUSES else "Error"
            return web.Response(
                text=_HTML_PAGE.format(status=status, reason=reason),
                status=status,
                content_type="text/html",
                headers={"Server": "nginx"},
            )
        return None

    @staticmethod
    def _drop(request: web.Request) -> None:
        transport = request.transport
        if transport is not None:
            transport.close()

    def _enter(self, route: str) -> None:
        self._in_flight += 1
        self._peak = max(self._peak, self._in_flight)
        count = self._in_flight_by_route.get(route, 0) + 1
        self._in_flight_by_route[route] = count
        if count > self._peak_by_route.get(route, 0):
            self._peak_by_route[route] = count

    def _leave(self, route: str) -> None:
        self._in_flight -= 1
        self._in_flight_by_route[route] -= 1

    async def _guarded(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except SandboxError as exc:
            return self._error(exc.status, exc.code, exc.message, exc.headers)
        except InvalidRequestError as exc:
            return self._error(400, 400, str(exc))
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
            if exc.status == 404:
                text = f"No such endpoint: {request.method} {request.path}"
            elif exc.status == 405:
                text = f"Method {request.method} is not allowed on {request.path}"
            else:
                text = exc.reason
            return self._error(exc.status, exc.status, text, headers)
        except Exception:
            logger.exception("sandbox handler failed on %s %s", request.method, request.path)
            return self._error(500, 500, "Internal sandbox error")

    def _authorize(self, request: web.Request) -> None:
        header = request.headers.get("Authorization")
        challenge = {"WWW-Authenticate": 'Bearer realm="videogen-sandbox"'}
        if not header or not header.strip():
            raise SandboxError(
                401,
                401,
                "Missing API key: send the header 'Authorization: Bearer <API_KEY>'",
                challenge,
            )
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode("utf-8", "surrogateescape"), self._key_bytes
        ):
            raise SandboxError(401, 401, "Invalid API key", challenge)

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw, parse_constant=_reject_constant, parse_float=_number)
        except (ValueError, RecursionError):
            raise SandboxError(400, 400, "Request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise SandboxError(400, 400, "Request body must be a JSON object")
        return body

    def _origin(self, request: web.Request | None = None) -> str:
        if request is not None:
            host = request.host
            if host and _HOST_HEADER.match(host):
                return f"{request.scheme}://{host}"
        return self._base_url_or_none() or "http://127.0.0.1"

    @staticmethod
    def _checked_id(field: str, value: str | None) -> str:
        if value is None:
            raise SandboxError(400, 400, f"{field}: is required (query parameter)")
        try:
            return check_id(field, value)
        except InvalidRequestError as exc:
            raise SandboxError(400, 400, str(exc)) from None

    # ----------------------------------------------------------------------------------------
    # Service endpoints
    # ----------------------------------------------------------------------------------------

    async def _create_task(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        body = validate_task_request(await self._body(request))
        task = self._state.create_task(body)
        return self._reply(self._state.created_task_data(task, task.created_at))

    async def _get_task(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        task_id = self._checked_id("task_id", request.query.get("task_id"))
        state = self._state
        now = state.settle()
        return self._reply(state.task_data(state.get_task(task_id), now, self._origin(request)))

    async def _get_credits(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        return self._reply(self._state.credits_data())

    async def _create_project(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        body = validate_project_request(await self._body(request))
        project = self._state.create_project(body)
        return self._reply(self._state.created_project_data(project, project.created_at))

    async def _get_project(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        project_id = self._checked_id("project_id", request.match_info["project_id"])
        state = self._state
        now = state.settle()
        project = state.get_project(project_id)
        return self._reply(state.project_data(project, now, self._origin(request)))

    async def _create_videos(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        project_id = self._checked_id("project_id", request.match_info["project_id"])
        body = validate_videos_request(await self._body(request))
        project, batch = self._state.create_videos(project_id, body)
        status, step = project.phase(batch.created_at)
        return self._reply(
            {
                "project_id": project.project_id,
                "project_status": status,
                "current_step": step,
                "task_ids": list(batch.task_ids),
            }
        )

    async def _media(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["file_name"]
        state = self._state
        now = state.settle()
        task = state.tasks.get(name[:-4]) if name.endswith(".mp4") else None
        if task is None or task.status(now) != SUCCEEDED:
            raise SandboxError(404, 404, f"No video at /media/{name[:80]}")
        data = sample_mp4()
        size = len(data)
        headers = {
            "Accept-Ranges": "bytes",
            "Cache-Control": "public, max-age=86400",
            "ETag": _MEDIA_ETAG,
        }
        wanted = parse_range(request.headers.get("Range"), size)
        if wanted is False:
            return web.Response(status=416, headers={**headers, "Content-Range": f"bytes */{size}"})
        if wanted is None:
            return web.Response(body=data, content_type="video/mp4", headers=headers)
        headers["Content-Range"] = f"bytes {wanted.start}-{wanted.end}/{size}"
        return web.Response(
            body=data[wanted.start : wanted.end + 1],
            status=206,
            content_type="video/mp4",
            headers=headers,
        )

    async def _openapi(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(build_openapi(self._origin(request)))

    # ----------------------------------------------------------------------------------------
    # Control endpoints (/_sandbox/)
    # ----------------------------------------------------------------------------------------

    async def _control_body(self, request: web.Request) -> dict[str, Any]:
        self._authorize(request)
        return await self._body(request)

    @staticmethod
    def _number(body: Mapping[str, Any], name: str, *, required: bool = True) -> float | None:
        value = body.get(name)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SandboxError(400, 400, f"{name}: must be a number")
        return float(value)

    def _clock_data(self) -> dict[str, Any]:
        clock = self.clock
        now = self._state.settle()
        return {
            "now": now,
            "wall": clock.wall_now(),
            "time_scale": clock.time_scale,
            "paused": clock.paused,
        }

    async def _c_stats(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        return self._reply(self.stats().to_dict())

    async def _c_reset_stats(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        self.reset_stats()
        return self._reply(self.stats().to_dict())

    async def _c_requests(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        limit = _query_int(request, "limit", 1000)
        records = list(self._log)[-limit:] if limit else []
        return self._reply({"count": len(self._log), "requests": [r.to_dict() for r in records]})

    async def _c_clock(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        return self._reply(self._clock_data())

    async def _c_clock_advance(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        seconds = self._number(body, "seconds")
        try:
            self.clock.advance(seconds or 0.0)
        except ValueError as exc:
            raise SandboxError(400, 400, str(exc)) from None
        return self._reply(self._clock_data())

    async def _c_clock_pause(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        self.clock.pause()
        return self._reply(self._clock_data())

    async def _c_clock_resume(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        self.clock.resume()
        return self._reply(self._clock_data())

    async def _c_credits(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        return self._reply(self.credits())

    async def _c_set_credits(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        add = self._number(body, "add", required=False)
        available = self._number(body, "available", required=False)
        total = self._number(body, "total", required=False)
        if add is not None:
            self.add_credits(add)
        if available is not None or total is not None:
            self.set_credits(available=available, total=total)
        return self._reply(self.credits())

    async def _c_tasks(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        offset = _query_int(request, "offset", 0)
        limit = _query_int(request, "limit", 1000)
        ids = self.task_ids
        return self._reply({"count": len(ids), "task_ids": list(ids[offset : offset + limit])})

    async def _c_task(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        task_id = request.match_info["task_id"]
        return self._reply(self._state.describe_task(task_id, self._origin(request)))

    async def _c_schedule_task(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        task_id = request.match_info["task_id"]
        try:
            self._state.schedule_task(
                task_id,
                finish_in=self._number(body, "finish_in") or 0.0,
                outcome=body.get("outcome"),
                error_message=body.get("error_message"),
            )
        except ValueError as exc:
            raise SandboxError(400, 400, str(exc)) from None
        return self._reply(self._state.describe_task(task_id, self._origin(request)))

    async def _c_bulk_tasks(self, request: web.Request) -> web.StreamResponse:
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
            ids = self.create_tasks(
                body.get("count"),  # type: ignore[arg-type]  # checked there
                finish_in=finish_in,
                outcome=body.get("outcome"),
                **options,
            )
        except ValueError as exc:
            if str(exc) == INSUFFICIENT_CREDITS:
                raise SandboxError(409, 300111, INSUFFICIENT_CREDITS) from None
            raise SandboxError(400, 400, str(exc)) from None
        return self._reply({"count": len(ids), "task_ids": ids})

    async def _c_projects(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        ids = self.project_ids
        return self._reply({"count": len(ids), "project_ids": list(ids)})

    async def _c_project(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        project_id = request.match_info["project_id"]
        return self._reply(self._state.describe_project(project_id, self._origin(request)))

    async def _c_schedule_project(self, request: web.Request) -> web.StreamResponse:
        body = await self._control_body(request)
        project_id = request.match_info["project_id"]
        try:
            self._state.schedule_project(
                project_id,
                script_ready_in=self._number(body, "script_ready_in") or 0.0,
                outcome=body.get("outcome") or "succeeded",
                error_message=body.get("error_message"),
            )
        except ValueError as exc:
            raise SandboxError(400, 400, str(exc)) from None
        return self._reply(self._state.describe_project(project_id, self._origin(request)))

    def _faults_data(self) -> dict[str, Any]:
        return {
            "rules": [r.to_dict() for r in self.faults.rules],
            "injected": dict(self.faults.injected),
        }

    async def _c_faults(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        return self._reply(self._faults_data())

    async def _c_set_faults(self, request: web.Request) -> web.StreamResponse:
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
            self.faults.clear()
        for rule in built:
            self.faults.add(rule)
        return self._reply(self._faults_data())

    async def _c_clear_faults(self, request: web.Request) -> web.StreamResponse:
        self._authorize(request)
        self.faults.clear(request.query.get("route"))
        return self._reply(self._faults_data())


_STATUSES = frozenset(s.value for s in http.HTTPStatus)


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
