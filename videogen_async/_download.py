"""Downloading finished videos: streamed, atomic, resumable, and never with the API key.

One download goes like this:

1. The source is resolved to a URL: a :class:`~videogen_async.Task` that succeeded carries its
   ``video_url``; a task id is fetched first (and must have succeeded); an ``http(s)`` URL is
   used as it is.
2. The body is streamed in chunks (bounded memory) through ``Transport.stream``, which never
   sends the ``Authorization`` header: the video lives on a media host, not on the service,
   and the key must not leak there. ``Accept-Encoding: identity`` is asked for, so that the
   bytes counted are the bytes declared by ``Content-Length``.
3. Chunks go to a temporary file *in the destination's directory* (``.NAME.XXXX.part``), written
   from a worker thread so that the event loop never blocks on the disk.
4. A connection that breaks mid-file is resumed with ``Range: bytes=N-`` (plus ``If-Range`` when
   the first answer carried a validator). A resumed answer is used only when it is a ``206``
   whose ``Content-Range`` starts exactly at ``N`` and names the same total size; a ``200`` (the
   host ignored ``Range``) or any other range starts the file over. A few attempts are made in
   all, with a short jittered backoff between them.
5. The received size must equal ``Content-Length`` (or the total of ``Content-Range``): a short
   body is never accepted, a longer one neither. Only then is the temporary file flushed,
   ``fsync``-ed and renamed over the destination (``os.replace``, atomic on one filesystem).
   On any failure, or cancellation, the temporary file is removed: a file at the destination
   path is always a complete download.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit, urlunsplit

import anyio
import attrs

from ._exceptions import APIConnectionError, DownloadError, VideoGenError
from ._models import ProjectTask, Task
from ._retry import RESUME_POLICY, retry_delay
from ._transport import Transport

#: Reads one task by id (the client's ``tasks.get``).
GetTask = Callable[[str], Awaitable[Task]]

__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_CHUNK_SIZE",
    "DownloadResult",
    "DownloadSource",
    "download",
    "download_many",
    "download_url",
    "redact_url",
]

logger = logging.getLogger("videogen_async")

DEFAULT_CHUNK_SIZE = 256 * 1024
"""Bytes read from the network (and written to disk) at a time."""
DEFAULT_ATTEMPTS = 4
"""Requests made for one file in all: the first and up to three resumes or restarts."""

#: HTTP statuses of the media host after which a download is tried again.
_RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)\s*-\s*(\d+)\s*/\s*(\d+|\*)\s*$", re.IGNORECASE)
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".m4v", ".webm", ".mkv"})

DownloadSource = Task | ProjectTask | str
"""What can be downloaded: a :class:`Task` (or a task listed in a project), a task id, or an
``http(s)`` URL."""

ProgressCallback = Callable[[int, int | None], None]
"""``progress(received, total)``: bytes received so far, and the size if the host said."""


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


# --------------------------------------------------------------------------------------------
# Small pure helpers
# --------------------------------------------------------------------------------------------


def is_url(text: str) -> bool:
    """Whether ``text`` is an ``http(s)`` URL (as opposed to a task id).

    Args:
        text: A task id or a URL.

    Returns:
        ``True`` for a string starting with ``http://`` or ``https://``.
    """
    return text.strip().lower().startswith(("http://", "https://"))


def redact_url(url: str) -> str:
    """A URL fit for messages and logs: without its query, fragment or credentials.

    Signed media URLs carry their signature in the query; it is a secret of sorts and is
    kept out of error texts.

    Args:
        url: The URL.

    Returns:
        ``scheme://host[:port]/path``, with ``?...`` shown when a query was dropped.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unreadable URL>"
    netloc = f"{host}:{port}" if port else host
    text = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return text + ("?..." if parts.query else "")


def _check_url(url: str) -> str:
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not host:
        raise DownloadError(f"not an http(s) URL: {redact_url(url)!s}", url=url)
    return url.strip()


def _safe_name(text: str) -> str:
    name = _UNSAFE_NAME.sub("_", text).strip("._")
    return name[:120] or "video"


