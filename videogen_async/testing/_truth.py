"""What tests and benchmarks read and steer on a sandbox: the base class of ``SandboxServer``.

Every task and project as the sandbox sees it, exact scheduling of outcomes, the balance, the
statistics and the request log; served over HTTP under ``/_sandbox/`` by :mod:`._control`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .._contract import _checks as checks
from .._contract._validation import validate_task_request
from . import _simulation as sim
from ._clock import SandboxClock
from ._config import Duration, check_duration, sample_duration
from ._faults import FaultInjector
from ._openapi import build_openapi
from ._routes import ServiceRoutes
from ._state import SandboxState
from ._stats import RequestRecord, RequestStats, SandboxStats

_BULK_MAX = 1_000_000
BULK_PROMPT = "a sandbox bulk task"
"""The prompt of bulk-created tasks unless given one."""


class ServerTruth:
    """Reading and steering one sandbox's simulated service (see ``SandboxServer``)."""

    clock: SandboxClock
    faults: FaultInjector
    _state: SandboxState
    _stats: RequestStats
    _routes: ServiceRoutes

    @property
    def task_ids(self) -> tuple[str, ...]:
        """Every task created (direct and project batches), in creation order."""
        return tuple(self._state.tasks)

    @property
    def project_ids(self) -> tuple[str, ...]:
        """Every project created, in creation order."""
        return tuple(self._state.projects)

    def describe_task(self, task_id: str) -> dict[str, Any]:
        """What the status query would show of a task, plus the sandbox's own view.

        Returns:
            The ``GET /v1/tasks`` data plus ``project_id``, ``prompt``, ``batch``,
            ``charged``, ``refunded``, ``now`` and ``schedule`` (``created_at``,
            ``started_at``, ``finish_at`` in simulated seconds; ``finish_at_wall``, the Unix
            time it ends or ended, ``None`` while a paused clock has not reached it;
            ``outcome``, ``error_message``).

        Raises:
            KeyError: No such task.
        """
        return self._state.show(
            "Task", task_id, self._state.render.describe_task, self._routes.origin()
        )

    def describe_project(self, project_id: str) -> dict[str, Any]:
        """What the project endpoint would show, plus inputs, script, batches and schedule.

        Raises:
            KeyError: No such project.
        """
        return self._state.show(
            "Project", project_id, self._state.render.describe_project, self._routes.origin()
        )

    def schedule_task(
        self,
        task_id: str,
        *,
        finish_in: float,
        outcome: str | None = None,
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when and how a pending task ends; return it as :meth:`describe_task`.

        Args:
            task_id: The task.
            finish_in: Simulated seconds from now until it ends; ``0`` ends it now.
            outcome: ``"succeeded"``, ``"failed"`` or ``"error"``; unchanged when omitted.
            error_message: The failure text of a failed/error outcome.

        Raises:
            KeyError: No such task (a 404 over the control API).
            ValueError: The task has already ended (a 409), or a bad argument (a 400).
        """
        state = self._state
        now = state.settle()
        task = sim.lookup(state.tasks, "Task", task_id)
        if now >= task.finished_at:
            raise sim.Conflict(409, 409, f"Task {task_id} has already ended ({task.outcome})")
        _end_task(state, task, now + checks.number("finish_in", finish_in), outcome, error_message)
        return self.describe_task(task_id)

    def create_tasks(
        self,
        count: int,
        *,
        prompt: str = BULK_PROMPT,
        model: str | None = None,
        duration: int | None = None,
        finish_in: Duration | None = None,
        outcome: str | None = None,
    ) -> list[str]:
        """Create many direct tasks at once, each charged as if created through the service.

        For benchmarks (``POST /_sandbox/tasks/bulk``); counted in ``tasks_created``, not logged.

        Args:
            count: How many tasks, 1 to 1,000,000.
            prompt: Their prompt (the failure marker works as usual).
            model: Their model, ``duration`` their duration (the service's defaults).
            duration: Seconds of video.
            finish_in: Simulated seconds until each ends: a number, ``(low, high)`` per task
                or callable(rng) (``None``: the sandbox's task duration).
            outcome: ``"succeeded"``, ``"failed"`` or ``"error"`` (``None``: drawn).

        Returns:
            The new ids, in creation order.

        Raises:
            ValueError: A bad argument (400 over the control API), or a balance short of them
                all (none created; a 409 / 300111).
        """
        checks.whole("count", count, maximum=_BULK_MAX)
        spec = None if finish_in is None else check_duration(finish_in, "finish_in")
        body = validate_task_request({"prompt": prompt, "model": model, "duration": duration})
        _check_outcome(outcome)
        state = self._state
        state.settle()
        if state.pricing.task_cost(body.get("model"), body.get("duration")) * count > (
            state.wallet.available
        ):  # all or none
            raise sim.Conflict(409, 300111, sim.INSUFFICIENT_CREDITS)
        ids = []
        for _ in range(count):
            task = state.create_task(body)
            ids.append(task.task_id)
            if spec is not None:
                _end_task(state, task, task.created_at + sample_duration(spec, state.rng), outcome)
            elif outcome is not None:
                _end_task(state, task, task.finished_at, outcome)
        return ids

    def schedule_project(
        self,
        project_id: str,
        *,
        script_ready_in: float,
        outcome: str = "succeeded",
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when a project's script gets ready, or when it fails instead.

        Returns the project as :meth:`describe_project` shows it. The steps still ahead are
        squeezed or stretched into the new span in proportion.

        Args:
            project_id: The project (its script must not be ready yet).
            script_ready_in: Simulated seconds from now until the script is ready, or with
                ``outcome="failed"`` until the project fails.
            outcome: ``"succeeded"`` or ``"failed"``.
            error_message: The project's ``error_message`` when it fails.

        Raises:
            KeyError: No such project (404).
            ValueError: The script is already ready or the project failed (409); a bad
                argument (400).
        """
        state = self._state
        now = state.settle()
        project = sim.lookup(state.projects, "Project", project_id)
        if project.failed(now) or now >= project.script_ready_at:
            raise sim.Conflict(
                409, 409, f"Project {project_id} is past its script step; it cannot be rescheduled"
            )
        span = checks.number("script_ready_in", script_ready_in)
        _check_outcome(outcome, (sim.SUCCEEDED, sim.FAILED))
        old_span = project.script_ready_at - now
        ratio = span / old_span if old_span > 0 else 0.0

        def rescale(boundary: float) -> float:
            return boundary if boundary <= now else now + (boundary - now) * ratio

        project.media_done_at = rescale(project.media_done_at)
        project.analysis_done_at = rescale(project.analysis_done_at)
        project.script_ready_at = now + span
        project.version += 1
        project.fail_at = None
        project.fail_message = None
        project.fails_before_script = False
        if outcome == sim.FAILED:
            state.fail_before_script(project, project.script_ready_at, error_message)
        else:
            state.push(project.script_ready_at, state.script_ready, project)
        return self.describe_project(project_id)

    def credits(self) -> dict[str, float | int]:
        """Return the balance as ``GET /v1/credits`` shows it."""
        return self._state.balance()

    def set_credits(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set ``api_available_credits`` and ``api_total_credits`` (raised to ``available``).

        Raises:
            ValueError: A value that is not a number.
        """
        for name, value in (("available", available), ("total", total)):
            if value is not None:
                checks.number(name, value, low=-math.inf)
        self._state.settle()
        self._state.wallet.set(available=available, total=total)

    def add_credits(self, amount: float) -> None:
        """Add ``amount`` credits to the balance (total and available).

        Raises:
            ValueError: ``amount`` is not a number.
        """
        checks.number("amount", amount, low=-math.inf)
        self._state.settle()  # a refund due first: then the sum
        wallet = self._state.wallet
        wallet.set(available=wallet.available + amount, total=wallet.total + amount)

    @property
    def request_log(self) -> tuple[RequestRecord, ...]:
        """The recent requests (control endpoints excluded), oldest first."""
        return tuple(self._stats.log)

    def stats(self) -> SandboxStats:
        """Return the counters since the last :meth:`reset_stats`."""
        return self._stats.snapshot()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` is true: checked now, then as each request arrives or ends.

        For a test that must act at a point of the traffic (every id polled once, a create in
        flight) without sleeping. ``condition`` reads the server (``stats()``,
        ``request_log``); await this on the server's loop, under a deadline (``fail_after``).
        """
        while not condition():
            await self._stats.changed()

    def reset_stats(self) -> None:
        """Zero the counters, the peaks and the request log (tasks and projects stay)."""
        self._stats.clear()
        self.faults.reset_counts()

    def openapi(self) -> dict[str, Any]:
        """Return the OpenAPI 3.1 document of the service, with this server's URL."""
        return build_openapi(self._routes.base_url())


def _check_outcome(outcome: str | None, allowed: tuple[str, ...] = sim.TASK_OUTCOMES) -> None:
    if outcome is not None and outcome not in allowed:
        raise ValueError(f"outcome must be one of {', '.join(allowed)}, got {outcome!r}")


def _end_task(
    state: SandboxState,
    task: sim.Task,
    at: float,
    outcome: str | None,
    error_message: str | None = None,
) -> None:
    """Make a pending task end at ``at`` with ``outcome`` (``None``: the one it had)."""
    _check_outcome(outcome)
    task.version += 1  # its pending refund, if any, is cancelled
    task.finished_at = at
    task.started_at = min(task.started_at, at)
    task.outcome = outcome or task.outcome
    if task.outcome == sim.SUCCEEDED:
        task.error_message = None
    else:
        task.error_message = (
            error_message
            or task.error_message
            or (
                sim.TASK_ERROR_MESSAGE
                if task.outcome == sim.ERROR
                else sim.TASK_FAILURE_MESSAGES[2]
            )
        )
        state.push(at, state.refund_task, task)
