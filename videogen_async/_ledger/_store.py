"""One store for both engines: each operation a plan (``_schema``) run in one transaction.

On :class:`DatabaseUnavailable` (restart, failover, killed connections, full disk) the
:class:`Store` reruns the whole transaction with backoff for up to ``outage_timeout`` seconds,
then raises :class:`LedgerError`. Every write plan is safe to rerun (each change is conditional
on the state it changes), as a commit whose answer was lost may have taken effect.

Group commit: :attr:`Store.grouped` writes queued during a transaction share the next (each
alone if one fails). Written once: every write passes :meth:`Store._attempt` (fires
:attr:`Store.changed`, prunes old changes once a minute); changes are recorded by triggers; an
entry column is a ``_plans.NewEntry`` field, a migration and a ``LedgerEntry`` field; terminal
states and deliveries are written by ``_claims.finish_many``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

import anyio
import attrs

from .._contract._exceptions import LedgerError
from .._http._retry import BackoffPolicy, backoff_after
from ._plans import creating_owners, expire_creating, prune_changes
from ._schema import SCHEMA_VERSION, Dialect, Plan, check_meta, create_or_migrate, read_meta

logger = logging.getLogger("videogen_async")

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: How an operation waits out a database that does not answer: quick first retries (a killed
#: connection is replaced at once), then up to 2 s apart; ``outage_timeout`` bounds them all.
DATABASE_BACKOFF = BackoffPolicy(initial_delay=0.05, max_delay=2.0, max_consecutive_failures=None)


class DatabaseUnavailable(LedgerError):
    """The database did not answer; the transaction did not take effect (or may have)."""


@attrs.define
class _Queued:  # a write waiting for its group's transaction
    make: Callable[[], Plan[Any]]
    done: bool = False
    result: Any = None
    error: Exception | None = None


@attrs.define
class _Lane:  # one plan's writes queued; set as its running group's transaction ends: turn
    queue: list[_Queued] = attrs.Factory(list)
    turn: anyio.Event | None = None


def _together(plans: Sequence[Plan[Any]]) -> Plan[list[Any]]:
    """Several plans as one, every step in its transaction; a plan alone as it is."""
    results, rows = [], None
    for plan in plans:
        try:
            while True:
                step = plan.send(rows)
                rows = yield step if len(plans) == 1 else attrs.evolve(step, alone=False)
        except StopIteration as stop:
            results.append(stop.value)
            rows = None
    return results


class Signal:
    """An event fired again and again: each :meth:`fire` wakes whoever waits on :attr:`event`."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    def fire(self) -> None:
        """Wake the waiters of the current event and start a new one."""
        self.event.set()
        self.event = anyio.Event()


async def first_of(events: Iterable[anyio.Event], seconds: float) -> None:
    """Wait until one of ``events`` is set, or ``seconds`` passed."""
    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tg:

            async def one(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(one, event)


class Listening:
    """How an engine wakes a change listener (``_listen``); ``lost``: its connection was."""

    lost = False

    async def open(self) -> None:
        """Start listening."""

    async def wait(self, event: anyio.Event, seconds: float) -> None:
        """Until ``event`` is set, another process may have committed, or ``seconds`` passed."""

    async def close(self) -> None:
        """Stop listening."""


class Engine(Protocol):
    """A connection to one kind of database (see ``_engines``)."""

    dialect: Dialect
    where: str

    async def open(self) -> None:
        """Connect."""

    async def prepare(self) -> None:
        """Set the connection up, once the database is known to be a ledger (or empty)."""

    async def run(self, plan: Plan[_T], *, write: bool) -> _T:
        """Run a plan in one transaction (a write transaction when ``write``)."""

    async def live(self, owner: str) -> None:
        """Hold the lock that tells others the creator ``owner`` lives."""

    async def dead(self, owners: Sequence[str]) -> set[str]:
        """The creators among ``owners`` known to have died."""

    def listen(self, changed: Signal) -> Listening:
        """What wakes a change listener (``changed`` may be fired by it)."""

    async def close(self) -> None:
        """Disconnect, and release the creator's lock."""


class Store:
    """A ledger's database: plans run in transactions, retried while the database is away.

    Attributes:
        writes: Write transactions committed (for the benchmark).
        grouped: The plans whose writes share transactions (see the module docstring).
        changed: Fired after each commit of this process, and by the change listener for
            another process's (see ``_listen``).
    """

    def __init__(self, engine: Engine, outage_timeout: float) -> None:
        self.engine, self.where, self.outage_timeout = engine, engine.where, outage_timeout
        self.writes, self.changed = 0, Signal()
        self._living, self._next_prune = anyio.Lock(), 0.0
        self.grouped: set[Callable[..., Plan[Any]]] = set()
        self._lanes: dict[Any, _Lane] = {}

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
        owners = await self.read(creating_owners)
        others = [row["owner"] for row in owners if row["owner"] != alive]
        dead = await self._retry(lambda: self.engine.dead(others)) if others else set()
        if not dead and not any(row["expired"] for row in owners):
            return 0
        return await self.write(expire_creating, sorted(dead))

    async def close(self) -> None:
        """Disconnect. Idempotent."""
        with anyio.CancelScope(shield=True):
            await self.engine.close()

    async def _attempt(self, kind: Callable[..., Plan[_T]], make: Callable[[], Plan[_T]]) -> _T:
        if kind not in self.grouped:
            return (await self._commit([make]))[0]  # type: ignore[no-any-return]
        mine, lane = _Queued(make), self._lanes.setdefault(kind, _Lane())
        lane.queue.append(mine)
        try:
            while not mine.done:
                if lane.turn is not None:  # a group's transaction runs: wait for the next
                    await lane.turn.wait()
                    continue
                group, lane.queue, lane.turn = lane.queue, [], anyio.Event()
                try:
                    await self._run_group(group)
                finally:  # the others of a group interrupted here go in the next
                    lane.queue[:0] = [q for q in group if not q.done and q is not mine]
                    lane.turn.set()
                    lane.turn = None
        finally:
            if mine in lane.queue:  # this caller stopped waiting: nothing is written
                lane.queue.remove(mine)
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
            queued.result, queued.done = result, True

    async def _commit(self, makes: list[Callable[[], Plan[Any]]]) -> list[Any]:
        plan = _together([make() for make in makes])
        prune = anyio.current_time() >= self._next_prune
        result = await self.engine.run(prune_changes(plan) if prune else plan, write=True)
        if prune:
            self._next_prune = anyio.current_time() + 60.0
        self.writes += 1
        self.changed.fire()
        return result  # type: ignore[no-any-return]

    async def _retry(self, attempt: Callable[[], Awaitable[_T]]) -> _T:
        tries, deadline = 0, 0.0
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
