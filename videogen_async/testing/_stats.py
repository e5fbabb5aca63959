"""What the sandbox counts: requests per route and status, in-flight peaks, the request log."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping

import anyio
import attrs

from .._contract._serial import Serializable


@attrs.frozen
class RequestRecord(Serializable):
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
        code: The envelope's ``code`` of the answer, if it was one of the sandbox's envelopes.
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
    code: int | None = None


@attrs.frozen
class SandboxStats(Serializable):
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


class RequestStats:
    """The counters and the request log of one sandbox."""

    def __init__(
        self,
        log_size: int,
        created: Callable[[], tuple[int, int]],
        faults_injected: Mapping[str, int],
    ) -> None:
        # A deque of maxlen 0 keeps nothing: request_log_size=0 turns the log off.
        self.log: collections.deque[RequestRecord] = collections.deque(maxlen=log_size)
        self._created, self._faults_injected = created, faults_injected
        self._in_flight: collections.Counter[str] = collections.Counter()
        self._changed: anyio.Event | None = None
        self.clear()

    def clear(self) -> None:
        """Zero the counters and the peaks, and clear the request log."""
        self.log.clear()
        self._by_route: collections.Counter[str] = collections.Counter()
        self._by_status: collections.Counter[str] = collections.Counter()
        # Requests in flight now stay counted (they will leave), and seed the new peaks.
        self._in_flight = +self._in_flight
        self._peak, self._peak_by_route = self._in_flight.total(), dict(self._in_flight)
        self._tasks_base, self._projects_base = self._created()
        self._since = time.time()
        self._notify()

    def enter(self, route: str) -> None:
        """A request of ``route`` arrived."""
        self._in_flight[route] += 1
        self._peak = max(self._peak, self._in_flight.total())
        self._peak_by_route[route] = max(self._in_flight[route], self._peak_by_route.get(route, 0))
        self._notify()

    def leave(self, record: RequestRecord) -> None:
        """A request ended (``record.status`` is ``None`` for a dropped connection)."""
        self._in_flight[record.route] -= 1
        self._by_route[record.route] += 1
        self._by_status["dropped" if record.status is None else str(record.status)] += 1
        self.log.append(record)
        self._notify()

    async def changed(self) -> None:
        """Return once a request has arrived or ended, or the counters were reset."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def snapshot(self) -> SandboxStats:
        """The counters now."""
        tasks, projects = self._created()
        return SandboxStats(
            requests=self._by_route.total(),
            by_route=dict(self._by_route),
            by_status=dict(self._by_status),
            in_flight=self._in_flight.total(),
            peak_in_flight=self._peak,
            peak_in_flight_by_route=dict(self._peak_by_route),
            tasks_created=tasks - self._tasks_base,
            projects_created=projects - self._projects_base,
            faults=dict(self._faults_injected),
            since=self._since,
        )
