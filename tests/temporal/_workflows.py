"""The workflows of the Temporal tests: one video, and a project's batch of videos."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from videogen_async.temporal import create_project, generate_project_videos, generate_video

#: One attempt waits this long for its video before Temporal starts another: longer than any
#: test, so that no attempt ends by its timeout (the tests end attempts themselves).
ATTEMPT_SECONDS = 600.0


@workflow.defn(name="GenerateVideo")
class GenerateVideo:
    """Generate one video and return its task as a dict."""

    @workflow.run
    async def run(self, prompt: str, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        task = await generate_video(
            prompt,
            **(fields or {"duration": 5}),
            start_to_close_timeout=timedelta(seconds=ATTEMPT_SECONDS),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)),
        )
        return task.to_dict()


@workflow.defn(name="GenerateAd")
class GenerateAd:
    """Create a manual project, then a batch of its videos; the project id and the tasks."""

    @workflow.run
    async def run(self, reference: str, products: list[str], videos: int) -> dict[str, Any]:
        attempts = RetryPolicy(initial_interval=timedelta(milliseconds=200))
        project = await create_project(reference, products, mode="manual", retry_policy=attempts)
        tasks = await generate_project_videos(
            project.key,
            out_number=videos,
            start_to_close_timeout=timedelta(seconds=ATTEMPT_SECONDS),
            retry_policy=attempts,
        )
        return {"project_id": project.project_id, "tasks": [task.to_dict() for task in tasks]}
