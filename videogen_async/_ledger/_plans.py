"""The statements of creates and reads, written once for both engines (see ``_schema``).

Every change is conditional on the state it changes, so a plan rerun after a lost commit answer
changes nothing twice. Spent and reserved are sums of entries; the budget row is locked only by
decisions under a cap, before any entry (writers take entries in key order after it), so no two
writers wait on each other. An uncapped create is two statements: its write ahead, its answer.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant fragments; every value
# is a bound parameter.

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._contract._exceptions import InvalidRequestError
from .._contract._validation import check_id
from ._entry import check_metadata, load_metadata, merge_patch
from ._schema import CHANGES_KEPT, Plan, Row, first, many, q

BatchTask = tuple[str, str | None, str | None]
"""``(key, id, problem)`` of a task of a project's batch (see :func:`batch_tasks`)."""


@attrs.frozen
class NewEntry:
    """The columns of an entry written before its create is sent (each a column)."""

    key: str
    kind: str
    request: str
    model: str | None
    duration: int | None
    project_id: str | None = None
    metadata: str | None = None


@attrs.frozen
class Hold:
    """Who writes an entry ahead of its create, for how long, and what it may reserve.

    ``estimate`` ``None``: the highest price answered for the entry's model and duration, or
    unknown if none was.
    """

    owner: str
    lease: float
    cap: float | None
    estimate: float | None


@attrs.frozen
class CreateStart:
    """How a write ahead was decided, and the budget as it stood.

    ``new``: this caller sends; ``existing``: the key is taken (``row``); ``budget``: the cap
    refuses it; ``wait``: a create of unknown price is in flight.
    """

    outcome: str
    row: Row | None = None
    estimate: float = 0.0
    spent: float = 0.0
    reserved: float = 0.0


class Refused(Exception):
    """The budget refused a reservation: raised to roll the transaction back."""

    def __init__(self, start: CreateStart) -> None:
        super().__init__(start.outcome)
        self.start = start


@attrs.frozen
class Settled:
    """A create's answer: its id once checked, its price, or why its id cannot be polled.

    ``task_ids``: a video batch's tasks, recorded with it.
    """

    task_id: str | None
    project_id: str | None
    cost: float
    problem: str | None = None
    task_ids: Sequence[Any] = ()


_COLUMNS = [field.name for field in attrs.fields(NewEntry)]
_N = len(_COLUMNS)
_INSERT = (
    f"INSERT INTO {{E}} ({', '.join(_COLUMNS)}, state, owner, lease_until, created_at,"
    f" updated_at) VALUES ({', '.join(f'${n}' for n in range(1, _N + 1))}, 'creating',"
    f" ${_N + 1}, {{now}} + ${_N + 2}, {{now}}, {{now}}) ON CONFLICT (key) DO NOTHING RETURNING *"
)
_RETAKE = (
    "UPDATE {E} SET state = 'creating', version = version + 1, request = $2, model = $3,"
    " duration = $4, owner = $5, lease_until = {now} + $6, metadata = $7, error = NULL,"
    " updated_at = {now}"
    " WHERE key = $1 AND state = 'refused' RETURNING *"
)
_RESEND = (
    "UPDATE {E} SET state = 'creating', version = version + 1, owner = $2,"
    " lease_until = {now} + $3, updated_at = {now}"
    " WHERE key = $1 AND state = 'unknown' AND kind = 'task' RETURNING *"
)
_LOCK_BUDGET = "SELECT id FROM videogen_ledger_budget WHERE id = 1{lock}"
_BUDGET = (  # read once the budget row is locked: a statement of its own sees the last commits
    "SELECT coalesce(sum(credits_cost), 0.0) AS spent, coalesce(sum(reserved), 0.0) AS reserved,"
    " coalesce(sum(unpriced), 0) AS unpriced FROM {E}"
)
_ROW = "SELECT * FROM {E} WHERE key = $1{lock}"
_PRICE = "SELECT price FROM videogen_ledger_prices WHERE model = $1 AND duration = $2"
_RESERVED = "UPDATE {E} SET reserved = $2, unpriced = $3 WHERE key = $1 RETURNING *"
_LEARN_PRICE = (
    "INSERT INTO videogen_ledger_prices (model, duration, price) VALUES ($1, $2, $3)"
    " ON CONFLICT (model, duration) DO UPDATE"
    " SET price = {greatest}(videogen_ledger_prices.price, excluded.price)"
)
_ANSWERED = (  # a pending entry is the watchers'; a video batch is created, kind $7 left alone
    "UPDATE {E} SET state = CASE WHEN CAST($6 AS TEXT) IS NOT NULL THEN 'unknown'"
    " WHEN kind = 'videos' THEN 'created' ELSE 'pending' END, version = version + 1,"
    " task_id = $3, project_id = COALESCE($4, project_id), credits_cost = $5, error = $6,"
    " owner = CASE WHEN CAST($6 AS TEXT) IS NULL THEN NULL ELSE owner END, reserved = 0,"
    " unpriced = 0, lease_until = NULL, updated_at = {now} WHERE key = $1 AND owner = $2"
    " AND state IN ('creating', 'unknown') AND kind != $7 RETURNING *"
)
_FAILED = (  # a refused create charged nothing; an unknown one may have: its reserve is spent
    "UPDATE {E} SET state = $2, version = version + 1, error = $3,"
    " credits_cost = CASE WHEN $2 = 'unknown' THEN reserved END, reserved = 0, unpriced = 0,"
    " lease_until = NULL, updated_at = {now}"
    " WHERE key = $1 AND owner = $4 AND state = 'creating' RETURNING *"
)


