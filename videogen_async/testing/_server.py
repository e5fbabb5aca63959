"""``SandboxServer``: the whole video generation service, in memory, over real HTTP on loopback.

It puts the routes (:mod:`._routes`), the control API (:mod:`._control`), the console, faults
and counters behind one middleware; what tests read and steer is its base class
(:class:`~._truth.ServerTruth`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import anyio
from aiohttp import web
from yarl import URL

from .._client import AsyncVideoGen
from .._contract import _checks as checks
from .._contract._closing import AsyncClosing
from .._contract._service import Pricing
from ._clock import SandboxClock
from ._config import DEFAULT_API_KEY, Duration, ProjectTiming
from ._console import add_console
from ._control import ControlAPI
from ._faults import FaultInjector, FaultRule
from ._media import sample_mp4
from ._middleware import service_middleware
from ._routes import ServiceRoutes
from ._state import SandboxState
from ._stats import RequestStats
from ._truth import ServerTruth

logger = logging.getLogger("videogen_async.testing")


class SandboxServer(ServerTruth, AsyncClosing):
    """An in-memory emulator of the whole video generation service, served over HTTP.

    Use it as an async context manager (or call :meth:`start` and :meth:`aclose`)::

        async with SandboxServer(time_scale=0.001, seed=1) as server:
            async with server.client() as client:
                task = await client.tasks.create("a red fox in the snow")

    Servers are independent (state, clock, port). See docs/sandbox.md.

    Args:
        host: Interface to listen on.
        port: Port to listen on; ``0`` picks a free one.
        api_key: The key the sandbox accepts (``Authorization: Bearer <key>``).
        credits: Starting balance (total and available).
        time_scale: Real seconds per simulated second; durations below are simulated.
        manual_clock: Start with the clock paused: it moves only through ``clock.advance``.
        seed: Seed of every random draw (durations, outcomes, ids, faults).
        task_duration: A task's run time: seconds, ``(low, high)`` or ``(rng) -> seconds``.
        queue_delay: How long a video task is ``queued`` before it runs (same forms).
        failure_rate: Probability that a task ends ``failed`` (refunded).
        error_rate: Probability that a task ends ``error`` (refunded).
        project_timing: Durations of a project's steps before its script is ready.
        project_failure_rate: Probability that a project fails before its script.
        failure_marker: Text making a project (``reference_video_url``) or task (prompt,
            script) fail; ``None``: off.
        media_rejects: Predicate on project media URLs: ``True``: not storable (409 / 100099),
            as hosts under ``.invalid`` always are.
        pricing: What tasks and projects cost.
        faults: Fault rules active from the start (see :class:`FaultRule`).
        request_log_size: How many recent requests the request log keeps (``>= 0``: the
            log's deque refuses a negative size with a ``ValueError``).

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
        if not isinstance(api_key, str) or not api_key or api_key != api_key.strip():
            raise ValueError("api_key must be a non-empty string without surrounding spaces")
        checks.whole("port", port, minimum=0, maximum=65535)
        self._host, self._port, self._api_key = host, port, api_key
        self.clock = SandboxClock(time_scale=time_scale, paused=manual_clock)
        self.faults = FaultInjector(seed, faults)
        self._state = SandboxState(
            clock=self.clock,
            seed=seed,
            credits=credits,
            pricing=pricing or Pricing(),
            task_duration=task_duration,
            queue_delay=queue_delay,
            failure_rate=failure_rate,
            error_rate=error_rate,
            project_timing=project_timing or ProjectTiming(),
            project_failure_rate=project_failure_rate,
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
            self.faults.injected,  # counted in place, zeroed in place
        )
        self._routes = ServiceRoutes(state, api_key, self._base_url_or_none)

    def __repr__(self) -> str:
        return (
            f"<SandboxServer {self._base_url_or_none() or 'not started'}"
            f" tasks={len(self._state.tasks)}>"
        )

    async def start(self) -> SandboxServer:
        """Start listening; return the server itself.

        Raises:
            RuntimeError: The server was already started or closed.
            OSError: The port could not be bound.
        """
        if self._runner is not None or self._closed:
            raise RuntimeError("a SandboxServer can be started once")
        await anyio.to_thread.run_sync(sample_mp4)  # read the clip once, off the event loop
        app = web.Application(middlewares=[service_middleware(self.faults, self._stats)])
        self._routes.register(app.router)
        ControlAPI(self).register(app.router, self._routes)
        add_console(app, self)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
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
        # A wildcard is shown as loopback, where a client can reach it; yarl brackets IPv6.
        return str(
            URL.build(
                scheme="http",
                host={"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(  # noqa: S104
                    self._host, self._host
                ),
                port=self._bound_port,
            )
        )

    @property
    def api_key(self) -> str:
        """The key the sandbox accepts."""
        return self._api_key

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` (starting with ``/``) on this server."""
        return self.base_url + path

    def client(self, **options: Any) -> AsyncVideoGen:
        """A new ``AsyncVideoGen`` of this sandbox (``options`` go to it); close it when done.

        Raises:
            RuntimeError: The server is not started.
        """
        return AsyncVideoGen(api_key=self.api_key, base_url=self.base_url, **options)
