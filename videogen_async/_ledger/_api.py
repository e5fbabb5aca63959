"""``Ledger``: charged task ids that survive crashes, shared by processes and machines."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from .._contract import _checks as checks
from .._contract._closing import AsyncClosing, ExitCloses
from .._contract._exceptions import InvalidRequestError, LedgerError
from .._contract._service import TASK_REQUEST
from .._contract._validation import json_text, validate_task_request
from .._http._options import CALL_OPTIONS, CallOptions
from ._creates import Creator, PriceEstimate, check_key
from ._dispatch import Dispatches
from ._engines import engine_for
from ._entry import LedgerEntry, check_metadata, entry_from_row
from ._listen import Listener, Waits
from ._plans import NewEntry, begin_create, get, page, restart_unknown, summary, update_metadata
from ._projects import ProjectCreates
from ._protocol import LedgerClient
from ._spool import Spool
from ._store import Engine, Store
from ._watch import Watch

if TYPE_CHECKING:
    from .._waiting._policy import PollPolicy

DEFAULT_MODEL: str = TASK_REQUEST.field("model").default
DEFAULT_DURATION: int = TASK_REQUEST.field("duration").default


class Ledger(ProjectCreates, Waits, Dispatches, AsyncClosing):
    """A durable record of every task created through it, shared by processes and machines.

    Open it with :meth:`open`::

        async with Ledger.open("tasks.db", max_credits=500) as ledger:
            entry = await ledger.create_task(client, "a red fox", key="fox-1")
            async with ledger.watch(client) as finished:
                async for entry in finished:
                    await notify(entry.key, entry.state, entry.task)
    """

    def __init__(self, store: Store, creator: Creator) -> None:
        self._store, self._creator = store, creator
        self._listener: Listener | None = None

    @staticmethod
    def open(
        url: str | os.PathLike[str],
        *,
        max_credits: float | None = None,
        price_estimate: PriceEstimate | None = None,
        outage_timeout: float = 30.0,
    ) -> LedgerOpener:
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
        return LedgerOpener(engine_for(url), max_credits, price_estimate, outage_timeout)

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
        key = check_key(key) if key is not None else uuid.uuid4().hex
        meta = check_metadata(metadata)
        options = {name: task_fields.pop(name) for name in CALL_OPTIONS if name in task_fields}
        extra = CallOptions.of(options).extra_body or {}
        body = validate_task_request({"prompt": prompt, **task_fields})
        model = str(extra.get("model") or body.get("model") or DEFAULT_MODEL)
        duration = extra.get("duration") or body.get("duration") or DEFAULT_DURATION
        if isinstance(duration, bool) or not isinstance(duration, int):
            rule = "its duration must be a whole number of seconds (the ledger prices by it)"
            raise InvalidRequestError("extra_body", rule)
        request = json_text({**body, "extra_body": extra} if extra else body, "", sort_keys=True)
        new = NewEntry(key, "task", request, model, duration, metadata=meta)
        estimate = self._creator.estimate(model, duration)
        fields = {name: value for name, value in body.items() if name != "prompt"}
        send = lambda: client.tasks.create(body["prompt"], **fields, **options)  # noqa: E731
        return await self._creator.create(begin_create, new, key, estimate, send)

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
        row = await self._store.read(get, check_key(key))
        if row is None:
            raise LedgerError(f"ledger key {key!r}: no such entry")
        if row["state"] != "unknown" or row["kind"] != "task":
            raise LedgerError(
                f"ledger key {key!r}: only an unknown task entry can be resent"
                f" (it is a {row['kind']} entry in state {row['state']!r})"
            )
        body = json.loads(row["request"])
        fields = {name: value for name, value in body.items() if name != "prompt"}
        estimate = self._creator.estimate(row["model"] or DEFAULT_MODEL, row["duration"] or 0)
        send = lambda: client.tasks.create(body["prompt"], **fields)  # noqa: E731
        return await self._creator.create(restart_unknown, key, key, estimate, send)

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
        wanted = check_metadata(metadata, "metadata") if metadata else None
        return self._entries(wanted, page_size)

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
            InvalidRequestError: The metadata would break a rule; nothing was written.
            LedgerError: No such key.
        """
        key = check_key(key)
        check_metadata(patch, "patch")
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
        """
        return Watch(
            self._store,
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

    @property
    def store(self) -> Store:
        """The ledger's database (for tools and benchmarks)."""
        return self._store

    async def aclose(self) -> None:
        """Stop listening for changes; close the connections. Idempotent."""
        if self._listener is not None:
            await self._listener.stop()
        await self._store.close()

    def __repr__(self) -> str:
        return f"<Ledger {self._store.engine.dialect.name}>"


@attrs.define(eq=False, repr=False)
class LedgerOpener(ExitCloses):
    """What :meth:`Ledger.open` returns: ``async with`` it, or ``await`` it."""

    _engine: Engine
    _max_credits: float | None
    _price_estimate: PriceEstimate | None
    _outage_timeout: float
    _ledger: Ledger | None = attrs.field(default=None, init=False)

    async def _open(self) -> Ledger:
        engine = self._engine
        store = Store(engine, self._outage_timeout)
        await store.open()
        spool = Spool(engine.where, local=engine.dialect.name == "sqlite")
        creator = Creator(
            store, spool, max_credits=self._max_credits, price_estimate=self._price_estimate
        )
        try:
            await creator.repair()  # answers that processes of this machine could not record
        except BaseException:
            await store.close()
            raise
        return Ledger(store, creator)

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
