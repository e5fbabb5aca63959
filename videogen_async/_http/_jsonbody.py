"""Decoding a response body safely: whatever bytes arrive, the result is a value or "not JSON".

``json.loads`` alone lets a hostile body escape the error tree (``RecursionError``, a
5,000-digit integer's ``ValueError``) and accepts ``NaN``: here nesting is bounded
(:data:`MAX_DEPTH`), those constants refused, any failure "not JSON", and error texts quote a
bounded, redacted excerpt (``reprlib`` with a depth and size bound for a decoded value).
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Callable
from typing import Any

from .._contract._redact import redact_text

#: The deepest nesting of arrays and objects accepted in a body.
MAX_DEPTH = 64
#: Characters of a body quoted in an error message.
EXCERPT_CHARS = 200
#: Characters of a server's ``message`` kept in an error message.
MESSAGE_CHARS = 1000
# Room beyond an excerpt's end, so that a key crossing the cut is redacted whole before it.
_WINDOW = 4096


def refuse_constant(name: str) -> Any:
    """``parse_constant`` of every JSON read: ``NaN`` and ``Infinity`` are not JSON."""
    raise ValueError(f"{name} is not JSON")


# One decoder for every body: ``json.loads`` with an option builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=refuse_constant)
# The decoder's C scanner (set by ``JSONDecoder.__init__``; the stubs do not show it).
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode_json(raw: bytes) -> tuple[Any, bool]:
    """Decode a body as ``json`` reads bytes (UTF-8, or UTF-16/32 with or without a BOM).

    ``(value, True)`` for a JSON body within :data:`MAX_DEPTH`, else ``(None, False)`` (an
    empty body included).
    """
    if not raw:
        return None, False
    # A cheap bound first: a body with few brackets cannot be deep (the polling hot path).
    if nested_too_deep(raw):
        return None, False
    try:
        if raw[:1] == b"{" and raw[1:2] != b"\x00":
            # An object in UTF-8 with nothing around it (every answer of the service): the
            # scanner alone, without the encoding sniffing and the white-space matching that
            # ``decode`` adds. Anything after the object takes the general path below.
            text = raw.decode("utf-8", "surrogatepass")
            value, end = _SCAN(text, 0)
            if end == len(text):
                return value, True
        # As ``json.loads`` reads bytes: UTF-8, or UTF-16/32 told by a BOM or the zero bytes.
        value = _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (ValueError, UnicodeError, RecursionError, MemoryError, TypeError, StopIteration):
        return None, False
    return value, True


#: A JSON string (its escapes included), or an unterminated one up to the end: where brackets
#: do not count. Unrolled (``[^"\\]*`` runs between escapes) so that it never backtracks.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)', re.DOTALL)


def nested_too_deep(raw: bytes) -> bool:
    """Whether the brackets of ``raw`` nest deeper than :data:`MAX_DEPTH` (strings skipped).

    Scans the bytes without decoding (in UTF-16/32 every bracket and quote is one code unit,
    so the zero bytes are dropped first).
    """
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    depth = 0
    for byte in _STRING.sub(b"", raw.replace(b"\x00", b"")):
        if byte in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif byte in b"]}":
            depth -= 1
    return False


def clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """Redact ``text`` and cut it to at most ``limit`` characters (plus ``...``).

    The redaction runs on a window larger than the cut, so a key that crosses the cut is
    replaced whole rather than left half-visible.
    """
    window = redact_text(text[: limit + _WINDOW])
    if len(window) <= limit and len(text) <= limit + _WINDOW:
        return window
    return window[:limit] + "..."


def excerpt(raw: bytes, limit: int = EXCERPT_CHARS) -> str:
    """The first ``limit`` characters of a body, for an error message, ``...`` if it is longer.

    Decoded, on one line, then :func:`clip`-ped (redacted whole, then cut). Only the bytes
    that can make the window are decoded (at most 4 per character).
    """
    return clip(
        " ".join(raw[: (limit + _WINDOW) * 4].decode("utf-8", errors="replace").split()), limit
    )


def short_repr(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A ``repr``-like text of a decoded JSON value, redacted, cut after ``limit`` characters.

    Unlike ``repr``, it cannot exhaust the stack on a deeply nested value nor spend time on a
    huge one: ``reprlib`` with bounds (:data:`_REPR`) stops at a depth and after enough items
    (each item takes at least a character, so more than an excerpt's are never shown), and
    keeps enough of each string that a key crossing the cut is redacted whole. An object's
    keys come sorted, as ``reprlib`` writes them (a sort of an 8 MB body's keys is a tenth of
    a second, on an error's path).
    """
    return clip(_REPR.repr(value), limit)


#: ``reprlib`` bounded for :func:`short_repr`: 16 levels deep (``{...}`` below), an excerpt's
#: worth of items per list or object, a string's first characters beyond the cut (a long
#: string loses its middle, past the cut). Set after construction: Python 3.10's ``Repr``
#: takes no arguments.
_REPR = reprlib.Repr()
_REPR.maxlevel = 16
_REPR.maxdict = _REPR.maxlist = EXCERPT_CHARS
_REPR.maxstring = _REPR.maxlong = 2 * EXCERPT_CHARS + _WINDOW


def int_text(value: int) -> str:
    """``str(value)``, or a placeholder for an integer beyond the int-to-str digit limit."""
    try:
        return str(value)
    except ValueError:  # beyond the int-to-str digit limit
        return "<a very large integer>"