def decide_budget(
    *, cap: float | None, spent: float, reserved: float, unpriced: int, estimate: float | None
) -> tuple[str, float]:
    """Decide a reservation while the budget row is locked: ``(outcome, credits)``.

    While the price is unknown, one create at a time may be in flight, sent only while
    budget remains: it reserves the whole rest, and only it may pass the cap (by its price).
    Outcomes: ``ok``, ``budget`` (refused), ``wait`` (a create of unknown price decides).
    """
    if cap is None:
        return "ok", 0.0
    if estimate is None:
        rest = cap - spent - reserved
        return ("wait", 0.0) if unpriced else (("ok", rest) if rest > 0 else ("budget", 0.0))
    if spent + reserved + estimate <= cap + 1e-9:
        return "ok", estimate
    return ("wait" if unpriced else "budget"), estimate


def begin_create(new: NewEntry, hold: Hold) -> Plan[CreateStart]:
    """Write a ``creating`` entry (or take back a ``refused`` one) and reserve its price."""
    budget = (yield from _budget()) if hold.cap is not None else None
    values = [getattr(new, name) for name in _COLUMNS]
    taken = yield from first(_INSERT, *values, hold.owner, hold.lease, alone=budget is None)
    if taken is None:
        args = (new.key, new.request, new.model, new.duration, hold.owner, hold.lease)
        taken = yield from first(_RETAKE, *args, new.metadata)
    return (yield from _started(new.key, taken, budget, hold))


def restart_unknown(key: str, hold: Hold) -> Plan[CreateStart]:
    """Move an ``unknown`` task entry back to ``creating`` for an explicit resend."""
    budget = (yield from _budget()) if hold.cap is not None else None
    taken = yield from first(_RESEND, key, hold.owner, hold.lease)
    return (yield from _started(key, taken, budget, hold))


def _budget() -> Plan[Row | None]:
    yield q(_LOCK_BUDGET)
    return (yield from first(_BUDGET))


def _started(key: str, taken: Row | None, budget: Row | None, hold: Hold) -> Plan[CreateStart]:
    if taken is None:
        row = yield from first(_ROW, key)
        # Ours already: an earlier run of this plan committed, and its answer was lost.
        mine = row is not None and row["state"] == "creating" and row["owner"] == hold.owner
        return CreateStart("new" if mine else "existing", row=row)
    if budget is None:
        return CreateStart("new", row=taken)
    estimate = hold.estimate
    if estimate is None and taken["model"] is not None and taken["duration"] is not None:
        estimate = yield from learned_price(taken["model"], taken["duration"])
    spent = budget["spent"]
    reserved = budget["reserved"]
    outcome, amount = decide_budget(
        cap=hold.cap, spent=spent, reserved=reserved, unpriced=budget["unpriced"], estimate=estimate
    )
    if outcome != "ok":
        raise Refused(CreateStart(outcome, estimate=amount, spent=spent, reserved=reserved))
    unpriced = 1 if estimate is None else 0
    return CreateStart("new", row=(yield from first(_RESERVED, key, amount, unpriced)))


def learned_price(model: str, duration: int) -> Plan[float | None]:
    """The highest price a create of ``model`` and ``duration`` was answered with, if any."""
    row = yield from first(_PRICE, model, duration)
    return None if row is None else float(row["price"])


