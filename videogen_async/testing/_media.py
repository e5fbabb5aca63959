r"""The sandbox's sample video, and byte-range serving.

The sandbox plays the role of the service's CDN: a succeeded task's ``result.video_url``
points at ``/media/{task_id}.mp4`` on the sandbox itself, which answers with
``sample.mp4``, a real clip shipped beside this module (H.264 Constrained Baseline, 64x64,
two seconds at 10 frames per second, "fast start", about 5 KB). It was made with::

    ffmpeg -f lavfi -i testsrc2=size=64x64:rate=10:duration=2 -c:v libx264 \
        -profile:v baseline -pix_fmt yuv420p -preset veryslow -crf 35 -g 10 -bf 0 -an \
        -movflags +faststart -map_metadata -1 -fflags +bitexact -flags:v +bitexact \
        -x264-params no-info=1 sample.mp4
"""

from __future__ import annotations

import functools
from pathlib import Path

SAMPLE_PATH = Path(__file__).with_name("sample.mp4")
"""The sample clip, served by aiohttp's file answer (``web.FileResponse``): one byte range
(``bytes=0-99``, ``bytes=100-``, ``bytes=-100``: 206 with ``Content-Range``; past the end:
416), ``HEAD``, ``Content-Length``, a strong ``ETag`` and ``If-Range``."""


@functools.lru_cache(maxsize=1)
def sample_mp4() -> bytes:
    """The sandbox's sample video: a small, playable H.264 MP4 (about 5 KB)."""
    return SAMPLE_PATH.read_bytes()
