"""A project at the service's desk: its creation, and the batches of videos asked for.

Defaults of a project's inputs come from the statement of the service
(:data:`videogen_async._contract._service.PROJECT_REQUEST`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._contract._service import PROJECT_REQUEST
from ._config import sample_duration
from ._simulation import (
    EV_PROJECT_SCRIPT,
    MEDIA_NOT_STORED,
    Batch,
    Project,
    SandboxError,
    host_is_invalid,
    lookup,
    make_script,
)
from ._state import SandboxState

__all__ = ["create_project", "create_videos"]


def create_project(state: SandboxState, body: Mapping[str, Any]) -> Project:
    """Create a project from a validated body: store its media, charge the script, start it.

    Raises:
        SandboxError: 409 / 100099 when a media URL cannot be stored, 409 / 300111 when the
            balance does not cover the script charge. Nothing is created or charged.
    """
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
    rejects = state.media_rejects
    if any(host_is_invalid(u) or (rejects is not None and rejects(u)) for u in urls):
        raise SandboxError(409, 100099, MEDIA_NOT_STORED)
    state.wallet.charge(state.pricing.script_credits)
    project = Project(
        state.new_id(state.projects), inputs, now, state.clock.wall_now(), make_script(inputs)
    )
    project.script_cost = state.pricing.script_credits
    timing, rng = state.project_timing, state.rng
    project.media_done_at = now + sample_duration(timing.preparing_media, rng)
    project.analysis_done_at = project.media_done_at + sample_duration(timing.analyzing, rng)
    project.script_ready_at = project.analysis_done_at + sample_duration(
        timing.generating_script, rng
    )
    draw = rng.random()
    if state.marked(inputs["reference_video_url"]):
        state.fail_before_script(project, project.analysis_done_at, None)
    elif draw < state.project_failure_rate:
        state.fail_before_script(
            project, rng.choice((project.analysis_done_at, project.script_ready_at)), None
        )
    else:
        state.push(project.script_ready_at, EV_PROJECT_SCRIPT, project)
    state.projects[project.project_id] = project
    return project


def create_videos(
    state: SandboxState, project_id: str, body: Mapping[str, Any]
) -> tuple[Project, Batch]:
    """Create a batch of video tasks from a project's script (a validated body).

    Raises:
        SandboxError: 404 for an unknown project; 409 / 409 when the project has failed or
            its script is not generated yet; 409 / 300111 when the balance does not cover the
            batch. Nothing is created or charged on failure.
    """
    now = state.settle()
    project = lookup(state.projects, "Project", project_id)
    if project.failed(now):
        raise SandboxError(
            409, 409, f"Project {project_id} has failed; no video tasks can be created"
        )
    if not project.script_ready(now):
        raise SandboxError(
            409,
            409,
            f"The script of project {project_id} is not ready yet (current_step:"
            f" {project.phase(now)[1]}); create videos once current_step is script_ready",
        )
    batch = state.create_batch(
        project,
        now,
        out_number=int(body.get("out_number") or project.inputs["out_number"]),
        resolution=body.get("resolution") or project.inputs["resolution"],
        aspect_ratio=body.get("aspect_ratio") or project.inputs["aspect_ratio"],
        script=body.get("script"),
        automatic=False,
    )
    return project, batch
