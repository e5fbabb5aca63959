"""``LedgerEntry``: one key of a ledger as the database holds it, and its metadata.

Metadata is stored as canonical JSON text (keys sorted, no spaces), so that equal objects are
equal text on every engine (SQLite compares nested values as text).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import attrs

from .._contract._exceptions import InvalidRequestError
from .._contract._models import Task, structure, unstructure
from .._contract._serial import Serializable

MAX_METADATA_BYTES = 16 * 1024
"""The largest metadata, as JSON text in UTF-8 (and at most 8 levels deep)."""

TERMINAL_STATES = frozenset({"succeeded", "failed", "error"})
"""The terminal task states an entry ends in."""
STATES = ("creating", "unknown", "refused", "pending", "created", "succeeded", "failed", "error")
"""Every state of an entry, in the order of its life (``created``: a video batch, answered)."""


def from_epoch(value: float | str | None) -> datetime | None:
    """A time the ledger stores (seconds since the epoch), as an aware ``datetime``."""
    return None if value is None else datetime.fromtimestamp(float(value), tz=timezone.utc)


@attrs.frozen
class LedgerEntry(Serializable):
    """One key of a ledger.

    Attributes:
        key: The key (given to ``create_task``, or drawn at random when none was given).
        state: ``creating`` (written, not yet answered), ``unknown`` (the create may have taken
            effect, its id is not known), ``refused`` (the service certainly created nothing),
            ``pending`` (created, not terminal), or the terminal task states ``succeeded``,
            ``failed``, ``error``.
        task_id: The task id, once known.
        credits_cost: The credits the service says it charged (``None`` before its answer;
            0 for a failed task it refunded).
        task: The last :class:`Task` seen, or ``None``.
        kind: ``task`` for a direct task, ``project`` for a project, ``project_task`` for a
            task of a project's video batch, ``videos`` for the create of a video batch
            (state ``created`` once answered; its tasks are entries of their own).
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
        version: The entry's changes so far (of its state or metadata), counted from 0: each
            process sees an entry's versions in this order.
        position: The change's position, on an entry read as a change (``Ledger.changes``):
            it only grows, and ``changes(after=position)`` resumes just after it; ``None``
            otherwise. Not compared: the same entry read from the table is equal.
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


def task_to_json(task: Task) -> str:
    """The task as the JSON the ledger stores."""
    return json.dumps(unstructure(task), separators=(",", ":"))


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


def _depth(value: Any, field: str) -> int:
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise InvalidRequestError(field, "must have string keys")
        return 1 + max((_depth(item, field) for item in value.values()), default=0)
    if isinstance(value, (list, tuple)):
        return 1 + max((_depth(item, field) for item in value), default=0)
    return 0


def check_metadata(value: Any, field: str = "metadata") -> str | None:
    """Check metadata; its canonical JSON text (``None`` for none).

    Raises:
        InvalidRequestError: Not a JSON object of string keys and JSON values (no NUL, no
            lone surrogate, no NaN), deeper than 8 levels or larger than 16 KiB as JSON.
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        rule = f"must be a JSON object (a dict with string keys), got {type(value).__name__}"
        raise InvalidRequestError(field, rule)
    if _depth(value, field) > 8:
        raise InvalidRequestError(field, "must nest at most 8 levels")
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False, default=_refuse)  # fmt: skip
        size = len(text.encode())
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError: a lone surrogate
        raise InvalidRequestError(field, f"must hold JSON values only ({exc})") from None
    if "\\u0000" in text:
        raise InvalidRequestError(field, "must not contain NUL characters")
    if size > MAX_METADATA_BYTES:
        raise InvalidRequestError(field, f"must be at most {MAX_METADATA_BYTES} bytes as JSON")
    return text


def _refuse(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} is not a JSON value")


def load_metadata(value: Any) -> dict[str, Any]:
    """The metadata of a row (JSON text, an object already parsed, or ``NULL``)."""
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
