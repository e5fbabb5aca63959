"""What tests and benchmarks read and steer on a sandbox: the base class of ``SandboxServer``.

Every task and project as the sandbox sees it, exact scheduling of outcomes, the balance, the
statistics and the request log; served over HTTP under ``/_sandbox/`` by :mod:`._control`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._contract._enums import ProjectStatus
from .._contract._validation import validate_task_request
from . import _simulation as sim
from ._clock import SandboxClock
from ._config import Duration, check_duration, is_number, sample_duration
from ._faults import FaultInjector
from ._openapi import build_openapi
from ._render import CREDITS
from ._routes import ServiceRoutes
from ._state import SandboxState
from ._stats import RequestRecord, RequestStats, SandboxStats

_T = TypeVar("_T")
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
        state, origin = self._state, self._routes.origin()
        return self._wrap_lookup(
            lambda: state.show("Task", task_id, state.render.describe_task, origin)
        )

    def describe_project(self, project_id: str) -> dict[str, Any]:
        """What the project endpoint would show, plus inputs, script, batches and schedule.

        Raises:
            KeyError: No such project.
        """
        state, origin = self._state, self._routes.origin()
        return self._wrap_lookup(
            lambda: state.show("Project", project_id, state.render.describe_project, origin)
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
            KeyError: No such task.
            ValueError: The task has already ended, or a bad argument.
        """
        self._wrap_lookup(
            lambda: reschedule_task(self._state, task_id, finish_in, outcome, error_message)
        )
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
            ValueError: A bad argument, or a balance short of them all (none created).
        """
        fields = {"prompt": prompt, "model": model, "duration": duration}
        return self._wrap_lookup(
            lambda: create_tasks(self._state, count, finish_in, outcome, fields)
        )

    def schedule_project(
        self,
        project_id: str,
        *,
        script_ready_in: float,
        outcome: str = "succeeded",
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when a project's script gets ready, or when it fails instead.

        Returns the project as :meth:`describe_project` shows it.

        Args:
            project_id: The project (its script must not be ready yet).
            script_ready_in: Simulated seconds from now until the script is ready, or with
                ``outcome="failed"`` until the project fails.
            outcome: ``"succeeded"`` or ``"failed"``.
            error_message: The project's ``error_message`` when it fails.

        Raises:
            KeyError: No such project.
            ValueError: The script is already ready or the project failed; a bad argument.
        """
        state, span = self._state, script_ready_in
        self._wrap_lookup(
            lambda: reschedule_project(state, project_id, span, outcome, error_message)
        )
        return self.describe_project(project_id)

    @staticmethod
    def _wrap_lookup(call: Callable[[], _T]) -> _T:
        # The service's answer to a failure becomes KeyError (404) or ValueError, as the
        # methods say; the control API keeps the statuses (it calls the same functions).
        try:
            return call()
        except sim.SandboxError as exc:
            if exc.status == 404:
                raise KeyError(exc.message) from None
            raise ValueError(exc.message) from None

    def credits(self) -> dict[str, float | int]:
        """Return the balance as ``GET /v1/credits`` shows it."""
        return CREDITS(self._state.wallet, self._state.settle())  # refunds due first

    def set_credits(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set ``api_available_credits`` and ``api_total_credits`` (raised to ``available``)."""
        self._state.settle()
        self._state.wallet.set(available=available, total=total)

    def add_credits(self, amount: float) -> None:
        """Add ``amount`` credits to the balance (total and available)."""
        wallet = self._state.wallet
        self._state.settle()
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


def create_tasks(
    state: SandboxState,
    count: object,
    finish_in: Duration | None,
    outcome: str | None,
    fields: Mapping[str, Any],
) -> list[str]:
    """:meth:`ServerTruth.create_tasks` (``POST /_sandbox/tasks/bulk``).

    ``fields``: the tasks' ``prompt``, ``model`` and ``duration`` as given (``None`` or
    missing: the defaults, :data:`BULK_PROMPT` for the prompt).

    Raises:
        ValueError: A bad argument (a bad task field: ``InvalidRequestError``, a
            ``ValueError`` too).
        SandboxError: 409 / 300111 when the balance does not cover them all.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _BULK_MAX:
        raise ValueError(f"count must be an integer from 1 to {_BULK_MAX}, got {count!r}")
    spec = None if finish_in is None else check_duration(finish_in, "finish_in")
    body = validate_task_request({"prompt": BULK_PROMPT, **fields})
    _check_outcome(outcome)
    state.settle()
    price = state.pricing.task_cost(body.get("model"), body.get("duration"))
    if price * count > state.wallet.available:  # all or none
        raise sim.SandboxError(409, 300111, sim.INSUFFICIENT_CREDITS)
    ids = []
    for _ in range(count):
        task = state.create_task(body)
        if spec is not None or outcome is not None:
            seconds = (
                task.finished_at - task.created_at
                if spec is None
                else sample_duration(spec, state.rng)
            )
            reschedule_task(state, task.task_id, seconds, outcome)
        ids.append(task.task_id)
    return ids


def _check_outcome(outcome: str | None) -> None:
    if outcome is not None and outcome not in sim.TASK_OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(sim.TASK_OUTCOMES)}, got {outcome!r}")


def _check_seconds(value: object, name: str) -> float:
    if not is_number(value) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def reschedule_task(
    state: SandboxState,
    task_id: str,
    finish_in: object,
    outcome: str | None = None,
    error_message: str | None = None,
) -> sim.Task:
    """:meth:`ServerTruth.schedule_task` (404 for an unknown task, 409 for one that ended)."""
    now = state.settle()
    task = sim.lookup(state.tasks, "Task", task_id)
    if now >= task.finished_at:
        raise sim.SandboxError(409, 409, f"Task {task_id} has already ended ({task.outcome})")
    seconds = _check_seconds(finish_in, "finish_in")
    _check_outcome(outcome)
    task.version += 1
    task.finished_at = now + seconds
    task.started_at = min(task.started_at, task.finished_at)
    if outcome is not None:
        task.outcome = outcome
    if task.outcome == sim.SUCCEEDED:
        task.error_message = None
    else:
        default = (
            sim.TASK_ERROR_MESSAGE if task.outcome == sim.ERROR else sim.TASK_FAILURE_MESSAGES[2]
        )
        task.error_message = error_message or task.error_message or default
        state.push(task.finished_at, state.refund_task, task)
    state.settle()
    return task


def reschedule_project(
    state: SandboxState,
    project_id: str,
    script_ready_in: object,
    outcome: str = "succeeded",
    error_message: str | None = None,
) -> sim.Project:
    """:meth:`ServerTruth.schedule_project` (404 unknown, 409 past its script step).

    The steps still ahead are squeezed or stretched into the new span in proportion.
    """
    now = state.settle()
    project = sim.lookup(state.projects, "Project", project_id)
    if project.failed(now) or now >= project.script_ready_at:
        raise sim.SandboxError(
            409, 409, f"Project {project_id} is past its script step; it cannot be rescheduled"
        )
    span = _check_seconds(script_ready_in, "script_ready_in")
    if outcome not in (ProjectStatus.SUCCEEDED.value, ProjectStatus.FAILED.value):
        raise ValueError(f"outcome must be 'succeeded' or 'failed', got {outcome!r}")
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
    if outcome == ProjectStatus.FAILED.value:
        state.fail_before_script(project, project.script_ready_at, error_message)
    else:
        state.push(project.script_ready_at, state.script_ready, project)
    state.settle()
    return project
