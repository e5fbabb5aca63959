"""The statements of creates and reads, each written once for both engines (see ``_schema``).

Every change is conditional on the state it changes, so that a plan run again after a commit
whose answer was lost changes nothing twice. Transactions that take the budget row lock it
before any entry, as every multi-row writer takes entries in key order after it: no two
writers wait on each other.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant fragments; every value
# is a bound parameter.

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from ._schema import Plan, many, one, q

__all__ = [
    "CreateStart",
    "Hold",
    "NewEntry",
    "Refused",
    "Settled",
    "add_batch_tasks",
    "begin_create",
    "creating_owners",
    "decide_budget",
    "expire_creating",
    "get",
    "has_open",
    "page",
    "restart_unknown",
    "settle_created",
    "settle_failed",
    "summary",
]

Row = dict[str, Any]


@attrs.frozen
class NewEntry:
    """The columns of an entry written before its create is sent (each a column of the table)."""

    key: str
    kind: str
    request: str
    model: str | None
    duration: int | None
    project_id: str | None = None


@attrs.frozen
class Hold:
    """Who writes an entry ahead of its create, for how long, and what it may reserve.

    Attributes:
        owner: The creator (the entry's ``owner`` until it is answered).
        lease: Seconds the creator holds the entry if its death cannot be known sooner.
        cap: ``max_credits`` (``None``: no cap).
        estimate: The price to reserve; ``None``: the highest price answered for the model
            and duration, or unknown if none was.
    """

    owner: str
    lease: float
    cap: float | None
    estimate: float | None


@attrs.frozen
class CreateStart:
    """The outcome of writing an entry before its create is sent.

    Attributes:
        outcome: ``new`` (this caller sends the create), ``existing`` (the key is taken:
            ``row`` holds it; nothing is sent), ``budget`` (the cap refuses it), ``wait``
            (a create of unknown price is in flight; try again once it is answered).
        row: The entry's row.
        estimate: The credits it would reserve.
        spent: Credits spent through the ledger when decided.
        reserved: Credits reserved when decided.
    """

    outcome: str
    row: Row | None = None
    estimate: float = 0.0
    spent: float = 0.0
    reserved: float = 0.0


class Refused(Exception):
    """The budget refused a reservation: the transaction rolls back."""

    def __init__(self, start: CreateStart) -> None:
        super().__init__(start.outcome)
        self.start = start


@attrs.frozen
class Settled:
    """What a create was answered: the id to record, its price, and why it cannot be polled.

    Attributes:
        task_id: The task id (a valid id, or ``None``).
        project_id: The project id (a valid id, or ``None``).
        cost: The credits charged.
        problem: Why the answered id cannot be polled (the entry is then ``unknown``).
    """

    task_id: str | None
    project_id: str | None
    cost: float
    problem: str | None = None


def decide_budget(
    *, cap: float | None, spent: float, reserved: float, unpriced: int, estimate: float | None
) -> tuple[str, float]:
    """Decide a reservation while the budget row is locked.

    While the price is unknown, one create at a time may be in flight, sent only while budget
    remains; it reserves the whole rest, and only it may pass the cap (by its own price).

    Returns:
        ``(outcome, credits to reserve)``; outcome ``ok``, ``budget`` or ``wait``.
    """
    if cap is None:
        return "ok", 0.0
    if estimate is None:
        if unpriced:
            return "wait", 0.0
        rest = cap - spent - reserved
        return ("ok", rest) if rest > 0 else ("budget", 0.0)
    if spent + reserved + estimate <= cap + 1e-9:
        return "ok", estimate
    return ("wait" if unpriced else "budget"), estimate


_COLUMNS = [field.name for field in attrs.fields(NewEntry)]
_INSERT = (
    f"INSERT INTO {{E}} ({', '.join(_COLUMNS)}, state, owner, lease_until, created_at,"
    f" updated_at) VALUES ({', '.join(f'${n}' for n in range(1, len(_COLUMNS) + 1))},"
    f" 'creating', ${len(_COLUMNS) + 1}, {{now}} + ${len(_COLUMNS) + 2}, {{now}}, {{now}})"
    " ON CONFLICT (key) DO NOTHING RETURNING *"
)
_BUDGET = "SELECT spent, reserved, unpriced FROM videogen_ledger_budget WHERE id = 1{lock}"
_ROW = "SELECT * FROM {E} WHERE key = $1{lock}"
_SETTLE_BUDGET = (
    "UPDATE videogen_ledger_budget SET reserved = {greatest}(0, reserved - $1),"
    " unpriced = {greatest}(0, unpriced - $2), spent = spent + $3 WHERE id = 1"
)


def begin_create(new: NewEntry, hold: Hold) -> Plan[CreateStart]:
    """Write a ``creating`` entry (or take back a ``refused`` one) and reserve its price."""
    budget = one((yield q(_BUDGET))) if hold.cap is not None else None
    values = [getattr(new, name) for name in _COLUMNS]
    taken = one((yield q(_INSERT, *values, hold.owner, hold.lease, changes=True)))
    if taken is None:
        taken = one(
            (
                yield q(
                    "UPDATE {E} SET state = 'creating', request = $2, model = $3,"
                    " duration = $4, owner = $5, lease_until = {now} + $6, error = NULL,"
                    " updated_at = {now} WHERE key = $1 AND state = 'refused' RETURNING *",
                    new.key,
                    new.request,
                    new.model,
                    new.duration,
                    hold.owner,
                    hold.lease,
                    changes=True,
                )
            )
        )
    if taken is None:
        row = one((yield q(_ROW, new.key)))
        mine = row is not None and row["state"] == "creating" and row["owner"] == hold.owner
        # Ours already: this plan's earlier run committed, its answer was lost.
        return CreateStart("new" if mine else "existing", row=row)
    if budget is None:
        return CreateStart("new", row=taken)
    return CreateStart("new", row=(yield from _reserve(taken, budget, hold)))


def restart_unknown(key: str, hold: Hold) -> Plan[CreateStart]:
    """Move an ``unknown`` task entry back to ``creating`` for an explicit resend."""
    budget = one((yield q(_BUDGET))) if hold.cap is not None else None
    taken = one(
        (
            yield q(
                "UPDATE {E} SET state = 'creating', owner = $2, lease_until = {now} + $3,"
                " updated_at = {now} WHERE key = $1 AND state = 'unknown' AND kind = 'task'"
                " RETURNING *",
                key,
                hold.owner,
                hold.lease,
                changes=True,
            )
        )
    )
    if taken is None:
        row = one((yield q(_ROW, key)))
        mine = row is not None and row["state"] == "creating" and row["owner"] == hold.owner
        return CreateStart("new" if mine else "existing", row=row)
    if budget is None:
        return CreateStart("new", row=taken)
    return CreateStart("new", row=(yield from _reserve(taken, budget, hold)))


def _reserve(entry: Row, budget: Row, hold: Hold) -> Plan[Row]:
    """Reserve an entry's price under the cap, the budget row locked; refuse by rolling back."""
    estimate = hold.estimate
    if estimate is None and entry["model"] is not None and entry["duration"] is not None:
        price = one(
            (
                yield q(
                    "SELECT price FROM videogen_ledger_prices WHERE model = $1 AND duration = $2",
                    entry["model"],
                    entry["duration"],
                )
            )
        )
        estimate = None if price is None else float(price["price"])
    outcome, amount = decide_budget(
        cap=hold.cap,
        spent=budget["spent"],
        reserved=budget["reserved"],
        unpriced=budget["unpriced"],
        estimate=estimate,
    )
    if outcome != "ok":
        raise Refused(
            CreateStart(
                outcome, estimate=amount, spent=budget["spent"], reserved=budget["reserved"]
            )
        )
    unpriced = 1 if estimate is None else 0
    yield q(
        "UPDATE videogen_ledger_budget SET reserved = reserved + $1, unpriced = unpriced + $2"
        " WHERE id = 1",
        amount,
        unpriced,
    )
    rows = yield q(
        "UPDATE {E} SET reserved = $2, unpriced = $3 WHERE key = $1 RETURNING *",
        entry["key"],
        amount,
        unpriced,
    )
    return dict(rows[0])


def settle_created(key: str, owner: str, answer: Settled) -> Plan[Row | None]:
    """Record a create's answer: ``pending`` with its id (``unknown`` if it cannot be polled).

    The entry must still be this creator's (``creating``, or ``unknown`` after it was thought
    dead). The price is learned for its model and duration.

    Returns:
        The entry, or ``None`` when the key now holds another create's answer.
    """
    yield q(_BUDGET)
    old = one((yield q(_ROW, key)))
    if old is None or old["state"] not in ("creating", "unknown") or old["owner"] != owner:
        return old if old is not None and _same_answer(old, answer) else None
    spent = answer.cost - (old["credits_cost"] or 0.0)
    yield q(_SETTLE_BUDGET, old["reserved"], old["unpriced"], spent)
    if old["kind"] == "task" and old["duration"] and old["model"] and answer.cost > 0:
        yield q(
            "INSERT INTO videogen_ledger_prices (model, duration, price) VALUES ($1, $2, $3)"
            " ON CONFLICT (model, duration) DO UPDATE SET price ="
            " {greatest}(videogen_ledger_prices.price, excluded.price)",
            old["model"],
            old["duration"],
            answer.cost,
        )
    rows = yield q(
        "UPDATE {E} SET state = $2, task_id = $3, project_id = COALESCE($4, project_id),"
        " credits_cost = $5, error = $6, owner = $7, reserved = 0, unpriced = 0,"
        " lease_until = NULL, updated_at = {now} WHERE key = $1 RETURNING *",
        key,
        "pending" if answer.problem is None else "unknown",
        answer.task_id,
        answer.project_id,
        answer.cost,
        answer.problem,
        None if answer.problem is None else owner,
        changes=True,
    )
    return dict(rows[0])


def _same_answer(row: Row, answer: Settled) -> bool:
    if answer.task_id is not None:
        return bool(row["task_id"] == answer.task_id)
    return answer.project_id is not None and row["project_id"] == answer.project_id


def settle_failed(key: str, owner: str, state: str, error: str) -> Plan[Row | None]:
    """Record a create that failed: ``refused`` (nothing charged) or ``unknown``."""
    yield q(_BUDGET)
    old = one((yield q(_ROW, key)))
    if old is None or old["state"] != "creating" or old["owner"] != owner:
        return old
    return (yield from _fail(old, state, error))


def _fail(old: Row, state: str, error: str) -> Plan[Row]:
    # A refused create charged nothing: its reservation is returned. An unknown one may have
    # been charged: its reservation counts as spent.
    spent = old["reserved"] if state == "unknown" else 0.0
    yield q(_SETTLE_BUDGET, old["reserved"], old["unpriced"], spent)
    rows = yield q(
        "UPDATE {E} SET state = $2, error = $3, credits_cost = $4, reserved = 0, unpriced = 0,"
        " lease_until = NULL, updated_at = {now} WHERE key = $1 RETURNING *",
        old["key"],
        state,
        error,
        spent if state == "unknown" else None,
        changes=True,
    )
    return dict(rows[0])


def creating_owners() -> Plan[list[Row]]:
    """The creators of ``creating`` entries, and whether any of their leases ran out."""
    rows: list[Row] = yield q(
        "SELECT owner, min(lease_until) < {now} AS expired FROM {E}"
        " WHERE state = 'creating' GROUP BY owner"
    )
    return rows


def expire_creating(dead: list[str]) -> Plan[int]:
    """Mark ``unknown`` the ``creating`` entries of dead creators or past their lease."""
    yield q(_BUDGET)
    rows = yield q(
        "SELECT * FROM {E} WHERE state = 'creating' AND (lease_until < {now}"
        " OR owner IN (items($1))) ORDER BY key{skip_locked}",
        json.dumps(dead),
    )
    for old in rows:
        yield from _fail(old, "unknown", "its creating process stopped before an answer")
    return len(rows)


def add_batch_tasks(
    project_id: str, tasks: Sequence[tuple[str, str | None, str | None]], request: str
) -> Plan[list[Row]]:
    """Record the tasks of a project's batch: ``(key, task id, problem)`` each.

    A valid id is ``pending``; an id that cannot be polled is kept ``unknown`` with its
    problem. A key already recorded is kept as it is.
    """
    yield many(
        "INSERT INTO {E} (key, kind, state, task_id, project_id, request, error, created_at,"
        " updated_at) VALUES ($1, 'project_task', $2, $3, $4, $5, $6, {now}, {now})"
        " ON CONFLICT DO NOTHING",
        [
            (key, "unknown" if problem else "pending", task_id, project_id, request, problem)
            for key, task_id, problem in tasks
        ],
    )
    rows: list[Row] = yield q(
        "SELECT * FROM {E} WHERE key IN (items($1)) ORDER BY key",
        json.dumps([key for key, _, _ in tasks]),
    )
    return rows


def get(key: str) -> Plan[Row | None]:
    """The row of a key."""
    return one((yield q("SELECT * FROM {E} WHERE key = $1", key)))


def page(after: str, limit: int) -> Plan[list[Row]]:
    """Rows in key order after ``after`` (``""``: from the first)."""
    rows: list[Row] = yield q(
        "SELECT * FROM {E} WHERE key > $1 ORDER BY key LIMIT $2", after, limit
    )
    return rows


def summary() -> Plan[dict[str, Any]]:
    """Counts of entries per state, credits spent and reserved."""
    counts = yield q("SELECT state, count(*) AS n FROM {E} GROUP BY state")
    budget = one((yield q("SELECT spent, reserved FROM videogen_ledger_budget WHERE id = 1")))
    assert budget is not None  # noqa: S101 - created with the schema
    states = {row["state"]: int(row["n"]) for row in counts}
    return {"states": states, "spent": budget["spent"], "reserved": budget["reserved"]}


def has_open(owner: str) -> Plan[bool]:
    """Whether any entry is ``creating``, ``pending``, or terminal and undelivered.

    Terminal entries held by ``owner`` (on their way to its consumer) do not count.
    """
    rows = yield q(
        "SELECT 1 AS one FROM {E} WHERE state IN ('creating', 'pending') OR"
        " (state IN ('succeeded', 'failed', 'error') AND delivered = 0"
        " AND (owner IS NULL OR owner != $1)) LIMIT 1",
        owner,
    )
    return bool(rows)
