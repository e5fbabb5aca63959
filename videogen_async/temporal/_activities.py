"""The worker side: activities that create through the ledger and complete asynchronously.

An activity writes its task token into the entry's metadata and returns holding no slot;
:class:`ActivityCompleter` completes it when the video has finished. The key derives from the
workflow run and activity, so a retried attempt sends nothing: it puts its own token on the
entry (returning at once if the video has finished).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from .._contract import _exceptions as err
from .._contract._enums import ProjectStatus
from .._http._retry import is_transient
from .._ledger import Ledger, LedgerEntry
from .._ledger._protocol import LedgerClient
from . import _workflow as calls
from ._completer import METADATA_KEY, outcome

_PERMANENT = (
    err.InvalidRequestError,
    err.ConfigurationError,
    err.AmbiguousCreateError,
    err.BudgetExceededError,
)


class VideoActivities:
    """The activities of ``videogen_async.temporal``, bound to a ledger and a client.

    Register :attr:`activities` on the worker::

        videos = VideoActivities(ledger, client)
        Worker(temporal, task_queue="videos", workflows=[...], activities=videos.activities)

    Args:
        ledger: The ledger every create goes through (shared with the companions that
            complete the activities: :func:`run_completions`).
        client: The client that sends the creates.
    """

    def __init__(self, ledger: Ledger, client: LedgerClient) -> None:
        self._ledger = ledger
        self._client = client

    @property
    def activities(self) -> list[Any]:
        """The activities to register on a worker."""
        return [self.create_task, self.create_project, self.create_videos, self.await_entry]

    @activity.defn(name=calls.CREATE_TASK)
    async def create_task(self, request: calls.VideoRequest) -> dict[str, Any]:
        """Create the task (once per key) and complete asynchronously when it has finished.

        Returns:
            The task as a dict, when its video had already finished (a retried attempt).

        Raises:
            ApplicationError: Not retryable: the create was refused for good (type: the
                SDK's error class) or the video failed (type ``TaskFailedError``).
        """
        with _refusals():
            entry = await self._ledger.create_task(
                self._client,
                request.prompt,
                key=request.key or _own_key(),
                metadata={**request.metadata, METADATA_KEY: _mark()},
                **request.fields,
            )
        return await self._complete_later(entry)

    @activity.defn(name=calls.CREATE_PROJECT)
    async def create_project(self, request: calls.ProjectRequest) -> dict[str, Any]:
        """Create the project (once per key); its entry as a dict, with its ``project_id``.

        Raises:
            ApplicationError: Not retryable: the create was refused for good.
        """
        with _refusals():
            entry = await self._ledger.create_project(
                self._client,
                request.reference_video_url,
                request.product_image_urls,
                key=request.key or _own_key(),
                metadata=request.metadata,
                **request.fields,
            )
        return entry.to_dict()

    @activity.defn(name=calls.CREATE_VIDEOS)
    async def create_videos(self, request: calls.VideosRequest) -> list[str]:
        """Create a video batch of a project (once per batch key); the keys of its tasks.

        A script not generated yet is retried by Temporal (type ``ScriptNotReady``): no slot
        is held while it is written.

        Raises:
            ApplicationError: Not retryable: the batch was refused for good, or the project
                failed (type ``ProjectFailedError``).
        """
        try:
            entries = await self._ledger.create_videos(
                self._client,
                request.project_key,
                batch_key=request.batch_key or _own_key(),
                **request.fields,
            )
        except err.VideoGenError as exc:
            if type(exc) is not err.ConflictError:  # not the script's or the project's state
                _fail_for_good(exc)
                raise
            project = await self._ledger.get(request.project_key)
            project_id = project.project_id if project is not None else None
            if project_id is None:  # not a project the ledger created
                raise
            if (await self._client.projects.get(project_id)).status == ProjectStatus.FAILED:
                raise ApplicationError(
                    str(exc), type="ProjectFailedError", non_retryable=True
                ) from exc
            raise ApplicationError(
                f"the script of project {project_id} is not generated yet",
                type="ScriptNotReady",
                next_retry_delay=SCRIPT_RETRY,
            ) from exc
        return [entry.key for entry in entries]

    @activity.defn(name=calls.AWAIT_ENTRY)
    async def await_entry(self, key: str) -> dict[str, Any]:
        """Complete asynchronously with the task of the entry ``key`` when it has finished.

        Returns:
            The task as a dict, when it had already finished.

        Raises:
            ApplicationError: Not retryable: the video failed (type ``TaskFailedError``), or
                the ledger holds no such key (type ``LedgerError``).
        """
        if await self._ledger.get(key) is None:
            raise ApplicationError(
                f"the ledger holds no key {key!r}", type="LedgerError", non_retryable=True
            )
        with _refusals():
            entry = await self._ledger.update_metadata(key, {METADATA_KEY: _mark()})
        return await self._complete_later(entry)

    async def _complete_later(self, entry: LedgerEntry) -> dict[str, Any]:
        """The entry's outcome now, or (not terminal) later, through this attempt's token."""
        if entry.metadata.get(METADATA_KEY) != _mark():
            # An earlier attempt's entry: the completion must reach this attempt. The entry
            # comes back as the update left it: terminal already, or completed later through
            # this token.
            with _refusals():
                entry = await self._ledger.update_metadata(entry.key, {METADATA_KEY: _mark()})
        if not entry.is_terminal:
            activity.raise_complete_async()
        return outcome(entry)


SCRIPT_RETRY = timedelta(seconds=5)
"""How long Temporal waits before it tries a batch again whose script was not ready."""


def _own_key() -> str:
    """The ledger key of the running activity: ``temporal/WORKFLOW/RUN/ACTIVITY``."""
    info = activity.info()
    return f"temporal/{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"


def _mark() -> dict[str, str | None]:
    """What the running attempt leaves on its entry: its task token, and whose it is."""
    info = activity.info()
    return {
        "task_token": base64.b64encode(info.task_token).decode("ascii"),
        "workflow_id": info.workflow_id,
        "run_id": info.workflow_run_id,
        "activity_id": info.activity_id,
    }


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """Turn an SDK error another attempt would meet again into a non-retryable failure."""
    try:
        yield
    except err.VideoGenError as exc:
        _fail_for_good(exc)
        raise


def _fail_for_good(exc: err.VideoGenError) -> None:
    """Raise a non-retryable failure for ``exc`` when another attempt would meet it again."""
    if isinstance(exc, _PERMANENT) or (
        isinstance(exc, err.APIStatusError) and not is_transient(exc)
    ):
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
