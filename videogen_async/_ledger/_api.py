"""``Ledger``: charged task ids that survive crashes, shared by processes and machines."""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from .._contract._closing import AsyncClosing
from .._contract._exceptions import InvalidRequestError, LedgerError
from ._creates import DEFAULT_CREATE_LEASE, LedgerCreates, PriceEstimate, _check_key
from ._entry import LedgerEntry, entry_from_row
from ._exit import ExitCloses
from ._postgres import PostgresStore
from ._protocol import LedgerClient
from ._sqlite import SQLiteStore
from ._store import NewEntry, Store, parse_url
from ._watch import Watch

if TYPE_CHECKING:
    from .._waiting._policy import PollPolicy

__all__ = ["DEFAULT_CREATE_LEASE", "Ledger", "LedgerOpener"]


class Ledger(LedgerCreates, AsyncClosing):
    """A durable record of every task created through it, shared by processes and machines.

    Open it with :meth:`open`::

        async with Ledger.open("tasks.db", max_credits=500) as ledger:
            entry = await ledger.create_task(client, "a red fox", key="fox-1")
            async with ledger.watch(client) as finished:
                async for entry in finished:
                    await notify(entry.key, entry.state, entry.task)
    """

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
        return await self._write_ahead(
            new,
            key,
            script_credits,
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


class LedgerOpener(ExitCloses):
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

    async def _exit(self, ok: bool) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            with anyio.CancelScope(shield=True):
                await ledger.aclose()
