"""``Ledger.dispatch``: each terminal entry delivered to a destination, at least once.

The outbox is written with each terminal state (``_claims.finish_many``); dispatchers claim
due deliveries with the watchers' leases, so two never deliver one entry at once.
"""

# ruff: noqa: S608 - the SQL interpolates only this module's constant fragments; every value
# is a bound parameter.

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from .._contract import _checks as checks
from .._contract._exceptions import InvalidRequestError, LedgerError
from .._http._retry import BackoffPolicy, backoff_after
from ._claims import claim_statement, release_leases, renew_leases
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row
from ._listen import Listener
from ._plans import get
from ._schema import Plan, first, q
from ._store import Signal, Store, first_of

logger = logging.getLogger("videogen_async")

Deliver = Callable[[LedgerEntry], Awaitable[Any]]
"""What a dispatch hands each terminal entry to; raising means "retry later"."""

DISPATCH_BACKOFF = BackoffPolicy(initial_delay=1.0, max_delay=3600.0, max_consecutive_failures=15)
"""A delivery's retries: full jitter below 1 s, 2 s, 4 s... at most an hour; dead after 15."""

_OUTBOX = "videogen_ledger_outbox"
_CLAIM = claim_statement(
    _OUTBOX,
    "state = 'pending' AND next_at <= {now} AND (lease_until IS NULL OR lease_until < {now})",
    "next_at",
    "key, attempts",
    scope="destination = $4",
)
_KNOWN = "SELECT name FROM videogen_ledger_destinations WHERE name = $1"


def _register(name: str, backlog: bool) -> Plan[None]:
    # The budget row first, as a finish of terminal entries takes it: an entry finishing
    # meanwhile is either in the backlog or sees the destination.
    yield q("SELECT spent FROM videogen_ledger_budget WHERE id = 1{lock}")
    yield q(
        "INSERT INTO videogen_ledger_destinations (name, created_at) VALUES ($1, {now})"
        " ON CONFLICT (name) DO NOTHING",
        name,
    )
    if backlog:
        terminal = ", ".join(f"'{state}'" for state in sorted(TERMINAL_STATES))
        yield q(
            f"INSERT INTO {_OUTBOX} (destination, key, state, attempts, next_at) SELECT $1,"
            f" key, 'pending', 0, {{now}} FROM {{E}} WHERE state IN ({terminal})"
            " ON CONFLICT (destination, key) DO NOTHING",
            name,
        )


