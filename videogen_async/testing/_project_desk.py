"""A project's life at the service's desk: creation, its batches of video tasks, early failure.

Defaults of a project's inputs come from the statement of the service
(:data:`videogen_async._contract._service.PROJECT_REQUEST`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._contract._enums import ProjectStep
from .._contract._service import PROJECT_REQUEST
from ._config import sample_duration
from ._simulation import (
    EV_PROJECT_FAIL,
    EV_PROJECT_SCRIPT,
    MEDIA_NOT_STORED,
    PROJECT_FAILURES,
    PROJECT_TASK_MODEL,
    Batch,
    Project,
    SandboxError,
    host_is_invalid,
    lookup,
    make_script,
)

if TYPE_CHECKING:
    from ._state import SandboxState

__all__ = ["ProjectDesk"]


class ProjectDesk:
    """Creates the projects of one :class:`SandboxState` and their batches."""

    def __init__(self, state: SandboxState) -> None:
        self._state = state

    def _media_rejected(self, url: str) -> bool:
        if host_is_invalid(url):
            return True
        return bool(self._state.media_rejects is not None and self._state.media_rejects(url))

    def create_project(self, body: Mapping[str, Any]) -> Project:
        """Create a project from a validated request body.

        The order of work follows the service: store the media, create the project, charge
        the script, start the background steps.

        Args:
            body: The body, already checked by ``validate_project_request``.

        Returns:
            The new project.

        Raises:
            SandboxError: 409 / 100099 when a media URL cannot be stored, 409 / 300111 when
                the balance does not cover the script charge. Nothing is created or charged.
        """
        state = self._state
        now = state.settle()
        inputs: dict[str, Any] = {
            f.name: f.default if body.get(f.name) is None else body[f.name]
            for f in PROJECT_REQUEST.fields
        }
        inputs["product_image_urls"] = list(inputs["product_image_urls"])
        inputs["duration"] = int(inputs["duration"])
        inputs["out_number"] = int(inputs["out_number"])
        urls = [inputs["reference_video_url"], *inputs["product_image_urls"]]
        if inputs["avatar_image_url"]:
            urls.append(inputs["avatar_image_url"])
        if any(self._media_rejected(u) for u in urls):
            raise SandboxError(409, 100099, MEDIA_NOT_STORED)
        state.wallet.charge(state.pricing.script_credits)
        project = Project(
            state.new_id(state.projects),
            inputs,
            now,
            state.clock.wall_now(),
            make_script(inputs),
        )
        project.script_cost = state.pricing.script_credits
        timing = state.project_timing
        project.media_done_at = now + sample_duration(timing.preparing_media, state.rng)
        project.analysis_done_at = project.media_done_at + sample_duration(
            timing.analyzing, state.rng
        )
        project.script_ready_at = project.analysis_done_at + sample_duration(
            timing.generating_script, state.rng
        )
        draw = state.rng.random()
        if state.marked(inputs["reference_video_url"]):
            self.fail_before_script(project, project.analysis_done_at, None)
        elif draw < state.project_failure_rate:
            failing_step = state.rng.choice((project.analysis_done_at, project.script_ready_at))
            self.fail_before_script(project, failing_step, None)
        else:
            state.push(project.script_ready_at, EV_PROJECT_SCRIPT, project)
        state.projects[project.project_id] = project
        return project

    def fail_before_script(self, project: Project, at: float, message: str | None) -> None:
        """Make a project fail at ``at``, before its script (the script charge is refunded)."""
        project.fails_before_script = True
        project.fail_at = at
        if message is None:
            step = (
                ProjectStep.ANALYZING.value
                if at <= project.analysis_done_at
                else ProjectStep.GENERATING_SCRIPT.value
            )
            message = PROJECT_FAILURES[step]
        project.fail_message = message
        self._state.push(at, EV_PROJECT_FAIL, project)

    def create_batch(
        self,
        project: Project,
        at: float,
        *,
        out_number: int,
        resolution: int | str,
        aspect_ratio: str,
        script: str | None,
        automatic: bool,
    ) -> Batch:
        """Charge and create one batch of a project's video tasks at ``at``."""
        cost = self._state.pricing.project_video_cost(project.inputs["duration"], resolution)
        self._state.wallet.charge(cost * out_number)
        batch = Batch(
            len(project.batches) + 1, at, out_number, resolution, aspect_ratio, script, automatic
        )
        forced = (
            "The batch script was rejected (sandbox failure marker)."
            if self._state.marked(script)
            else None
        )
        for _ in range(out_number):
            task = self._state.new_task(
                at,
                PROJECT_TASK_MODEL,
                project.inputs["duration"],
                cost,
                forced,
                floor=project.created_wall,
            )
            task.project_id = project.project_id
            task.batch = batch.index
            task.aspect_ratio = aspect_ratio
            task.resolution = resolution
            batch.task_ids.append(task.task_id)
            project.tasks.append(task)
        project.batches.append(batch)
        return batch

    def create_videos(self, project_id: str, body: Mapping[str, Any]) -> tuple[Project, Batch]:
        """Create a batch of video tasks from a project's script.

        Args:
            project_id: The project.
            body: The body, already checked by ``validate_videos_request``.

        Returns:
            The project and the new batch.

        Raises:
            SandboxError: 404 for an unknown project; 409 / 409 when the project has failed or
                its script is not generated yet; 409 / 300111 when the balance does not cover
                the batch. Nothing is created or charged on failure.
        """
        now = self._state.settle()
        project = lookup(self._state.projects, "Project", project_id)
        if project.failed(now):
            raise SandboxError(
                409, 409, f"Project {project_id} has failed; no video tasks can be created"
            )
        if not project.script_ready(now):
            _status, step = project.phase(now)
            raise SandboxError(
                409,
                409,
                f"The script of project {project_id} is not ready yet (current_step: {step});"
                " create videos once current_step is script_ready",
            )
        batch = self.create_batch(
            project,
            now,
            out_number=int(body.get("out_number") or project.inputs["out_number"]),
            resolution=body.get("resolution") or project.inputs["resolution"],
            aspect_ratio=body.get("aspect_ratio") or project.inputs["aspect_ratio"],
            script=body.get("script"),
            automatic=False,
        )
        return project, batch
