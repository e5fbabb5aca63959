"""ISO 8601 date-times as the service writes them, read on every supported Python."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

_FRACTION = re.compile(r"\.(\d+)")
_LEAP = re.compile(r"(T\d\d:\d\d):60(?:[.,]\d+)?")


def parse_datetime(value: Any) -> datetime | None:
    """An aware ``datetime`` (UTC without an offset) of ISO 8601 text.

    Takes text such as ``2026-01-02T03:04:05.123456789Z`` or a ``datetime``; ``None`` for
    ``None``. A leap second (``23:59:60``) is the last microsecond of its minute
    (``23:59:59.999999``): a time, in order, never a missing value.

    Raises:
        ValueError: The value is not a date-time (a number, an empty text, ``yesterday``).
    """
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    # Blank text is refused without a stripped copy of every answer's times.
    elif isinstance(value, str) and value and not value.isspace():
        try:  # the common case on 3.11+ (which reads "Z" and any fraction), without a regex
            parsed = datetime.fromisoformat(value)
        except ValueError:  # normalised first: what Python 3.10's version does not read
            text = value.strip()
            if text[-1:] in "zZ":
                text = text[:-1] + "+00:00"
            text = text.replace(" ", "T", 1) if "T" not in text and " " in text else text
            text = _LEAP.sub(r"\1:59.999999", text, count=1)
            # Python 3.10's fromisoformat takes exactly 3 or 6 fractional digits.
            text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
            parsed = datetime.fromisoformat(text)
    else:  # cattrs wraps ValueError; a number's unit (s, ms) would be a guess
        raise ValueError(f"expected an ISO 8601 date-time text, got {value!r:.60}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def format_datetime(value: datetime) -> str:
    """ISO 8601 text of an aware date-time (``Z`` for UTC)."""
    if value.utcoffset() == timedelta(0):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return value.isoformat()
