"""``Ledger.dispatch``: each terminal entry delivered to a destination, at least once.

An outbox in the ledger: ``videogen_ledger_destinations`` names the destinations, and the
transaction that records an entry's terminal state (``_claims.finish_many``) also makes its
delivery to every destination due (``videogen_ledger_outbox``: pending, delivered or dead;
attempts; the last error; when it is next due). A new destination delivers what becomes
terminal from its first use on (``backlog=True``: also what already is).

Dispatchers claim due deliveries with the watchers' leases (``_claims``: ``SKIP LOCKED``
claims, renewed every third of the lease while the dispatcher lives, released when it
stops), so that two never deliver one entry at once: a delivery whose lease could not be
renewed in time is cancelled. Each attempt reads the entry as it is now. A ``deliver`` that
raises (or outlasts ``timeout``) is retried as the one retry decision says
(``decide_retry`` with the dispatch's :class:`BackoffPolicy`), and after
``max_consecutive_failures`` attempts the delivery is dead (see :meth:`Dispatches.redeliver`).
Dispatchers wake when the change listener hears of a terminal entry, when a delivery is
next due, and to renew: they never poll.
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
from datetime import datetime
from typing import Any

import anyio
import attrs

from .._contract._exceptions import InvalidRequestError, LedgerError
from .._http._retry import BackoffPolicy, decide_retry
from ._claims import claim_statement, release_leases, renew_leases
from ._entry import TERMINAL_STATES, LedgerEntry, entry_from_row, from_epoch
from ._listen import Listener
from ._plans import get
from ._schema import Plan, first, q
from ._store import Signal, Store

__all__ = ["DISPATCH_BACKOFF", "Deliver", "Delivery", "Dispatches"]

logger = logging.getLogger("videogen_async")

Deliver = Callable[[LedgerEntry], Awaitable[Any]]
"""What a dispatch hands each terminal entry to; raising means "retry later"."""

DISPATCH_BACKOFF = BackoffPolicy(initial_delay=1.0, max_delay=3600.0, max_consecutive_failures=15)
"""A delivery's retries: full jitter below 1 s, 2 s, 4 s... at most an hour; dead after 15."""

_OUTBOX = "videogen_ledger_outbox"
_TERMINAL = ", ".join(f"'{state}'" for state in sorted(TERMINAL_STATES))
_CLAIM = claim_statement(
    _OUTBOX,
    "state = 'pending' AND next_at <= {now} AND (lease_until IS NULL OR lease_until < {now})",
    "next_at",
    "key, attempts",
    scope="destination = $4",
)


@attrs.frozen
class Delivery:
    """One entry's delivery to a destination.

    Attributes:
        key: The entry's key.
        state: ``pending``, ``delivered`` or ``dead`` (its attempts used up).
        attempts: Attempts so far.
        error: The last attempt's error, if it failed.
        next_attempt_at: When a pending delivery is next due.
        delivered_at: When it was delivered.
    """

    key: str
    state: str
    attempts: int
    error: str | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None


def _register(name: str, backlog: bool) -> Plan[None]:
    # The budget row first, as the finish of terminal entries takes it: an entry finishing
    # meanwhile is either seen by the backlog or sees the destination.
    yield q("SELECT spent FROM videogen_ledger_budget WHERE id = 1{lock}")
    yield q(
        "INSERT INTO videogen_ledger_destinations (name, created_at) VALUES ($1, {now})"
        " ON CONFLICT (name) DO NOTHING",
        name,
    )
    if backlog:
        yield q(
            f"INSERT INTO {_OUTBOX} (destination, key, state, attempts, next_at)"
            f" SELECT $1, key, 'pending', 0, {{now}} FROM {{E}} WHERE state IN ({_TERMINAL})"
            " ON CONFLICT (destination, key) DO NOTHING",
            name,
        )


