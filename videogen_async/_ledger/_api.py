"""``Ledger``: charged task ids that survive crashes, shared by processes and machines."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from .._exceptions import (
    AmbiguousCreateError,
    BudgetExceededError,
    InvalidRequestError,
    LedgerError,
    VideoGenError,
)
from .._validation import validate_task_request
from ._entry import LedgerEntry, entry_from_row
from ._postgres import PostgresStore
from ._protocol import LedgerClient
from ._sqlite import SQLiteStore
from ._store import CreateStart, NewEntry, Store, parse_url
from ._watch import Signal, Watch

if TYPE_CHECKING:
    from .._polling import PollPolicy

__all__ = ["DEFAULT_CREATE_LEASE", "Ledger", "LedgerOpener"]

logger = logging.getLogger("videogen_async")

DEFAULT_CREATE_LEASE = 600.0
"""Seconds a ``creating`` entry is held by its process; past it, the entry is ``unknown``."""

DEFAULT_MODEL = "videomodel_2_0"
DEFAULT_DURATION = 5

PriceEstimate = Callable[[str, int], float]
"""``(model, duration) -> credits``: the worst-case price of a task."""


def _new_owner(role: str) -> str:
    return f"{role}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key.strip():
        raise InvalidRequestError("key", "must be a non-empty string", value=key, has_value=True)
    if len(key) > 500:
        raise InvalidRequestError("key", "must be at most 500 characters")
    return key


class Ledger:
    """A durable record of every task created through it, shared by processes and machines.

    Open it with :meth:`open`::

        async with Ledger.open("tasks.db", max_credits=500) as ledger:
            entry = await ledger.create_task(client, "a red fox", key="fox-1")
            async with ledger.watch(client) as finished:
                async for entry in finished:
                    await notify(entry.key, entry.state, entry.task)
    """

    def __init__(
        self,
        store: Store,
        *,
        max_credits: float | None = None,
        price_estimate: PriceEstimate | None = None,
        create_lease: float = DEFAULT_CREATE_LEASE,
    ) -> None:
        self._store = store
        self.max_credits = max_credits
        self._price_estimate = price_estimate
        self._create_lease = create_lease
        self._owner = _new_owner("creator")
        self._created = Signal()

    @staticmethod
    def open(
        url: str | os.PathLike[str],
        *,
        max_credits: float | None = None,
        price_estimate: PriceEstimate | None = None,
    ) -> LedgerOpener:
        """Open (and on first use create) a ledger.

        Use it as ``async with Ledger.open(url) as ledger:``; ``await Ledger.open(url)`` also
        works and then the caller calls :meth:`aclose`.

        Args:
            url: A file path or ``sqlite:///PATH`` (SQLite: one machine, any number of
                processes), or ``postgresql://USER:PASSWORD@HOST:PORT/DBNAME`` (shared by
                processes on many machines; needs the ``videogen-async[postgres]`` extra).
            max_credits: Refuse creates that could take the credits charged through this
                ledger (by every process) past this cap (``None``: no cap).
            price_estimate: ``(model, duration) -> credits``, the worst-case price reserved
                before a create is sent while ``max_credits`` is set. ``None``: the highest
                price per second of video this ledger has recorded for the model, times the
                duration; for a model it has not priced yet, the whole remaining budget (see
                ``docs/ledger.md``).

        Returns:
            An async context manager (also awaitable) giving the :class:`Ledger`.

        Raises:
            LedgerError: A malformed URL, an unreachable database, a database that is not a
                ledger, or a ledger of a newer schema (raised on entering).
            InvalidRequestError: ``max_credits`` is not a number >= 0.
        """
        if max_credits is not None and (
            isinstance(max_credits, bool)
            or not isinstance(max_credits, (int, float))
            or not math.isfinite(max_credits)
            or max_credits < 0
        ):
            raise InvalidRequestError(
                "max_credits", "must be a number >= 0 or None", value=max_credits, has_value=True
            )
        if price_estimate is not None and not callable(price_estimate):
            raise InvalidRequestError("price_estimate", "must be a callable(model, duration)")
        engine, where = parse_url(url)
        return LedgerOpener(engine, where, max_credits, price_estimate)

    # -- creates -----------------------------------------------------------------------------

    async def create_task(
        self,
        client: LedgerClient,
        prompt: str,
        *,
        key: str | None = None,
        **task_fields: Any,
    ) -> LedgerEntry:
        """Create a task through the ledger: written before it is sent, its id the moment known.

        Args:
            client: The client that sends the create.
            prompt: The prompt.
            key: Makes the create idempotent across every process of the ledger: a key already
                created returns its entry and sends nothing. ``None``: a fresh random key.
            **task_fields: The other fields of ``client.tasks.create`` (``model``,
                ``duration``, ``ratio``, ``function_mode``, ``image_urls``, ...).

        Returns:
            The entry: ``pending`` with its ``task_id`` (or, for a key created before, as the
            ledger holds it; ``refused`` keys are sent again).

        Raises:
            InvalidRequestError: A field breaks a rule of the service; nothing was written.
            AmbiguousCreateError: This key's create (now or earlier) may have taken effect and
                its id is unknown; nothing more is sent (see :meth:`resend`).
            BudgetExceededError: The create could pass ``max_credits``; nothing was sent.
            APIStatusError: The service refused the create (the entry is ``refused``).
            LedgerError: The ledger could not be written.
        """
        key = _check_key(key) if key is not None else uuid.uuid4().hex
        body = validate_task_request({"prompt": prompt, **task_fields})
        fields = {name: value for name, value in body.items() if name != "prompt"}
        model = str(body.get("model") or DEFAULT_MODEL)
        duration = int(body.get("duration") or DEFAULT_DURATION)
        new = NewEntry(
            key=key,
            kind="task",
            request=json.dumps(body, sort_keys=True),
            model=model,
            duration=duration,
        )
        estimate = await self._estimate(model, duration)
        start = await self._begin(
            lambda: self._store.begin_create(
                new,
                owner=self._owner,
                lease=self._create_lease,
                cap=self.max_credits,
                estimate=estimate,
            ),
            key,
        )
        if start.outcome == "existing":
            return await self._existing(key, start)
        return await self._send(key, lambda: client.tasks.create(body["prompt"], **fields))

    async def resend(self, client: LedgerClient, key: str) -> LedgerEntry:
        """Send again the create of an ``unknown`` key, accepting the risk of paying twice.

        Use it after checking (on the service's dashboard, or with the support) that the
        earlier create did not take effect, or when a duplicate is acceptable.

        Args:
            client: The client that sends the create.
            key: A key in state ``unknown``.

        Returns:
            The entry, ``pending`` with its new ``task_id``.

        Raises:
            LedgerError: No such key, or the key is not ``unknown``.
            AmbiguousCreateError: The resend too may have taken effect without an id.
            BudgetExceededError: The create could pass ``max_credits``.
        """
        row = await self._store.get(_check_key(key))
        if row is None:
            raise LedgerError(f"ledger key {key!r}: no such entry")
        if row["state"] != "unknown" or row["kind"] != "task":
            raise LedgerError(
                f"ledger key {key!r}: only an unknown task entry can be resent"
                f" (it is a {row['kind']} entry in state {row['state']!r})"
            )
        body = json.loads(row["request"])
        fields = {name: value for name, value in body.items() if name != "prompt"}
        estimate = await self._estimate(row["model"] or DEFAULT_MODEL, row["duration"] or 5)
        start = await self._begin(
            lambda: self._store.restart_unknown(
                key,
                owner=self._owner,
                lease=self._create_lease,
                cap=self.max_credits,
                estimate=estimate,
            ),
            key,
        )
        if start.outcome == "existing":
            raise LedgerError(f"ledger key {key!r}: was resent by another process meanwhile")
        return await self._send(key, lambda: client.tasks.create(body["prompt"], **fields))

    async def _estimate(self, model: str, duration: int) -> float | None:
        if self.max_credits is None:
            return 0.0
        if self._price_estimate is not None:
            value = float(self._price_estimate(model, duration))
            if not math.isfinite(value) or value < 0:
                raise InvalidRequestError("price_estimate", "must return a number >= 0")
            return value
        rate = await self._store.rate(model)
        return None if rate is None else rate * duration

    async def _begin(self, attempt: Callable[[], Any], key: str) -> CreateStart:
        delay = 0.02
        while True:
            start: CreateStart = await attempt()
            if start.outcome in {"new", "existing"}:
                return start
            if start.outcome == "budget":
                raise BudgetExceededError(
                    key,
                    estimate=start.estimate,
                    spent=start.spent,
                    reserved=start.reserved,
                    max_credits=self.max_credits or 0.0,
                )
            # A create of unknown price holds the rest of the budget until it is answered.
            await self._store.expire_creating()
            await anyio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, 0.5)

    async def _existing(self, key: str, start: CreateStart) -> LedgerEntry:
        row = start.row
        delay = 0.02
        while row is not None and row["state"] == "creating":
            # Another process is sending this key now: wait for its answer.
            if await self._store.expire_creating(key):
                row = await self._store.get(key)
                break
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.5)
            row = await self._store.get(key)
        if row is None:  # pragma: no cover - keys are never deleted
            raise LedgerError(f"ledger key {key!r}: vanished")
        entry = entry_from_row(row)
        if entry.state == "unknown":
            raise AmbiguousCreateError(key, entry, entry.error)
        return entry

    async def _send(self, key: str, send: Callable[[], Any]) -> LedgerEntry:
        store = self._store
        try:
            created = await send()
        except VideoGenError as exc:
            ambiguous = exc.request_may_have_taken_effect
            with anyio.CancelScope(shield=True):
                row = await store.settle_failed(
                    key, state="unknown" if ambiguous else "refused", error=str(exc)
                )
            if ambiguous:
                raise AmbiguousCreateError(key, entry_from_row(row), str(exc)) from exc
            raise
        except BaseException as exc:
            # Cancelled (or a bug) while the request may have been on the wire.
            with anyio.CancelScope(shield=True):
                await store.settle_failed(
                    key, state="unknown", error=f"interrupted: {type(exc).__name__}"
                )
            raise
        task_id = getattr(created, "task_id", None)
        project_id = getattr(created, "project_id", None)
        try:
            with anyio.CancelScope(shield=True):
                row = await store.settle_created(
                    key,
                    task_id=task_id,
                    project_id=project_id,
                    cost=float(created.credits_cost or 0.0),
                )
        except Exception as exc:
            logger.error(  # noqa: TRY400 - the id must reach the log even without a traceback
                "ledger key %r: created %s but the ledger could not record it: %s",
                key,
                task_id or project_id,
                exc,
            )
            raise LedgerError(
                f"ledger key {key!r}: created {task_id or project_id} but the ledger could not"
                f" record it: {exc}"
            ) from exc
        self._created.fire()
        return entry_from_row(row)

    # -- projects ----------------------------------------------------------------------------

    async def create_project(
        self,
        client: LedgerClient,
        reference_video_url: str,
        product_image_urls: Sequence[str],
        *,
        key: str | None = None,
        script_credits: float = 10.0,
        **project_fields: Any,
    ) -> LedgerEntry:
        """Create a project through the ledger, with the guarantees of :meth:`create_task`.

        The entry (kind ``project``) holds the ``project_id`` the moment it is known. The
        tasks of its video batches are recorded with :meth:`create_videos` (and, for the
        automatic first batch of auto mode, :meth:`record_project_tasks`).

        Args:
            client: The client that sends the create.
            reference_video_url: As ``client.projects.create``.
            product_image_urls: As ``client.projects.create``.
            key: The idempotency key (``None``: a fresh random key).
            script_credits: The price reserved under ``max_credits`` (the service's script
                charge, 10 credits).
            **project_fields: The other fields of ``client.projects.create``.

        Returns:
            The project's entry (state ``pending``, ``project_id`` set).

        Raises:
            AmbiguousCreateError: The create may have taken effect without an id.
            BudgetExceededError: It could pass ``max_credits``.
        """
        key = _check_key(key) if key is not None else uuid.uuid4().hex
        request = {
            "reference_video_url": reference_video_url,
            "product_image_urls": list(product_image_urls),
            **project_fields,
        }
        new = NewEntry(
            key=key,
            kind="project",
            request=json.dumps(request, sort_keys=True, default=str),
            model=None,
            duration=project_fields.get("duration"),
        )
        start = await self._begin(
            lambda: self._store.begin_create(
                new,
                owner=self._owner,
                lease=self._create_lease,
                cap=self.max_credits,
                estimate=script_credits,
            ),
            key,
        )
        if start.outcome == "existing":
            return await self._existing(key, start)
        return await self._send(
            key,
            lambda: client.projects.create(
                reference_video_url, list(product_image_urls), **project_fields
            ),
        )

    async def record_project_tasks(
        self, key: str, project_id: str, task_ids: Sequence[str]
    ) -> list[LedgerEntry]:
        """Record task ids of a project (kind ``project_task``, ``pending``) for watchers.

        Idempotent: an id already recorded is kept as it is.

        Args:
            key: The project's ledger key (each task's key is ``KEY/TASK_ID``).
            project_id: The project.
            task_ids: The ids (e.g. ``Project.task_ids`` of an auto-mode project).

        Returns:
            The entries of these ids.
        """
        rows: list[Any] = []
        ids = list(task_ids)
        request = json.dumps({"project_id": project_id})
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            rows += await self._store.add_batch_tasks(key, project_id, chunk, request)
        return [entry_from_row(row) for row in rows]

    async def create_videos(
        self, client: LedgerClient, key: str, **batch_fields: Any
    ) -> list[LedgerEntry]:
        """Create a video batch of a ledger project; record every task id of it at once.

        Args:
            client: The client that sends the create.
            key: The ledger key of the project (created with :meth:`create_project`).
            **batch_fields: The fields of ``client.projects.create_videos``.

        Returns:
            The entries of the batch's tasks (``pending``; keys ``KEY/TASK_ID``).

        Raises:
            LedgerError: No such project key, or its project id is not known.
        """
        row = await self._store.get(_check_key(key))
        if row is None or row["kind"] != "project" or not row["project_id"]:
            raise LedgerError(f"ledger key {key!r}: no project with a known id")
        batch = await client.projects.create_videos(row["project_id"], **batch_fields)
        return await self.record_project_tasks(key, row["project_id"], batch.task_ids)

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: str) -> LedgerEntry | None:
        """The entry of a key, or ``None``.

        Args:
            key: The key.

        Returns:
            The entry as the ledger holds it now.
        """
        row = await self._store.get(_check_key(key))
        return None if row is None else entry_from_row(row)

    async def entries(self, *, page_size: int = 500) -> AsyncIterator[LedgerEntry]:
        """Every entry the ledger holds, in key order, read a page at a time.

        Args:
            page_size: Rows read per query.

        Yields:
            Each entry.
        """
        after: str | None = None
        while True:
            rows = await self._store.page(after, page_size)
            for row in rows:
                yield entry_from_row(row)
            if len(rows) < page_size:
                return
            after = rows[-1]["key"]

    async def summary(self) -> dict[str, Any]:
        """Counts of entries per state, and the credits spent and reserved through the ledger.

        Returns:
            ``{"states": {state: count}, "spent": credits, "reserved": credits}``.
        """
        return await self._store.summary()

    # -- watching ----------------------------------------------------------------------------

    def watch(
        self,
        client: LedgerClient,
        *,
        lease: float = 30.0,
        claim_size: int = 1000,
        claim_interval: float = 1.0,
        max_concurrency: int | None = None,
        poll_policy: PollPolicy | None = None,
        stop_when_idle: bool = False,
        max_held: int | None = None,
    ) -> Watch:
        """Wait on the ledger's pending entries with other watchers; yield each terminal one.

        ::

            async with ledger.watch(client) as finished:
                async for entry in finished:
                    ...

        Args:
            client: The client that polls.
            lease: Seconds a claimed entry stays this watcher's without a renewal (renewed
                every third of it while the watcher lives); a watcher that dies leaves its
                entries to the others after this long.
            claim_size: Entries claimed at most per claim.
            claim_interval: Seconds between looks for new entries (and renewals).
            max_concurrency: Polls in flight at most per gather (``None``: its default).
            poll_policy: The poll policy (``None``: the client's).
            stop_when_idle: End the iteration once the ledger holds nothing open (no entry
                ``creating``, ``pending``, or terminal and not yet delivered).
            max_held: Entries this watcher holds at most at once (``None``: no limit; claims
                are greedy, so set it to spread a large backlog over several watchers).

        Returns:
            A :class:`Watch`: an async context manager whose value is an async iterator of
            terminal :class:`LedgerEntry`.
        """
        return Watch(
            self._created,
            self._store,
            client,
            lease=lease,
            claim_size=claim_size,
            claim_interval=claim_interval,
            max_concurrency=max_concurrency,
            poll_policy=poll_policy,
            stop_when_idle=stop_when_idle,
            max_held=max_held,
        )

    @property
    def store(self) -> Store:
        """The engine (for tools and benchmarks)."""
        return self._store

    async def aclose(self) -> None:
        """Close the connection. Idempotent."""
        await self._store.close()

    def __repr__(self) -> str:
        return f"<Ledger {type(self._store).__name__}>"

    async def __aenter__(self) -> Ledger:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class LedgerOpener:
    """What :meth:`Ledger.open` returns: ``async with`` it, or ``await`` it."""

    def __init__(
        self,
        engine: str,
        where: str,
        max_credits: float | None,
        price_estimate: PriceEstimate | None,
    ) -> None:
        self._engine = engine
        self._where = where
        self._max_credits = max_credits
        self._price_estimate = price_estimate
        self._ledger: Ledger | None = None

    async def _open(self) -> Ledger:
        store: Store = (
            SQLiteStore(self._where) if self._engine == "sqlite" else PostgresStore(self._where)
        )
        await store.open()
        return Ledger(store, max_credits=self._max_credits, price_estimate=self._price_estimate)

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> Ledger:
        self._ledger = await self._open()
        return self._ledger

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            with anyio.CancelScope(shield=True):
                await ledger.aclose()
