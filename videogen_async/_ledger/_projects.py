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


class ProjectCreates:
    """The project calls of :class:`~videogen_async.Ledger` (documented there)."""

    def __init__(self, creator: Creator) -> None:
        self._creator = creator
        self._store = creator.store

    async def create_project(
        self,
        client: Any,
        urls: tuple[str, Sequence[str]],
        key: str | None,
        script_credits: float,
        metadata: dict[str, Any] | None,
        fields: dict[str, Any],
    ) -> LedgerEntry:
        """``Ledger.create_project``: ``urls`` the reference video's and the product images'."""
        key = check_key(key) if key is not None else uuid.uuid4().hex
        meta = check_metadata(metadata)
        video = urls[0]
        images = list(urls[1])
        request = {"reference_video_url": video, "product_image_urls": images, **fields}
        text = json_text(request, "", sort_keys=True, default=str)
        new = NewEntry(key, "project", text, None, fields.get("duration"), metadata=meta)
        send = lambda: client.projects.create(video, images, **fields)  # noqa: E731
        return await self._creator.create(begin_create, new, key, script_credits, send)

    async def record_project_tasks(
        self, key: str, project_id: str, task_ids: Sequence[str]
    ) -> list[LedgerEntry]:
        """``Ledger.record_project_tasks``: written 1,000 a transaction."""
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
        client: Any,
        key: str,
        batch_key: str | None,
        metadata: dict[str, Any] | None,
        fields: dict[str, Any],
    ) -> list[LedgerEntry]:
        """``Ledger.create_videos``: the batch's own entry written ahead, its tasks answered."""
        check_metadata(metadata)
        row = await self._store.read(get, check_key(key))
        if row is None or row["kind"] != "project" or not row["project_id"]:
            raise LedgerError(f"ledger key {key!r}: no project with a known id")
        project_id = row["project_id"]
        batch = f"{key}/videos/{uuid.uuid4().hex}" if batch_key is None else check_key(batch_key)
        meta = check_metadata({**load_metadata(row["metadata"]), **(metadata or {})})
        text = json_text({"project": key, **fields}, "", sort_keys=True, default=str)
        new = NewEntry(batch, "videos", text, None, None, project_id=project_id, metadata=meta)
        send = lambda: client.projects.create_videos(project_id, **fields)  # noqa: E731
        await self._creator.create(begin_create, new, batch, 0.0, send)
        rows = await self._store.read(batch_entries, project_id, batch)
        return [entry_from_row(task) for task in rows]