def default_filename(*, url: str | None, task_id: str | None) -> str:
    """The file name a video is saved under when only a directory is given.

    Args:
        url: The video's URL (its extension is kept when it is a video one).
        task_id: The task's id, when known: ``{task_id}.mp4``.

    Returns:
        A safe file name (letters, digits, ``.``, ``_``, ``-``).
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
    return _safe_name(base) + suffix


def _parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    if not value:
        return None
    match = _CONTENT_RANGE.match(value)
    if match is None:
        return None
    start, end = int(match.group(1)), int(match.group(2))
    total = None if match.group(3) == "*" else int(match.group(3))
    if end < start or (total is not None and end >= total):
        return None
    return start, end, total


def _content_length(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length")
    if value is None:
        return None
    try:
        length = int(str(value).strip())
    except ValueError:
        return None
    return length if length >= 0 else None


def _validator(headers: Mapping[str, str]) -> str | None:
    etag = headers.get("etag")
    if etag and not str(etag).startswith("W/"):
        return str(etag)
    modified = headers.get("last-modified")
    return str(modified) if modified else None


# --------------------------------------------------------------------------------------------
# The temporary file (every call runs in a worker thread)
# --------------------------------------------------------------------------------------------


class _PartFile:
    """The temporary ``.part`` file beside the destination; all I/O off the event loop."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.path: Path | None = None
        self._file: BinaryIO | None = None

    async def open(self, *, overwrite: bool) -> None:
        def _open() -> tuple[Path, BinaryIO]:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            if not overwrite and self.dest.exists():
                raise FileExistsError(f"{self.dest} already exists")
            fd, name = tempfile.mkstemp(
                dir=self.dest.parent, prefix=f".{self.dest.name}.", suffix=".part"
            )
            return Path(name), os.fdopen(fd, "wb")

        self.path, self._file = await anyio.to_thread.run_sync(_open)

    def _open_file(self) -> BinaryIO:
        if self._file is None:
            raise RuntimeError("the temporary file is not open")
        return self._file

    async def write(self, chunk: bytes) -> None:
        file = self._open_file()
        try:
            await anyio.to_thread.run_sync(file.write, chunk)
        except OSError as exc:
            raise _DiskError(exc) from exc

    async def truncate(self) -> None:
        file = self._open_file()

        def _truncate() -> None:
            file.seek(0)
            file.truncate()

        try:
            await anyio.to_thread.run_sync(_truncate)
        except OSError as exc:
            raise _DiskError(exc) from exc

    async def commit(self) -> None:
        """Flush, fsync, close, and rename over the destination (atomic)."""
        file, part = self._open_file(), self.path
        if part is None:
            raise RuntimeError("the temporary file is not open")

        def _commit() -> None:
            file.flush()
            os.fsync(file.fileno())
            file.close()
            os.replace(part, self.dest)

        await anyio.to_thread.run_sync(_commit)
        self._file = None
        self.path = None

    async def discard(self) -> None:
        """Close and delete the temporary file; safe to call at any time, even cancelled."""
        file, part = self._file, self.path
        self._file = None
        self.path = None
        if file is None and part is None:
            return

        def _discard() -> None:
            if file is not None:
                file.close()
            if part is not None:
                with contextlib.suppress(FileNotFoundError):
                    part.unlink()

        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_discard)
        except BaseException:
            if file is not None:  # never leak the handle, even if the worker thread failed
                file.close()
            raise


# --------------------------------------------------------------------------------------------
# One URL to one file
# --------------------------------------------------------------------------------------------


