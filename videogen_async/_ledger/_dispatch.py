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
from anyio.abc import TaskGroup

from .._contract import _checks as checks
from .._contract._exceptions import InvalidRequestError, LedgerError
from .._http._retry import BackoffPolicy, backoff_after
from ._claims import claim_statement, release_leases, renew_leases
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row
from ._listen import Listener
from ._plans import get
from ._protocol import Signal, first_of
from ._schema import Plan, first, q, rows
from ._store import Store

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
    found = yield q(
        f"UPDATE {_OUTBOX} SET state = 'pending', attempts = 0, error = NULL, next_at = {{now}}"
        f" WHERE destination = $1 AND {which} RETURNING key",
        *((name,) if keys is None else (name, json.dumps(keys))),
    )
    return len(found)


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
        self.store = store
        self.listener = listener
        self.name = name
        self.deliver = deliver
        self.lease, self.room, self.attempt_timeout, self.backoff = options
        self.owner = f"dispatcher:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.flying: dict[str, anyio.CancelScope] = {}
        self.freed = Signal()
        self.delivered = 0
        self.renewed = 0.0  # when the leases held were last renewed

    async def run(self, stop_when_idle: bool) -> None:
        await self.listener.start()
        self.renewed = anyio.current_time()
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    woken = (self.listener.terminal.event, self.freed.event)
                    due, busy = await self.store.read(_due, self.name, stop_when_idle)
                    free = self.room - len(self.flying)
                    if due is not None and due <= 0 and free > 0 and await self._claim(tg, free):
                        continue
                    if stop_when_idle and due is None and not busy and not self.flying:
                        return
                    wake = await self._renew()
                    if due is not None and free > 0:
                        wake = min(wake, due)
                    await first_of(woken, max(wake, 0.0))
        finally:
            with anyio.CancelScope(shield=True):
                try:  # once: what this misses, the leases settle
                    await self.store.write_once(release_leases, _OUTBOX, self.owner)
                except LedgerError as exc:
                    logger.warning("dispatch %r: its deliveries not released: %s", self.name, exc)

    async def _claim(self, tg: TaskGroup, free: int) -> bool:
        """Claim up to ``free`` due deliveries and start them; whether any was claimed."""
        if not self.flying:  # the claim's lease runs from now
            self.renewed = anyio.current_time()
        claimed = await self.store.write(rows, _CLAIM, self.owner, self.lease, free, self.name)
        for row in claimed:
            scope = self.flying[row["key"]] = anyio.CancelScope()
            scope.deadline = self.renewed + self.lease * 0.9
            tg.start_soon(self._attempt, row["key"], int(row["attempts"]), scope)
        return bool(claimed)

    async def _renew(self) -> float:
        """Renew the leases held, a third of a lease after the last; seconds until the next."""
        if not self.flying:
            return math.inf
        now = anyio.current_time()
        if now - self.renewed >= self.lease / 3:
            await self.store.write(renew_leases, _OUTBOX, self.owner, self.lease)
            self.renewed = now
            for scope in self.flying.values():  # an attempt outliving its lease gives up
                scope.deadline = now + self.lease * 0.9
        return self.renewed + self.lease / 3 - now

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
                    delay = backoff_after(attempts + 1, self.backoff, exc=exc).delay
                    logger.log(
                        logging.WARNING if delay is not None else logging.ERROR,
                        "dispatch %r: %r attempt %d failed (%s)%s",
                        self.name,
                        key,
                        attempts + 1,
                        error,
                        "" if delay is not None else ": dead",
                    )
            if scope.cancelled_caught:  # its lease could not be renewed: another may hold it
                logger.warning("dispatch %r: %r given up, its lease ran out", self.name, key)
                return
            self.delivered += error is None
            await self.store.write(_outcome, self.name, key, self.owner, error, delay)
        finally:
            self.flying.pop(key, None)
            self.freed.fire()


async def dispatch(
    store: Store,
    listener: Listener,
    name: str,
    deliver: Deliver,
    stop_when_idle: bool,
    backlog: bool,
    options: tuple[float, int, float, BackoffPolicy | None],
) -> int:
    """``Ledger.dispatch``: ``options`` its lease, concurrency, attempt timeout, backoff."""
    lease, concurrency, attempt_timeout, backoff = options
    checks.name("name", name, max_length=200)
    if not callable(deliver):
        raise InvalidRequestError("deliver", "must be an async callable taking a LedgerEntry")
    checks.whole("concurrency", concurrency)
    checks.positive("lease", lease)
    checks.positive("attempt_timeout", attempt_timeout)
    if backoff is not None and not isinstance(backoff, BackoffPolicy):
        raise InvalidRequestError("backoff", "must be a BackoffPolicy")
    dispatcher = _Dispatcher(
        store,
        listener,
        name,
        deliver,
        (lease, concurrency, attempt_timeout, backoff or DISPATCH_BACKOFF),
    )
    try:
        await store.write(_register, name, backlog)
        await dispatcher.run(stop_when_idle)
    finally:
        close = getattr(deliver, "aclose", None)
        if inspect.iscoroutinefunction(close):
            with anyio.CancelScope(shield=True):
                await close()
    return dispatcher.delivered


async def redeliver(store: Store, listener: Listener, name: str, keys: Iterable[str] | None) -> int:
    """``Ledger.redeliver``."""
    count = await store.write(_redeliver, name, None if keys is None else sorted(keys))
    if count is None:
        raise LedgerError(f"ledger: no destination named {name!r}")
    listener.terminal.fire()  # this process's dispatchers look at once
    return count
