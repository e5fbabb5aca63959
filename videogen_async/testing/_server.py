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

import logging
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from .._exceptions import InvalidRequestError
from .._validation import validate_task_request
from ._clock import SandboxClock
from ._config import (
    DEFAULT_API_KEY,
    Duration,
    Pricing,
    ProjectTiming,
    check_duration,
    check_rate,
)
from ._control import ControlAPI
from ._faults import FaultInjector, FaultRule
from ._middleware import service_middleware
from ._openapi import build_openapi
from ._routes import ServiceRoutes
from ._simulation import SandboxError
from ._state import SandboxState
from ._stats import RequestRecord, RequestStats, SandboxStats

if TYPE_CHECKING:
    from .._client import AsyncVideoGen

__all__ = ["RequestRecord", "SandboxServer", "SandboxStats"]

logger = logging.getLogger("videogen_async.testing")

_T = TypeVar("_T")
_BULK_MAX = 1_000_000


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
        state = self._state
        self._stats = RequestStats(
            request_log_size,
            lambda: (len(state.tasks), len(state.projects)),
            lambda: self.faults.injected,
        )
        self._routes = ServiceRoutes(state, api_key, self._base_url_or_none)
        self._control = ControlAPI(self, state, self._routes)

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
        runner = web.AppRunner(
            self._build_app(), access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
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
            lambda: self._state.schedule.schedule_task(
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
            lambda: self._state.schedule.create_tasks(body, count, finish_in=spec, outcome=outcome)
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
            lambda: self._state.schedule.schedule_project(
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
            available=state.wallet.available + amount, total=state.wallet.total + amount
        )

    @property
    def request_log(self) -> tuple[RequestRecord, ...]:
        """The recent requests (control endpoints excluded), oldest first."""
        return tuple(self._stats.log)

    def stats(self) -> SandboxStats:
        """Return the counters since the last :meth:`reset_stats`."""
        return self._stats.snapshot()

    def reset_stats(self) -> None:
        """Zero the counters, the peaks and the request log (tasks and projects stay)."""
        self._stats.clear()
        self.faults.reset_counts()

    def openapi(self) -> dict[str, Any]:
        """Return the OpenAPI 3.1 document of the service, with this server's URL."""
        return build_openapi(self._base_url_or_none())

    # ----------------------------------------------------------------------------------------
    # The application: every route is registered here
    # ----------------------------------------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[service_middleware(self.faults, self._stats)])
        self._routes.register(app.router)
        self._control.register(app.router)
        return app

    def _origin(self) -> str:
        return self._routes.origin()
