"""Downloads: streamed, atomic, resumed with Range, short bodies refused, never with the key.

The media host here is a small aiohttp.web app of the test's own, whose behaviour each test
sets (drop the connection after N bytes, ignore Range, send a short body, fail with a status),
and which records every request's ``Range`` and ``Authorization`` headers. The same app also
answers ``GET /v1/tasks`` like the service, so that a task id can be downloaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from aiohttp import web

import videogen_async as vg
from videogen_async import AsyncVideoGen, DownloadError
from videogen_async._download._sources import default_filename, redact_url

from ._disk import without_coverage
from .helpers import KEY, envelope, task_data

VIDEO = bytes(range(256)) * 400  # 102,400 bytes, every offset distinguishable


@attrs.define
class Behaviour:
    """What the media host does; each test sets what it needs."""

    body: bytes = VIDEO
    drop_after: list[int] = attrs.field(factory=list)  # per request, in order: cut after N
    ignore_range: bool = False
    short_by: int = 0  # declare len(body) but send len(body) - short_by, then close
    statuses: list[int] = attrs.field(factory=list)  # per request, in order, before the body
    bad_content_range: bool = False
    range_status: int | None = None  # answer every Range request with this status
    accept_ranges: str = "bytes"
    etag: str | None = '"v1"'
    seen: list[dict[str, str | None]] = attrs.field(factory=list)
    tasks: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    task_auth: list[str | None] = attrs.field(factory=list)


BEHAVIOUR = web.AppKey("behaviour", Behaviour)


def _cut(request: web.Request) -> None:
    """Drop the connection at once, mid-body (no clean end of the response)."""
    transport = request.transport
    assert transport is not None
    sock = transport.get_extra_info("socket")
    if sock is not None:  # a reset, so that the client sees a broken body, not a clean EOF
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    transport.abort()


async def media(request: web.Request) -> web.StreamResponse:
    b = request.app[BEHAVIOUR]
    index = len(b.seen)
    b.seen.append(
        {
            "range": request.headers.get("Range"),
            "if_range": request.headers.get("If-Range"),
            "authorization": request.headers.get("Authorization"),
            "path": request.path,
        }
    )
    if index < len(b.statuses):
        return web.Response(status=b.statuses[index], text="temporarily broken")
    body = b.body
    start = 0
    status = 200
    rng = request.headers.get("Range")
    if rng and b.range_status is not None:
        return web.Response(status=b.range_status, text="no such range")
    headers = {"Content-Type": "video/mp4", "Accept-Ranges": b.accept_ranges}
    if b.etag:
        headers["ETag"] = b.etag
    if rng and not b.ignore_range:
        start = int(rng.removeprefix("bytes=").split("-")[0])
        status = 206
        first = start + 1 if b.bad_content_range else start
        headers["Content-Range"] = f"bytes {first}-{len(body) - 1}/{len(body)}"
    part = body[start:]
    headers["Content-Length"] = str(len(part))
    resp = web.StreamResponse(status=status, headers=headers)
    await resp.prepare(request)
    cut = b.drop_after[index] if index < len(b.drop_after) else None
    if cut is not None:
        await resp.write(part[:cut])
        _cut(request)
        return resp
    if b.short_by:
        await resp.write(part[: len(part) - b.short_by])
        _cut(request)
        return resp
    await resp.write(part)
    await resp.write_eof()
    return resp


async def tasks_endpoint(request: web.Request) -> web.Response:
    b = request.app[BEHAVIOUR]
    b.task_auth.append(request.headers.get("Authorization"))
    task_id = request.query["task_id"]
    if task_id not in b.tasks:
        return web.json_response(envelope(None, code=404, message="no such task"), status=404)
    return web.json_response(envelope(b.tasks[task_id]))


@pytest.fixture
async def host() -> AsyncIterator[tuple[str, Behaviour]]:
    behaviour = Behaviour()
    app = web.Application()
    app[BEHAVIOUR] = behaviour
    app.router.add_get("/media/{name}", media)
    app.router.add_get("/v1/tasks", tasks_endpoint)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", behaviour
    finally:
        await runner.cleanup()


@pytest.fixture
async def client(host: tuple[str, Behaviour]) -> AsyncIterator[AsyncVideoGen]:
    base, _ = host
    async with AsyncVideoGen(KEY, base, max_retries=0) as c:
        yield c


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def succeeded(task_id: str, url: str) -> dict[str, Any]:
    return task_data(
        task_id,
        "succeeded",
        result={
            "video_url": url,
            "error_message": None,
            "finished_at": "2026-11-21T10:01:00Z",
        },
    )


# --------------------------------------------------------------------------------------------


async def test_url_download_writes_exact_bytes_without_the_key(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    progress: list[tuple[int, int | None]] = []
    dest = await client.download(
        f"{base}/media/a.mp4",
        tmp_path / "a.mp4",
        chunk_size=8192,
        progress=lambda r, t: progress.append((r, t)),
    )
    assert dest == tmp_path / "a.mp4"
    assert dest.read_bytes() == VIDEO
    assert leftovers(tmp_path) == ["a.mp4"]
    assert b.seen == [
        {"range": None, "if_range": None, "authorization": None, "path": "/media/a.mp4"}
    ]
    assert progress[-1] == (len(VIDEO), len(VIDEO))
    assert len(progress) > 1  # streamed in chunks, not read whole


async def test_task_id_is_fetched_with_the_key_and_video_fetched_without(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.tasks["t-ok"] = succeeded("t-ok", f"{base}/media/t-ok.mp4?sig=SECRET")
    dest = await client.download("t-ok", tmp_path)  # a directory: named after the task
    assert dest == tmp_path / "t-ok.mp4"
    assert dest.read_bytes() == VIDEO
    assert b.task_auth == [f"Bearer {KEY}"]  # the service got the key...
    assert [s["authorization"] for s in b.seen] == [None]  # ...the video host never did


async def test_task_object_is_used_directly(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    task = vg.Task(
        task_id="t-obj",
        status=vg.TaskStatus.SUCCEEDED,
        result=vg.TaskResult(video_url=f"{base}/media/x.mp4"),
    )
    dest = await client.download(task, tmp_path / "out" / "video.mp4")  # parent created
    assert dest.read_bytes() == VIDEO
    assert b.task_auth == []  # no need to fetch a Task that is already terminal


@pytest.mark.parametrize(
    ("status", "result", "match"),
    [
        ("running", None, "has not finished"),
        ("failed", {"video_url": None, "error_message": "nsfw", "finished_at": None}, "nsfw"),
    ],
)
async def test_task_that_did_not_succeed_is_refused(
    host: tuple[str, Behaviour],
    client: AsyncVideoGen,
    tmp_path: Path,
    status: str,
    result: Any,
    match: str,
) -> None:
    _, b = host
    b.tasks["t-x"] = task_data("t-x", status, result=result)
    with pytest.raises(DownloadError, match=match) as info:
        await client.download("t-x", tmp_path)
    assert info.value.task_id == "t-x"
    assert b.seen == []
    assert leftovers(tmp_path) == []


async def test_unknown_task_id_raises_not_found(client: AsyncVideoGen, tmp_path: Path) -> None:
    with pytest.raises(vg.NotFoundError):
        await client.download("t-missing", tmp_path)


async def test_dropped_connection_is_resumed_with_range(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.drop_after = [30_000]
    dest = await client.download(f"{base}/media/r.mp4", tmp_path / "r.mp4", chunk_size=4096)
    assert hashlib.sha256(dest.read_bytes()).digest() == hashlib.sha256(VIDEO).digest()
    assert len(b.seen) == 2
    assert b.seen[0]["range"] is None
    resumed_at = int(b.seen[1]["range"].removeprefix("bytes=").rstrip("-"))  # type: ignore[union-attr]
    assert 0 < resumed_at <= 30_000  # resumed where it stopped, not from scratch
    assert b.seen[1]["if_range"] == '"v1"'
    assert all(s["authorization"] is None for s in b.seen)
    assert leftovers(tmp_path) == ["r.mp4"]


async def test_host_ignoring_range_restarts_from_scratch(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.drop_after = [50_000]
    b.ignore_range = True  # answers 200 with the whole file even to a Range request
    dest = await client.download(f"{base}/media/i.mp4", tmp_path / "i.mp4")
    assert dest.read_bytes() == VIDEO  # not the first 50 KB twice
    assert len(b.seen) == 2
    assert b.seen[1]["range"] is not None


async def test_wrong_content_range_is_not_spliced(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.drop_after = [20_000]
    b.bad_content_range = True  # 206 starting one byte later than asked: must not be used
    dest = await client.download(f"{base}/media/w.mp4", tmp_path / "w.mp4")
    assert dest.read_bytes() == VIDEO
    # the bad 206 was thrown away; the file was then fetched again without Range
    assert len(b.seen) == 3
    assert b.seen[2]["range"] is None


async def test_short_body_is_rejected_and_nothing_is_left(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.short_by = 1000  # Content-Length says 102,400; every answer stops 1,000 bytes early
    (tmp_path / "s.mp4").write_bytes(b"previous complete file")
    with pytest.raises(DownloadError, match="failed after 2 attempt") as info:
        await client.download(f"{base}/media/s.mp4", tmp_path / "s.mp4", attempts=2)
    assert info.value.expected_size == len(VIDEO)
    assert info.value.bytes_received < len(VIDEO)
    assert isinstance(info.value, vg.VideoGenError)
    # the old file is untouched and no temporary file remains
    assert (tmp_path / "s.mp4").read_bytes() == b"previous complete file"
    assert leftovers(tmp_path) == ["s.mp4"]


async def test_http_error_of_the_host_fails_at_once(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.statuses = [403]
    with pytest.raises(DownloadError, match="HTTP 403") as info:
        await client.download(f"{base}/media/f.mp4?token=SECRET", tmp_path / "f.mp4")
    assert info.value.status_code == 403
    assert "SECRET" not in str(info.value)
    assert len(b.seen) == 1  # a 403 is not retried
    assert leftovers(tmp_path) == []


async def test_transient_host_errors_are_retried(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.statuses = [503, 502]
    dest = await client.download(f"{base}/media/t.mp4", tmp_path / "t.mp4")
    assert dest.read_bytes() == VIDEO
    assert len(b.seen) == 3


async def test_a_media_hosts_425_is_retried_but_not_a_501(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    # The one retry decision, with a media host's 425 Too Early as transient for downloads.
    base, b = host
    b.statuses = [425]
    dest = await client.download(f"{base}/media/e.mp4", tmp_path / "e.mp4")
    assert dest.read_bytes() == VIDEO
    assert len(b.seen) == 2
    b.seen.clear()
    b.statuses = [501]
    with pytest.raises(DownloadError, match="HTTP 501") as info:
        await client.download(f"{base}/media/n.mp4", tmp_path / "n.mp4")
    assert info.value.status_code == 501
    assert len(b.seen) == 1


async def test_overwrite_false_keeps_existing_file(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    (tmp_path / "k.mp4").write_bytes(b"mine")
    with pytest.raises(DownloadError, match="already exists"):
        await client.download(f"{base}/media/k.mp4", tmp_path / "k.mp4", overwrite=False)
    assert (tmp_path / "k.mp4").read_bytes() == b"mine"
    assert b.seen == []


async def test_cancelled_download_leaves_no_partial_file(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    import anyio

    base, _ = host
    started = anyio.Event()

    def progress(received: int, total: int | None) -> None:
        started.set()

    async with anyio.create_task_group() as tg:

        async def run() -> None:
            await client.download(
                f"{base}/media/c.mp4", tmp_path / "c.mp4", chunk_size=1024, progress=progress
            )

        tg.start_soon(run)
        await started.wait()
        tg.cancel_scope.cancel()
    assert leftovers(tmp_path) == []


async def test_download_many_bounded_and_keeps_failures(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.tasks["t-1"] = succeeded("t-1", f"{base}/media/1.mp4")
    b.tasks["t-2"] = succeeded("t-2", f"{base}/media/2.mp4")
    b.tasks["t-run"] = task_data("t-run", "running")
    seen: list[vg.DownloadResult] = []
    results = await client.download_many(
        ["t-1", "t-run", "t-2", f"{base}/media/clip.mp4", "t-nope"],
        tmp_path / "videos",
        max_concurrency=2,
        on_result=seen.append,
    )
    assert [r.source for r in results] == [
        "t-1", "t-run", "t-2", f"{base}/media/clip.mp4", "t-nope"
    ]  # fmt: skip
    assert [r.ok for r in results] == [True, False, True, True, False]
    assert results[0].path == tmp_path / "videos" / "t-1.mp4"
    assert results[3].path == tmp_path / "videos" / "clip.mp4"
    assert isinstance(results[1].error, DownloadError)
    assert results[1].task_id == "t-run"
    assert isinstance(results[4].error, vg.NotFoundError)
    assert len(seen) == 5
    assert leftovers(tmp_path / "videos") == ["clip.mp4", "t-1.mp4", "t-2.mp4"]
    for name in ("clip.mp4", "t-1.mp4", "t-2.mp4"):
        assert (tmp_path / "videos" / name).read_bytes() == VIDEO
    assert all(s["authorization"] is None for s in b.seen)


async def test_download_many_never_exceeds_max_concurrency(
    host: tuple[str, Behaviour],
    client: AsyncVideoGen,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from videogen_async._download import _file

    base, _ = host
    active = 0
    peak = 0
    real = _file.download_url

    async def counting(*args: Any, **kwargs: Any) -> int:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            return await real(*args, **kwargs)
        finally:
            active -= 1

    monkeypatch.setattr(_file, "download_url", counting)
    urls = [f"{base}/media/{i}.mp4" for i in range(7)]
    results = await client.download_many(urls, tmp_path, max_concurrency=3)
    assert all(r.ok for r in results)
    assert peak == 3


def test_names_and_redaction() -> None:
    assert default_filename(url="https://cdn.x/a/b/My%20Clip.MOV?x=1", task_id=None) == (
        "My_Clip.mov"
    )
    assert default_filename(url="https://cdn.x/v", task_id="t/../1") == "t_.._1.mp4"
    assert redact_url("https://u:p@cdn.x:8443/a.mp4?sig=abc#f") == "https://cdn.x:8443/a.mp4?..."


async def test_not_a_url_is_refused(client: AsyncVideoGen, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="not an http"):
        await vg._download._file.download_url(client._transport, "ftp://x/y.mp4", tmp_path / "y")
    assert os.listdir(tmp_path) == []


async def test_file_io_never_blocks_the_event_loop(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    from blockbuster import blockbuster_ctx

    base, b = host
    b.drop_after = [40_000]  # a resume too: truncate/seek paths run as well
    with blockbuster_ctx("videogen_async"):
        dest = await client.download(f"{base}/media/nb.mp4", tmp_path / "nb" / "nb.mp4")
    assert dest.read_bytes() == VIDEO


async def test_sandbox_video_downloads_byte_for_byte(
    videogen_sandbox_factory: Any, tmp_path: Path
) -> None:
    from videogen_async.testing import sample_mp4

    server = await videogen_sandbox_factory(manual_clock=True)
    async with server.client() as sandbox_client:
        created = [await sandbox_client.tasks.create(f"clip {i}") for i in range(3)]
        server.clock.advance(120)
        tasks = [await sandbox_client.tasks.get(c.task_id) for c in created]
        one = await sandbox_client.download(tasks[0], tmp_path / "one.mp4")
        many = await sandbox_client.download_many(tasks[1:], tmp_path / "many")
    assert one.read_bytes() == sample_mp4()
    assert [r.path.read_bytes() if r.path else None for r in many] == [sample_mp4()] * 2
    media = [r for r in server.request_log if r.route.startswith("GET /media/")]
    assert len(media) == 3
    assert all(r.status == 200 for r in media)


async def test_a_416_to_the_resume_starts_over(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.drop_after = [10_000]
    b.range_status = 416
    dest = await client.download(f"{base}/media/z.mp4", tmp_path / "z.mp4")
    assert dest.read_bytes() == VIDEO
    assert [s["range"] is not None for s in b.seen] == [False, True, False]


async def test_a_host_without_ranges_is_restarted_not_resumed(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    b.drop_after = [10_000]
    b.accept_ranges = "none"
    b.etag = None
    dest = await client.download(f"{base}/media/n.mp4", tmp_path / "n.mp4")
    assert dest.read_bytes() == VIDEO
    assert [s["range"] for s in b.seen] == [None, None]


async def test_an_unwritable_destination_is_a_download_error(
    host: tuple[str, Behaviour], client: AsyncVideoGen, tmp_path: Path
) -> None:
    base, b = host
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(DownloadError, match="cannot write") as info:
        await client.download(f"{base}/media/u.mp4", tmp_path / "file" / "u.mp4")
    assert isinstance(info.value.__cause__, OSError)
    assert b.seen == []


# A file the kernel refuses to grow (RLIMIT_FSIZE: the write fails with EFBIG, as a full disk
# fails with ENOSPC), in a process of its own: the limit holds for every file of a process.
_LIMITED = """
import asyncio, json, os, resource, signal, sys
import videogen_async as vg