class _DiskError(Exception):
    """Writing the temporary file failed (internal; kept apart from network ``OSError``)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Retry(Exception):
    """One attempt failed in a way worth another attempt (internal)."""

    def __init__(self, reason: str, *, restart: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.restart = restart


async def download_url(
    transport: Transport,
    url: str,
    dest: Path,
    *,
    overwrite: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: ProgressCallback | None = None,
    task_id: str | None = None,
    rng: random.Random | None = None,
) -> int:
    """Stream ``url`` into ``dest`` atomically, resuming after a broken connection.

    Args:
        transport: The client's transport (its ``stream`` never sends the API key).
        url: The video's ``http(s)`` URL.
        dest: The destination file.
        overwrite: Replace an existing file at ``dest``; otherwise fail before any request.
        attempts: Requests made in all (at least 1).
        chunk_size: Bytes read and written at a time.
        progress: Called as ``progress(received, total)`` after each chunk (``total`` is
            ``None`` when the host does not say).
        task_id: The task the video belongs to, for error messages.
        rng: Random source of the backoff jitter.

    Returns:
        The number of bytes written.

    Raises:
        DownloadError: The video could not be downloaded; nothing is left at ``dest`` (an
            existing file there is untouched).
        ValueError: ``attempts`` or ``chunk_size`` is below 1.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size!r}")
    url = _check_url(url)
    what = f"task {task_id}" if task_id else redact_url(url)
    part = _PartFile(dest)
    try:
        await part.open(overwrite=overwrite)
    except OSError as exc:
        raise DownloadError(
            f"download of {what}: cannot write {dest}: {exc}", url=url, path=dest, task_id=task_id
        ) from exc
    state = _State()
    attempt = 0
    try:
        while True:
            attempt += 1
            try:
                await _attempt(transport, url, part, state, chunk_size, progress, what)
            except _Retry as retry:
                if retry.restart:
                    await part.truncate()
                    state.received = 0
                if attempt >= attempts:
                    raise DownloadError(
                        f"download of {what} failed after {attempt} attempt(s): {retry.reason}",
                        url=url,
                        path=dest,
                        task_id=task_id,
                        bytes_received=state.received,
                        expected_size=state.total,
                    ) from retry.__cause__
                delay = retry_delay(RESUME_POLICY, attempt, rng=rng) or 0.0
                logger.info(
                    "download of %s: %s; %s in %.2fs (attempt %d of %d)",
                    what,
                    retry.reason,
                    f"resuming at byte {state.received}"
                    if state.received and state.ranges_ok
                    else "starting over",
                    delay,
                    attempt + 1,
                    attempts,
                )
                await anyio.sleep(delay)
                continue
            break
        await part.commit()
    except (OSError, _DiskError) as exc:
        await part.discard()
        cause = exc.cause if isinstance(exc, _DiskError) else exc
        raise DownloadError(
            f"download of {what}: writing {dest} failed: {cause}",
            url=url,
            path=dest,
            task_id=task_id,
            bytes_received=state.received,
            expected_size=state.total,
        ) from cause
    except BaseException:
        await part.discard()
        raise
    logger.debug(
        "downloaded %s to %s (%d bytes, %d attempt(s))", what, dest, state.received, attempt
    )
    return state.received


class _State:
    """What one download knows across its attempts."""

    def __init__(self) -> None:
        self.received = 0  # bytes in the temporary file
        self.total: int | None = None  # the size the host declared
        self.validator: str | None = None  # strong ETag or Last-Modified, for If-Range
        self.ranges_ok = True  # whether a resume may be asked for


async def _attempt(
    transport: Transport,
    url: str,
    part: _PartFile,
    state: _State,
    chunk_size: int,
    progress: ProgressCallback | None,
    what: str,
) -> None:
    """One request, appending to ``part`` and updating ``state``; returns once complete.

    Raises:
        _Retry: Worth another attempt (a broken connection, a short body, a 5xx, a range
            the host got wrong).
        DownloadError: Not worth another attempt (a 4xx, more bytes than declared).
    """
    headers = {"Accept-Encoding": "identity"}
    if state.received > 0 and not state.ranges_ok:
        await part.truncate()
        state.received = 0
    resuming = state.received > 0
    if resuming:
        headers["Range"] = f"bytes={state.received}-"
        if state.validator:
            headers["If-Range"] = state.validator
    try:
        async with transport.stream(url, headers=headers) as resp:
            status = resp.status_code
            # HTTP header names are case-insensitive; the stream hands over a plain dict.
            hdrs = {k.lower(): v for k, v in resp.headers.items()}
            encoding = hdrs.get("content-encoding", "identity").strip().lower()
            exact = encoding in ("", "identity")
            if resuming and status == 206:
                _check_resumed(hdrs, state)
            elif status == 200:
                if resuming:
                    logger.info("download of %s: the host ignored Range; starting over", what)
                    await part.truncate()
                    state.received = 0
                    state.ranges_ok = False
                state.total = _content_length(hdrs) if exact else None
                state.validator = _validator(hdrs)
                if not exact or hdrs.get("accept-ranges", "").strip().lower() == "none":
                    state.ranges_ok = False
            elif resuming and status == 416:
                raise _Retry("the host refused the resume range (416)", restart=True)
            else:
                excerpt = await resp.read_excerpt()
                text = f"the host answered HTTP {status}" + (f": {excerpt}" if excerpt else "")
                if status in _RETRYABLE_STATUSES:
                    raise _Retry(text)
                raise DownloadError(
                    f"download of {what}: {text}", url=url, status_code=status, path=part.dest
                )
            total = state.total
            async for chunk in resp.iter_chunks(chunk_size):
                if total is not None and state.received + len(chunk) > total:
                    raise DownloadError(
                        f"download of {what}: the host sent more than the {total} bytes it"
                        " declared",
                        url=url,
                        path=part.dest,
                        bytes_received=state.received + len(chunk),
                        expected_size=total,
                    )
                await part.write(chunk)
                state.received += len(chunk)
                if progress is not None:
                    progress(state.received, total)
    except APIConnectionError as exc:
        raise _Retry(f"the connection broke at byte {state.received}: {exc.message}") from exc
    if state.total is not None and state.received < state.total:
        raise _Retry(f"short body: got {state.received} of {state.total} bytes")


