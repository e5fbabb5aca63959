"""The statements watchers run: claims, leases, fair shares, finishes and the shared pause.

A claim is one ``UPDATE`` (PostgreSQL: ``FOR UPDATE SKIP LOCKED``: watchers never wait on or
take each other's rows). Multi-entry transactions lock in key order, after the budget row when
taken. Leases are written once for any table with ``key``, ``owner`` and ``lease_until``.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant fragments; every value
# is a bound parameter.

from __future__ import annotations

import json
from collections.abc import Sequence

from ._schema import Plan, Row, first, many, q

# A project's own entry stays pending (its tasks are entries of their own, polled): no watcher
# can settle it, so none claims it, holds it or waits for it.
_OPEN = (
    "((state = 'pending' AND kind != 'project')"
    " OR (state IN ('succeeded', 'failed', 'error') AND delivered = 0))"
)
_CLAIMABLE = f"{_OPEN} AND (lease_until IS NULL OR lease_until < {{now}})"
HAS_OPEN = (
    "SELECT 1 AS one FROM {E} WHERE state = 'creating'"
    f" OR ({_OPEN} AND (state = 'pending' OR owner IS NULL OR owner != $1)) LIMIT 1"
)
"""A row when an entry is ``creating``, open (``_OPEN``), or terminal and undelivered.

