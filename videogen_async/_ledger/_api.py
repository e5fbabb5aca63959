"""``Ledger``: charged task ids that survive crashes, shared by processes and machines.

A facade over the parts it owns: the creates (``_creates.Creator``: tasks, projects and their
video batches), the listening (``_changes.Waits``: ``wait`` and ``changes``), the dispatch
(``_dispatch.Dispatches``) and the store they share. Each public call checks its arguments
here or in its part, before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._contract import _checks as checks
from .._contract._checks import check_key
from .._contract._closing import AsyncClosing
from .._contract._exceptions import InvalidRequestError, LedgerError
from .._http._retry import BackoffPolicy
from . import _changes, _dispatch
from ._changes import Changes
from ._creates import Creator, PriceEstimate
from ._dispatch import Deliver
from ._engines import engine_for
from ._entry import LedgerEntry, check_metadata, entry_from_row
from ._listen import Listener
from ._opener import LedgerOpener
from ._plans import get, page, summary, update_metadata
from ._protocol import LedgerClient
from ._store import Store
from ._watch import Watch

if TYPE_CHECKING:
    from .._waiting._policy import PollPolicy


class Ledger(AsyncClosing):
    """A durable record of every task created through it, shared by processes and machines.

    Open it with :meth:`open`::

        async with Ledger.open("tasks.db", max_credits=500) as ledger:
            entry = await ledger.create_task(client, "a red fox", key="fox-1")
            async with ledger.watch(client) as finished:
                async for entry in finished:
                    await notify(entry.key, entry.state, entry.task)
    """

    def __init__(self, creator: Creator) -> None:
        self._creator = creator
        self._store = creator.store
        self._listener = Listener(creator.store)  # the one listener, started on first use

    @staticmethod
    def open(
        url: str | os.PathLike[str],
        *,
        max_credits: float | None = None,
        price_estimate: PriceEstimate | None = None,
        outage_timeout: float = 30.0,
    ) -> LedgerOpener[Ledger]:
        """Open (and on first use create) a ledger: ``async with Ledger.open(url) as ledger:``.

        Args:
            url: A file path or ``sqlite:///PATH`` (one machine), or
                ``postgresql://USER:PASSWORD@HOST:PORT/DBNAME`` (``[postgres]`` extra).
            max_credits: Refuse creates that could take the credits charged through this
                ledger (by every process) past this cap (``None``: no cap).
            price_estimate: ``(model, duration) -> credits`` reserved under ``max_credits``
                before a create (``None``: the highest price answered for them).
            outage_timeout: Seconds an operation retries a silent database before raising
                ``LedgerError``.

        Returns:
            An async context manager (or awaitable, then :meth:`aclose`) of the :class:`Ledger`.

        Raises:
            LedgerError: A malformed URL, an unreachable database, a database that is not a
                ledger, or a ledger of a newer schema (raised on entering).
            InvalidRequestError: ``max_credits`` is not a number >= 0, or ``outage_timeout``
                not a number > 0.
        """
        if max_credits is not None:
            checks.number("max_credits", max_credits)
        checks.positive("outage_timeout", outage_timeout)
        if price_estimate is not None and not callable(price_estimate):
            raise InvalidRequestError("price_estimate", "must be a callable(model, duration)")
        return LedgerOpener(Ledger, (engine_for(url), outage_timeout, max_credits, price_estimate))

    @property
    def max_credits(self) -> float | None:
        """The cap on credits charged through the ledger (``None``: none)."""
        return self._creator.max_credits

    async def create_task(
        self,
        client: LedgerClient,
        prompt: str,
        *,
        key: str | None = None,
        metadata: dict[str, Any] | None = None,
        **task_fields: Any,
    ) -> LedgerEntry:
        """Create a task through the ledger: written before it is sent, its id the moment known.

        Args:
            client: The client that sends the create.
            prompt: The prompt.
            key: Idempotency across the ledger's processes: a created key returns its entry,
                sending nothing (``None``: a random key).
            metadata: A JSON object kept with the entry (at most 16 KiB, 8 levels deep).
            **task_fields: The other fields and per-call options of ``client.tasks.create``
                (``extra_body`` is kept for :meth:`resend` and read for the price).

        Returns:
            The entry, ``pending`` with its ``task_id`` (a key created before: as held;
            ``refused`` keys are sent again).

        Raises:
            InvalidRequestError: A field (key, metadata) breaks a rule; nothing written.
            AmbiguousCreateError: This key's create may have taken effect, its id unknown (or
                unpollable); nothing more is sent (see :meth:`resend`).
            BudgetExceededError: The create could pass ``max_credits``; nothing was sent.
            APIStatusError: The service refused the create (the entry is ``refused``).
            APIResponseError: The answer names the id but is otherwise unreadable (the entry
                is ``pending`` with that id).
            LedgerError: The ledger could not be used (nothing sent), or the answer could not
                be recorded (its id is kept and written back later; the message says where).
        """
        return await self._creator.create_task(client, prompt, key, metadata, task_fields)

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
        return await self._creator.resend(client, check_key(key))

    async def get(self, key: str) -> LedgerEntry | None:
        """The entry of a key, or ``None``.

        Args:
            key: The key.

        Returns:
            The entry as the ledger holds it now.
        """
        key = check_key(key)
        await self._creator.repair()
        row = await self._store.read(get, key)
        return None if row is None else entry_from_row(row)

    def entries(
        self, *, metadata: dict[str, Any] | None = None, page_size: int = 500
    ) -> AsyncIterator[LedgerEntry]:
        """Every entry the ledger holds (or those with some metadata), in key order.

        Args:
            metadata: Only entries whose metadata holds each of these keys with an equal JSON
                value (``{"tenant": "acme"}``).
            page_size: Rows read per query.

        Returns:
            An async iterator of the entries, read a page at a time.

        Raises:
            InvalidRequestError: ``metadata`` is not a JSON object.
        """
        return self._entries(check_metadata(metadata) if metadata else None, page_size)

    async def _entries(self, wanted: str | None, page_size: int) -> AsyncIterator[LedgerEntry]:
        await self._creator.repair()
        after = ""
        while True:
            rows = await self._store.read(page, after, page_size, wanted)
            for row in rows:
                yield entry_from_row(row)
            if len(rows) < page_size:
                return
            after = rows[-1]["key"]

    async def summary(self, *, group_by: str | None = None) -> dict[str, Any]:
        """Counts of entries per state, the credits spent and reserved, the deliveries.

        Args:
            group_by: A metadata key: also count entries and credits per value of it.

        Returns:
            ``{"states": {state: count}, "spent": credits, "reserved": credits,
            "destinations": {name: {"pending": n, "delivered": n, "dead": n}}}``; with
            ``group_by``, also ``"groups": {value: {"states": {...}, "spent": credits}}``
            (``None``: the entries without the key).

        Raises:
            InvalidRequestError: ``group_by`` is not a non-empty string.
        """
        if group_by is not None and (not isinstance(group_by, str) or not group_by):
            rule = "must be a metadata key (a non-empty string)"
            raise InvalidRequestError("group_by", rule, value=group_by, has_value=True)
        await self._creator.repair()
        return await self._store.read(summary, group_by)

    async def update_metadata(self, key: str, patch: dict[str, Any]) -> LedgerEntry:
        """Merge ``patch`` into an entry's metadata (RFC 7386: ``None`` removes a key).

        Args:
            key: The entry's key.
            patch: A JSON object.

        Returns:
            The entry with its new metadata.

        Raises:
            InvalidRequestError: ``patch`` is not a JSON object, or the metadata would break a
                rule (naming ``metadata``); nothing was written.
            LedgerError: No such key.
        """
        key = check_key(key)
        if check_metadata(patch) is None:
            raise InvalidRequestError("metadata", "must be a JSON object (the patch), got None")
        row = await self._store.write(update_metadata, key, patch)
        if row is None:
            raise LedgerError(f"ledger key {key!r}: no such entry")
        return entry_from_row(row)

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

        ``async with ledger.watch(client) as finished: async for entry in finished: ...``;
        the iteration raises ``LedgerError`` after ``outage_timeout`` (:meth:`open`).

        Args:
            client: The client that polls.
            lease: Seconds a claimed entry stays this watcher's unrenewed (renewed every
                third of it): a dead watcher's entries pass to others after this long.
            claim_size: Entries claimed at most per claim.
            claim_interval: Seconds between looks for new entries (and renewals).
            max_concurrency: Polls in flight at most per gather (``None``: its default).
            poll_policy: The poll policy (``None``: the client's).
            stop_when_idle: End the iteration once the ledger holds nothing open (no entry
                ``creating``, ``pending``, or terminal and not yet delivered).
            max_held: Entries held at most at once (``None``: no limit); claims are greedy.

        Returns:
            A :class:`Watch`: an async context manager of terminal :class:`LedgerEntry`.

        Raises:
            InvalidRequestError: ``lease`` or ``claim_interval`` is not a number of seconds
                > 0, or ``claim_size`` not an int >= 1 (a ``ValueError``).
        """
        return Watch(
            self._creator,
            client,
            lease=lease,
            claim_size=claim_size,
            claim_interval=claim_interval,
            max_concurrency=max_concurrency,
            poll_policy=poll_policy,
            stop_when_idle=stop_when_idle,
            max_held=max_held,
        )

    async def create_project(
        self,
        client: LedgerClient,
        reference_video_url: str,
        product_image_urls: Sequence[str],
        *,
        key: str | None = None,
        script_credits: float = 10.0,
        metadata: dict[str, Any] | None = None,
        **project_fields: Any,
    ) -> LedgerEntry:
        """Create a project through the ledger, with the guarantees of ``create_task``.

        Its batches' tasks are recorded by :meth:`create_videos` (:meth:`record_project_tasks`
        for auto mode's first batch).

        Args:
            client: The client that sends the create.
            reference_video_url: As ``client.projects.create``.
            product_image_urls: As ``client.projects.create``.
            key: The idempotency key (``None``: a fresh random key).
            script_credits: The price reserved under ``max_credits`` (the service's script
                charge, 10 credits).
            metadata: A JSON object kept with the entry, and with the entries of its tasks.
            **project_fields: The other fields of ``client.projects.create``.

        Returns:
            The project's entry (state ``pending``, ``project_id`` set).

        Raises:
            InvalidRequestError: ``metadata`` or the key breaks a rule; nothing was written.
            AmbiguousCreateError: The create may have taken effect without an id.
            BudgetExceededError: It could pass ``max_credits``.
        """
        return await self._creator.create_project(
            client,
            (reference_video_url, product_image_urls),
            key,
            script_credits,
            metadata,
            project_fields,
        )

    async def record_project_tasks(
        self, key: str, project_id: str, task_ids: Sequence[str]
    ) -> list[LedgerEntry]:
        """Record task ids of a project (kind ``project_task``, ``pending``) for watchers.

        Idempotent. An unpollable id is recorded ``unknown`` as ``KEY/#POSITION "ID"`` (the id
        escaped), with the reason. The entries take the project's metadata.

        Args:
            key: The project's ledger key (each task's key is ``KEY/TASK_ID``).
            project_id: The project.
            task_ids: The ids (e.g. ``Project.task_ids`` of an auto-mode project).

        Returns:
            The entries of these ids.
        """
        return await self._creator.record_project_tasks(key, project_id, task_ids)

    async def create_videos(
        self,
        client: LedgerClient,
        key: str,
        *,
        batch_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        **batch_fields: Any,
    ) -> list[LedgerEntry]:
        """Create a video batch of a ledger project, written ahead like every create.

        Its task ids are recorded with the answer (``project_task`` entries, keys
        ``KEY/TASK_ID``); a batch key created before returns its tasks, sending nothing.

        Args:
            client: The client that sends the create.
            key: The ledger key of the project (created with :meth:`create_project`).
            batch_key: Makes the batch idempotent (``None``: a fresh ``KEY/videos/...``).
            metadata: Merged over the project's metadata, kept on the batch's entries.
            **batch_fields: The fields of ``client.projects.create_videos``.

        Returns:
            The entries of the batch's tasks (``pending``).

        Raises:
            LedgerError: No such project key, or its project id is not known.
            AmbiguousCreateError: This batch's create may have taken effect, its ids unknown.
        """
        return await self._creator.create_videos(client, key, batch_key, metadata, batch_fields)

    async def wait(
        self,
        key: str,
        *,
        timeout: float | None = None,
    ) -> LedgerEntry:
        """Wait until an entry is terminal, whichever process records it; nothing is sent.

        Args:
            key: The entry's key (a task's).
            timeout: Seconds to wait at most (``None``: no limit).

        Returns:
            The entry, ``succeeded``, ``failed`` or ``error``.

        Raises:
            WaitTimeoutError: Not terminal in time (``last``: the entry as last seen).
            LedgerError: No such key, or an entry that never becomes terminal (a project, a
                video batch, a create the service refused).
            AmbiguousCreateError: The entry is (or becomes) ``unknown``.
        """
        return await _changes.wait(self._store, self._listener, key, timeout)

    def changes(
        self,
        *,
        keys: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
        after: int | None = None,
    ) -> Changes:
        """Every change of the ledger's entries, from every process, as each is committed.

        It starts at its first step (or on entering ``async with``), or just after ``after``;
        each change comes once, in ``position`` order.

        Args:
            keys: Only the changes of these keys.
            states: Only changes to these states (``pending``, ``succeeded``...).
            after: Resume just after this ``position`` from any process (``0``: every change
                kept).

        Returns:
            An async iterator of :class:`LedgerEntry` as at each change, with ``position``.

        Raises:
            InvalidRequestError: A bad key, an unknown state, or ``after`` not an int >= 0.
            LedgerError: On its first step: changes after ``after`` were pruned (the message
                names the oldest position still kept).
        """
        return _changes.changes(self._store, self._listener, keys, states, after)

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
        options = (lease, concurrency, attempt_timeout, backoff)
        return await _dispatch.dispatch(
            self._store, self._listener, name, deliver, stop_when_idle, backlog, options
        )

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
        return await _dispatch.redeliver(self._store, self._listener, name, keys)

    @property
    def store(self) -> Store:
        """The ledger's database (for tools and benchmarks)."""
        return self._store

    async def aclose(self) -> None:
        """Stop listening for changes; close the connections. Idempotent."""
        await self._listener.stop()
        await self._store.close()

    def __repr__(self) -> str:
        return f"<Ledger {self._store.engine.dialect.name}>"
