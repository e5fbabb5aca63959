"""The client's download calls, ``download`` and ``download_many``: :class:`DownloadCalls`."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import anyio

from .._contract import _checks as checks
from .._contract._exceptions import VideoGenError
from .._contract._models import GetTask, ProjectTask, Task
from .._http._transport import Transport
from . import _file
from ._file import DEFAULT_ATTEMPTS, DEFAULT_CHUNK_SIZE, ProgressCallback
from ._many import DownloadResult
from ._sources import (
    DownloadSource,
    check_download_options,
    check_source,
    default_filename,
    is_url,
    planned_names,
    resolve_source,
    source_name,
)

logger = logging.getLogger("videogen_async")


class DownloadCalls:
    """The download calls of a client, which says what they go through."""

    def _download_through(self) -> tuple[Transport, GetTask]:
        """The transport bodies are streamed with, and how a task id is read."""
        raise NotImplementedError

    async def download(
        self,
        source: DownloadSource,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        attempts: int = DEFAULT_ATTEMPTS,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        progress: ProgressCallback | None = None,
    ) -> Path:
        """Download a finished video to a file: streamed, atomic, resumed after a broken link.

        ``path`` never holds a partial video; a broken connection is resumed with ``Range``
        (or started over); the API key is never sent to the host. See ``docs/downloads.md``.

        Args:
            source: A succeeded :class:`Task`, a task id (the task is fetched and must have
                succeeded), or the video's ``http(s)`` URL.
            path: The file to write, or an existing directory (the file is then named
                ``{task_id}.mp4``, or after the URL's last path segment).
            overwrite: Replace an existing file; when ``False`` an existing file is an error.
            attempts: Requests made in all for the file (resumes included).
            chunk_size: Bytes read and written at a time.
            progress: Called as ``progress(received, total)`` after each chunk.

        Returns:
            The path of the written file.

        Raises:
            DownloadError: The task has not succeeded, the host failed, the body was short,
                or the file could not be written; nothing partial is left behind.
            NotFoundError: No such task (for a task id).
            APIConnectionError: The service could not be reached to read the task.
            InvalidRequestError: ``source`` is not a ``Task``, a task id or a URL, or
                ``attempts`` or ``chunk_size`` is not a whole number >= 1.
        """
        transport, get_task = self._download_through()
        check_download_options(attempts, chunk_size)
        url, task_id = await resolve_source(get_task, check_source(source))
        dest = Path(path)
        if await anyio.to_thread.run_sync(dest.is_dir) or str(path).endswith(("/", os.sep)):
            dest /= default_filename(url=url, task_id=task_id)
        await _file.download_url(
            transport,
            url,
            dest,
            overwrite=overwrite,
            attempts=attempts,
            chunk_size=chunk_size,
            progress=progress,
            task_id=task_id,
        )
        return dest

    async def download_many(
        self,
        items: Iterable[DownloadSource],
        directory: str | os.PathLike[str],
        *,
        max_concurrency: int = 4,
        overwrite: bool = True,
        attempts: int = DEFAULT_ATTEMPTS,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        on_result: Callable[[DownloadResult], None] | None = None,
    ) -> list[DownloadResult]:
        """Download many videos into a directory, at most ``max_concurrency`` at a time.

        A failed item does not stop the others. Files are named as by :meth:`download`, made
        distinct when two would collide.

        Args:
            items: Succeeded tasks, task ids or video URLs.
            directory: Where to write the files (created if missing).
            max_concurrency: Downloads in flight at once.
            overwrite: Replace existing files; when ``False`` an existing file is that
                item's error.
            attempts: Requests made in all per file (resumes included).
            chunk_size: Bytes read and written at a time.
            on_result: Quick, non-raising callback given each result as soon as it is done.

        Returns:
            One :class:`DownloadResult` per item (its ``path`` or ``error``), in order.

        Raises:
            InvalidRequestError: ``max_concurrency``, ``attempts`` or ``chunk_size`` is not
                a whole number >= 1, or an item is not a ``Task``, a task id or a URL.
        """
        transport, get_task = self._download_through()
        checks.whole("max_concurrency", max_concurrency)
        check_download_options(attempts, chunk_size)
        sources = [check_source(item) for item in items]
        names = planned_names(sources)
        folder = Path(directory)
        results: list[DownloadResult | None] = [None] * len(sources)
        limiter = anyio.Semaphore(max_concurrency)
        fetch = functools.partial(
            _file.download_url,
            transport,
            overwrite=overwrite,
            attempts=attempts,
            chunk_size=chunk_size,
        )

        async def one(index: int) -> None:
            source = sources[index]
            name = source_name(source)
            url = task_id = None
            async with limiter:
                try:
                    url, task_id = await resolve_source(get_task, source)
                    dest = folder / names[index]
                    result = DownloadResult(
                        name, dest, url, task_id, await fetch(url, dest, task_id=task_id)
                    )
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