def _claim(name: str, owner: str, lease: float, limit: int) -> Plan[list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = yield q(_CLAIM, owner, lease, limit, name)
    return rows


def _outcome(name: str, key: str, owner: str, error: str | None, delay: float | None) -> Plan[None]:
    """Record an attempt: delivered (``error`` None), due again in ``delay`` s, or dead."""
    state = "delivered" if error is None else ("dead" if delay is None else "pending")
    yield q(
        f"UPDATE {_OUTBOX} SET state = $4, attempts = attempts + 1, error = $5,"
        " next_at = {now} + $6, delivered_at = CASE WHEN $4 = 'delivered' THEN {now} END,"
        " owner = NULL, lease_until = NULL WHERE destination = $1 AND key = $2 AND owner = $3",
        *(name, key, owner, state, error, delay or 0.0),
    )


def _due(name: str) -> Plan[tuple[float | None, bool]]:
    """``(seconds until a delivery is due or None, whether an entry may still finish)``."""
    row = yield from first(
        "SELECT min({greatest}(next_at, COALESCE(lease_until, 0))) - {now} AS due"
        f" FROM {_OUTBOX} WHERE destination = $1 AND state = 'pending'",
        name,
    )
    busy = yield q(
        "SELECT 1 AS one FROM {E} WHERE state = 'creating'"
        " OR (state = 'pending' AND task_id IS NOT NULL) LIMIT 1"
    )
    due = None if row is None or row["due"] is None else float(row["due"])
    return due, bool(busy)


def _deliveries(name: str, state: str | None) -> Plan[list[dict[str, Any]] | None]:
    if (yield from first("SELECT name FROM videogen_ledger_destinations WHERE name = $1", name)):
        rows: list[dict[str, Any]] = yield q(
            f"SELECT * FROM {_OUTBOX} WHERE destination = $1 AND state = COALESCE($2, state)"
            " ORDER BY key",
            name,
            state,
        )
        return rows
    return None


def _redeliver(name: str, keys: list[str] | None) -> Plan[int | None]:
    if not (
        yield from first("SELECT name FROM videogen_ledger_destinations WHERE name = $1", name)
    ):
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
        *,
        lease: float,
        concurrency: int,
        timeout: float,
        backoff: BackoffPolicy,
    ) -> None:
        self._store = store
        self._listener = listener
        self._name = name
        self._deliver = deliver
        self._lease = lease
        self._concurrency = concurrency
        self._timeout = timeout
        self._backoff = backoff
        self.owner = f"dispatcher:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._flying: dict[str, anyio.CancelScope] = {}
        self._freed = Signal()
        self._held_until = math.inf
        self.delivered = 0

    async def run(self, stop_when_idle: bool) -> None:
        store, lease = self._store, self._lease
        await self._listener.start()
        renewed = anyio.current_time()
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    woken = (self._listener.terminal.event, self._freed.event)
                    due, busy = await store.read(_due, self._name)
                    room = self._concurrency - len(self._flying)
                    if due is not None and due <= 0 and room > 0:
                        rows = await store.write(_claim, self._name, self.owner, lease, room)
                        if not self._flying:
                            renewed = anyio.current_time()
                            self._held_until = renewed + lease * 0.9
                        for row in rows:
                            self._flying[row["key"]] = scope = anyio.CancelScope()
                            scope.deadline = self._held_until
                            tg.start_soon(self._attempt, row["key"], int(row["attempts"]), scope)
                        if rows:
                            continue
                    if stop_when_idle and due is None and not busy and not self._flying:
                        return
                    now = anyio.current_time()
                    if self._flying and now - renewed >= lease / 3:
                        await store.write(renew_leases, _OUTBOX, self.owner, lease)
                        renewed = now
                        self._held_until = now + lease * 0.9
                        for scope in self._flying.values():
                            scope.deadline = self._held_until
                    await _first(woken, _next_wake(due, room, self._flying, renewed, lease, now))
        finally:
            with anyio.CancelScope(shield=True):
                try:  # once: what this misses, the leases settle
                    await store.write_once(release_leases, _OUTBOX, self.owner)
                except LedgerError as exc:
                    logger.warning("dispatch %r: its deliveries not released: %s", self._name, exc)

    async def _attempt(self, key: str, attempts: int, scope: anyio.CancelScope) -> None:
        error: BaseException | None = None
        try:
            with scope:
                row = await self._store.read(get, key)
                try:
                    with anyio.fail_after(self._timeout):
                        await self._deliver(entry_from_row(row))  # type: ignore[arg-type]
                except Exception as exc:  # a failed delivery: tried again later
                    error = exc
            if scope.cancelled_caught:  # its lease could not be renewed: another may hold it
                logger.warning("dispatch %r: %r given up, its lease ran out", self._name, key)
                return
            delay, text = None, None
            if error is not None:
                failures = attempts + 1
                decision = decide_retry(
                    error, method="GET", failures=failures, policy=self._backoff, poll=True,
                    transient=True,
                )  # fmt: skip
                delay = decision.delay
                text = f"{type(error).__name__}: {error}"[:2000]
                level = logging.WARNING if delay is not None else logging.ERROR
                logger.log(level, "dispatch %r: %r attempt %d failed (%s)%s", self._name, key,
                           failures, text, "" if delay is not None else ", dead")  # fmt: skip
            else:
                self.delivered += 1
            await self._store.write(_outcome, self._name, key, self.owner, text, delay)
        finally:
            self._flying.pop(key, None)
            self._freed.fire()


def _next_wake(
    due: float | None,
    room: int,
    flying: dict[str, anyio.CancelScope],
    renewed: float,
    lease: float,
    now: float,
) -> float:
    """Seconds until the loop must look again: a due delivery, or the next renewal."""
    wake = due if due is not None and room > 0 else math.inf
    if flying:
        wake = min(wake, renewed + lease / 3 - now)
    return max(wake, 0.0)


