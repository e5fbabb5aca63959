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
import importlib.resources
import re
from typing import Literal


@functools.lru_cache(maxsize=1)
def sample_mp4() -> bytes:
    """The sandbox's sample video: a small, playable H.264 MP4 (about 5 KB)."""
    return importlib.resources.files(__package__).joinpath("sample.mp4").read_bytes()


# At most 18 digits: larger positions are not sizes of anything, and int() of a very long
# digit string would raise.
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d{0,18})\s*-\s*(\d{0,18})\s*$", re.IGNORECASE)


def parse_range(header: str | None, size: int) -> range | Literal[False] | None:
    """Read the ``Range`` header of a request for a resource of ``size`` bytes.

    One range is honoured; several (``bytes=0-1,5-6``) or one not understood are ignored, as
    RFC 9110 allows. Returns the positions to send (206: a ``range``, whose ``stop`` is one
    past the last byte), ``None`` for the whole resource, or ``False`` when the range cannot
    be satisfied (416).
    """
    match = _RANGE.match(header or "")
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:  # suffix range: the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return False
        return range(max(0, size - suffix), size)
    start = int(first)
    if last and int(last) < start:
        return None  # syntactically invalid: ignored
    if start >= size:
        return False
    end = int(last) if last else size - 1
    return range(start, min(end, size - 1) + 1)
