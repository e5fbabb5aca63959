"""The downloads and the manifest of ``videogen batch``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ._common import describe_error
from ._tasks import download_with_progress

if TYPE_CHECKING:
    from ._batch import BatchRun

__all__ = ["download_all", "write_manifest"]


async def download_all(run: BatchRun, directory: Path) -> None:
    """Download the succeeded lines' videos not downloaded yet; record where each went."""
    wanted = [
        record
        for _, record in sorted(run.records.items())
        if record["status"] == "succeeded" and record["task_id"]
    ]
    if not wanted:
        return

    def _existing() -> set[str]:
        found: set[str] = set()
        for record in wanted:
            path = directory / f"{record['task_id']}.mp4"
            if path.is_file():  # files appear only complete (atomic rename)
                found.add(record["task_id"])
        return found

    present = await anyio.to_thread.run_sync(_existing)
    for record in wanted:
        if record["task_id"] in present:
            path = str(directory / f"{record['task_id']}.mp4")
            if record.get("path") != path:
                record["path"] = path
                await run.store.downloaded(record["line"], path)
    todo = [r for r in wanted if r["task_id"] not in present]
    if present:
        run.ui.note(f"{len(present)} video(s) already downloaded to {directory}")
    if not todo:
        return

    results = await download_with_progress(
        run.ctx,
        run.client,
        [r["task_id"] for r in todo],
        directory,
        max_concurrency=run.max_concurrency,
    )
    for record, result in zip(todo, results, strict=True):
        if result.ok and result.path is not None:
            record["path"] = str(result.path)
            await run.store.downloaded(record["line"], str(result.path))
        else:
            run.download_failures += 1
            record["download_error"] = describe_error(result.error) if result.error else None
            run.ui.warn(f"line {record['line']}: download failed: {record['download_error']}")


async def write_manifest(target: Path, records: list[dict[str, Any]]) -> None:
    """Write the manifest atomically (temporary file, then rename), off the event loop."""

    def _write() -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                for record in records:
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(name, target)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise

    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(_write)
