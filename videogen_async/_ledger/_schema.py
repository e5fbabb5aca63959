"""The ledger's schema, the two SQL dialects its statements are written in once, and plans.

A *plan* is a generator yielding :class:`Step` statements and receiving each one's rows (dicts);
it returns the result. An engine runs a plan in one transaction. Tables are
``videogen_ledger_*`` (a ledger may share an application's database). An entry's ``owner`` is
its creator while ``creating``/``unknown``, then the leasing watcher; its ``version`` counts its
state/metadata changes, each recorded in ``changes`` by triggers in the same transaction (with
``pg_notify``). ``rates`` (v1) is unused; ``budget`` (v5) only locked under a cap. Migrations
only add; a newer ledger is refused.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant fragments; every value
# is a bound parameter.

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

import attrs

from .._contract._exceptions import LedgerError

APPLICATION = "videogen_async.ledger"
SCHEMA_VERSION = 5
CHANNEL = "videogen_ledger"
"""The PostgreSQL channel of change notices."""
CHANGES_KEPT = 3600.0
"""Seconds a change is kept for readers that were away (see ``_listen``)."""
ENTRY_FIELDS = (
    *("key", "kind", "state", "task_id", "project_id", "model", "duration", "request"),
    *("credits_cost", "task", "error", "created_at", "updated_at", "finished_at", "version"),
)
"""The columns of an entry a change carries (and ``metadata``, as JSON)."""

_T = TypeVar("_T")


@attrs.frozen
class Step:
    """One statement of a plan: answered with its rows, or run once per tuple of ``args``.

    A write plan's transaction begins at its first step that may not commit ``alone``.
    """

    sql: str
    args: Any = ()
    many: bool = False
    alone: bool = False


Plan = Generator[Step, Any, _T]
"""An operation: yields steps, receives each one's rows, returns its result."""
Row = dict[str, Any]
"""A row as a step receives it: its columns by name."""


def q(sql: str, *args: Any, alone: bool = False) -> Step:
    """A statement answered with its rows."""
    return Step(sql, args, alone=alone)


def many(sql: str, rows: Sequence[tuple[Any, ...]]) -> Step:
    """A statement run once per tuple of parameters."""
    return Step(sql, list(rows), many=True)


def rows(sql: str, *args: Any) -> Plan[Any]:
    """A statement, as a plan of its own: its rows."""
    return (yield q(sql, *args))


def first(sql: str, *args: Any, alone: bool = False) -> Plan[Row | None]:
    """A statement answered with its first row (``None``: no row)."""
    rows = yield q(sql, *args, alone=alone)
    return rows[0] if rows else None


class Dialect:
    """What differs between the engines, as data.

    Statements are written once, with ``$1``-style parameters and words in braces: ``{E}``
    (entries table), ``{real}``, ``{json}``, ``{now}`` (database clock, epoch seconds),
    ``{greatest}``, ``{lock}`` (rows read, until commit), ``{skip_locked}`` (pass over rows
    others locked), ``{in_progress}`` (transactions running at the statement's start: a list,
    or ``NULL``), and a few statements. Macros: ``items($n)``/``numbers($n)`` (elements of a
    JSON list of strings/integers), ``meta_has($n)`` (metadata holds each key of a JSON object
    with an equal value), ``meta_value($n)`` (JSON text of a metadata key's value, or ``NULL``).
    """

    def __init__(self, name: str, *, macros: dict[str, str], numbered: bool, **words: str) -> None:
        self.name = name
        self._macros = macros
        self._numbered = numbered
        self._words = {"E": "videogen_ledger_entries", **words}
        self._done: dict[str, str] = {}

    def sql(self, template: str) -> str:
        """The statement ``template`` in this dialect."""
        text = self._done.get(template)
        if text is None:
            text = template.format(**self._words)
            text = re.sub(
                r"(items|numbers|meta_has|meta_value)\((\$\d+)\)",
                lambda m: self._macros[m[1]].format(m[2]),
                text,
            )
            self._done[template] = text = text if self._numbered else text.replace("$", "?")
        return text


_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # fixed for a statement, to the ms
_NO_OP = "SELECT 1"
_TIMES = ("created_at", "updated_at", "finished_at")  # as text: JSON would keep 15 digits
_LOG = (  # SQLite: the trigger's statement
    "INSERT INTO videogen_ledger_changes (key, version, state, entry, at) VALUES (NEW.key,"
    " NEW.version, NEW.state, json_object("
    + ", ".join(
        f"'{name}', iif(NEW.{name} IS NULL, NULL, printf('%!.17g', NEW.{name}))"
        if name in _TIMES
        else f"'{name}', NEW.{name}"
        for name in ENTRY_FIELDS
    )
    + f", 'metadata', json(NEW.metadata)), {_SQLITE_NOW});"
)
_PG_FUNCTION = (
    "CREATE OR REPLACE FUNCTION {} RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {} END $$"
)


