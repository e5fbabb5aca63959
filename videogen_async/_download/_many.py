"""Many videos into one folder: distinct names fixed first, bounded concurrency, one result each."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import anyio
import attrs

from .._exceptions import VideoGenError
from .._models import ProjectTask, Task
from .._transport import Transport
from . import _file
from ._file import DEFAULT_ATTEMPTS, DEFAULT_CHUNK_SIZE
from ._sources import DownloadSource, GetTask, is_url, planned_names, resolve_source, source_name

__all__ = ["DownloadResult", "download_many"]

logger = logging.getLogger("videogen_async")


@attrs.frozen(eq=False)
class DownloadResult:
    """The outcome of one item of :meth:`AsyncVideoGen.download_many`.

    Attributes:
        source: The item as given: a task id or a URL (for a ``Task``, its id).
        path: Where the video was written; ``None`` when it failed.
        url: The video's URL, once known (``None`` when the task could not be resolved).
        task_id: The task's id, when the item was a task or a task id.
        size: Bytes written.
        error: Why it failed (``None`` on success).
    """

    source: str
    path: Path | None = None
    url: str | None = None
    task_id: str | None = None
    size: int = 0
    error: VideoGenError | None = None

    @property
    def ok(self) -> bool:
        """Whether the video was downloaded."""
        return self.error is None


async def download_many(
    transport: Transport,
    get_task: GetTask,
    items: Iterable[DownloadSource],
    directory: str | os.PathLike[str],
    *,
    max_concurrency: int = 4,
    overwrite: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    on_result: Callable[[DownloadResult], None] | None = None,
) -> list[DownloadResult]:
    """Download many videos; see :meth:`AsyncVideoGen.download_many`."""
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency!r}")
    if attempts < 1 or chunk_size < 1:
        raise ValueError("attempts and chunk_size must be at least 1")
    sources = list(items)
    for item in sources:
        if not isinstance(item, (Task, ProjectTask, str)):
            raise TypeError(f"cannot download a {type(item).__name__}: pass a Task, id or URL")
    names = planned_names(sources)
    folder = Path(directory)
    results: list[DownloadResult | None] = [None] * len(sources)
    limiter = anyio.Semaphore(max_concurrency)

    async def one(index: int) -> None:
        source = sources[index]
        name = source_name(source)
        url: str | None = None
        task_id: str | None = None
        async with limiter:
            try:
                url, task_id = await resolve_source(get_task, source)
                dest = folder / names[index]
                size = await _file.download_url(
                    transport,
                    url,
                    dest,
                    overwrite=overwrite,
                    attempts=attempts,
                    chunk_size=chunk_size,
                    task_id=task_id,
                )
                result = DownloadResult(source=name, path=dest, url=url, task_id=task_id, size=size)
            except VideoGenError as exc:
                if task_id is None and not (isinstance(source, str) and is_url(source)):
                    task_id = getattr(exc, "task_id", None) or (
                        source.task_id if isinstance(source, (Task, ProjectTask)) else source
                    )
                logger.info("download of %s failed: %s", name, exc)
                result = DownloadResult(source=name, url=url, task_id=task_id, error=exc)
        results[index] = result
        if on_result is not None:
            on_result(result)

    async with anyio.create_task_group() as tg:
        for index in range(len(sources)):
            tg.start_soon(one, index)
    return [r for r in results if r is not None]
