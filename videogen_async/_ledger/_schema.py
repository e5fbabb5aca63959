"""The ledger's schema: one definition for both engines, versioned, with explicit migrations.

Version 1 tables (every name prefixed ``videogen_ledger_`` so that a ledger can live in a
PostgreSQL database beside other tables):

* ``videogen_ledger_meta(name, value)``: ``application`` (always :data:`APPLICATION`, how a
  ledger is told from another database) and ``schema_version``.
* ``videogen_ledger_entries``: one row per key: what was asked (``kind``, ``model``,
  ``duration``, ``request``), what is known (``state``, ``task_id``, ``project_id``,
  ``credits_cost``, ``task``, ``error``), the budget reservation (``reserved``, ``unpriced``),
  and the watchers' lease (``owner``, ``lease_until``, ``delivered``). ``model`` and
  ``duration`` are kept per task so that finish times can be learned per class.
* ``videogen_ledger_budget``: one row: credits ``spent`` and ``reserved`` through the ledger,
  and ``unpriced``, the creates in flight whose price could not be estimated.
* ``videogen_ledger_pacing``: one row: ``pause_until``, the shared pause after a 429.
* ``videogen_ledger_rates``: the highest price per second of video seen, per model.

Version 2 adds:

* ``videogen_ledger_watchers(owner, seen_until)``: the live watchers (each refreshes its row
  while it lives), so that claims spread the open entries fairly over them.
* ``videogen_ledger_classes(class_key, stats, version)``: what was learned of the finish times
  of each class of tasks (``model/duration``), kept across processes and restarts.

Migrations: :data:`MIGRATIONS` maps a version to the statements that bring the previous one
to it; they only ever add. A ledger of a newer version than this SDK knows is refused.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant names and fragments;
# every value is a bound parameter.

from __future__ import annotations

from .._contract._exceptions import LedgerError

__all__ = [
    "APPLICATION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TABLES",
    "check_meta",
    "create_statements",
]

APPLICATION = "videogen_async.ledger"
SCHEMA_VERSION = 2

TABLES = (
    "videogen_ledger_meta",
    "videogen_ledger_entries",
    "videogen_ledger_budget",
    "videogen_ledger_pacing",
    "videogen_ledger_rates",
    "videogen_ledger_watchers",
    "videogen_ledger_classes",
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        "CREATE TABLE IF NOT EXISTS videogen_ledger_watchers ("
        " owner TEXT PRIMARY KEY, seen_until DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_classes ("
        " class_key TEXT PRIMARY KEY, stats TEXT NOT NULL, version INTEGER NOT NULL)",
    ),
}
"""Statements from version ``n - 1`` to ``n``; each only adds."""


def create_statements(*, real: str) -> list[str]:
    """The statements that create the schema at :data:`SCHEMA_VERSION`.

    Args:
        real: The engine's floating point type (``REAL`` or ``DOUBLE PRECISION``).

    Returns:
        ``CREATE TABLE`` / ``CREATE INDEX`` statements, each idempotent.
    """
    return [
        "CREATE TABLE IF NOT EXISTS videogen_ledger_meta ("
        " name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_entries ("
        " key TEXT PRIMARY KEY,"
        " kind TEXT NOT NULL DEFAULT 'task',"
        " state TEXT NOT NULL,"
        " task_id TEXT UNIQUE,"
        " project_id TEXT,"
        " model TEXT,"
        " duration INTEGER,"
        " request TEXT NOT NULL,"
        f" reserved {real} NOT NULL DEFAULT 0,"
        " unpriced INTEGER NOT NULL DEFAULT 0,"
        f" credits_cost {real},"
        " task TEXT,"
        " error TEXT,"
        " owner TEXT,"
        f" lease_until {real},"
        " delivered INTEGER NOT NULL DEFAULT 0,"
        f" created_at {real} NOT NULL,"
        f" updated_at {real} NOT NULL,"
        f" finished_at {real})",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_claim"
        " ON videogen_ledger_entries (state, lease_until)",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_owner"
        " ON videogen_ledger_entries (owner)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_budget ("
        " id INTEGER PRIMARY KEY CHECK (id = 1),"
        f" spent {real} NOT NULL DEFAULT 0,"
        f" reserved {real} NOT NULL DEFAULT 0,"
        " unpriced INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_pacing ("
        f" id INTEGER PRIMARY KEY CHECK (id = 1), pause_until {real} NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_rates ("
        f" model TEXT PRIMARY KEY, per_second {real} NOT NULL)",
        *(statement for version in sorted(MIGRATIONS) for statement in MIGRATIONS[version]),
        "INSERT INTO videogen_ledger_budget (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO videogen_ledger_pacing (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO videogen_ledger_meta (name, value) VALUES"
        f" ('application', '{APPLICATION}') ON CONFLICT (name) DO NOTHING",
        "INSERT INTO videogen_ledger_meta (name, value) VALUES"
        f" ('schema_version', '{SCHEMA_VERSION}') ON CONFLICT (name) DO NOTHING",
    ]


def check_meta(where: str, meta: dict[str, str]) -> int:
    """Check the meta rows of a ledger; return its schema version.

    Raises:
        LedgerError: Not a ledger, or a newer schema than this SDK knows.
    """
    if meta.get("application") != APPLICATION:
        raise LedgerError(f"ledger {where!r}: is not a ledger (no videogen_async.ledger marker)")
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError:
        raise LedgerError(f"ledger {where!r}: its schema version is unreadable") from None
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {where!r}: has schema version {version}, newer than this version of"
            f" videogen-async knows ({SCHEMA_VERSION}); upgrade videogen-async to use it"
            " (nothing was written)"
        )
    return version
