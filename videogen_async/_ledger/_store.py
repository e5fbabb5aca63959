"""One store for both engines: each operation a plan (``_schema``) run in one transaction.

On :class:`DatabaseUnavailable` (restart, failover, killed connections, full disk) the
:class:`Store` reruns the whole transaction with backoff for up to ``outage_timeout`` seconds,
then raises :class:`LedgerError`. Every write plan is safe to rerun (each change is conditional
on the state it changes), as a commit whose answer was lost may have taken effect.

Group commit: the writes of the plans a store is told to group (at construction, in lanes),
queued during a transaction, share the next of their lane (each alone if one fails). On SQLite
one lane holds them all (one writer at a time: a group never waits on another's rows), so a
create's write ahead and another's answer share a commit; on PostgreSQL each plan has its own
(row locks are taken statement by statement: a group of answers and writes ahead in arrival
order could deadlock with another process's). Written once: every write passes
:meth:`Store._attempt` (fires :attr:`Store.changed`, prunes old changes once a minute); changes
are recorded by triggers; an entry column is a ``_plans.NewEntry`` field, a migration and a
``LedgerEntry`` field; terminal states and deliveries are written by ``_claims.finish_many``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, ParamSpec, TypeVar

import anyio
import attrs

from .._contract._exceptions import LedgerError
from .._http._retry import BackoffPolicy, backoff_after
from ._plans import CREATING_OWNERS, expire_creating, prune_changes
from ._protocol import DatabaseUnavailable, Engine, Signal
from ._schema import SCHEMA_VERSION, Plan, Step, check_meta, create_or_migrate, read_meta, rows

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: How an operation waits out a database that does not answer: quick first retries (a killed
#: connection is replaced at once), then up to 2 s apart; ``outage_timeout`` bounds them all.
DATABASE_BACKOFF = BackoffPolicy(initial_delay=0.05, max_delay=2.0, max_consecutive_failures=None)


@attrs.define(eq=False)  # found in its queue by identity
class _Queued:  # a write waiting for its group's transaction
    make: Callable[[], Plan[Any]]
    done: bool = False
    result: Any = None
    error: Exception | None = None


def _together(plans: Sequence[Plan[Any]]) -> Plan[list[Any]]:
    """Several plans as one, every step in its transaction; a plan alone as it is."""
    results = []
    rows = None
    for plan in plans:
        try:
            while True:
                step = plan.send(rows)
                rows = yield step if len(plans) == 1 else Step(step.sql, step.args, step.many)
        except StopIteration as stop:
            results.append(stop.value)
            rows = None
    return results


class Store:
    """A ledger's database: plans run in transactions, retried while the database is away.

    Attributes:
        writes: Write transactions committed (for the benchmark).
        changed: Fired after each commit of this process, and by the change listener for
            another process's (see ``_listen``).
    """

    def __init__(
        self,
        engine: Engine,
        outage_timeout: float,
        grouped: Collection[Callable[..., Plan[Any]]] = (),
    ) -> None:
        """``grouped``: the plans whose writes share transactions (see the module docstring)."""
        self.engine = engine
        self.where = engine.where
        self.outage_timeout = outage_timeout
        self.writes = 0
        self.changed = Signal()
        # asyncio's: free, it is taken without a trip through the event loop (anyio's takes
        # one), and every create passes it.
        self._living = asyncio.Lock()
        self._next_prune = 0.0
        # A lane's writes queued, and its lock: one group's transaction at a time (in turn:
        # asyncio's lock is fair, and free when no one holds it, as at 1 in flight), taking
        # every write queued when it starts.
        one = (asyncio.Lock(), list[_Queued]()) if engine.dialect.name == "sqlite" else None
        self._lanes = {plan: one or (asyncio.Lock(), list[_Queued]()) for plan in grouped}

    async def open(self) -> None:
        """Connect; check the database is a ledger of a known version; create or migrate it."""
        try:
            await self.engine.open()  # a connection made as the open was cancelled is closed
            # Read before anything is written: a file that is not a SQLite database fails
            # here, and so do a database of other tables and a ledger of a newer schema.
            meta, others = await self.engine.run(read_meta(), write=False)
            version = None if meta is None else check_meta(self.where, meta)
            if others:
                raise LedgerError(  # noqa: TRY301 - closed below like any other failure
                    f"ledger {self.where!r}: is a SQLite database but not a ledger (it holds"
                    " other tables); nothing was written"
                )
            await self.engine.prepare()
            if version != SCHEMA_VERSION:
                await self.engine.run(create_or_migrate(self.where), write=True)
        except BaseException:
            await self.close()
            raise

    async def read(self, plan: Callable[_P, Plan[_T]], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run a read-only plan, again while the database does not answer."""
        return await self._retry(lambda: self.engine.run(plan(*args, **kw), write=False))

    async def write(self, plan: Callable[_P, Plan[_T]], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run a plan in one write transaction, again while the database does not answer."""
        return await self._retry(lambda: self._attempt(plan, lambda: plan(*args, **kw)))

    async def write_once(self, plan: Callable[_P, Plan[_T]], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run a plan in one write transaction, once."""
        return await self._attempt(plan, lambda: plan(*args, **kw))

    async def live(self, owner: str) -> None:
        """Hold the liveness lock of a creator (again while the database does not answer)."""
        async with self._living:
            await self._retry(lambda: self.engine.live(owner))

    async def expire_creating(self, alive: str = "") -> int:
        """Mark ``unknown`` the ``creating`` entries whose creator died or outlived its lease.

        ``alive`` is a creator known to live (this process's own); returns how many changed.
        """
        owners = await self.read(rows, CREATING_OWNERS)
        others = [row["owner"] for row in owners if row["owner"] != alive]
        dead = await self._retry(lambda: self.engine.dead(others)) if others else set()
        if not dead and not any(row["expired"] for row in owners):
            return 0
        changed = await self.write(expire_creating, sorted(dead))
        await self.engine.forget(sorted(dead))  # settled: the sign of their death may go
        return changed

    async def close(self) -> None:
        """Disconnect. Idempotent."""
        with anyio.CancelScope(shield=True):
            await self.engine.close()

    async def _attempt(self, kind: Callable[..., Plan[_T]], make: Callable[[], Plan[_T]]) -> _T:
        lane = self._lanes.get(kind)
        if lane is None:
            return (await self._commit([make]))[0]  # type: ignore[no-any-return]
        lock, queue = lane
        mine = _Queued(make)
        queue.append(mine)
        try:
            async with lock:
                if not mine.done:  # else written by the group of another
                    group = queue[:]
                    queue.clear()
                    try:
                        await self._run_group(group)
                    finally:  # the others of a group interrupted here go in the next
                        queue[:0] = [q for q in group if not q.done and q is not mine]
        finally:
            if mine in queue:  # this caller stopped waiting: nothing is written
                queue.remove(mine)
        if mine.error is not None:
            raise mine.error
        return mine.result  # type: ignore[no-any-return]

    async def _run_group(self, group: list[_Queued]) -> None:
        try:
            results = await self._commit([queued.make for queued in group])
        except Exception as exc:
            for queued in group:
                if len(group) == 1 or isinstance(exc, DatabaseUnavailable):
                    queued.error = exc
                else:  # one failed them all: each alone
                    try:
                        queued.result = (await self._commit([queued.make]))[0]
                    except Exception as error:  # its caller's to handle
                        queued.error = error
                queued.done = True
            return
        for queued, result in zip(group, results, strict=True):
            queued.result = result
            queued.done = True

    async def _commit(self, makes: list[Callable[[], Plan[Any]]]) -> list[Any]:
        plan = _together([make() for make in makes])
        prune = time.monotonic() >= self._next_prune
        result = await self.engine.run(prune_changes(plan) if prune else plan, write=True)
        if prune:
            self._next_prune = time.monotonic() + 60.0
        self.writes += 1
        self.changed.fire()
        return result  # type: ignore[no-any-return]

    async def _retry(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        tries = 0
        deadline = 0.0
        while True:
            try:
                return await attempt()
            except DatabaseUnavailable as exc:
                now = anyio.current_time()
                tries += 1
                if tries == 1:
                    deadline = now + self.outage_timeout
                    logger.warning("%s; retrying for up to %g s", exc, self.outage_timeout)
                decision = backoff_after(tries, DATABASE_BACKOFF, remaining=deadline - now)
                if decision.delay is None:
                    raise LedgerError(
                        f"the database did not answer for {self.outage_timeout:g} s: {exc}"
                    ) from exc
                await anyio.sleep(decision.delay)
