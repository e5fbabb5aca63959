"""Control of the simulation's timelines: when a task ends and how, when a script is ready.

Tests and benchmarks use it through :class:`~videogen_async.testing.SandboxServer` (and its
``/_sandbox/`` endpoints) to make every instant exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._contract._enums import ProjectStatus
from ._config import Duration, sample_duration
from ._simulation import (
    ERROR,
    EV_PROJECT_SCRIPT,
    EV_TASK_REFUND,
    INSUFFICIENT_CREDITS,
    SUCCEEDED,
    TASK_ERROR_MESSAGE,
    TASK_FAILURE_MESSAGES,
    TASK_OUTCOMES,
    Project,
    SandboxError,
    Task,
    lookup,
)
from ._state import SandboxState

__all__ = ["create_tasks", "schedule_project", "schedule_task"]


def create_tasks(
    state: SandboxState,
    body: Mapping[str, Any],
    count: int,
    *,
    finish_in: Duration | None = None,
    outcome: str | None = None,
) -> list[Task]:
    """Create ``count`` tasks from one checked body (see ``SandboxServer.create_tasks``).

    Raises:
        SandboxError: 409 / 300111 when the balance does not cover them all.
        ValueError: A bad ``outcome``.
    """
    if outcome is not None and outcome not in TASK_OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(TASK_OUTCOMES)}, got {outcome!r}")
    state.settle()
    price = state.pricing.task_cost(body.get("model"), body.get("duration"))
    if not state.wallet.can_pay(price * count):
        raise SandboxError(409, 300111, INSUFFICIENT_CREDITS)
    tasks = []
    for _ in range(count):
        task = state.create_task(body)
        if finish_in is not None or outcome is not None:
            seconds = (
                task.finished_at - task.created_at
                if finish_in is None
                else sample_duration(finish_in, state.rng)
            )
            schedule_task(state, task.task_id, finish_in=seconds, outcome=outcome)
        tasks.append(task)
    return tasks


def schedule_task(
    state: SandboxState,
    task_id: str,
    *,
    finish_in: float,
    outcome: str | None = None,
    error_message: str | None = None,
) -> Task:
    """Set when and how a pending task ends (see ``SandboxServer.schedule_task``).

    Raises:
        SandboxError: 404 for an unknown task, 409 for one that has already ended.
        ValueError: A bad ``finish_in`` or ``outcome``.
    """
    now = state.settle()
    task = lookup(state.tasks, "Task", task_id)
    if now >= task.finished_at:
        raise SandboxError(409, 409, f"Task {task_id} has already ended ({task.outcome})")
    if not isinstance(finish_in, (int, float)) or isinstance(finish_in, bool) or finish_in < 0:
        raise ValueError(f"finish_in must be a number >= 0, got {finish_in!r}")
    if outcome is not None and outcome not in TASK_OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(TASK_OUTCOMES)}, got {outcome!r}")
    task.version += 1
    task.finished_at = now + float(finish_in)
    task.started_at = min(task.started_at, task.finished_at)
    if outcome is not None:
        task.outcome = outcome
    if task.outcome == SUCCEEDED:
        task.error_message = None
    else:
        default = TASK_ERROR_MESSAGE if task.outcome == ERROR else TASK_FAILURE_MESSAGES[2]
        task.error_message = error_message or task.error_message or default
        state.push(task.finished_at, EV_TASK_REFUND, task)
    state.settle()
    return task


def schedule_project(
    state: SandboxState,
    project_id: str,
    *,
    script_ready_in: float,
    outcome: str = "succeeded",
    error_message: str | None = None,
) -> Project:
    """Set when a script is ready or the project fails (``SandboxServer.schedule_project``).

    The steps still ahead are squeezed or stretched into the new span in proportion.

    Raises:
        SandboxError: 404 for an unknown project; 409 once its script is ready or it
            has failed.
        ValueError: A bad ``script_ready_in`` or ``outcome``.
    """
    now = state.settle()
    project = lookup(state.projects, "Project", project_id)
    if project.failed(now) or now >= project.script_ready_at:
        raise SandboxError(
            409, 409, f"Project {project_id} is past its script step; it cannot be rescheduled"
        )
    span = script_ready_in
    if not isinstance(span, (int, float)) or isinstance(span, bool) or span < 0:
        raise ValueError(f"script_ready_in must be a number >= 0, got {span!r}")
    if outcome not in (ProjectStatus.SUCCEEDED.value, ProjectStatus.FAILED.value):
        raise ValueError(f"outcome must be 'succeeded' or 'failed', got {outcome!r}")
    old_span = project.script_ready_at - now
    ratio = float(span) / old_span if old_span > 0 else 0.0

    def rescale(boundary: float) -> float:
        return boundary if boundary <= now else now + (boundary - now) * ratio

    project.media_done_at = rescale(project.media_done_at)
    project.analysis_done_at = rescale(project.analysis_done_at)
    project.script_ready_at = now + float(span)
    project.version += 1
    project.fail_at = None
    project.fail_message = None
    project.fails_before_script = False
    if outcome == ProjectStatus.FAILED.value:
        state.fail_before_script(project, project.script_ready_at, error_message)
    else:
        state.push(project.script_ready_at, EV_PROJECT_SCRIPT, project)
    state.settle()
    return project
