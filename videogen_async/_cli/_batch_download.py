"""The downloads of ``videogen batch``: the succeeded lines' videos not downloaded yet."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ._batch_state import BatchState
from ._common import Context, describe_error
from ._tasks import download_with_progress

if TYPE_CHECKING:
    from .._client import AsyncVideoGen

__all__ = ["download_all"]


async def download_all(
    ctx: Context, client: AsyncVideoGen, state: BatchState, directory: Path, max_concurrency: int
) -> None:
    """Save each succeeded line's video as ``TASK_ID.mp4``; record where each went."""
    wanted = [r for r in state.ordered() if r["status"] == "succeeded" and r["task_id"]]
    if not wanted:
        return

    def existing() -> set[str]:
        # Files appear only complete (an atomic rename): one that exists is kept.
        return {r["task_id"] for r in wanted if (directory / f"{r['task_id']}.mp4").is_file()}

    present = await anyio.to_thread.run_sync(existing)
    for record in wanted:
        if record["task_id"] in present:
            record["path"] = str(directory / f"{record['task_id']}.mp4")
    if present:
        ctx.ui.note(f"{len(present)} video(s) already downloaded to {directory}")
    todo = [r for r in wanted if r["task_id"] not in present]
    if not todo:
        return
    results = await download_with_progress(
        ctx, client, [r["task_id"] for r in todo], directory, max_concurrency=max_concurrency
    )
    for record, result in zip(todo, results, strict=True):
        if result.ok and result.path is not None:
            record["path"] = str(result.path)
        else:
            state.download_failures += 1
            record["download_error"] = describe_error(result.error) if result.error else None
            ctx.ui.warn(f"line {record['line']}: download failed: {record['download_error']}")