def settle_created(
    key: str,
    owner: str,
    answer: Settled,
    prices: dict[Any, float],
    price: tuple[str | None, int | None] | None = None,
) -> Plan[Row | None]:
    """Record a create's answer: ``pending`` with its id (``unknown`` if it cannot be polled).

    The entry must still be this creator's (``creating``, or ``unknown`` if it was thought
    dead meanwhile); the price is learned for its model and duration unless ``prices`` (this
    process's highest, kept here) holds it. A video batch is ``created``, its tasks recorded.

    The answer commits alone (one round trip) only when ``price``, the entry's model and
    duration, is one this process knows at this cost already. Otherwise the answer and the
    price it teaches commit together: in between, a capped create of that price would find the
    create of unknown price answered (it no longer waits) and the price still unknown (so it
    would be sent as another create of unknown price, and the two could pass the cap).

    Returns:
        The entry, or ``None`` when the key holds another create's answer meanwhile.
    """
    args = (key, owner, answer.task_id, answer.project_id, answer.cost, answer.problem)
    learned = price is not None and answer.cost <= max(0.0, prices.get(price, -1.0))
    row = yield from first(_ANSWERED, *args, "videos", alone=learned)
    if row is not None:
        price, cost = (row["model"], row["duration"]), row["credits_cost"]
        if row["kind"] == "task" and all(price) and cost > max(0.0, prices.get(price, -1.0)):
            yield q(_LEARN_PRICE, *price, cost)
            prices[price] = cost
        return row
    old = yield from first(_ROW, key)
    if old is None or old["state"] not in ("creating", "unknown") or old["owner"] != owner:
        answered = answer.task_id or answer.project_id
        same = old is not None and answered in (old["task_id"], old["project_id"])
        return old if same and answered else None  # recorded already, or another create's
    row = yield from first(_ANSWERED, *args, "")  # a video batch, and its tasks
    tasks = batch_tasks(json.loads(old["request"]).get("project", key), answer.task_ids)
    yield from add_batch_tasks(old["project_id"], tasks, key, old["metadata"])
    return row


def settle_failed(key: str, owner: str, state: str, error: str) -> Plan[Row | None]:
    """Record a create that failed: ``refused`` (nothing charged) or ``unknown``."""
    row = yield from first(_FAILED, key, state, error, owner, alone=True)
    return row if row is not None else (yield from get(key))


CREATING_OWNERS = (  # and whether any of their leases ran out
    "SELECT owner, min(lease_until) < {now} AS expired FROM {E}"
    " WHERE state = 'creating' GROUP BY owner"
)
"""The creators of ``creating`` entries (a statement for ``_schema.rows``)."""


def expire_creating(dead: list[str]) -> Plan[int]:
    """Mark ``unknown`` the ``creating`` entries of dead creators, or past their lease."""
    rows = yield q(
        "SELECT key, owner FROM {E} WHERE state = 'creating' AND (lease_until < {now}"
        " OR owner IN (items($1))) ORDER BY key{skip_locked}",
        json.dumps(dead),
    )
    why = "its creating process stopped before an answer"
    for row in rows:  # one by one: executemany refuses a statement that returns rows
        yield q(_FAILED, row["key"], "unknown", why, row["owner"])
    return len(rows)


def unpollable(field: str, value: Any) -> str | None:
    """Why an id the service answered cannot be polled (its value escaped), or ``None``."""
    try:
        check_id(field, value)
    except InvalidRequestError as exc:
        shown = json.dumps(value, default=str)
        return f"the service answered {field} {shown}, which cannot be polled: {exc.rule}"
    return None


def batch_tasks(key: str, task_ids: Sequence[Any]) -> list[BatchTask]:
    """``(key, id, problem)`` of a project's task ids: keys ``KEY/ID``, or ``KEY/#N "ID"``."""
    tasks: list[BatchTask] = []
    for position, task_id in enumerate(task_ids):
        problem = unpollable("task_id", task_id)
        if problem is None:
            tasks.append((f"{key}/{task_id}", task_id, None))
        else:
            tasks.append((f"{key}/#{position} {json.dumps(task_id, default=str)}", None, problem))
    return tasks


def _batch_request(project_id: str, batch: str | None) -> str:
    return json.dumps({"batch": batch, "project_id": project_id}, sort_keys=True)


def add_batch_tasks(
    project_id: str,
    tasks: Sequence[BatchTask],
    batch: str | None,
    metadata: str | None,
) -> Plan[list[Row]]:
    """Record a project batch's tasks, ``(key, id, problem)`` each (recorded keys are kept).

    An id that cannot be polled is recorded ``unknown``, with its problem. ``batch``: the key
    of the batch's own entry (``None``: the automatic first batch).
    """
    request = _batch_request(project_id, batch)
    rows = [
        (
            key,
            "pending" if problem is None else "unknown",
            task_id,
            project_id,
            request,
            problem,
            metadata,
        )
        for key, task_id, problem in tasks
    ]
    yield many(
        "INSERT INTO {E} (key, kind, state, task_id, project_id, request, error, metadata,"
        " created_at, updated_at) VALUES ($1, 'project_task', $2, $3, $4, $5, $6, $7, {now},"
        " {now}) ON CONFLICT DO NOTHING",
        rows,
    )
    keys = json.dumps([key for key, _, _ in tasks])
    found: list[Row] = yield q("SELECT * FROM {E} WHERE key IN (items($1)) ORDER BY key", keys)
    return found


