"""The creates of a ledger (tasks, projects, video batches): written ahead, sent, recorded.

A create is decided in one transaction (key; under ``max_credits`` its reservation), sent, then
recorded. An answer that cannot be recorded goes to the spool at once, retried with backoff and
written back by any later operation or open (``_spool``); last resort: its id logged at ERROR.
A creator holds a liveness lock (``_engines``): a dead one's ``creating`` entries are
``unknown`` at once, its 600 s lease only the last resort.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import types
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import attrs

from .._contract import _checks as checks
from .._contract import _exceptions as err
from .._contract._checks import check_key
from .._contract._service import TASK_REQUEST
from .._contract._validation import json_text, validate_task_request
from .._http._options import CALL_OPTIONS, call_options
from ._entry import LedgerEntry, check_metadata, entry_from_row, load_metadata
from ._plans import (
    CreateStart,
    Hold,
    NewEntry,
    Refused,
    Settled,
    add_batch_tasks,
    batch_entries,
    batch_tasks,
    begin_create,
    get,
    restart_unknown,
    settle_created,
    settle_failed,
    unpollable,
)
from ._protocol import Engine, Signal, new_creator
from ._schema import Row
from ._spool import Spool, spool_directory
from ._store import Store

logger = logging.getLogger("videogen_async")

PriceEstimate = Callable[[str, int], float]
"""``(model, duration) -> credits``: the worst-case price of a task."""

DEFAULT_MODEL: str = TASK_REQUEST.field("model").default
DEFAULT_DURATION: int = TASK_REQUEST.field("duration").default
CREATE_LEASE = 600.0
"""Seconds a ``creating`` entry stays its creator's: the last resort, as a dead creator's
liveness lock tells the others at once."""
GROUPED = (settle_created, settle_failed, begin_create)
"""The plans whose writes share transactions (in one lane on SQLite, a lane each on
PostgreSQL: see ``_store``); a cap's decisions (``begin_create`` under ``max_credits``) lock its
row, so they never do."""
_CHARGED = {"task": "task_id", "project": "project_id", "videos": "task_ids"}  # what a create makes


def _key(key: str | None) -> str:
    return uuid.uuid4().hex if key is None else check_key(key)


class Creator:
    """The creates of one ledger (see the module docstring).

    Attributes:
        owner: This creator's id (the ``owner`` of its entries until they are answered).
        settled: Fired as each create of this creator is answered.
    """

    def __init__(
        self,
        store: Store,
        spool: Spool,
        max_credits: float | None,
        price_estimate: PriceEstimate | None,
    ) -> None:
        self.store = store
        self.spool = spool
        self.max_credits = max_credits
        self.price_estimate = price_estimate
        self.owner = new_creator()
        self.settled = Signal()
        # What could not be written yet: key -> (plan, its arguments, spool file or "").
        self._kept: dict[str, tuple[Callable[..., Any], tuple[Any, ...], str]] = {}
        # The keys this creator is creating: the database tells another creator's create of
        # a key from ours, but not two calls of ours apart (both are its owner).
        self._creating: dict[str, Signal] = {}
        self._next_scan = -math.inf
        self._prices: dict[Any, float] = {}  # the highest this process learned

    @classmethod
    async def open(
        cls,
        engine: Engine,
        outage_timeout: float,
        max_credits: float | None,
        price_estimate: PriceEstimate | None,
    ) -> Creator:
        """Open the store of ``engine`` and the creator of a ledger over it."""
        store = Store(engine, outage_timeout, GROUPED if max_credits is None else GROUPED[:2])
        await store.open()
        spool = Spool(engine.where, local=engine.dialect.name == "sqlite")
        creator = cls(store, spool, max_credits, price_estimate)
        try:
            await creator.repair()  # answers that processes of this machine could not record
        except BaseException:
            await store.close()
            raise
        return creator

    async def create_task(
        self,
        client: Any,
        prompt: str,
        key: str | None,
        metadata: dict[str, Any] | None,
        task_fields: dict[str, Any],
    ) -> LedgerEntry:
        """``Ledger.create_task``: its fields checked and priced, then :meth:`create`."""
        key = _key(key)
        meta = check_metadata(metadata)
        options = {name: task_fields.pop(name) for name in CALL_OPTIONS if name in task_fields}
        extra = call_options(options).extra_body or {}
        body = validate_task_request({"prompt": prompt, **task_fields})
        model = str(extra.get("model") or body.get("model") or DEFAULT_MODEL)
        duration = extra.get("duration") or body.get("duration") or DEFAULT_DURATION
        if isinstance(duration, bool) or not isinstance(duration, int):
            rule = "its duration must be a whole number of seconds (the ledger prices by it)"
            raise err.InvalidRequestError("extra_body", rule)
        request = json_text({**body, "extra_body": extra} if extra else body, "", sort_keys=True)
        new = NewEntry(key, "task", request, model, duration, metadata=meta)
        prompt = body.pop("prompt")
        send = lambda: client.tasks.create(prompt, **body, **options)  # noqa: E731
        return await self.create(begin_create, new, key, self.estimate(model, duration), send)

    async def resend(self, client: Any, key: str) -> LedgerEntry:
        """``Ledger.resend``: an ``unknown`` task entry's create sent again."""
        row = await self.store.read(get, key)
        if row is None:
            raise err.LedgerError(f"ledger key {key!r}: no such entry")
        if row["state"] != "unknown" or row["kind"] != "task":
            raise err.LedgerError(
                f"ledger key {key!r}: only an unknown task entry can be resent"
                f" (it is a {row['kind']} entry in state {row['state']!r})"
            )
        fields = json.loads(row["request"])
        prompt = fields.pop("prompt")
        estimate = self.estimate(row["model"] or DEFAULT_MODEL, row["duration"] or 0)
        send = lambda: client.tasks.create(prompt, **fields)  # noqa: E731
        return await self.create(restart_unknown, key, key, estimate, send)

    async def create_project(
        self,
        client: Any,
        urls: tuple[str, Sequence[str]],
        key: str | None,
        script_credits: float,
        metadata: dict[str, Any] | None,
        fields: dict[str, Any],
    ) -> LedgerEntry:
        """``Ledger.create_project``: ``urls`` the reference video's and the product images'."""
        key = _key(key)
        meta = check_metadata(metadata)
        video = urls[0]
        images = list(urls[1])
        request = {"reference_video_url": video, "product_image_urls": images, **fields}
        text = json_text(request, "", sort_keys=True, default=str)
        new = NewEntry(key, "project", text, None, fields.get("duration"), metadata=meta)
        send = lambda: client.projects.create(video, images, **fields)  # noqa: E731
        return await self.create(begin_create, new, key, script_credits, send)

    async def record_project_tasks(
        self, key: str, project_id: str, task_ids: Sequence[str]
    ) -> list[LedgerEntry]:
        """``Ledger.record_project_tasks``: written 1,000 a transaction."""
        project = await self.store.read(get, check_key(key))
        meta = None if project is None else project["metadata"]
        tasks = batch_tasks(key, task_ids)
        rows: list[Any] = []
        for start in range(0, len(tasks), 1000):
            chunk = tasks[start : start + 1000]
            rows += await self.store.write(add_batch_tasks, project_id, chunk, None, meta)
        self.settled.fire()
        return [entry_from_row(row) for row in rows]

    async def create_videos(
        self,
        client: Any,
        key: str,
        batch_key: str | None,
        metadata: dict[str, Any] | None,
        fields: dict[str, Any],
    ) -> list[LedgerEntry]:
        """``Ledger.create_videos``: the batch's own entry written ahead, its tasks answered."""
        check_metadata(metadata)
        row = await self.store.read(get, check_key(key))
        if row is None or row["kind"] != "project" or not row["project_id"]:
            raise err.LedgerError(f"ledger key {key!r}: no project with a known id")
        project_id = row["project_id"]
        batch = f"{key}/videos/{uuid.uuid4().hex}" if batch_key is None else check_key(batch_key)
        meta = check_metadata({**load_metadata(row["metadata"]), **(metadata or {})})
        text = json_text({"project": key, **fields}, "", sort_keys=True, default=str)
        new = NewEntry(batch, "videos", text, None, None, project_id=project_id, metadata=meta)
        send = lambda: client.projects.create_videos(project_id, **fields)  # noqa: E731
        await self.create(begin_create, new, batch, 0.0, send)
        rows = await self.store.read(batch_entries, project_id, batch)
        return [entry_from_row(task) for task in rows]

    def estimate(self, model: str, duration: int) -> float | None:
        """The price to reserve for a task; ``None``: learned in the create's transaction."""
        if self.price_estimate is None or self.max_credits is None:
            return None
        # What it returned: a number >= 0 (float() first: a Decimal or a numpy number passes).
        return checks.number("price_estimate", float(self.price_estimate(model, duration)))

    async def create(
        self,
        plan: Callable[[Any, Hold], Any],
        entry: Any,
        key: str,
        estimate: float | None,
        send: Callable[[], Awaitable[Any]],
    ) -> LedgerEntry:
        """Write the entry ahead with ``plan(entry, hold)``, send, record.

        Returns the entry of a key another create holds (``existing``) instead of sending.
        """
        while (busy := self._creating.get(key)) is not None:
            await busy.event.wait()  # its outcome is this call's, unless it wrote nothing
            if (row := await self.store.read(get, key)) is not None:
                return await self._existing(key, row)
        self._creating[key] = done = Signal()
        try:
            await self.repair()
            await self.store.live(self.owner)
            hold = Hold(self.owner, CREATE_LEASE, self.max_credits, estimate)
            tries = 0
            while True:
                try:
                    start: CreateStart = await self.store.write(plan, entry, hold)
                except Refused as refused:
                    start = refused.start
                if start.outcome == "new":
                    kind = getattr(entry, "kind", "task")  # a resend's entry is its task's key
                    price = (getattr(entry, "model", None), getattr(entry, "duration", None))
                    return await self._send(key, send, kind, estimate, price)
                if start.outcome == "existing":
                    return await self._existing(key, start.row)
                if start.outcome == "budget":
                    raise err.BudgetExceededError(
                        key,
                        estimate=start.estimate,
                        spent=start.spent,
                        reserved=start.reserved,
                        max_credits=self.max_credits or 0.0,
                    )
                # A create of unknown price is in flight: its answer (or its creator's death)
                # prices this one.
                await self.store.expire_creating(alive=self.owner)
                tries = await self._nap(tries)
        finally:
            del self._creating[key]
            done.fire()

    async def _nap(self, tries: int) -> int:
        """Wait before looking again: backoff, or less when a create of this ledger settles."""
        with anyio.move_on_after(min(0.5, 0.02 * 2**tries) * random.uniform(0.5, 1.0)):
            await self.settled.event.wait()
        await self.repair()  # this creator's own outcomes kept meanwhile, written back
        return tries + 1

    async def _existing(self, key: str, row: Row | None) -> LedgerEntry:
        tries = 0
        while row is not None and row["state"] == "creating":
            # Another create of this key is in flight: wait for its answer or its death.
            if row["owner"] == self.owner or not await self.store.expire_creating(self.owner):
                tries = await self._nap(tries)
            row = await self.store.read(get, key)
        if row is None:  # pragma: no cover - keys are never deleted
            raise err.LedgerError(f"ledger key {key!r}: vanished")
        entry = entry_from_row(row)
        if entry.state == "unknown":
            raise err.AmbiguousCreateError(key, entry, entry.error)
        return entry

    async def _send(
        self,
        key: str,
        send: Callable[[], Awaitable[Any]],
        kind: str,
        estimate: float | None,
        price: tuple[str | None, int | None],
    ) -> LedgerEntry:
        unreadable = None
        try:
            created = await send()
        except err.VideoGenError as exc:
            ambiguous = exc.request_may_have_taken_effect
            read = exc.readable if isinstance(exc, err.APIResponseError) else {}
            if not ambiguous or _CHARGED.get(kind) not in read:
                state = "unknown" if ambiguous else "refused"
                row = await self._settle(key, settle_failed, state, str(exc))
                if ambiguous:
                    raise err.AmbiguousCreateError(
                        key, row and entry_from_row(row), str(exc)
                    ) from exc
                raise
            # An answer read in part that names what it created: recorded (the watchers poll
            # it), then its error raised.
            created = types.SimpleNamespace(**read)
            unreadable = exc
        except BaseException as exc:
            # Cancelled (or a bug) while the request may have been on the wire: one attempt,
            # so that a Ctrl-C is not held up; if it fails, the next operation writes it.
            args = (key, self.owner, "unknown", f"interrupted: {type(exc).__name__}")
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                try:
                    await self.store.write_once(settle_failed, *args)
                except err.LedgerError:
                    self._kept[key] = (settle_failed, args, "")
            self.settled.fire()
            raise
        field = "task_id" if hasattr(created, "task_id") else "project_id"
        found = getattr(created, field, None)
        batch = getattr(created, "task_ids", None)  # a video batch's
        batch = list(batch) if isinstance(batch, (list, tuple)) else None
        # A batch's ids are its tasks' (each checked as it is recorded); the project's id
        # echoed with them is neither checked nor kept: the ledger wrote it ahead.
        problem = None if batch is not None else unpollable(field, found)
        cost = getattr(created, "credits_cost", estimate or 0.0)
        cost = float(cost) if isinstance(cost, (int, float)) and math.isfinite(cost) else 0.0
        known = None if problem or batch is not None else found
        task_id, project_id = (known, None) if field == "task_id" else (None, known)
        answer = Settled(task_id, project_id, cost, problem, batch or [])
        row = await self._settle(key, settle_created, answer, self._prices, price)
        entry = entry_from_row(await self._checked(key, answer, row))
        if problem is not None:
            raise err.AmbiguousCreateError(key, entry, problem)
        if unreadable is not None:
            raise unreadable
        return entry

    async def _settle(self, key: str, plan: Callable[..., Any], *args: Any) -> Any:
        """Write a create's outcome, again while the database is away.

        What cannot be written at once is kept (an answer in the spool too) until it is.
        """
        try:
            with anyio.CancelScope(shield=True):
                return await self.store.write_once(plan, key, self.owner, *args)
        except Exception as exc:  # whatever failed, the outcome must not be lost
            kept = await self._keep(key, plan, (key, self.owner, *args), exc)
        finally:
            self.settled.fire()
        try:
            row = await self.store.write(plan, key, self.owner, *args)
        except Exception as again:
            answer = args[0] if plan is settle_created else None  # what was charged, if known
            raise err.LedgerError(
                f"ledger key {key!r}: {kept}: {again}",
                created=answer and (answer.task_id or answer.project_id),
                credits_cost=answer and answer.cost,
            ) from again
        await self._drop(key)
        return row

    async def _checked(self, key: str, answer: Settled, row: Any) -> Row:
        if row is None:  # another create of this key was answered meanwhile
            logger.error(
                "ledger key %r: created %s, but the key holds another create: both are charged",
                key,
                answer.task_id or answer.project_id,
            )
            row = await self.store.read(get, key)
        return dict(row)

    async def _keep(self, key: str, plan: Any, args: tuple[Any, ...], exc: BaseException) -> str:
        """Keep an outcome to write later (an answer also in the spool); say what was kept."""
        path = ""
        if plan is settle_created:
            answer: Settled = args[2]
            created = answer.task_id or answer.project_id
            record = {"key": key, "owner": self.owner, **attrs.asdict(answer)}
            with anyio.CancelScope(shield=True):
                try:
                    path = await anyio.to_thread.run_sync(self.spool.put, record)
                except OSError as problem:
                    logger.error(  # noqa: TRY400 - the id must reach the log, traceback or not
                        "ledger key %r: created %s, but neither the ledger (%s) nor the spool"
                        " in %s (%s) could record it: keep this id",
                        *(key, created, exc, spool_directory(), problem),
                    )
            where = f"it is kept in {path}" if path else "its id was logged at ERROR"
            kept = f"created {created}, not recorded yet: {where}"
        else:
            kept = f"the create failed ({args[2]}), not recorded yet: kept by this process"
        self._kept[key] = (plan, args, path)
        logger.warning("ledger key %r: %s (%s)", key, kept, exc)
        # Only a spool file outlives this process: without one, the write back is this
        # process's (a command that exits first leaves the entry to be found unknown).
        later = "when the database answers" if path else "by this process if the database answers"
        return f"{kept}, and written back {later}"

    async def _drop(self, key: str) -> None:
        _plan, _args, path = self._kept.pop(key, (None, (), ""))
        if path:
            await anyio.to_thread.run_sync(Spool.drop, path)

    async def repair(self) -> None:
        """Write back the outcomes kept while the database was away (here and in the spool).

        Stops at the first that still cannot be written.
        """
        now = time.monotonic()  # the event loop's clock, without asking anyio for it
        if now >= self._next_scan:  # what other processes of the machine left
            self._next_scan = now + 5.0
            for path, record in await anyio.to_thread.run_sync(self.spool.load):
                if record.get("key") not in self._kept:
                    answer = Settled(**{name: record[name] for name in attrs.fields_dict(Settled)})
                    args = (record["key"], record["owner"], answer, self._prices)
                    self._kept[record["key"]] = (settle_created, args, path)
        for key, (plan, args, _path) in list(self._kept.items()):
            try:
                row = await self.store.write_once(plan, *args)
            except Exception:  # still away (or failing): kept for the next operation
                return
            if plan is settle_created:
                await self._checked(key, args[2], row)
            logger.info("ledger key %r: its create's outcome written back", key)
            await self._drop(key)
            self.settled.fire()