def _claim(name: str, owner: str, lease: float, limit: int) -> Plan[list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = yield q(_CLAIM, owner, lease, limit, name)
    return rows


def _outcome(name: str, key: str, owner: str, error: str | None, delay: float | None) -> Plan[None]:
    """An attempt: delivered (no ``error``), due again in ``delay`` s, or (no delay) dead."""
    state = "delivered" if error is None else ("dead" if delay is None else "pending")
    yield q(
        f"UPDATE {_OUTBOX} SET state = $4, attempts = attempts + 1, error = $5,"
        " next_at = {now} + $6, delivered_at = CASE WHEN $4 = 'delivered' THEN {now} END,"
        " owner = NULL, lease_until = NULL WHERE destination = $1 AND key = $2 AND owner = $3",
        *(name, key, owner, state, error, delay or 0.0),
    )


def _due(name: str, idle_check: bool) -> Plan[tuple[float | None, bool]]:
    """``(seconds until a delivery is due, or None; whether an entry may still finish)``.

    The second is read only for a dispatch that stops when idle (``idle_check``).
    """
    row = yield from first(
        "SELECT min({greatest}(next_at, COALESCE(lease_until, 0))) - {now} AS due"
        f" FROM {_OUTBOX} WHERE destination = $1 AND state = 'pending'",
        name,
    )
    busy = idle_check and (
        yield q(
            "SELECT 1 AS one FROM {E} WHERE state = 'creating'"
            " OR (state = 'pending' AND task_id IS NOT NULL) LIMIT 1"
        )
    )
    return (None if row is None or row["due"] is None else float(row["due"])), bool(busy)


def _redeliver(name: str, keys: list[str] | None) -> Plan[int | None]:
    if not (yield from first(_KNOWN, name)):
        return None
    which = "state = 'dead'" if keys is None else "key IN (items($2))"
    rows = yield q(
        f"UPDATE {_OUTBOX} SET state = 'pending', attempts = 0, error = NULL, next_at = {{now}}"
        f" WHERE destination = $1 AND {which} RETURNING key",
        *((name,) if keys is None else (name, json.dumps(keys))),
    )
    return len(rows)


class _Dispatcher:
    """One dispatcher of one destination (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        listener: Listener,
        name: str,
        deliver: Deliver,
        options: tuple[float, int, float, BackoffPolicy],
    ) -> None:
        self.store, self.listener, self.name, self.deliver = store, listener, name, deliver
        self.lease, self.room, self.attempt_timeout, self.backoff = options
        self.owner = f"dispatcher:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.flying: dict[str, anyio.CancelScope] = {}
        self.freed, self.delivered = Signal(), 0

    async def run(self, stop_when_idle: bool) -> None:
        store, lease, room = self.store, self.lease, self.room
        await self.listener.start()
        renewed = anyio.current_time()
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    woken = (self.listener.terminal.event, self.freed.event)
                    due, busy = await store.read(_due, self.name, stop_when_idle)
                    free = room - len(self.flying)
                    if due is not None and due <= 0 and free > 0:
                        if not self.flying:
                            renewed = anyio.current_time()
                        rows = await store.write(_claim, self.name, self.owner, lease, free)
                        for row in rows:
                            scope = self.flying[row["key"]] = anyio.CancelScope()
                            scope.deadline = renewed + lease * 0.9
                            tg.start_soon(self._attempt, row["key"], int(row["attempts"]), scope)
                        if rows:
                            continue
                    if stop_when_idle and due is None and not busy and not self.flying:
                        return
                    now, wake = anyio.current_time(), math.inf
                    if self.flying and now - renewed >= lease / 3:
                        await store.write(renew_leases, _OUTBOX, self.owner, lease)
                        renewed = now
                        for scope in self.flying.values():
                            scope.deadline = now + lease * 0.9
                    if self.flying:
                        wake = renewed + lease / 3 - now
                    if due is not None and free > 0:
                        wake = min(wake, due)
                    await first_of(woken, max(wake, 0.0))
        finally:
            with anyio.CancelScope(shield=True):
                try:  # once: what this misses, the leases settle
                    await store.write_once(release_leases, _OUTBOX, self.owner)
                except LedgerError as exc:
                    logger.warning("dispatch %r: its deliveries not released: %s", self.name, exc)

    async def _attempt(self, key: str, attempts: int, scope: anyio.CancelScope) -> None:
        error = delay = None
        try:
            with scope:
                row = await self.store.read(get, key)
                try:
                    with anyio.fail_after(self.attempt_timeout):
                        await self.deliver(entry_from_row(row))  # type: ignore[arg-type]
                except Exception as exc:  # a failed attempt: tried again later
                    error = f"{type(exc).__name__}: {exc}"[:2000]
                    decision = backoff_after(attempts + 1, self.backoff, exc=exc)
                    delay = decision.delay
                    logger.log(
                        logging.WARNING if delay is not None else logging.ERROR,
                        "dispatch %r: %r attempt %d failed (%s)%s", self.name, key, attempts + 1,
                        error, "" if delay is not None else ": dead",
                    )  # fmt: skip
            if scope.cancelled_caught:  # its lease could not be renewed: another may hold it
                logger.warning("dispatch %r: %r given up, its lease ran out", self.name, key)
                return
            self.delivered += error is None
            await self.store.write(_outcome, self.name, key, self.owner, error, delay)
        finally:
            self.flying.pop(key, None)
            self.freed.fire()


class Dispatches:
    """The outbox of :class:`~videogen_async.Ledger`: deliveries of terminal entries."""

    _store: Store

    def _listening(self) -> Listener:
        raise NotImplementedError  # pragma: no cover - the ledger's

    async def dispatch(
        self,
        name: str,
        deliver: Deliver,
        *,
        stop_when_idle: bool = False,
        backlog: bool = False,
        lease: float = 30.0,
        concurrency: int = 8,
        attempt_timeout: float = 60.0,
        backoff: BackoffPolicy | None = None,
    ) -> int:
        """Deliver each terminal entry to the destination ``name``, at least once.

        Dispatchers of one name, in any processes, share the work, never delivering one entry
        at once. Each attempt gets the entry as it is then; ``deliver`` raising (or outlasting
        ``attempt_timeout``) means "later". Its ``aclose()``, if any, is called at the end.

        Args:
            name: The destination (``"billing"``, ``"app-hook"``).
            deliver: An async callable taking a :class:`LedgerEntry`.
            stop_when_idle: Return once nothing is left to deliver and no entry of the ledger
                may still finish (else run until cancelled).
            backlog: Also deliver the entries terminal before the destination's first use
                (by default, those that become terminal from then on).
            lease: Seconds a claimed delivery stays this dispatcher's without a renewal.
            concurrency: Deliveries in flight at most.
            attempt_timeout: Seconds one attempt may take.
            backoff: The retries; dead after ``max_consecutive_failures`` attempts
                (``None``: ``DISPATCH_BACKOFF``, 15 attempts over hours).

        Returns:
            How many deliveries this dispatcher made.

        Raises:
            InvalidRequestError: A bad argument; nothing was written.
            LedgerError: The database stayed away longer than ``outage_timeout``.
        """
        checks.name("name", name, max_length=200)
        if not callable(deliver):
            raise InvalidRequestError("deliver", "must be an async callable taking a LedgerEntry")
        checks.whole("concurrency", concurrency)
        checks.instance("backoff", backoff, (BackoffPolicy, type(None)), "must be a BackoffPolicy")
        seconds = (
            checks.number("lease", lease, above=True, high=1e9),
            checks.number("attempt_timeout", attempt_timeout, above=True, high=1e9),
        )
        options = (seconds[0], concurrency, seconds[1], backoff or DISPATCH_BACKOFF)
        dispatcher = _Dispatcher(self._store, self._listening(), name, deliver, options)
        try:
            await self._store.write(_register, name, backlog)
            await dispatcher.run(stop_when_idle)
        finally:
            close = getattr(deliver, "aclose", None)
            if inspect.iscoroutinefunction(close):
                with anyio.CancelScope(shield=True):
                    await close()
        return dispatcher.delivered

    async def redeliver(self, name: str, *, keys: Iterable[str] | None = None) -> int:
        """Make deliveries due again: the dead ones, or those of ``keys`` whatever their state.

        Args:
            name: The destination.
            keys: The entries to deliver again (``None``: every dead delivery).

        Returns:
            How many deliveries are due again (the running dispatchers take them).

        Raises:
            LedgerError: No destination of that name was ever dispatched to.
        """
        count = await self._store.write(_redeliver, name, None if keys is None else sorted(keys))
        if count is None:
            raise LedgerError(f"ledger: no destination named {name!r}")
        self._listening().terminal.fire()  # this process's dispatchers look at once
        return count