async def main(url, dest, chunk_size):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
    async with vg.AsyncVideoGen("key", url, max_retries=0) as client:
        try:
            await client.download(url + "/media/f.mp4", dest, chunk_size=int(chunk_size))
        except Exception as exc:
            cause = exc.__cause__
            print(json.dumps([type(exc).__name__, str(exc), type(cause).__name__]))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE is POSIX's")
@pytest.mark.parametrize("chunk_size", [512, 65536])  # kept in the buffer, or written at once
async def test_a_file_the_disk_refuses_is_a_download_error_and_leaves_nothing(
    host: tuple[str, Behaviour], tmp_path: Path, chunk_size: int
) -> None:
    base, b = host
    dest = tmp_path / "out" / "f.mp4"
    dest.parent.mkdir()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-c", _LIMITED, base, str(dest), str(chunk_size)),
        stdout=asyncio.subprocess.PIPE,
        env=without_coverage(),
    )
    out, _ = await child.communicate()
    kind, message, cause = json.loads(out)
    # Refused as a chunk is written, or once the buffered ones reach the file (the flush before
    # the rename): the file's error, named with its path, not a raw OSError, and no partial
    # file left behind.
    assert (kind, cause) == ("DownloadError", "OSError")
    assert f"writing {dest} failed" in message
    assert "File too large" in message
    assert leftovers(dest.parent) == []
    assert len(b.seen) == 1  # the disk's refusal is not a broken connection: not tried again


