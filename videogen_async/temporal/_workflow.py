"""The workflow side: one awaited call each, deterministic in Temporal's sandbox.

Activities are referred to by name, and each answer is rebuilt from the payload the
workflow's history holds, the same on every replay.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from .._contract._models import Task
from .._ledger._entry import LedgerEntry

CREATE_TASK = "videogen.create_task"
"""The name of the activity that creates a video task through the ledger."""
CREATE_PROJECT = "videogen.create_project"
"""The name of the activity that creates a project through the ledger."""
CREATE_VIDEOS = "videogen.create_videos"
"""The name of the activity that creates a video batch of a project through the ledger."""
AWAIT_ENTRY = "videogen.await_entry"
"""The name of the activity that waits for a ledger entry's video without holding a slot."""


@dataclass(frozen=True)
class VideoRequest:
    """The input of the :data:`CREATE_TASK` activity: :func:`generate_video`'s arguments.

    ``fields`` are its ``**task_fields``; the metadata key ``temporal`` is the integration's.
    """

    prompt: str
    fields: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProjectRequest:
    """The input of the :data:`CREATE_PROJECT` activity: :func:`create_project`'s arguments.

    ``fields`` are its ``**project_fields``.
    """

    reference_video_url: str
    product_image_urls: list[str]
    fields: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VideosRequest:
    """The input of :data:`CREATE_VIDEOS`: :func:`generate_project_videos`'s arguments.

    ``fields`` are its ``**batch_fields``.
    """

    project_key: str
    fields: dict[str, Any] = field(default_factory=dict)
    batch_key: str | None = None


async def generate_video(
    prompt: str,
    *,
    key: str | None = None,
    metadata: dict[str, Any] | None = None,
    start_to_close_timeout: timedelta = timedelta(hours=1),
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
    **task_fields: Any,
) -> Task:
    """Create a video task and wait until it has finished: call it from a workflow.

    Created through the worker's ledger, once even when retried; the activity holds no slot
    while waiting (:func:`run_completions` completes it). See docs/temporal.md.

    Args:
        prompt: The prompt.
        key: The ledger key (``None``: derived from the workflow, its run and the activity).
        metadata: Metadata kept on the ledger entry (for ``ledger.entries(metadata=...)``).
        start_to_close_timeout: How long one attempt may wait before Temporal starts another
            (which only waits again).
        retry_policy: Temporal's retry policy of the activity (``None``: Temporal's default).
        task_queue: The task queue of the activity (``None``: the workflow's).
        **task_fields: The other fields of ``client.tasks.create``.

    Returns:
        The succeeded task.

    Raises:
        temporalio.exceptions.ActivityError: The task failed (its cause an
            ``ApplicationError`` of type ``TaskFailedError``, details ``[task as dict]``,
            not retried), or the create was refused (type: the SDK's error class name).
    """
    return Task.from_dict(
        await workflow.execute_activity(
            CREATE_TASK,
            VideoRequest(prompt, dict(task_fields), key, dict(metadata or {})),
            result_type=dict,
            **_options(start_to_close_timeout, retry_policy, task_queue),
        )
    )


async def create_project(
    reference_video_url: str,
    product_image_urls: list[str],
    *,
    key: str | None = None,
    metadata: dict[str, Any] | None = None,
    start_to_close_timeout: timedelta = timedelta(minutes=5),
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
    **project_fields: Any,
) -> LedgerEntry:
    """Create a viral ad clone project through the worker's ledger: call it from a workflow.

    A retried attempt never creates a second project.

    Args:
        reference_video_url: As ``client.projects.create``.
        product_image_urls: As ``client.projects.create``.
        key: The ledger key (``None``: derived from the workflow, its run and the activity).
        metadata: Metadata kept on the project's entry and on the entries of its tasks.
        start_to_close_timeout: How long one attempt may take.
        retry_policy: Temporal's retry policy of the activity (``None``: Temporal's default).
        task_queue: The task queue of the activity (``None``: the workflow's).
        **project_fields: The other fields of ``client.projects.create`` (``mode``...).

    Returns:
        The project's ledger entry (``key`` for :func:`generate_project_videos`,
        ``project_id``).

    Raises:
        temporalio.exceptions.ActivityError: The create was refused for good (its cause an
            ``ApplicationError`` whose type is the SDK's error class name).
    """
    return LedgerEntry.from_dict(
        await workflow.execute_activity(
            CREATE_PROJECT,
            ProjectRequest(
                reference_video_url,
                list(product_image_urls),
                dict(project_fields),
                key,
                dict(metadata or {}),
            ),
            result_type=dict,
            **_options(start_to_close_timeout, retry_policy, task_queue),
        )
    )


async def generate_project_videos(
    project_key: str,
    *,
    batch_key: str | None = None,
    start_to_close_timeout: timedelta = timedelta(hours=1),
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
    **batch_fields: Any,
) -> list[Task]:
    """Create a video batch of a project and wait for every video: call it from a workflow.

    The batch is created once per ``batch_key`` (a script not yet written is retried by
    Temporal); each video is awaited as in :func:`generate_video`.

    Args:
        project_key: The project's ledger key (:func:`create_project`'s entry's ``key``).
        batch_key: The batch's ledger key (``None``: derived from the workflow run).
        start_to_close_timeout: How long one attempt may wait for its video or create.
        retry_policy: Temporal's retry policy of the activities (``None``: Temporal's).
        task_queue: The task queue of the activities (``None``: the workflow's).
        **batch_fields: The fields of ``client.projects.create_videos`` (``out_number``...).

    Returns:
        The succeeded tasks, one per video of the batch, ordered by task id.

    Raises:
        temporalio.exceptions.ActivityError: A video failed (type ``TaskFailedError``), the
            project failed (type ``ProjectFailedError``) or the batch was refused for good.
    """
    options = _options(start_to_close_timeout, retry_policy, task_queue)
    keys = await workflow.execute_activity(
        CREATE_VIDEOS,
        VideosRequest(project_key, dict(batch_fields), batch_key),
        result_type=list,
        **options,
    )
    return [
        Task.from_dict(result)
        for result in await asyncio.gather(
            *(
                workflow.execute_activity(AWAIT_ENTRY, key, result_type=dict, **options)
                for key in keys
            )
        )
    ]


def _options(
    timeout: timedelta, retry_policy: RetryPolicy | None, task_queue: str | None
) -> dict[str, Any]:
    """The options of ``workflow.execute_activity`` every call here passes on."""
    return {
        "start_to_close_timeout": timeout,
        "retry_policy": retry_policy,
        "task_queue": task_queue,
    }