def batch_entries(project_id: str, batch: str) -> Plan[list[Row]]:
    """The task entries recorded with the video batch whose entry is ``batch``."""
    rows: list[Row] = yield q(
        "SELECT * FROM {E} WHERE project_id = $1 AND kind = 'project_task' AND request = $2"
        " ORDER BY key",
        project_id,
        _batch_request(project_id, batch),
    )
    return rows


def get(key: str) -> Plan[Row | None]:
    """The row of a key."""
    return (yield from first("SELECT * FROM {E} WHERE key = $1", key))


def page(after: str, limit: int, metadata: str | None = None) -> Plan[list[Row]]:
    """Rows in key order after ``after`` (``""``: from the first), as ``Ledger.entries`` reads."""
    where, args = ("", ()) if metadata is None else (" AND meta_has($3)", (metadata,))
    sql = f"SELECT * FROM {{E}} WHERE key > $1{where} ORDER BY key LIMIT $2"
    rows: list[Row] = yield q(sql, after, limit, *args)
    return rows


def _group(value: str | None) -> Any:
    loaded = None if value is None else json.loads(value)
    if isinstance(loaded, (dict, list)):  # one text on both engines
        return json.dumps(loaded, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return loaded


def summary(group_by: str | None = None) -> Plan[dict[str, Any]]:
    """What ``Ledger.summary`` answers."""
    counts = yield q("SELECT state, count(*) AS n FROM {E} GROUP BY state")
    budget = yield from first(_BUDGET)
    assert budget is not None  # noqa: S101 - an aggregate's one row
    states = {row["state"]: int(row["n"]) for row in counts}
    found: dict[str, Any] = {"states": states, **budget}
    del found["unpriced"]
    outbox: dict[str, dict[str, int]] = {}
    found["destinations"] = outbox
    for row in (
        yield q(  # every destination, its deliveries counted per state
            "SELECT d.name, o.state, count(o.key) AS n FROM videogen_ledger_destinations AS d"
            " LEFT JOIN videogen_ledger_outbox AS o ON o.destination = d.name"
            " GROUP BY d.name, o.state ORDER BY d.name"
        )
    ):
        counts = outbox.setdefault(row["name"], dict.fromkeys(("pending", "delivered", "dead"), 0))
        if row["state"] is not None:
            counts[row["state"]] = int(row["n"])
    if group_by is not None:
        groups: dict[Any, dict[str, Any]] = {}
        for row in (
            yield q(
                "SELECT meta_value($1) AS value, state, count(*) AS n, sum(credits_cost) AS spent"
                " FROM {E} GROUP BY 1, 2",
                group_by,
            )
        ):
            group = groups.setdefault(_group(row["value"]), {"states": {}, "spent": 0.0})
            group["states"][row["state"]] = group["states"].get(row["state"], 0) + int(row["n"])
            group["spent"] += float(row["spent"] or 0.0)
        found["groups"] = groups
    return found


def update_metadata(key: str, patch: Mapping[str, Any]) -> Plan[Row | None]:
    """Merge ``patch`` into an entry's metadata (RFC 7386: ``None`` removes a key)."""
    row = yield from first(_ROW, key)
    held = load_metadata(row and row["metadata"])
    merged = check_metadata(merge_patch(held, patch))
    if row is None or merged == check_metadata(held):  # as text: True is not 1, 1.0 not 1
        return row
    sql = "UPDATE {E} SET metadata = $2, version = version + 1, updated_at = {now} WHERE key = $1"
    return (yield from first(sql + " RETURNING *", key, merged))


def prune_changes(plan: Plan[Any]) -> Plan[Any]:
    """``plan``, then each position up to the last older than :data:`CHANGES_KEPT` forgotten."""
    result = yield from plan
    yield q(
        "INSERT INTO videogen_ledger_meta (name, value) SELECT 'changes_pruned',"
        " CAST(max(seq) AS TEXT) FROM videogen_ledger_changes WHERE at < {now} - $1"
        " HAVING count(*) > 0 ON CONFLICT (name) DO UPDATE SET value = excluded.value"
        " WHERE CAST(videogen_ledger_meta.value AS BIGINT) < CAST(excluded.value AS BIGINT)",
        CHANGES_KEPT,
    )
    yield q(
        "DELETE FROM videogen_ledger_changes WHERE seq <= (SELECT CAST(value AS BIGINT)"
        " FROM videogen_ledger_meta WHERE name = 'changes_pruned')"
    )
    return result