Terminal entries held by ``$1`` (on their way to its consumer) do not count.
"""
_COUNTS = (
    "SELECT count(*) AS open, count(*) FILTER (WHERE owner = $1) AS mine,"
    " (SELECT count(*) FROM videogen_ledger_watchers WHERE seen_until >= {now}) AS live"
    f" FROM {{E}} WHERE {_OPEN}"
)
_OUTBOX = (  # a destination's delivery of each entry that became terminal
    "INSERT INTO videogen_ledger_outbox (destination, key, state, attempts, next_at)"
    " SELECT d.name, e.key, 'pending', 0, {now} FROM videogen_ledger_destinations AS d, {E} AS e"
    " WHERE e.key IN (items($1)) ON CONFLICT (destination, key) DO UPDATE SET"
    " state = 'pending', attempts = 0, error = NULL, next_at = excluded.next_at"
)


def claim_statement(table: str, claimable: str, order: str, returning: str, scope: str = "") -> str:
    """The claim of rows of ``table`` (``$1`` owner, ``$2`` lease, ``$3`` at most).

    ``claimable``: the claim rule; ``scope``: a condition the claimed rows meet, with
    parameters from ``$4``.
    """
    where = f"{scope} AND " if scope else ""
    return (
        f"UPDATE {table} SET owner = $1, lease_until = {{now}} + $2 WHERE {where}key IN"
        f" (SELECT key FROM {table} WHERE {where}{claimable} ORDER BY {order}"
        " LIMIT $3{skip_locked}) RETURNING " + returning
    )


def renew_leases(table: str, owner: str, lease: float) -> Plan[None]:
    """Extend every lease ``owner`` holds on rows of ``table``."""
    yield q(
        f"UPDATE {table} SET lease_until = {{now}} + $1 WHERE owner = $2"
        f" AND key IN (SELECT key FROM {table} WHERE owner = $2 ORDER BY key{{lock}})",
        lease,
        owner,
    )


def release_leases(table: str, owner: str) -> Plan[None]:
    """Release every row of ``table`` ``owner`` holds."""
    yield q(
        f"UPDATE {table} SET owner = NULL, lease_until = NULL WHERE owner = $1"
        f" AND key IN (SELECT key FROM {table} WHERE owner = $1 ORDER BY key{{lock}})",
        owner,
    )


_CLAIM = claim_statement("{E}", _CLAIMABLE, "created_at", "key, task_id, state, model, duration")
_LOCK_KEYS = "SELECT key FROM {E} WHERE key IN (items($1)) ORDER BY key{lock}"
_FINISH = (
    "UPDATE {E} SET state = $2, version = version + 1, credits_cost = $3, task = $4,"
    " delivered = 0, finished_at = {now}, updated_at = {now}, error = NULL WHERE key = $1"
)
_GIVE_UP = (
    "UPDATE {E} SET state = 'unknown', version = version + 1, error = $3, owner = NULL,"
    " lease_until = NULL, updated_at = {now} WHERE key = $1 AND owner = $2 AND state = 'pending'"
)


CLAIMABLE = f"SELECT 1 AS one FROM {{E}} WHERE {_CLAIMABLE} LIMIT 1"
"""A row when an entry can be claimed now (read without a write transaction)."""


def share(owner: str) -> Plan[tuple[int, int]]:
    """``(fair share, entries held)`` of a watcher."""
    counts = yield from first(_COUNTS, owner)
    assert counts is not None  # noqa: S101 - an aggregate answers one row
    fair = -(-counts["open"] // max(counts["live"], 1))  # ceil(open / live watchers)
    return fair, counts["mine"]


def claim(owner: str, lease: float, limit: int) -> Plan[list[Row]]:
    """Claim pending (or terminal, undelivered) entries whose lease is out.

    At most ``limit``, and at most what brings the watcher to its fair share, decided in this
    transaction.
    """
    share_now, held = yield from share(owner)
    take = max(0, min(limit, share_now - held))
    rows: list[Row] = (yield q(_CLAIM, owner, lease, take)) if take else []
    return rows


def register(owner: str, lease: float) -> Plan[None]:
    """Record ``owner`` as a live watcher for ``lease`` seconds (renewed by :func:`renew`)."""
    yield q("DELETE FROM videogen_ledger_watchers WHERE seen_until < {now}")
    yield q(
        "INSERT INTO videogen_ledger_watchers (owner, seen_until) VALUES ($1, {now} + $2)"
        " ON CONFLICT (owner) DO UPDATE SET seen_until = excluded.seen_until",
        owner,
        lease,
    )


def renew(owner: str, lease: float) -> Plan[None]:
    """Extend every lease held by ``owner``, and its presence as a live watcher."""
    yield q(
        "UPDATE videogen_ledger_watchers SET seen_until = {now} + $1 WHERE owner = $2", lease, owner
    )
    yield from renew_leases("{E}", owner, lease)


def release_keys(owner: str, keys: Sequence[str]) -> Plan[None]:
    """Release pending entries held by ``owner`` (its share shrank: others joined)."""
    listed = json.dumps(sorted(keys))
    yield q(_LOCK_KEYS, listed)
    yield q(
        "UPDATE {E} SET owner = NULL, lease_until = NULL"
        " WHERE key IN (items($1)) AND owner = $2 AND state = 'pending'",
        listed,
        owner,
    )


def release(owner: str) -> Plan[None]:
    """Release every entry held by ``owner``; it is no longer a live watcher."""
    yield from release_leases("{E}", owner)
    yield q("DELETE FROM videogen_ledger_watchers WHERE owner = $1", owner)


def finish_many(
    owner: str, items: Sequence[tuple[str, str, float, str]], acks: Sequence[str]
) -> Plan[list[Row]]:
    """Record terminal states and mark the consumer's ``acks`` delivered, in one transaction.

    ``items``: ``(key, state, cost, task JSON)`` of entries polled; those ``owner`` still
    holds are recorded and their rows returned, and a delivery of each to every destination
    of the outbox is due.
    """
    found = {item[0]: item for item in items}
    if found:
        yield q("SELECT id FROM videogen_ledger_budget WHERE id = 1{lock}")
    yield q(_LOCK_KEYS, json.dumps(sorted(set(found) | set(acks))))
    held = []
    if found:
        held = yield q(
            "SELECT key FROM {E} WHERE key IN (items($1)) AND owner = $2 AND state = 'pending'",
            json.dumps(sorted(found)),
            owner,
        )
    keys = json.dumps([row["key"] for row in held])
    if held:
        yield many(_FINISH, [found[row["key"]] for row in held])
        yield q(_OUTBOX, keys)
    if acks:
        yield many(
            "UPDATE {E} SET delivered = 1, owner = NULL, lease_until = NULL"
            " WHERE key = $1 AND owner = $2",
            [(key, owner) for key in sorted(set(acks))],
        )
    if not held:
        return []
    rows: list[Row] = yield q("SELECT * FROM {E} WHERE key IN (items($1))", keys)
    return rows


def give_up(owner: str, problems: Sequence[tuple[str, str]]) -> Plan[None]:
    """Mark ``unknown`` the held entries whose ids cannot be polled: ``(key, why)`` each."""
    yield many(_GIVE_UP, [(key, owner, error) for key, error in problems])


# An id the service answers it does not know, on a poll ``$1`` seconds or more after the entry
# last changed (its id recorded, resent, or an earlier poll's failure written): marked
# ``unknown`` (its id and cost kept), as an id that cannot be polled is. Sooner, it may be the
# service's lag behind its own create: released to be polled again, like any failed poll.
_GONE = "($5 AND state = 'pending' AND updated_at <= {now} - $1)"
_POLL_FAILED = (
    f"UPDATE {{E}} SET owner = NULL, error = $2, updated_at = {{now}},"
    f" state = CASE WHEN {_GONE} THEN 'unknown' ELSE state END,"
    f" version = version + CASE WHEN {_GONE} THEN 1 ELSE 0 END,"
    f" lease_until = CASE WHEN {_GONE} THEN NULL ELSE {{now}} + $1 END"
    " WHERE key = $3 AND owner = $4"
)


def poll_failed(key: str, owner: str, error: str, retry_in: float, gone: bool) -> Plan[None]:
    """Release an entry whose polls failed, not to be claimed for ``retry_in`` seconds.

    ``gone``: the service answered that it has no task of this id (``NotFoundError``); the
    entry is marked ``unknown`` if it last changed ``retry_in`` seconds ago or more.
    """
    yield q(_POLL_FAILED, retry_in, error, key, owner, gone)


def load_classes() -> Plan[dict[str, str]]:
    """Every remembered class: ``{class key: stats JSON}``."""
    rows = yield q("SELECT class_key, stats FROM videogen_ledger_classes")
    return {row["class_key"]: row["stats"] for row in rows}


def pause_remaining() -> Plan[float]:
    """Seconds left of the shared pause (0 when none)."""
    row = yield from first("SELECT pause_until - {now} AS remaining FROM videogen_ledger_pacing")
    return 0.0 if row is None else max(0.0, float(row["remaining"]))


def pause_for(seconds: float) -> Plan[None]:
    """Extend the shared pause to at least ``seconds`` from now."""
    yield q(
        "UPDATE videogen_ledger_pacing SET pause_until = {greatest}(pause_until, {now} + $1)",
        seconds,
    )
