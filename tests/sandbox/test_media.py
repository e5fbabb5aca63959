"""The sandbox's CDN stand-in: a valid MP4 per succeeded task, with byte ranges."""

from __future__ import annotations

import shutil
import struct
import subprocess
from importlib.resources import files
from pathlib import Path

import pytest

from videogen_async.testing import SandboxServer, sample_mp4

from .conftest import TASK_SECONDS, Api


def boxes(data: bytes, start: int = 0, end: int | None = None) -> dict[bytes, tuple[int, int]]:
    """Map box type -> (payload start, payload end) for the boxes between start and end."""
    end = len(data) if end is None else end
    found: dict[bytes, tuple[int, int]] = {}
    pos = start
    while pos < end:
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        assert size >= 8, (kind, size)
        assert pos + size <= end, kind
        found[kind] = (pos + 8, pos + size)
        pos += size
    assert pos == end
    return found


def child(data: bytes, parent: tuple[int, int], *path: bytes, skip: int = 0) -> tuple[int, int]:
    span = parent
    for kind in path:
        span = boxes(data, span[0] + skip, span[1])[kind]
        skip = 0
    return span


def boxes_in_order(data: bytes) -> list[bytes]:
    order, pos = [], 0
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        order.append(kind)
        pos += size
    return order


def test_sample_is_a_well_formed_mp4() -> None:
    data = sample_mp4()
    assert 1000 < len(data) < 10_000
    assert data == files("videogen_async.testing").joinpath("sample.mp4").read_bytes()
    order = [k for k in boxes_in_order(data) if k != b"free"]
    assert order == [b"ftyp", b"moov", b"mdat"]  # "fast start": the index before the media
    top = boxes(data)
    assert data[top[b"ftyp"][0] : top[b"ftyp"][0] + 4] == b"isom"
    stbl = child(data, top[b"moov"], b"trak", b"mdia", b"minf", b"stbl")
    inner = boxes(data, *stbl)
    assert {b"stsd", b"stts", b"stss", b"stsc", b"stsz", b"stco"} <= set(inner)
    stsd = inner[b"stsd"]
    assert data[stsd[0] + 12 : stsd[0] + 16] == b"avc1"
    avcc = data.index(b"avcC", stsd[0], stsd[1]) + 4
    assert data[avcc + 1] == 66  # profile_idc: Baseline
    stsz = inner[b"stsz"]
    _, _, count = struct.unpack(">III", data[stsz[0] : stsz[0] + 12])
    sizes = struct.unpack(f">{count}I", data[stsz[0] + 12 : stsz[0] + 12 + 4 * count])
    assert count == 20  # two seconds at 10 frames per second
    (chunks, offset) = struct.unpack(">II", data[inner[b"stco"][0] + 4 : inner[b"stco"][0] + 12])
    mdat = top[b"mdat"]
    assert (chunks, offset) == (1, mdat[0])
    assert sum(sizes) == mdat[1] - mdat[0]
    # every sample is whole length-prefixed NAL units; a key frame (IDR) every ten
    stss = inner[b"stss"]
    (keys,) = struct.unpack(">I", data[stss[0] + 4 : stss[0] + 8])
    key_samples = struct.unpack(f">{keys}I", data[stss[0] + 8 : stss[0] + 8 + 4 * keys])
    assert key_samples == (1, 11)
    pos = mdat[0]
    for number, size in enumerate(sizes, start=1):
        end, kinds = pos + size, []
        while pos < end:
            (length,) = struct.unpack(">I", data[pos : pos + 4])
            kinds.append(data[pos + 4] & 0x1F)
            pos += 4 + length
        assert pos == end
        assert (5 in kinds) == (number in key_samples), (number, kinds)


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffprobe is not installed")
def test_sample_decodes_with_ffprobe(tmp_path: Path) -> None:
    path = tmp_path / "sample.mp4"
    path.write_bytes(sample_mp4())
    ffprobe = shutil.which("ffprobe")
    assert ffprobe is not None
    out = subprocess.run(  # noqa: S603 - fixed arguments
        [
            ffprobe,
            "-v",
            "error",
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=codec_name,width,height,nb_read_frames",
            "-of",
            "csv=p=0",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.strip() == "h264,64,64,20"
    assert out.stderr == ""


async def succeeded_task(api: Api, sandbox: SandboxServer) -> str:
    task_id: str = (await api.create_task())["task_id"]
    sandbox.clock.advance(TASK_SECONDS)
    return task_id


async def test_video_url_serves_the_mp4_without_auth(api: Api, sandbox: SandboxServer) -> None:
    task_id = await succeeded_task(api, sandbox)
    url = (await api.task(task_id))["result"]["video_url"]
    async with api.session.get(url) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "video/mp4"
        assert response.headers["Accept-Ranges"] == "bytes"
        assert int(response.headers["Content-Length"]) == len(sample_mp4())
        assert await response.read() == sample_mp4()


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [("bytes=0-9", 0, 9), ("bytes=100-", 100, None), ("bytes=-50", -50, None)],
)
async def test_range_requests(
    api: Api, sandbox: SandboxServer, header: str, first: int, last: int | None
) -> None:
    data = sample_mp4()
    size = len(data)
    task_id = await succeeded_task(api, sandbox)
    async with api.session.get(
        sandbox.url(f"/media/{task_id}.mp4"), headers={"Range": header}
    ) as response:
        body = await response.read()
        assert response.status == 206
        start = first % size
        end = size - 1 if last is None else last
        assert response.headers["Content-Range"] == f"bytes {start}-{end}/{size}"
        assert int(response.headers["Content-Length"]) == end - start + 1
        assert body == data[start : end + 1]


async def test_unsatisfiable_and_ignored_ranges(api: Api, sandbox: SandboxServer) -> None:
    size = len(sample_mp4())
    task_id = await succeeded_task(api, sandbox)
    url = sandbox.url(f"/media/{task_id}.mp4")
    async with api.session.get(url, headers={"Range": f"bytes={size}-"}) as response:
        assert response.status == 416
        assert response.headers["Content-Range"] == f"bytes */{size}"
    async with api.session.get(url, headers={"Range": "bytes=0-1,5-6"}) as response:
        assert response.status == 200  # several ranges: ignored, whole body
    async with api.session.get(url, headers={"Range": "items=0-1"}) as response:
        assert response.status == 200  # a unit it does not know: ignored (RFC 9110)
    async with api.session.get(url, headers={"Range": "bytes=5-2"}) as response:
        assert response.status == 200  # not a range: ignored
        assert await response.read() == sample_mp4()


async def test_head(api: Api, sandbox: SandboxServer) -> None:
    task_id = await succeeded_task(api, sandbox)
    async with api.session.head(sandbox.url(f"/media/{task_id}.mp4")) as response:
        assert response.status == 200
        assert int(response.headers["Content-Length"]) == len(sample_mp4())
        assert await response.read() == b""


async def test_no_video_before_success_or_after_failure(api: Api, sandbox: SandboxServer) -> None:
    running = (await api.create_task())["task_id"]
    failed = (await api.create_task())["task_id"]
    sandbox.schedule_task(failed, finish_in=0, outcome="failed")
    for name in (f"{running}.mp4", f"{failed}.mp4", "nope.mp4", f"{running}.mov"):
        (await api.call("GET", f"/media/{name}", auth=False)).error(404)
