"""``LedgerEntry``: one key of a ledger as the database holds it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import attrs

from .._contract._models import Task, structure, unstructure
from .._contract._serial import Serializable
from ._metadata import load_metadata

__all__ = [
    "STATES",
    "TERMINAL_STATES",
    "LedgerEntry",
    "entry_from_row",
    "from_epoch",
    "task_to_json",
]

TERMINAL_STATES = frozenset({"succeeded", "failed", "error"})
"""The terminal task states an entry ends in."""
STATES = frozenset({"creating", "unknown", "refused", "pending", "created", *TERMINAL_STATES})
"""Every state of an entry (``created``: a video batch, answered)."""


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

    @property
    def is_terminal(self) -> bool:
        """Whether the entry is in a terminal task state."""
        return self.state in TERMINAL_STATES


def task_to_json(task: Task) -> str:
    """The task as the JSON the ledger stores."""
    return json.dumps(unstructure(task), separators=(",", ":"))


def entry_from_row(row: Mapping[str, Any], task: Task | None = None) -> LedgerEntry:
    """Build an entry from a database row (a mapping of column names).

    Args:
        row: The row.
        task: The task the row's ``task`` column was just written from, if at hand (it is
            then not read back from its JSON).
    """
    task_text = row["task"]
    if task is None and task_text:
        task = structure(json.loads(task_text), Task)
    request_text = row["request"]
    return LedgerEntry(
        key=row["key"],
        state=row["state"],
        task_id=row["task_id"],
        credits_cost=row["credits_cost"],
        task=task,
        kind=row["kind"],
        model=row["model"],
        duration=row["duration"],
        request=json.loads(request_text) if request_text else {},
        project_id=row["project_id"],
        error=row["error"],
        created_at=from_epoch(row["created_at"]),
        updated_at=from_epoch(row["updated_at"]),
        finished_at=from_epoch(row["finished_at"]),
        metadata=load_metadata(row.get("metadata")),
        version=int(row.get("version") or 0),
    )