async def _first(events: Iterable[anyio.Event], seconds: float) -> None:
    """Wait until one of ``events`` is set, at most ``seconds``."""
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tg:

            async def one(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(one, event)


def _check(name: Any, deliver: Any, lease: Any, concurrency: Any, timeout: Any) -> None:
    if not isinstance(name, str) or not name.strip() or len(name) > 200 or "\x00" in name:
        rule = "must be a destination name: a non-empty string of at most 200 characters"
        raise InvalidRequestError("name", rule, value=name, has_value=True)
    if not callable(deliver):
        raise InvalidRequestError("deliver", "must be an async callable taking a LedgerEntry")
    for field, value in (("lease", lease), ("attempt_timeout", timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
            raise InvalidRequestError(field, "must be a number of seconds > 0")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidRequestError("concurrency", "must be a whole number >= 1")


def _delivery(row: dict[str, Any]) -> Delivery:
    return Delivery(
        key=row["key"],
        state=row["state"],
        attempts=int(row["attempts"]),
        error=row["error"],
        next_attempt_at=from_epoch(row["next_at"]) if row["state"] == "pending" else None,
        delivered_at=from_epoch(row["delivered_at"]),
    )


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

        Any number of dispatchers of one name (in one process or many) share the work; two
        never deliver one entry at once. Each attempt hands ``deliver`` the entry as the
        ledger holds it then; ``deliver`` raising (or outlasting ``attempt_timeout``) means
        "try again later", after the backoff of ``backoff``; once its attempts are used up
        (``max_consecutive_failures``) the delivery is dead (see :meth:`deliveries`,
        :meth:`redeliver`). Runs until cancelled, or with ``stop_when_idle`` until nothing
        is left to deliver and no entry of the ledger may still finish. A ``deliver`` with an
        ``aclose()`` (as :func:`~videogen_async.webhook` builds) is closed at the end.

        Args:
            name: The destination (a name of yours: ``"billing"``, ``"app-hook"``).
            deliver: An async callable taking a :class:`LedgerEntry`.
            stop_when_idle: Return once idle (see above).
            backlog: Also deliver the entries that were terminal before the destination's
                first use (by default a new destination delivers those that become terminal
                from then on).
            lease: Seconds a claimed delivery stays this dispatcher's without a renewal (a
                dispatcher that dies leaves its deliveries to the others after this long).
            concurrency: Deliveries in flight at most.
            attempt_timeout: Seconds one attempt may take.
            backoff: The retries (``None``: ``DISPATCH_BACKOFF``: full jitter below 1 s,
                2 s, 4 s... at most an hour, dead after 15 attempts).

        Returns:
            How many deliveries this dispatcher made.

        Raises:
            InvalidRequestError: A bad name, ``deliver`` or number; nothing was written.
            LedgerError: The database stayed away longer than ``outage_timeout``.
        """
        _check(name, deliver, lease, concurrency, attempt_timeout)
        if backoff is not None and not isinstance(backoff, BackoffPolicy):
            raise InvalidRequestError("backoff", "must be a BackoffPolicy")
        dispatcher = _Dispatcher(
            self._store,
            self._listening(),
            name,
            deliver,
            lease=float(lease),
            concurrency=concurrency,
            timeout=float(attempt_timeout),
            backoff=backoff or DISPATCH_BACKOFF,
        )
        try:
            await self._store.write(_register, name, backlog)
            await dispatcher.run(stop_when_idle)
        finally:
            close = getattr(deliver, "aclose", None)
            if close is not None and inspect.iscoroutinefunction(close):
                with anyio.CancelScope(shield=True):
                    await close()
        return dispatcher.delivered

    async def deliveries(self, name: str, *, state: str | None = None) -> list[Delivery]:
        """The deliveries of a destination, in key order.

        Args:
            name: The destination.
            state: Only those ``pending``, ``delivered`` or ``dead``.

        Returns:
            Each :class:`Delivery`.

        Raises:
            LedgerError: No destination of that name was ever dispatched to.
        """
        if state not in (None, "pending", "delivered", "dead"):
            raise InvalidRequestError("state", "must be pending, delivered, dead or None")
        rows = await self._store.read(_deliveries, name, state)
        if rows is None:
            raise LedgerError(f"ledger: no destination named {name!r}")
        return [_delivery(row) for row in rows]

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
        listed = None if keys is None else sorted(keys)
        count = await self._store.write(_redeliver, name, listed)
        if count is None:
            raise LedgerError(f"ledger: no destination named {name!r}")
        self._listening().terminal.fire()  # the dispatchers of this process look at once
        return count
