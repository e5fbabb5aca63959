"""The creates of a ledger: reserve, send, record; the write-ahead half of ``Ledger``."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import uuid
from collections.abc import Callable
from typing import Any

import anyio

from .._contract._exceptions import (
    AmbiguousCreateError,
    BudgetExceededError,
    InvalidRequestError,
    LedgerError,
    VideoGenError,
)
from .._contract._validation import validate_task_request
from ._entry import LedgerEntry, entry_from_row
from ._protocol import LedgerClient
from ._store import CreateStart, Hold, NewEntry, Store
from ._watch import Signal

__all__ = ["DEFAULT_CREATE_LEASE", "LedgerCreates", "PriceEstimate"]

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


class LedgerCreates:
    """The creates of a :class:`~._api.Ledger`: each reserved, sent and recorded."""

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
        return await self._write_ahead(
            new, key, estimate, lambda: client.tasks.create(body["prompt"], **fields)
        )

    async def _write_ahead(
        self, new: Any, key: str, estimate: float | None, send: Callable[[], Any]
    ) -> LedgerEntry:
        """Commit the entry before sending; return the existing entry of a known key instead."""
        start = await self._begin(self._store.begin_create, new, key, estimate)
        if start.outcome == "existing":
            return await self._existing(key, start)
        return await self._send(key, send)

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
        start = await self._begin(self._store.restart_unknown, key, key, estimate)
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

    async def _begin(
        self, write: Callable[..., Any], entry: Any, key: str, estimate: float | None
    ) -> CreateStart:
        """Run the store's write-ahead step ``write(entry, ...)`` until it is decided."""
        delay = 0.02
        while True:
            start: CreateStart = await write(
                entry, Hold(self._owner, self._create_lease, self.max_credits, estimate)
            )
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
