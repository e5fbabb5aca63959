"""An entry's metadata: a bounded JSON object, checked before anything is written or sent.

Stored as canonical JSON text (keys sorted, no spaces), so that equal objects are equal
text on every engine (SQLite compares nested values as text).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from .._contract._exceptions import InvalidRequestError

__all__ = ["MAX_DEPTH", "MAX_METADATA_BYTES", "check_metadata", "load_metadata", "merge_patch"]

MAX_METADATA_BYTES = 16 * 1024
"""The largest metadata, as JSON text in UTF-8."""
MAX_DEPTH = 8
"""The deepest nesting of objects and lists in metadata."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _check(value: Any, where: str, depth: int, field: str) -> None:
    if depth > MAX_DEPTH:
        raise InvalidRequestError(field, f"must nest at most {MAX_DEPTH} levels (at {where})")
    if isinstance(value, str):
        if _UNSTORABLE.search(value):
            rule = f"must not contain NUL or lone surrogate characters (at {where})"
            raise InvalidRequestError(field, rule)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequestError(field, f"must hold finite numbers only (at {where})")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidRequestError(field, f"must have string keys (at {where}: {key!r})")
            _check(key, where, depth, field)
            _check(item, f"{where}.{key}", depth + 1, field)
    elif isinstance(value, (list, tuple)):
        for n, item in enumerate(value):
            _check(item, f"{where}[{n}]", depth + 1, field)
    elif value is not None and not isinstance(value, (bool, int, float)):
        rule = f"must hold JSON values only (at {where}: a {type(value).__name__})"
        raise InvalidRequestError(field, rule)


def check_metadata(value: Any, field: str = "metadata") -> str | None:
    """Check metadata; its canonical JSON text (``None`` for none).

    Raises:
        InvalidRequestError: Not a JSON object (string keys; strings, numbers, booleans,
            null, lists and objects), deeper than :data:`MAX_DEPTH`, or larger than
            :data:`MAX_METADATA_BYTES`.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        rule = f"must be a JSON object (a dict with string keys), got {type(value).__name__}"
        raise InvalidRequestError(field, rule)
    _check(value, "$", 1, field)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode())
    if size > MAX_METADATA_BYTES:
        rule = f"must be at most {MAX_METADATA_BYTES} bytes as JSON (it is {size})"
        raise InvalidRequestError(field, rule)
    return text


def load_metadata(value: Any) -> dict[str, Any]:
    """The metadata of a row (JSON text, an object already parsed, or ``NULL``)."""
    if value is None:
        return {}
    loaded = json.loads(value) if isinstance(value, str) else value
    return dict(loaded) if isinstance(loaded, Mapping) else {}


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``target`` changed by ``patch`` as RFC 7386 says: ``None`` removes a key, objects merge."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged
