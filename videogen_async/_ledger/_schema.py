"""The ledger's schema, the two SQL dialects every statement is written in once, and plans.

A *plan* is a generator that yields :class:`Step` statements (written once, in the words of
:class:`Dialect`) and receives each one's rows (a list of dicts); its return value is the
operation's result. An engine (:mod:`._engines`) runs a plan in one transaction.

Tables (every name prefixed ``videogen_ledger_`` so that a ledger can live in a PostgreSQL
database beside other tables):

* ``meta(name, value)``: ``application`` (always :data:`APPLICATION`, how a ledger is told
  from another database) and ``schema_version``.
* ``entries``: one row per key: what was asked (``kind``, ``model``, ``duration``,
  ``request``), what is known (``state``, ``task_id``, ``project_id``, ``credits_cost``,
  ``task``, ``error``), the budget reservation (``reserved``, ``unpriced``), and who holds
  it (``owner``: the creator while it is ``creating`` or ``unknown``, then the watcher that
  claimed it, until ``lease_until``; ``delivered``).
* ``budget``: one row: credits ``spent`` and ``reserved``, and ``unpriced``, the creates in
  flight whose price was unknown (at most one).
* ``pacing``: one row: ``pause_until``, the shared pause after a 429.
* ``rates``: version 1's price per second of each model (no longer read: see ``prices``).
* ``watchers(owner, seen_until)`` (version 2): the live watchers, so that claims spread the
  open entries fairly over them.
* ``classes(class_key, stats, version)`` (version 2): what was learned of the finish times of
  each class of tasks (``model/duration``).
* ``prices(model, duration, price)`` (version 3): the highest price answered for each model
  and duration; a create of a pair not in it has an unknown price.

:data:`MIGRATIONS` maps a version to the statements that bring the previous one to it; they
only ever add. A ledger of a newer version than this SDK knows is refused.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant fragments; every value
# is a bound parameter.

from __future__ import annotations

import functools
import re
from collections.abc import Generator, Sequence
from typing import Any, TypeVar

import attrs

from .._contract._exceptions import LedgerError

__all__ = [
    "APPLICATION",
    "MIGRATIONS",
    "POSTGRES",
    "SCHEMA_VERSION",
    "SQLITE",
    "Dialect",
    "Plan",
    "Step",
    "check_meta",
    "create_or_migrate",
    "many",
    "one",
    "q",
    "read_meta",
]

APPLICATION = "videogen_async.ledger"
SCHEMA_VERSION = 3

_T = TypeVar("_T")


@attrs.frozen
class Step:
    """One statement of a plan.

    Attributes:
        sql: The statement, in the words of :class:`Dialect`.
        args: Its parameters; for ``many``, a list of parameter tuples.
        many: Run once per parameter tuple (answered with no rows).
        changes: Its rows are entries whose state the transaction changes.
    """

    sql: str
    args: Any = ()
    many: bool = False
    changes: bool = False


Plan = Generator[Step, Any, _T]
"""An operation: yields steps, receives each one's rows, returns its result."""


def q(sql: str, *args: Any, changes: bool = False) -> Step:
    """A statement answered with its rows."""
    return Step(sql, args, changes=changes)


def many(sql: str, rows: Sequence[tuple[Any, ...]]) -> Step:
    """A statement run once per parameter tuple."""
    return Step(sql, list(rows), many=True)


def one(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first row, or ``None``."""
    return rows[0] if rows else None


@attrs.frozen
class Dialect:
    """What differs between the engines, as data: every statement is written once.

    Statements are written with ``$1``-style parameters and these words in braces:
    ``{E}`` (the entries table), ``{real}``, ``{now}`` (the database's clock, in seconds since
    the epoch), ``{greatest}`` (of two values), ``{lock}`` (lock the selected rows until the
    transaction ends), ``{skip_locked}`` (and pass over rows another transaction locked),
    ``{table_exists}`` and ``{any_table}``; ``items($n)`` is the set of the elements of a JSON
    list parameter.

    Attributes:
        name: ``sqlite`` or ``postgresql``.
        words: The text of each word.
        items: The text of ``items($n)``, ``{}`` standing for the parameter.
        numbered: The parameter style: ``$`` (PostgreSQL's ``$1``) or ``?`` (SQLite's ``?1``).
    """

    name: str
    words: tuple[tuple[str, str], ...]
    items: str
    numbered: str

    def sql(self, template: str) -> str:
        """The statement ``template`` in this dialect."""
        return _render(self, template)


@functools.lru_cache(maxsize=512)
def _render(dialect: Dialect, template: str) -> str:
    text = template.format(E="videogen_ledger_entries", **dict(dialect.words))
    text = re.sub(r"items\((\$\d+)\)", lambda m: dialect.items.format(m[1]), text)
    return text if dialect.numbered == "$" else re.sub(r"\$(\d+)", r"?\1", text)


SQLITE = Dialect(
    name="sqlite",
    words=(
        ("real", "REAL"),
        # SQLite's 'now' is fixed for the whole statement, to the millisecond.
        ("now", "((julianday('now') - 2440587.5) * 86400.0)"),
        ("greatest", "MAX"),
        ("lock", ""),  # every write transaction holds the whole file (BEGIN IMMEDIATE)
        ("skip_locked", ""),
        ("table_exists", "SELECT name FROM sqlite_master WHERE type = 'table' AND name = $1"),
        # Tables of another application (a ledger's own, seen half made, do not count).
        (
            "any_table",
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND name NOT LIKE 'videogen_ledger_%' LIMIT 1",
        ),
        ("schema_lock", "SELECT 1"),
    ),
    items="SELECT value FROM json_each({})",
    numbered="?",
)

POSTGRES = Dialect(
    name="postgresql",
    words=(
        ("real", "DOUBLE PRECISION"),
        # The server's clock: the machines sharing a ledger need not agree on theirs.
        ("now", "extract(epoch from clock_timestamp())"),
        ("greatest", "GREATEST"),
        ("lock", " FOR UPDATE"),
        ("skip_locked", " FOR UPDATE SKIP LOCKED"),
        ("table_exists", "SELECT 1 AS one WHERE to_regclass($1) IS NOT NULL"),
        # A ledger may share its database with an application's tables.
        ("any_table", "SELECT 1 AS one WHERE false"),
        ("schema_lock", "SELECT pg_advisory_xact_lock(7451041415555822) AS locked"),
    ),
    items="SELECT jsonb_array_elements_text({}::jsonb)",
    numbered="$",
)

MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        "CREATE TABLE IF NOT EXISTS videogen_ledger_watchers ("
        " owner TEXT PRIMARY KEY, seen_until {real} NOT NULL)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_classes ("
        " class_key TEXT PRIMARY KEY, stats TEXT NOT NULL, version INTEGER NOT NULL)",
    ),
    3: (
        "CREATE TABLE IF NOT EXISTS videogen_ledger_prices ("
        " model TEXT NOT NULL, duration INTEGER NOT NULL, price {real} NOT NULL,"
        " PRIMARY KEY (model, duration))",
    ),
}
"""Statements from version ``n - 1`` to ``n``; each only adds."""


def _create_statements() -> list[str]:
    """The statements that create the schema at :data:`SCHEMA_VERSION`, each idempotent."""
    return [
        "CREATE TABLE IF NOT EXISTS videogen_ledger_meta ("
        " name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS {E} ("
        " key TEXT PRIMARY KEY, kind TEXT NOT NULL DEFAULT 'task', state TEXT NOT NULL,"
        " task_id TEXT UNIQUE, project_id TEXT, model TEXT, duration INTEGER,"
        " request TEXT NOT NULL, reserved {real} NOT NULL DEFAULT 0,"
        " unpriced INTEGER NOT NULL DEFAULT 0, credits_cost {real}, task TEXT, error TEXT,"
        " owner TEXT, lease_until {real}, delivered INTEGER NOT NULL DEFAULT 0,"
        " created_at {real} NOT NULL, updated_at {real} NOT NULL, finished_at {real})",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_claim ON {E} (state, lease_until)",
        "CREATE INDEX IF NOT EXISTS videogen_ledger_entries_owner ON {E} (owner)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_budget ("
        " id INTEGER PRIMARY KEY CHECK (id = 1), spent {real} NOT NULL DEFAULT 0,"
        " reserved {real} NOT NULL DEFAULT 0, unpriced INTEGER NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_pacing ("
        " id INTEGER PRIMARY KEY CHECK (id = 1), pause_until {real} NOT NULL DEFAULT 0)",
        "CREATE TABLE IF NOT EXISTS videogen_ledger_rates ("
        " model TEXT PRIMARY KEY, per_second {real} NOT NULL)",
        *(statement for version in sorted(MIGRATIONS) for statement in MIGRATIONS[version]),
        "INSERT INTO videogen_ledger_budget (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO videogen_ledger_pacing (id) VALUES (1) ON CONFLICT (id) DO NOTHING",
        "INSERT INTO videogen_ledger_meta (name, value) VALUES"
        f" ('application', '{APPLICATION}') ON CONFLICT (name) DO NOTHING",
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


def read_meta() -> Plan[tuple[dict[str, str] | None, bool]]:
    """``(the meta rows or None, whether the database holds other tables)``, reading only."""
    if not (yield q("{table_exists}", "videogen_ledger_meta")):
        return None, bool((yield q("{any_table}")))
    rows = yield q("SELECT name, value FROM videogen_ledger_meta")
    return {row["name"]: row["value"] for row in rows}, False


def create_or_migrate(where: str) -> Plan[None]:
    """Create the schema, or bring an older one to :data:`SCHEMA_VERSION` (one transaction)."""
    yield q("{schema_lock}")
    meta, _ = yield from read_meta()
    if meta is None:
        statements = _create_statements()
    else:
        version = check_meta(where, meta)
        statements = [s for v in range(version + 1, SCHEMA_VERSION + 1) for s in MIGRATIONS[v]]
    for statement in statements:
        yield q(statement)
    yield q(
        "INSERT INTO videogen_ledger_meta (name, value) VALUES ('schema_version', $1)"
        " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        str(SCHEMA_VERSION),
    )
