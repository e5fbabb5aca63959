"""``LedgerEntry``: one key of a ledger as the database holds it, and its metadata.

Metadata is stored as canonical JSON text (keys sorted, no spaces, a float as digits and ``.0``:
``jsonb`` keeps no exponent, ``1e+20`` would read back as an integer; ``-0.0`` as ``0.0``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import attrs

from .._contract._exceptions import InvalidRequestError
from .._contract._models import Task, structure, unstructure
from .._contract._serial import Serializable
from .._contract._validation import json_text

MAX_METADATA_BYTES = 16 * 1024
"""The largest metadata, as JSON text in UTF-8 (and at most 8 levels deep)."""
_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|-?[\d.]+e\+\d+|-0\.0(?=[,\]}])')  # or a string

TERMINAL_STATES = frozenset({"succeeded", "failed", "error"})
"""The terminal task states an entry ends in."""
STATES = ("creating", "unknown", "refused", "pending", "created", "succeeded", "failed", "error")
"""Every state of an entry, in the order of its life (``created``: a video batch, answered)."""
KINDS = ("task", "project", "project_task", "videos")
"""What an entry's create makes (``LedgerEntry.kind``)."""


def from_epoch(value: float | str | None) -> datetime | None:
    """A time the ledger stores (seconds since the epoch), as an aware ``datetime``."""
    return None if value is None else datetime.fromtimestamp(float(value), tz=timezone.utc)


@attrs.frozen
class LedgerEntry(Serializable):
    """One key of a ledger.

    Attributes:
        key: The key (given to ``create_task``, or random).
        state: ``creating`` (written, unanswered), ``unknown`` (may have taken effect, id
            unknown), ``refused`` (nothing created), ``pending``, or a terminal task state.
        task_id: The task id, once known.
        credits_cost: Credits charged (``None`` before the answer; 0 once refunded).
        task: The last :class:`Task` seen, or ``None``.
        kind: ``task``, ``project``, ``project_task`` (a task of a project's batch) or
            ``videos`` (a batch's create: ``created`` once answered).
        model: The model asked for (``None``: the service's default).
        duration: The duration asked for, in seconds (``None``: the service's default).
        request: The fields the create was (or will be) sent with.
        project_id: The project of a ``project`` or ``project_task`` entry.
        error: The text of the last error met by the create or by a poll, if any.
        created_at: When the entry was written.
        updated_at: When it last changed.
        finished_at: When a watcher recorded its terminal state.
        metadata: The JSON object given with the create (``{}``: none), see
            :meth:`Ledger.update_metadata`.
        version: The entry's state/metadata changes so far, from 0 (seen in this order).
        position: On an entry read as a change (``Ledger.changes``), its growing position
            for ``changes(after=position)``; ``None`` otherwise. Not compared.
    """

    key: str
    state: str
    task_id: str | None = None
    credits_cost: float | None = None
    task: Task | None = None
    kind: str = "task"
    model: str | None = None
    duration: int | None = None
    request: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    project_id: str | None = None
    error: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    version: int = 0
    position: int | None = attrs.field(default=None, eq=False)

    @property
    def is_terminal(self) -> bool:
        """Whether the entry is in a terminal task state."""
        return self.state in TERMINAL_STATES

    @property
    def video_url(self) -> str | None:
        """The video of a succeeded entry (``None`` otherwise, or before any poll).

        ``entry.task`` is ``None`` until a poll was recorded, so ``entry.task.video_url`` does
        not type-check; this reads the same value, ``None`` where there is none.
        """
        return self.task.video_url if self.task is not None else None


def task_to_json(task: Task) -> str:
    """The task as the JSON the ledger stores."""
    return json_text(unstructure(task), "task", separators=(",", ":"))


_COPIED = (  # the columns an entry takes as they are
    *("key", "state", "task_id", "credits_cost", "kind"),
    *("model", "duration", "project_id", "error"),
)


def entry_from_row(row: Mapping[str, Any], task: Task | None = None) -> LedgerEntry:
    """Build an entry from a database row (``task``: the task its column was written from)."""
    task_text = row["task"]
    if task is None and task_text:
        task = structure(json.loads(task_text), Task)
    request_text = row["request"]
    return LedgerEntry(
        **{name: row[name] for name in _COPIED},
        task=task,
        request=json.loads(request_text) if request_text else {},
        created_at=from_epoch(row["created_at"]),
        updated_at=from_epoch(row["updated_at"]),
        finished_at=from_epoch(row["finished_at"]),
        metadata=load_metadata(row.get("metadata")),
        version=int(row.get("version") or 0),
        position=row.get("position"),
    )


def _depth(value: Any) -> int:
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise InvalidRequestError("metadata", "must have string keys")
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


def check_metadata(value: Any) -> str | None:
    """Check metadata; its canonical JSON text (``None`` for none).

    Raises:
        InvalidRequestError: Not a JSON object of string keys and JSON values (no NUL, no
            lone surrogate, no NaN), deeper than 8 levels or larger than 16 KiB as JSON.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidRequestError(
            "metadata",
            f"must be a JSON object (a dict with string keys), got {type(value).__name__}",
        )
    if _depth(value) > 8:
        raise InvalidRequestError("metadata", "must nest at most 8 levels")
    try:
        text = json_text(
            value,
            "metadata",
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            default=_refuse,
        )
        text = _NUMBER.sub(_digits, text)
        size = len(text.encode())
    except InvalidRequestError:
        raise
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError: a lone surrogate
        raise InvalidRequestError("metadata", f"must hold JSON values only ({exc})") from None
    if "\\u0000" in text:
        raise InvalidRequestError("metadata", "must not contain NUL characters")
    if size > MAX_METADATA_BYTES:
        raise InvalidRequestError("metadata", f"must be at most {MAX_METADATA_BYTES} bytes as JSON")
    return text


def _digits(match: re.Match[str]) -> str:
    found = match[0]
    return found if found[0] == '"' else "0.0" if found == "-0.0" else f"{Decimal(found):f}.0"


def _refuse(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


#: One decoder for every row's metadata (``json.loads`` with a hook builds one per call).
_SORTED = json.JSONDecoder(object_pairs_hook=lambda pairs: dict(sorted(pairs)))


def load_metadata(value: Any) -> dict[str, Any]:
    """The metadata of a row (JSON, parsed or not, or ``NULL``), keys sorted (not as ``jsonb``)."""
    if value is None:  # most entries: no metadata
        return {}
    loaded = _SORTED.decode(value if isinstance(value, str) else json.dumps(value))
    return dict(loaded) if isinstance(loaded, Mapping) else {}


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``target`` changed by ``patch`` (RFC 7386): ``None`` removes, an object merges (into {})."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            merged[key] = merge_patch(h if isinstance(h := merged.get(key), Mapping) else {}, value)
        else:
            merged[key] = value
    return merged


def _number(text: str) -> tuple[str, Decimal]:  # equal as decimals, never to a boolean
    return ("number", Decimal(text))


_exact = functools.partial(json.loads, parse_float=_number, parse_int=_number)


def meta_has(metadata: str | None, wanted: str) -> bool:
    """Whether ``metadata`` holds each key of ``wanted`` with an equal JSON value (as jsonb)."""
    held = _exact(metadata or "{}")
    return all(k in held and held[k] == v for k, v in _exact(wanted).items())


def meta_value(metadata: str | None, key: str) -> str | None:
    """The JSON text of ``metadata``'s value under ``key`` (``None``: no such key)."""
    held = json.loads(metadata or "{}")
    return json.dumps(held[key], ensure_ascii=False) if key in held else None
