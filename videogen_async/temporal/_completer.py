"""The other end of an activity that waits: completing it from the ledger's dispatch.

Each attempt gets the entry as it is now (a retried activity's new token is used); an activity
already closed answers ``NOT_FOUND``, which counts as delivered.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import anyio
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from .._ledger import Ledger, LedgerEntry
from .._ledger._protocol import LedgerClient

logger = logging.getLogger("videogen_async")

DESTINATION = "temporal"
"""The dispatch destination name the activities are completed through."""

METADATA_KEY = "temporal"
"""The metadata key of an entry that holds its activity's task token."""


def outcome(entry: LedgerEntry) -> dict[str, Any]:
    """The activity's result for a terminal entry: its task as a dict.

    Raises:
        ApplicationError: The video failed (type ``TaskFailedError``, not retryable, details
            ``[task as dict]``).
    """
    task = entry.task.to_dict() if entry.task is not None else None
    if entry.state == "succeeded" and task is not None:
        return task
    raise ApplicationError(
        f"video task {entry.task_id} ended {entry.state}:"
        f" {(entry.task.error_message if entry.task else entry.error) or 'no reason given'}",
        task,
        type="TaskFailedError",
        non_retryable=True,
    )


def task_token(entry: LedgerEntry) -> bytes | None:
    """The task token an activity left on the entry, or ``None``."""
    held = entry.metadata.get(METADATA_KEY)
    token = held.get("task_token") if isinstance(held, dict) else None
    return base64.b64decode(token, validate=True) if isinstance(token, str) else None


class ActivityCompleter:
    """A ``deliver`` for ``ledger.dispatch`` that completes the activities waiting on entries.

    Args:
        client: The Temporal client to complete activities through.
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    async def __call__(self, entry: LedgerEntry) -> None:
        """Complete (or fail) the activity waiting on ``entry``; nothing if none waits.

        Raises:
            RPCError: Temporal did not take the completion (the dispatch tries again later).
        """
        token = task_token(entry)
        if token is None or not entry.is_terminal:
            return
        handle = self._client.get_async_activity_handle(task_token=token)
        try:
            try:
                result = outcome(entry)
            except ApplicationError as failure:
                await handle.fail(failure)
            else:
                await handle.complete(result)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            logger.debug("ledger key %r: its activity was already closed (%s)", entry.key, exc)


async def run_completions(
    ledger: Ledger,
    client: LedgerClient,
    temporal_client: Client,
    *,
    lease: float = 30.0,
    **watch_options: Any,
) -> None:
    """Run a worker's companions until cancelled: one watch and one dispatch of the ledger.

    The watch polls every workflow's pending videos in one gather; the dispatch
    (:data:`DESTINATION`) completes each waiting activity. Any number of these share the work.

    Args:
        ledger: The ledger the activities create through.
        client: The client that polls.
        temporal_client: The Temporal client that completes the activities.
        lease: Seconds the watch's and the dispatch's claims outlive a process that died
            before another takes them over.
        **watch_options: Other options of ``ledger.watch`` (``max_concurrency``...).
    """

    async def watch() -> None:
        async with ledger.watch(client, lease=lease, **watch_options) as finished:
            async for _entry in finished:
                pass

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        # backlog: an activity's video that finished before the destination's first use is
        # delivered too (entries of other programs are no-ops: no token).
        await ledger.dispatch(
            DESTINATION, ActivityCompleter(temporal_client), backlog=True, lease=lease
        )
