"""Download sources: a task, a task id or a URL, resolved to a URL and a file name."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast
from urllib.parse import unquote, urlsplit, urlunsplit

from .._contract import _checks as checks
from .._contract._exceptions import DownloadError
from .._contract._models import GetTask, ProjectTask, Task
from .._contract._validation import is_web_url

DownloadSource = Task | ProjectTask | str


def check_source(source: object) -> DownloadSource:
    """``source`` when it is something to download (a ``Task``, a task id or a URL)."""
    return cast(
        DownloadSource,
        checks.instance("source", source, (Task, ProjectTask, str), "must be a Task, id or URL"),
    )


def check_download_options(attempts: object, chunk_size: object) -> None:
    """The options of a file's download: whole numbers >= 1."""
    checks.whole("attempts", attempts)
    checks.whole("chunk_size", chunk_size)


"""What can be downloaded: a :class:`Task` (or a task listed in a project), a task id, or an
``http(s)`` URL."""

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".m4v", ".webm", ".mkv"})


def is_url(text: str) -> bool:
    """Whether ``text`` is an ``http(s)`` URL (as opposed to a task id)."""
    return text.strip().lower().startswith(("http://", "https://"))


def redact_url(url: str) -> str:
    """``scheme://host[:port]/path`` of a URL (``?...`` for a query), for messages and logs.

    Signed media URLs carry their signature in the query: it is kept out of error texts, as
    are credentials and the fragment.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unreadable URL>"
    return urlunsplit((parts.scheme, f"{host}:{port}" if port else host, parts.path, "", "")) + (
        "?..." if parts.query else ""
    )


def check_url(url: str) -> str:
    if not is_web_url(url.strip()):
        raise DownloadError(f"not an http(s) URL: {redact_url(url)!s}", url=url)
    return url.strip()


def default_filename(*, url: str | None, task_id: str | None) -> str:
    """The safe file name (letters, digits, ``.``, ``_``, ``-``) of a video in a directory.

    ``{task_id}.mp4`` when the id is known, else the URL's last segment; a video extension of
    the URL is kept.
    """
    suffix = ".mp4"
    base = ""
    if url:
        try:
            path = unquote(urlsplit(url).path)
        except ValueError:
            path = ""
        leaf = path.rsplit("/", 1)[-1]
        stem, dot, ext = leaf.rpartition(".")
        if dot and f".{ext.lower()}" in _VIDEO_SUFFIXES:
            suffix = f".{ext.lower()}"
            base = stem
        else:
            base = leaf
    if task_id:
        base = task_id
    return (_UNSAFE_NAME.sub("_", base).strip("._")[:120] or "video") + suffix


def source_name(source: DownloadSource) -> str:
    if isinstance(source, (Task, ProjectTask)):
        return source.task_id or "<task without id>"
    return str(source)


def planned_names(items: Sequence[DownloadSource]) -> list[str]:
    """A distinct file name per item, fixed before anything starts."""
    names = []
    seen: dict[str, int] = {}
    for item in items:
        url = item if isinstance(item, str) and is_url(item) else None
        name = default_filename(
            url=url,
            task_id=None
            if url
            else (item.task_id if isinstance(item, (Task, ProjectTask)) else item) or None,
        )
        key = name.lower()
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{seen[key]}{dot}{ext}"
        names.append(name)
    return names


async def resolve_source(get_task: GetTask, source: DownloadSource) -> tuple[str, str | None]:
    """The video URL of a source and its task id (``None`` for a plain URL).

    A task id is read with ``get_task`` (the client's ``tasks.get``), as is a task that is
    not terminal yet or listed in a project.

    Raises:
        DownloadError: The task has not succeeded, or has no video URL.
        NotFoundError: No such task.
        APIStatusError: Reading the task failed.
        APIConnectionError: The service could not be reached.
    """
    task: Task | None
    if isinstance(source, Task):
        task = source if source.is_terminal else await get_task(source.task_id)
    elif isinstance(source, ProjectTask):
        if not source.task_id:
            raise DownloadError("this project task carries no task_id")
        task = await get_task(source.task_id)
    elif is_url(source):  # a string: checked by check_source first
        return check_url(source), None
    else:
        task = await get_task(source)
    if not task.is_succeeded:
        raise DownloadError(
            f"task {task.task_id}"
            f" {'has not finished yet' if not task.is_terminal else f'ended {task.status}'}"
            f"{f': {task.error_message}' if task.error_message else ''}; only a succeeded task"
            " has a video",
            task_id=task.task_id,
        )
    if not task.video_url:
        raise DownloadError(
            f"task {task.task_id} succeeded but its result has no video_url", task_id=task.task_id
        )
    return task.video_url, task.task_id
