"""One video to one file: streamed into a temporary file, resumed with ``Range``, renamed.

The steps are those of the package's docstring (2 to 5); ``DownloadCalls.download`` resolves a
source first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

import anyio
import attrs

from .._contract import _exceptions as err
from .._contract._redact import drop_locals
from .._http._envelope import make_status_error
from .._http._retry import decide_retry
from .._http._transport import StreamResponse, Transport
from ._sources import check_url, redact_url

logger = logging.getLogger("videogen_async")

DEFAULT_CHUNK_SIZE = 256 * 1024
"""Bytes read from the network (and written to disk) at a time."""
DEFAULT_ATTEMPTS = 4
"""Requests made for one file in all: the first and up to three resumes or restarts."""

#: Statuses of a media host transient for a download beyond the SDK's own (``_retry``): 425
#: Too Early (a CDN still filling its cache).
_MEDIA_HOST_STATUSES = frozenset({425})
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)\s*-\s*(\d+)\s*/\s*(\d+|\*)\s*$", re.IGNORECASE)

ProgressCallback = Callable[[int, int | None], None]
"""``progress(received, total)``: bytes received so far, and the size if the host said."""


def _parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    match = _CONTENT_RANGE.match(value or "")
    if match is None:
        return None
    first, last, size = match.groups()
    start, end = int(first), int(last)
    total = None if size == "*" else int(size)
    if end < start or (total is not None and end >= total):
        return None
    return start, end, total


def _content_length(headers: Mapping[str, str]) -> int | None:
    try:  # none (""), or not a number: no size; int() takes the white space around one
        length = int(headers.get("content-length", ""))
    except ValueError:
        return None
    return length if length >= 0 else None


def _validator(headers: Mapping[str, str]) -> str | None:
    etag = headers.get("etag")
    if etag and not etag.startswith("W/"):
        return etag
    return headers.get("last-modified") or None


@attrs.define
class _PartFile:
    """The temporary ``.part`` file beside the destination; all I/O off the event loop.

    Made open (:meth:`open`); ``done`` once committed or discarded, after which a discard
    does nothing.
    """

    dest: Path
    path: Path
    file: BinaryIO
    done: bool = False

    @classmethod
    async def open(cls, dest: Path, *, overwrite: bool) -> _PartFile:
        """The temporary file beside ``dest`` (refused if it exists, unless ``overwrite``)."""

        def _open() -> _PartFile:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not overwrite and dest.exists():
                raise FileExistsError(f"{dest} already exists")
            fd, name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
            return cls(dest, Path(name), os.fdopen(fd, "wb"))

        return await anyio.to_thread.run_sync(_open)

    async def write(self, chunk: bytes | None) -> None:
        """Append ``chunk``; ``None`` empties the file (to start over)."""
        file = self.file

        def _write() -> None:
            if chunk is None:
                file.seek(0)
                file.truncate()
            else:
                file.write(chunk)

        try:
            await anyio.to_thread.run_sync(_write)
        except OSError as exc:
            raise _DiskError from exc

    async def commit(self) -> None:
        """Flush, fsync, close, and rename over the destination (atomic)."""

        def _commit() -> None:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.path, self.dest)

        await anyio.to_thread.run_sync(_commit)
        self.done = True

    async def discard(self) -> None:
        """Close and delete the temporary file; safe to call at any time, even cancelled."""
        if self.done:
            return
        self.done = True

        def _discard() -> None:
            # Closing flushes what is buffered, and fails again where the write failed (a full
            # disk, a file size limit): the file is closed all the same, and still removed.
            with contextlib.suppress(OSError):
                self.file.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_discard)
        except BaseException:
            self.file.close()  # never leak the handle, even if the worker thread failed
            raise


class _DiskError(Exception):
    """Writing the temporary file failed (internal; kept apart from network ``OSError``).

    The ``OSError`` is its ``__cause__``.
    """


@attrs.define(auto_exc=True)
class _Retry(Exception):
    """One attempt failed; ``error`` is what the retry decision judges (internal).

    ``restart``: the temporary file starts over (what it holds is not the host's file).
    """

    error: err.VideoGenError
    restart: bool = False


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
) -> int:
    """Stream ``url`` into ``dest`` atomically, resuming after a broken connection.

    The arguments are those of ``client.download`` (``task_id`` names the video in errors).
    Whether and when to try again after a failed attempt is the one retry decision's
    (``decide_retry``, with the client's backoff policy, ``attempts - 1`` retries and a
    media host's 425 as transient). Returns the number of bytes written.

    Raises:
        DownloadError: The video could not be downloaded; nothing is left at ``dest`` (an
            existing file there is untouched).

    ``attempts`` and ``chunk_size`` are checked by the calls (``download``, ``download_many``),
    before a task is read.
    """
    url = check_url(url)
    what = f"task {task_id}" if task_id else redact_url(url)
    state = _State()
    backoff = attrs.evolve(transport.backoff, max_retries=attempts - 1)

    def failed(message: str, status_code: int | None = None) -> err.DownloadError:
        return err.DownloadError(
            message,
            url=url,
            path=dest,
            task_id=task_id,
            status_code=status_code,
            bytes_received=state.received,
            expected_size=state.total,
        )

    try:
        part = await _PartFile.open(dest, overwrite=overwrite)
    except OSError as exc:
        raise failed(f"download of {what}: cannot write {dest}: {exc}") from exc
    attempt = 0
    try:
        while True:
            attempt += 1
            try:
                await _attempt(transport, url, part, state, chunk_size, progress, what)
            except _Retry as retry:
                reason = retry.error.message
                if retry.restart:
                    await _start_over(part, state)
                decision = decide_retry(
                    retry.error,
                    failures=attempt,
                    policy=backoff,
                    extra_statuses=_MEDIA_HOST_STATUSES,
                )
                if decision.reason == "permanent" and isinstance(retry.error, err.APIStatusError):
                    raise failed(f"download of {what}: {reason}", retry.error.status_code) from None
                if decision.delay is None:
                    raise failed(
                        f"download of {what} failed after {attempt} attempt(s): {reason}"
                        + (f" ({decision.detail})" if decision.reason == "too long" else "")
                    ) from retry.__cause__
                logger.info(
                    "download of %s: %s; %s in %.2fs (attempt %d of %d)",
                    what,
                    reason,
                    f"resuming at byte {state.received}"
                    if state.received and state.ranges_ok
                    else "starting over",
                    decision.delay,
                    attempt + 1,
                    attempts,
                )
                await anyio.sleep(decision.delay)
                continue
            break
        await part.commit()
    except (OSError, _DiskError) as exc:
        await part.discard()
        cause = exc.__cause__ if isinstance(exc, _DiskError) else exc
        raise failed(f"download of {what}: writing {dest} failed: {cause}") from cause
    except BaseException as exc:
        await part.discard()
        drop_locals(exc)  # the attempts' frames held the host's headers
        raise
    logger.debug(
        "downloaded %s to %s (%d bytes, %d attempt(s))", what, dest, state.received, attempt
    )
    return state.received


@attrs.define
class _State:
    """What one download knows across its attempts."""

    received: int = 0  # bytes in the temporary file
    total: int | None = None  # the size the host declared
    validator: str | None = None  # strong ETag or Last-Modified, for If-Range
    ranges_ok: bool = True  # whether a resume may be asked for


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
        _Retry: The attempt failed (a broken connection, a short body, an HTTP failure, a
            range the host got wrong): the retry decision judges its ``error``.
        DownloadError: Not worth another attempt (more bytes than declared).
    """
    headers = {"Accept-Encoding": "identity"}
    if state.received > 0 and not state.ranges_ok:
        await _start_over(part, state)
    resuming = state.received > 0
    if resuming:
        headers["Range"] = f"bytes={state.received}-"
        if state.validator:
            headers["If-Range"] = state.validator
    try:
        async with transport.stream(url, headers=headers) as resp:
            await _check_answer(resp, part, state, resuming=resuming, what=what)
            async for chunk in resp.iter_chunks(chunk_size):
                received = state.received + len(chunk)
                if state.total is not None and received > state.total:
                    # More than the host declared: no retry (it would send it again).
                    raise err.DownloadError(
                        f"download of {what}: the host sent more than the {state.total} bytes"
                        " it declared",
                        url=url,
                        path=part.dest,
                        bytes_received=received,
                        expected_size=state.total,
                    )
                await part.write(chunk)
                state.received = received
                if progress is not None:
                    progress(state.received, state.total)
    except err.APIConnectionError as exc:
        exc.message = f"the connection broke at byte {state.received}: {exc.message}"
        raise _Retry(exc) from exc
    if state.total is not None and state.received < state.total:
        raise _Retry(_broken(f"short body: got {state.received} of {state.total} bytes"))


async def _check_answer(
    resp: StreamResponse, part: _PartFile, state: _State, *, resuming: bool, what: str
) -> None:
    """Read an answer's status and headers into ``state`` (size, validator, resumable).

    A 200 to a resume starts the file over (the host ignored ``Range``); any other failure is
    a :class:`_Retry` for the retry decision.
    """
    status = resp.status_code
    # HTTP header names are case-insensitive; the stream hands over a plain dict.
    hdrs = {k.lower(): v for k, v in resp.headers.items()}
    if resuming and status == 206:
        _check_resumed(hdrs, state)
        return
    if resuming and status == 416:
        raise _Retry(_broken("the host refused the resume range (416)"), restart=True)
    if status != 200:
        excerpt = await resp.read_excerpt()
        raise _Retry(
            make_status_error(
                status,
                None,
                f"the host answered HTTP {status}" + (f": {excerpt}" if excerpt else ""),
                headers=dict(resp.headers),
                method="GET",
            )
        )
    if resuming:
        logger.info("download of %s: the host ignored Range; starting over", what)
        await _start_over(part, state)
        state.ranges_ok = False
    # A compressed body's length is not the file's: no size to check, no byte ranges.
    exact = hdrs.get("content-encoding", "identity").strip().lower() in ("", "identity")
    state.total = _content_length(hdrs) if exact else None
    state.validator = _validator(hdrs)
    if not exact or hdrs.get("accept-ranges", "").strip().lower() == "none":
        state.ranges_ok = False


async def _start_over(part: _PartFile, state: _State) -> None:
    await part.write(None)
    state.received = 0


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
            _broken(f"the host answered Range bytes={state.received}- with Content-Range {raw!r}"),
            restart=True,
        )
    length = _content_length(headers)
    if length is not None and length != span[1] - span[0] + 1:
        raise _Retry(
            _broken("the host's Content-Length does not match its Content-Range"), restart=True
        )
    if span[2] is not None:
        state.total = span[2]


def _broken(reason: str) -> err.APIResponseError:
    """An answer that is not the file the host declared: transient, as a garbled body is."""
    return err.APIResponseError(reason)
