"""A small, genuinely valid MP4 built in code, and byte-range serving helpers.

The sandbox plays the role of the service's CDN: a succeeded task's ``result.video_url``
points at ``/media/{task_id}.mp4`` on the sandbox itself, which answers with the bytes built
here. The file is a real ISO base media file (``ftyp`` + ``moov`` + ``mdat``, "fast start"
layout) holding one H.264 Constrained Baseline video track that any decoder plays: one IDR
frame whose macroblocks are coded as ``I_PCM`` (raw samples, so no entropy coder is needed to
write it) followed by ``P`` frames made of skipped macroblocks. It is a 48x48 colour pattern,
one second long at 10 frames per second, about 4 KB.
"""

from __future__ import annotations

import functools
import re
import struct
from typing import Literal

import attrs

__all__ = ["ByteRange", "parse_range", "sample_mp4"]

_WIDTH = 48
_HEIGHT = 48
_FPS = 10
_FRAMES = 10
_MB = 16


class _BitWriter:
    """Writes the bit fields of an H.264 RBSP (raw byte sequence payload)."""

    def __init__(self) -> None:
        self._bits: list[int] = []

    def u(self, bits: int, value: int) -> None:
        for shift in range(bits - 1, -1, -1):
            self._bits.append((value >> shift) & 1)

    def ue(self, value: int) -> None:
        code = value + 1
        length = code.bit_length()
        self.u(length - 1, 0)
        self.u(length, code)

    def se(self, value: int) -> None:
        self.ue(2 * value - 1 if value > 0 else -2 * value)

    def align_zero(self) -> None:
        while len(self._bits) % 8:
            self._bits.append(0)

    def byte(self, value: int) -> None:
        self.u(8, value)

    def trailing(self) -> bytes:
        self._bits.append(1)
        self.align_zero()
        out = bytearray()
        for i in range(0, len(self._bits), 8):
            chunk = 0
            for bit in self._bits[i : i + 8]:
                chunk = (chunk << 1) | bit
            out.append(chunk)
        return bytes(out)


def _nal(header: int, rbsp: bytes) -> bytes:
    """Wrap an RBSP into a NAL unit, inserting emulation-prevention bytes."""
    out = bytearray([header])
    zeros = 0
    for b in rbsp:
        if zeros >= 2 and b <= 3:
            out.append(3)
            zeros = 0
        out.append(b)
        zeros = zeros + 1 if b == 0 else 0
    return bytes(out)