async def test_download_many_validates_before_starting(
    client: AsyncVideoGen, tmp_path: Path
) -> None:
    with pytest.raises(vg.InvalidRequestError, match="source: must be a Task"):
        await client.download_many([1], tmp_path)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="max_concurrency"):
        await client.download_many([], tmp_path, max_concurrency=0)
    assert await client.download_many([], tmp_path) == []


def test_header_parsing() -> None:
    from videogen_async._download._file import _content_length, _parse_content_range, _validator

    assert _parse_content_range("bytes 10-99/100") == (10, 99, 100)
    assert _parse_content_range("bytes 10-99/*") == (10, 99, None)
    assert _parse_content_range("bytes 10-100/100") is None  # past the end
    assert _parse_content_range("bytes 9-3/100") is None
    assert _parse_content_range("items 1-2/3") is None
    assert _parse_content_range(None) is None
    assert _content_length({"content-length": " 42 "}) == 42
    assert _content_length({"content-length": "-1"}) is None
    assert _content_length({"content-length": "lots"}) is None
    assert _validator({"etag": 'W/"weak"', "last-modified": "Tue, 01 Jan 2030"}) == (
        "Tue, 01 Jan 2030"
    )
    assert _validator({}) is None
    assert default_filename(url="https://cdn.x/", task_id=None) == "video.mp4"
    assert redact_url("https://[::1") == "<unreadable URL>"