def _check_resumed(headers: Mapping[str, str], state: _State) -> None:
    """Accept a 206 only if it continues exactly where the file stops, of the same file."""
    raw = headers.get("content-range")
    span = _parse_content_range(raw)
    if (
        span is None
        or span[0] != state.received
        or (state.total is not None and span[2] is not None and span[2] != state.total)
    ):
        raise _Retry(
            f"the host answered Range bytes={state.received}- with Content-Range {raw!r}",
            restart=True,
        )
    length = _content_length(headers)
    if length is not None and length != span[1] - span[0] + 1:
        raise _Retry("the host's Content-Length does not match its Content-Range", restart=True)
    if span[2] is not None:
        state.total = span[2]


# --------------------------------------------------------------------------------------------
# Sources: a Task, a task id, a URL
# --------------------------------------------------------------------------------------------


def _source_name(source: DownloadSource) -> str:
    if isinstance(source, (Task, ProjectTask)):
        return source.task_id or "<task without id>"
    return str(source)


async def resolve_source(get_task: GetTask, source: DownloadSource) -> tuple[str, str | None]:
    """Find the URL of a source: ``(url, task_id)``.

    Args:
        get_task: Reads a task given by id (the client's ``tasks.get``).
        source: A :class:`Task`, a task listed in a project, a task id, or a URL.

    Returns:
        The video URL and the task id (``None`` for a plain URL).

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
    elif isinstance(source, str):
        if is_url(source):
            return _check_url(source), None
        task = await get_task(source)
    else:
        raise TypeError(f"cannot download a {type(source).__name__}: pass a Task, id or URL")
    if not task.is_succeeded:
        reason = f": {task.error_message}" if task.error_message else ""
        state = "has not finished yet" if not task.is_terminal else f"ended {task.status}"
        raise DownloadError(
            f"task {task.task_id} {state}{reason}; only a succeeded task has a video",
            task_id=task.task_id,
        )
    if not task.video_url:
        raise DownloadError(
            f"task {task.task_id} succeeded but its result has no video_url",
            task_id=task.task_id,
        )
    return task.video_url, task.task_id


async def download(
    transport: Transport,
    get_task: GetTask,
    source: DownloadSource,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = True,
    attempts: int = DEFAULT_ATTEMPTS,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: ProgressCallback | None = None,
) -> Path:
    """Download one video; see :meth:`AsyncVideoGen.download`."""
    url, task_id = await resolve_source(get_task, source)
    dest = Path(path)
    if await anyio.to_thread.run_sync(dest.is_dir) or str(path).endswith(("/", os.sep)):
        dest = dest / default_filename(url=url, task_id=task_id)
    await download_url(
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


def _planned_names(items: Sequence[DownloadSource]) -> list[str]:
    """A distinct file name per item, fixed before anything starts."""
    names: list[str] = []
    seen: dict[str, int] = {}
    for item in items:
        if isinstance(item, (Task, ProjectTask)):
            name = default_filename(url=None, task_id=item.task_id or None)
        elif is_url(item):
            name = default_filename(url=item, task_id=None)
        else:
            name = default_filename(url=None, task_id=item)
        key = name.lower()
        if key in seen:
            seen[key] += 1
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{seen[key]}{dot}{ext}"
        else:
            seen[key] = 1
        names.append(name)
    return names


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
    names = _planned_names(sources)
    folder = Path(directory)
    results: list[DownloadResult | None] = [None] * len(sources)
    limiter = anyio.Semaphore(max_concurrency)

    async def one(index: int) -> None:
        source = sources[index]
        name = _source_name(source)
        url: str | None = None
        task_id: str | None = None
        async with limiter:
            try:
                url, task_id = await resolve_source(get_task, source)
                dest = folder / names[index]
                size = await download_url(
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