def _sps() -> bytes:
    w = _BitWriter()
    w.u(8, 66)  # profile_idc: Baseline
    w.u(8, 0xC0)  # constraint_set0 + constraint_set1: Constrained Baseline
    w.u(8, 10)  # level_idc 1.0
    w.ue(0)  # seq_parameter_set_id
    w.ue(0)  # log2_max_frame_num_minus4 -> frame_num is 4 bits
    w.ue(2)  # pic_order_cnt_type 2: output order = decoding order
    w.ue(1)  # max_num_ref_frames
    w.u(1, 0)  # gaps_in_frame_num_value_allowed_flag
    w.ue(_WIDTH // _MB - 1)  # pic_width_in_mbs_minus1
    w.ue(_HEIGHT // _MB - 1)  # pic_height_in_map_units_minus1
    w.u(1, 1)  # frame_mbs_only_flag
    w.u(1, 1)  # direct_8x8_inference_flag
    w.u(1, 0)  # frame_cropping_flag
    w.u(1, 0)  # vui_parameters_present_flag
    return _nal(0x67, w.trailing())


def _pps() -> bytes:
    w = _BitWriter()
    w.ue(0)  # pic_parameter_set_id
    w.ue(0)  # seq_parameter_set_id
    w.u(1, 0)  # entropy_coding_mode_flag: CAVLC
    w.u(1, 0)  # bottom_field_pic_order_in_frame_present_flag
    w.ue(0)  # num_slice_groups_minus1
    w.ue(0)  # num_ref_idx_l0_default_active_minus1
    w.ue(0)  # num_ref_idx_l1_default_active_minus1
    w.u(1, 0)  # weighted_pred_flag
    w.u(2, 0)  # weighted_bipred_idc
    w.se(0)  # pic_init_qp_minus26
    w.se(0)  # pic_init_qs_minus26
    w.se(0)  # chroma_qp_index_offset
    w.u(1, 1)  # deblocking_filter_control_present_flag
    w.u(1, 0)  # constrained_intra_pred_flag
    w.u(1, 0)  # redundant_pic_cnt_present_flag
    return _nal(0x68, w.trailing())


# (Y, Cb, Cr) of the macroblock colours, kept inside the video range 16..235.
_PALETTE = (
    (81, 90, 240),  # red
    (145, 54, 34),  # green
    (41, 240, 110),  # blue
    (210, 16, 146),  # yellow
    (170, 166, 16),  # cyan
    (106, 202, 222),  # magenta
    (235, 128, 128),  # white
    (126, 128, 128),  # grey
    (16, 128, 128),  # black
)


def _idr_slice() -> bytes:
    w = _BitWriter()
    w.ue(0)  # first_mb_in_slice
    w.ue(7)  # slice_type: I (all slices of the picture)
    w.ue(0)  # pic_parameter_set_id
    w.u(4, 0)  # frame_num
    w.ue(0)  # idr_pic_id
    w.u(1, 0)  # no_output_of_prior_pics_flag
    w.u(1, 0)  # long_term_reference_flag
    w.se(0)  # slice_qp_delta
    w.ue(1)  # disable_deblocking_filter_idc: off
    mbs = (_WIDTH // _MB) * (_HEIGHT // _MB)
    for index in range(mbs):
        luma, cb, cr = _PALETTE[index % len(_PALETTE)]
        w.ue(25)  # mb_type: I_PCM
        w.align_zero()  # pcm_alignment_zero_bit
        for row in range(_MB):
            for col in range(_MB):
                # A soft diagonal shade so the picture is not flat.
                w.byte(min(235, max(16, luma + (row + col) // 2 - 8)))
        for value in (cb, cr):
            for _ in range(64):
                w.byte(value)
    return _nal(0x65, w.trailing())


def _skip_slice(frame_num: int) -> bytes:
    w = _BitWriter()
    w.ue(0)  # first_mb_in_slice
    w.ue(5)  # slice_type: P (all slices of the picture)
    w.ue(0)  # pic_parameter_set_id
    w.u(4, frame_num % 16)  # frame_num
    w.u(1, 0)  # num_ref_idx_active_override_flag
    w.u(1, 0)  # ref_pic_list_modification_flag_l0
    w.u(1, 0)  # adaptive_ref_pic_marking_mode_flag
    w.se(0)  # slice_qp_delta
    w.ue(1)  # disable_deblocking_filter_idc: off
    w.ue((_WIDTH // _MB) * (_HEIGHT // _MB))  # mb_skip_run: every macroblock
    return _nal(0x41, w.trailing())


def _box(kind: bytes, *payload: bytes) -> bytes:
    body = b"".join(payload)
    return struct.pack(">I", 8 + len(body)) + kind + body


def _full_box(kind: bytes, version: int, flags: int, *payload: bytes) -> bytes:
    return _box(kind, struct.pack(">I", (version << 24) | flags), *payload)


_MATRIX = struct.pack(">9I", 0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000)


def _avc1(sps: bytes, pps: bytes) -> bytes:
    avcc = _box(
        b"avcC",
        bytes([1, sps[1], sps[2], sps[3], 0xFF, 0xE1]),
        struct.pack(">H", len(sps)),
        sps,
        b"\x01",
        struct.pack(">H", len(pps)),
        pps,
    )
    return _box(
        b"avc1",
        b"\x00" * 6,
        struct.pack(">H", 1),  # data_reference_index
        b"\x00" * 16,  # pre_defined, reserved
        struct.pack(">HH", _WIDTH, _HEIGHT),
        struct.pack(">II", 0x00480000, 0x00480000),  # 72 dpi
        b"\x00" * 4,
        struct.pack(">H", 1),  # frame_count
        bytes([8]) + b"videogen" + b"\x00" * 23,  # compressorname (Pascal string)
        struct.pack(">Hh", 0x0018, -1),  # depth, pre_defined
        avcc,
    )


def _moov(sample_sizes: list[int], mdat_offset: int, sps: bytes, pps: bytes) -> bytes:
    duration_ms = _FRAMES * 1000 // _FPS
    mvhd = _full_box(
        b"mvhd",
        0,
        0,
        struct.pack(">IIII", 0, 0, 1000, duration_ms),
        struct.pack(">IH", 0x00010000, 0x0100),
        b"\x00" * 10,
        _MATRIX,
        b"\x00" * 24,
        struct.pack(">I", 2),  # next_track_ID
    )
    tkhd = _full_box(
        b"tkhd",
        0,
        3,  # enabled, in movie
        struct.pack(">IIII", 0, 0, 1, 0),
        struct.pack(">I", duration_ms),
        b"\x00" * 8,
        struct.pack(">hhhH", 0, 0, 0, 0),
        _MATRIX,
        struct.pack(">II", _WIDTH << 16, _HEIGHT << 16),
    )
    mdhd = _full_box(
        b"mdhd",
        0,
        0,
        struct.pack(">IIII", 0, 0, _FPS, _FRAMES),
        struct.pack(">HH", 0x55C4, 0),  # language "und"
    )
    hdlr = _full_box(b"hdlr", 0, 0, b"\x00" * 4, b"vide", b"\x00" * 12, b"VideoHandler\x00")
    vmhd = _full_box(b"vmhd", 0, 1, b"\x00" * 8)
    dinf = _box(b"dinf", _full_box(b"dref", 0, 0, struct.pack(">I", 1), _full_box(b"url ", 0, 1)))
    stsd = _full_box(b"stsd", 0, 0, struct.pack(">I", 1), _avc1(sps, pps))
    stts = _full_box(b"stts", 0, 0, struct.pack(">III", 1, _FRAMES, 1))
    stss = _full_box(b"stss", 0, 0, struct.pack(">II", 1, 1))
    stsc = _full_box(b"stsc", 0, 0, struct.pack(">IIII", 1, 1, _FRAMES, 1))
    stsz = _full_box(
        b"stsz",
        0,
        0,
        struct.pack(">II", 0, len(sample_sizes)),
        struct.pack(f">{len(sample_sizes)}I", *sample_sizes),
    )
    stco = _full_box(b"stco", 0, 0, struct.pack(">II", 1, mdat_offset))
    stbl = _box(b"stbl", stsd, stts, stss, stsc, stsz, stco)
    minf = _box(b"minf", vmhd, dinf, stbl)
    trak = _box(b"trak", tkhd, _box(b"mdia", mdhd, hdlr, minf))
    return _box(b"moov", mvhd, trak)


@functools.lru_cache(maxsize=1)
def sample_mp4() -> bytes:
    """Return the sandbox's sample video: a small, valid MP4 file.

    Returns:
        The bytes of a 48x48, one-second, 10 fps H.264 MP4 (about 4 KB). The same bytes on
        every call.
    """
    sps, pps = _sps(), _pps()
    frames = [_idr_slice()] + [_skip_slice(n) for n in range(1, _FRAMES)]
    samples = [struct.pack(">I", len(f)) + f for f in frames]
    ftyp = _box(b"ftyp", b"isom", struct.pack(">I", 0x200), b"isom", b"iso2", b"avc1", b"mp41")
    sizes = [len(s) for s in samples]
    moov_len = len(_moov(sizes, 0, sps, pps))
    mdat_offset = len(ftyp) + moov_len + 8
    moov = _moov(sizes, mdat_offset, sps, pps)
    return ftyp + moov + _box(b"mdat", *samples)


@attrs.frozen
class ByteRange:
    """A satisfiable byte range of a resource: ``start`` to ``end`` inclusive.

    Attributes:
        start: The first byte.
        end: The last byte (inclusive).
    """

    start: int
    end: int

    @property
    def length(self) -> int:
        """Number of bytes in the range."""
        return self.end - self.start + 1


# At most 18 digits: larger positions are not sizes of anything, and int() of a very long
# digit string would raise.
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d{0,18})\s*-\s*(\d{0,18})\s*$", re.IGNORECASE)


def parse_range(header: str | None, size: int) -> ByteRange | Literal[False] | None:
    """Read a ``Range`` request header for a resource of ``size`` bytes.

    Only one range is honoured; a header asking for several (``bytes=0-1,5-6``) or one that is
    not understood is ignored, as RFC 9110 allows, and the whole resource is sent.

    Args:
        header: The ``Range`` header, or ``None``.
        size: The size of the resource.

    Returns:
        ``None`` to send the whole resource (no header, or one that is ignored), a
        :class:`ByteRange` to send that part (206), or ``False`` when the range cannot be
        satisfied (416).
    """
    if not header:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # suffix range: the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            return False
        return ByteRange(max(0, size - suffix), size - 1)
    start = int(first)
    if last and int(last) < start:
        return None  # syntactically invalid: ignored
    if start >= size:
        return False
    end = int(last) if last else size - 1
    return ByteRange(start, min(end, size - 1))
