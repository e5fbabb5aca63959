"""Projects through the ledger: the project's create, and its video batches, written ahead."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from .._contract._exceptions import LedgerError
from .._contract._validation import json_text
from ._creates import Creator, check_key
from ._entry import LedgerEntry, check_metadata, entry_from_row, load_metadata
from ._plans import NewEntry, add_batch_tasks, batch_entries, batch_tasks, begin_create, get
from ._protocol import LedgerClient
from ._store import Store


class ProjectCreates:
    """The project calls of :class:`~videogen_async.Ledger`."""

    _store: Store
    _creator: Creator

    async def create_project(
        self,
        client: LedgerClient,
        reference_video_url: str,
        product_image_urls: Sequence[str],
        *,
        key: str | None = None,
        script_credits: float = 10.0,
        metadata: dict[str, Any] | None = None,
        **project_fields: Any,
    ) -> LedgerEntry:
        """Create a project through the ledger, with the guarantees of ``create_task``.

        Its batches' tasks are recorded by :meth:`create_videos` (:meth:`record_project_tasks`
        for auto mode's first batch).

        Args:
            client: The client that sends the create.
            reference_video_url: As ``client.projects.create``.
            product_image_urls: As ``client.projects.create``.
            key: The idempotency key (``None``: a fresh random key).
            script_credits: The price reserved under ``max_credits`` (the service's script
                charge, 10 credits).
            metadata: A JSON object kept with the entry, and with the entries of its tasks.
            **project_fields: The other fields of ``client.projects.create``.

        Returns:
            The project's entry (state ``pending``, ``project_id`` set).

        Raises:
            InvalidRequestError: ``metadata`` or the key breaks a rule; nothing was written.
            AmbiguousCreateError: The create may have taken effect without an id.
            BudgetExceededError: It could pass ``max_credits``.
        """
        key = check_key(key) if key is not None else uuid.uuid4().hex
        meta = check_metadata(metadata)
        urls = list(product_image_urls)
        request = {"reference_video_url": reference_video_url, "product_image_urls": urls}
        text = json_text({**request, **project_fields}, "", sort_keys=True, default=str)
        duration = project_fields.get("duration")
        new = NewEntry(key, "project", text, None, duration, metadata=meta)
        send = lambda: client.projects.create(reference_video_url, urls, **project_fields)  # noqa: E731
        return await self._creator.create(begin_create, new, key, script_credits, send)

    async def record_project_tasks(
        self, key: str, project_id: str, task_ids: Sequence[str]
    ) -> list[LedgerEntry]:
        """Record task ids of a project (kind ``project_task``, ``pending``) for watchers.

        Idempotent. An unpollable id is recorded ``unknown`` as ``KEY/#POSITION "ID"`` (the id
        escaped), with the reason. The entries take the project's metadata.

        Args:
            key: The project's ledger key (each task's key is ``KEY/TASK_ID``).
            project_id: The project.
            task_ids: The ids (e.g. ``Project.task_ids`` of an auto-mode project).

        Returns:
            The entries of these ids.
        """
        project = await self._store.read(get, check_key(key))
        meta = None if project is None else project["metadata"]
        tasks = batch_tasks(key, task_ids)
        rows: list[Any] = []
        for start in range(0, len(tasks), 1000):
            chunk = tasks[start : start + 1000]
            rows += await self._store.write(add_batch_tasks, project_id, chunk, None, meta)
        self._creator.settled.fire()
        return [entry_from_row(row) for row in rows]

    async def create_videos(
        self,
        client: LedgerClient,
        key: str,
        *,
        batch_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        **batch_fields: Any,
    ) -> list[LedgerEntry]:
        """Create a video batch of a ledger project, written ahead like every create.

        Its task ids are recorded with the answer (``project_task`` entries, keys
        ``KEY/TASK_ID``); a batch key created before returns its tasks, sending nothing.

        Args:
            client: The client that sends the create.
            key: The ledger key of the project (created with :meth:`create_project`).
            batch_key: Makes the batch idempotent (``None``: a fresh ``KEY/videos/...``).
            metadata: Merged over the project's metadata, kept on the batch's entries.
            **batch_fields: The fields of ``client.projects.create_videos``.

        Returns:
            The entries of the batch's tasks (``pending``).

        Raises:
            LedgerError: No such project key, or its project id is not known.
            AmbiguousCreateError: This batch's create may have taken effect, its ids unknown.
        """
        check_metadata(metadata)
        row = await self._store.read(get, check_key(key))
        if row is None or row["kind"] != "project" or not row["project_id"]:
            raise LedgerError(f"ledger key {key!r}: no project with a known id")
        project_id = row["project_id"]
        batch = f"{key}/videos/{uuid.uuid4().hex}" if batch_key is None else check_key(batch_key)
        meta = check_metadata({**load_metadata(row["metadata"]), **(metadata or {})})
        text = json_text({"project": key, **batch_fields}, "", sort_keys=True, default=str)
        new = NewEntry(batch, "videos", text, None, None, project_id=project_id, metadata=meta)
        send = lambda: client.projects.create_videos(project_id, **batch_fields)  # noqa: E731
        await self._creator.create(begin_create, new, batch, 0.0, send)
        rows = await self._store.read(batch_entries, project_id, batch)
        return [entry_from_row(task) for task in rows]