def _pg_trigger(name: str, event: str, when: str = "") -> str:
    # Created once, even by openers that waited on the schema lock: such a transaction may
    # still see the tables as it found them before the wait (its caches), so every statement
    # of a migration must be one that can run twice.
    return (
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{name}') THEN"
        f" CREATE TRIGGER {name} {event} ON videogen_ledger_entries FOR EACH ROW{when}"
        " EXECUTE FUNCTION videogen_ledger_log(); END IF; END $$"
    )


SQLITE = Dialect(
    "sqlite",
    macros={
        "items": "SELECT value FROM json_each({})",
        "numbers": "SELECT value FROM json_each({})",
        # Functions of the connection (_entry.py): SQLite's JSON has no exact big integers.
        "meta_has": "videogen_meta_has(metadata, {0})",
        "meta_value": "videogen_meta_value(metadata, {0})",
    },
    numbered=False,  # ?1, ?2: SQLite's numbered parameters
    real="REAL",
    json="TEXT",
    add_column="ADD COLUMN",  # a write transaction holds the file: never twice
    serial="INTEGER PRIMARY KEY AUTOINCREMENT",  # never reused, even once pruned
    now=_SQLITE_NOW,
    greatest="MAX",
    in_progress="NULL",  # one writer at a time: a number passed over never commits
    lock="",  # a write transaction holds the whole file (BEGIN IMMEDIATE)
    skip_locked="",
    table_exists="SELECT name FROM sqlite_master WHERE type = 'table' AND name = $1",
    # Another application's tables (a ledger's own, seen half made, do not count).
    any_table="SELECT name FROM sqlite_master WHERE type = 'table'"
    " AND name NOT LIKE 'videogen_ledger_%' AND name NOT LIKE 'sqlite_%' LIMIT 1",
    schema_lock=_NO_OP,
    metadata_index=_NO_OP,
    log_function=_NO_OP,
    insert_trigger="CREATE TRIGGER IF NOT EXISTS videogen_ledger_added AFTER INSERT ON"
    f" videogen_ledger_entries BEGIN {_LOG} END",
    update_trigger="CREATE TRIGGER IF NOT EXISTS videogen_ledger_changed AFTER UPDATE OF"
    " version ON videogen_ledger_entries WHEN OLD.version IS NOT NEW.version"
    f" BEGIN {_LOG} END",
)

POSTGRES = Dialect(
    "postgresql",
    macros={
        "items": "SELECT jsonb_array_elements_text({}::jsonb)",
        "numbers": "SELECT jsonb_array_elements_text({}::jsonb)::bigint",
        # @> lets an index choose the rows; each key's value must then be equal.
        "meta_has": "(metadata @> {0}::jsonb AND NOT EXISTS (SELECT 1 FROM"
        " jsonb_each({0}::jsonb) AS f WHERE metadata -> f.key IS DISTINCT FROM f.value))",
        "meta_value": "(metadata -> {0}::text)::text",
    },
    numbered=True,
    real="DOUBLE PRECISION",
    json="JSONB",
    add_column="ADD COLUMN IF NOT EXISTS",
    serial="BIGSERIAL PRIMARY KEY",
    now="extract(epoch from clock_timestamp())",  # the server's: machines need not agree
    greatest="GREATEST",
    # Every transaction holding an id, from the lock each holds on its own id until it ends:
    # not the snapshot's xip list, which names only ids below its xmax (the newest id that had
    # ended, plus one), so a running transaction with a higher id than the last to commit was
    # missing from it. Read after the statement's snapshot: the listener waits one more read
    # before taking a number as never coming (see _listen.py).
    in_progress="(SELECT array_agg(transactionid::text::bigint) FROM pg_locks"
    " WHERE locktype = 'transactionid')",
    lock=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    table_exists="SELECT 1 AS one WHERE to_regclass($1) IS NOT NULL",
    any_table="SELECT 1 AS one WHERE false",  # a ledger may share an application's database
    schema_lock="SELECT pg_advisory_xact_lock(7451041415555822) AS locked",
    metadata_index="CREATE INDEX IF NOT EXISTS videogen_ledger_entries_metadata"
    " ON videogen_ledger_entries USING GIN (metadata jsonb_path_ops)",
    log_function=_PG_FUNCTION.format(
        "videogen_ledger_log()",
        "INSERT INTO videogen_ledger_changes (key, version, state, entry, at) VALUES (NEW.key,"
        " NEW.version, NEW.state, to_jsonb(NEW)::text, extract(epoch from clock_timestamp()));"
        f" PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL;",
    ),
    insert_trigger=_pg_trigger("videogen_ledger_added", "AFTER INSERT"),
    update_trigger=_pg_trigger(
        "videogen_ledger_changed",
        "AFTER UPDATE OF version",
        " WHEN (OLD.version IS DISTINCT FROM NEW.version)",
    ),
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        "CREATE TABLE IF NOT EXISTS videogen_ledger_watchers ("
        " owner TEXT PRIMARY KEY, seen_until {real} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_classes ("
        " class_key TEXT PRIMARY KEY, stats TEXT NOT NULL, version INTEGER NOT NULL)",
    ),
    3: (
        "CREATE TABLE IF NOT EXISTS videogen_ledger_prices (model TEXT NOT NULL,"
        " duration INTEGER NOT NULL, price {real} NOT NULL, PRIMARY KEY (model, duration))",
    ),
    4: (
        "ALTER TABLE {E} {add_column} metadata {json}",
        "ALTER TABLE {E} {add_column} version INTEGER NOT NULL DEFAULT 0",
        "{metadata_index}",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_changes (seq {serial}, key TEXT NOT NULL,"
        " version INTEGER NOT NULL, state TEXT NOT NULL, entry TEXT NOT NULL, at {real} NOT NULL)",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_changes_at ON videogen_ledger_changes (at)",
        "{log_function}",
        "{insert_trigger}",
        "{update_trigger}",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_destinations (name TEXT PRIMARY KEY,"
        " created_at {real} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_outbox (destination TEXT NOT NULL,"
        " key TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending',"
        " attempts INTEGER NOT NULL DEFAULT 0, error TEXT, next_at {real} NOT NULL, owner TEXT,"
        " lease_until {real}, delivered_at {real}, PRIMARY KEY (destination, key))",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_outbox_due"
        " ON videogen_ledger_outbox (destination, state, next_at)",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_outbox_owner ON videogen_ledger_outbox (owner)",
    ),
    5: (),  # the budget row no longer kept (see the docstring): the earlier versions keep out
}
"""Statements from version ``n - 1`` to ``n``; each only adds."""

_CREATE = (
    "CREATE TABLE IF NOT EXISTS videogen_ledger_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {E} (key TEXT PRIMARY KEY, kind TEXT NOT NULL DEFAULT 'task',"
    " state TEXT NOT NULL, task_id TEXT UNIQUE, project_id TEXT, model TEXT, duration INTEGER,"
    " request TEXT NOT NULL, reserved {real} NOT NULL DEFAULT 0,"
    " unpriced INTEGER NOT NULL DEFAULT 0, credits_cost {real}, task TEXT, error TEXT,"
    " owner TEXT, lease_until {real}, delivered INTEGER NOT NULL DEFAULT 0,"
    " created_at {real} NOT NULL, updated_at {real} NOT NULL, finished_at {real})",
    "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_claim ON {E} (state, lease_until)",
    "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_owner ON {E} (owner)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_budget (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " spent {real} NOT NULL DEFAULT 0, reserved {real} NOT NULL DEFAULT 0,"
    " unpriced INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS videogen_ledger_pacing (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " pause_until {real} NOT NULL DEFAULT 0)",
    *(statement for version in sorted(MIGRATIONS) for statement in MIGRATIONS[version]),
    "INSERT INTO videogen_ledger_budget (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
    "INSERT INTO videogen_ledger_pacing (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
    f"INSERT INTO videogen_ledger_meta (name, value) VALUES ('application', '{APPLICATION}')"
    " ON CONFLICT (name) DO NOTHING",
)


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


def read_meta() -> Plan[tuple[dict[str, str] | None, bool]]:
    """``(the meta rows or None, whether the database holds other tables)``, reading only."""
    if not (yield q("{table_exists}", "videogen_ledger_meta")):
        return None, bool((yield q("{any_table}")))
    rows = yield q("SELECT name, value FROM videogen_ledger_meta")
    return {row["name"]: row["value"] for row in rows}, False


def create_or_migrate(where: str) -> Plan[None]:
    """Create the schema, or bring an older one to :data:`SCHEMA_VERSION`."""
    yield q("{schema_lock}")
    meta, _ = yield from read_meta()
    if meta is None:
        statements: Sequence[str] = _CREATE
    else:
        statements = [
            s for v in range(check_meta(where, meta) + 1, SCHEMA_VERSION + 1) for s in MIGRATIONS[v]
        ]
    for statement in statements:
        yield q(statement)
    yield q(
        "INSERT INTO videogen_ledger_meta (name, value) VALUES ('schema_version', $1)"
        " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        str(SCHEMA_VERSION),
    )
