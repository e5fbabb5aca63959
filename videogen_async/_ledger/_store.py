"""What the ledger needs of a database, and how a URL picks the engine.

Both engines hold the same rules: every state change is one transaction, claims are decided
in SQL (a row is claimed by an ``UPDATE`` whose condition is the claim rule), keys are
idempotent by the primary key (``INSERT ... ON CONFLICT DO NOTHING``), and the budget is
reserved while its row is locked for the transaction.
"""

from __future__ import annotations

import abc
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._contract._exceptions import LedgerError

__all__ = [
    "CreateStart",
    "Hold",
    "Store",
    "claim_count",
    "fair_share",
    "parse_url",
    "reservation",
    "share_and_held",
    "share_of",
]

Row = Mapping[str, Any]


@attrs.frozen
class CreateStart:
    """The outcome of writing an entry before its create is sent.

    Attributes:
        outcome: ``new`` (this caller sends the create), ``existing`` (the key is taken:
            ``row`` holds it; nothing is sent), ``budget`` (the cap refuses it), ``wait``
            (a create of unknown price holds the rest of the budget; try again soon).
        row: The entry's row.
        estimate: The credits reserved for the create.
        spent: Credits spent through the ledger when decided.
        reserved: Credits reserved when decided.
    """

    outcome: str
    row: Row | None = None
    estimate: float = 0.0
    spent: float = 0.0
    reserved: float = 0.0


@attrs.frozen
class Hold:
    """Who writes an entry ahead of its create, for how long, and what it may reserve.

    Attributes:
        owner: The creator's id (the entry's ``owner`` while it is ``creating``).
        lease: Seconds the creator holds the entry before it counts as dead.
        cap: ``max_credits`` (``None``: no cap).
        estimate: The worst-case price, or ``None`` when it cannot be estimated.
    """

    owner: str
    lease: float
    cap: float | None
    estimate: float | None


@attrs.frozen
class NewEntry:
    """The columns of an entry written before its create is sent."""

    key: str
    kind: str
    request: str
    model: str | None
    duration: int | None
    project_id: str | None = None

    def columns(self) -> tuple[Any, ...]:
        """``(key, kind, project_id, model, duration, request)``, in the order of the inserts."""
        return (self.key, self.kind, self.project_id, self.model, self.duration, self.request)


def decide_budget(
    *,
    cap: float | None,
    spent: float,
    reserved: float,
    unpriced: int,
    estimate: float | None,
) -> tuple[str, float]:
    """Decide a reservation while the budget row is locked.

    Args:
        cap: ``max_credits`` (``None``: no cap, nothing is reserved).
        spent: Credits spent.
        reserved: Credits reserved.
        unpriced: Creates in flight of unknown price.
        estimate: The worst-case price, or ``None`` when it cannot be estimated.

    Returns:
        ``(outcome, credits to reserve)``; outcome ``ok``, ``budget`` or ``wait``.
    """
    if cap is None:
        return "ok", 0.0
    if estimate is None:
        if unpriced:
            return "wait", 0.0
        rest = cap - spent - reserved
        return ("ok", rest) if rest > 0 else ("budget", 0.0)
    if spent + reserved + estimate <= cap + 1e-9:
        return "ok", estimate
    return ("wait" if unpriced else "budget"), estimate


def reservation(budget: Row, hold: Hold) -> tuple[CreateStart | None, float, int]:
    """Decide a create's reservation from the budget row, locked by the caller's transaction.

    Returns:
        ``(refusal, credits to reserve, unpriced creates to add)``; the refusal is ``None``
        when the reservation is made.
    """
    outcome, amount = decide_budget(
        cap=hold.cap,
        spent=budget["spent"],
        reserved=budget["reserved"],
        unpriced=budget["unpriced"],
        estimate=hold.estimate,
    )
    if outcome != "ok":
        refusal = CreateStart(
            outcome, estimate=amount, spent=budget["spent"], reserved=budget["reserved"]
        )
        return refusal, amount, 0
    return None, amount, 1 if (hold.cap is not None and hold.estimate is None) else 0


def fair_share(*, limit: int, open_entries: int, watchers: int, held: int) -> int:
    """How many entries a watcher claims now: its fair share of the open entries.

    A watcher holds at most ``ceil(open / live watchers)`` entries (itself counted), so that
    watchers started together spread a backlog instead of the first one taking all of it.

    Args:
        limit: The most this claim may take (``claim_size``).
        open_entries: Entries pending, or terminal and undelivered.
        watchers: Live watchers (this one included).
        held: Entries this watcher holds.

    Returns:
        The entries to claim (0: none).
    """
    return max(0, min(limit, share_of(open_entries, watchers) - held))


def share_of(open_entries: int, watchers: int) -> int:
    """``ceil(open_entries / watchers)``: what one of ``watchers`` live watchers may hold."""
    return -(-open_entries // max(watchers, 1))


def claim_count(counts: Row, limit: int) -> int:
    """:func:`fair_share` from a counts row (``open``, ``live`` and ``mine``, both engines)."""
    return fair_share(
        limit=limit,
        open_entries=int(counts["open"]),
        watchers=int(counts["live"]),
        held=int(counts["mine"]),
    )


def share_and_held(counts: Row) -> tuple[int, int]:
    """``(fair share, entries held)`` from a counts row, as :meth:`Store.share` returns them."""
    return share_of(int(counts["open"]), int(counts["live"])), int(counts["mine"])


class Store(abc.ABC):
    """One engine's connection to a ledger."""

    url_for_errors: str = ""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect, check the database is a ledger of a known version, create the schema."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Disconnect."""

    @abc.abstractmethod
    async def begin_create(self, new: NewEntry, hold: Hold) -> CreateStart:
        """Write a ``creating`` entry (or take back a ``refused`` one) and reserve its price."""

    @abc.abstractmethod
    async def restart_unknown(self, key: str, hold: Hold) -> CreateStart:
        """Move an ``unknown`` entry back to ``creating`` for an explicit resend."""

    @abc.abstractmethod
    async def settle_created(
        self, key: str, *, task_id: str | None, project_id: str | None, cost: float
    ) -> Row:
        """Record the answer of a create: ``pending`` with its id; settle the budget."""

    @abc.abstractmethod
    async def settle_failed(self, key: str, *, state: str, error: str) -> Row:
        """Record a create that failed: ``refused`` or ``unknown``; settle the budget."""

    @abc.abstractmethod
    async def expire_creating(self, key: str | None = None) -> int:
        """Mark ``unknown`` the ``creating`` entries whose creator's lease ran out."""

    @abc.abstractmethod
    async def add_batch_tasks(
        self, project_key: str, project_id: str, task_ids: Sequence[str], request: str
    ) -> list[Row]:
        """Record the task ids of a project's video batch as ``pending`` entries."""

    @abc.abstractmethod
    async def get(self, key: str) -> Row | None:
        """The row of a key."""

    @abc.abstractmethod
    async def page(self, after: str | None, limit: int) -> list[Row]:
        """Rows in key order after ``after``."""

    @abc.abstractmethod
    async def summary(self) -> dict[str, Any]:
        """Counts per state, credits spent and reserved."""

    @abc.abstractmethod
    async def claim(self, owner: str, lease: float, limit: int) -> list[Row]:
        """Claim pending (or terminal, undelivered) entries whose lease is out.

        At most ``limit``, and at most this watcher's :func:`fair_share`, decided in the same
        transaction.
        """

    @abc.abstractmethod
    async def renew(self, owner: str, lease: float) -> int:
        """Extend every lease held by ``owner``, and its presence as a live watcher."""

    @abc.abstractmethod
    async def register(self, owner: str, lease: float) -> None:
        """Record ``owner`` as a live watcher for ``lease`` seconds (renewed by :meth:`renew`)."""

    @abc.abstractmethod
    async def share(self, owner: str) -> tuple[int, int]:
        """``(fair share, entries held)`` of a watcher, as :func:`fair_share` counts them."""

    @abc.abstractmethod
    async def release_keys(self, owner: str, keys: Sequence[str]) -> None:
        """Release pending entries held by ``owner`` (its share shrank: others joined)."""

    @abc.abstractmethod
    async def load_classes(self) -> dict[str, tuple[str, int]]:
        """Every remembered class: ``{class key: (stats JSON, version)}``."""

    @abc.abstractmethod
    async def save_class(self, key: str, stats: str, version: int) -> bool:
        """Store a class's stats if its version is still ``version`` (0: a new class).

        Returns:
            Whether it was stored (``False``: another watcher stored it first; merge, retry).
        """

    @abc.abstractmethod
    async def finish_many(
        self, owner: str, items: Sequence[tuple[str, str, float, str]], acks: Sequence[str]
    ) -> list[Row]:
        """In one transaction: record terminal states and mark delivered entries.

        Args:
            owner: The watcher.
            items: ``(key, state, cost, task JSON)`` of pending entries it holds.
            acks: Keys of terminal entries its consumer moved past.

        Returns:
            The rows whose terminal state was recorded (entries still held by ``owner``).
        """

    @abc.abstractmethod
    async def poll_failed(self, key: str, owner: str, error: str, retry_in: float) -> None:
        """Release an entry whose polls failed, not to be claimed for ``retry_in`` seconds."""

    @abc.abstractmethod
    async def release(self, owner: str) -> None:
        """Release every entry held by ``owner``; it is no longer a live watcher."""

    @abc.abstractmethod
    async def has_open(self, owner: str = "") -> bool:
        """Whether any entry is ``creating``, ``pending`` or terminal and undelivered.

        Terminal entries held by ``owner`` (on their way to its consumer) do not count.
        """

    @abc.abstractmethod
    async def pause_remaining(self) -> float:
        """Seconds left of the shared pause (0 when none)."""

    @abc.abstractmethod
    async def pause_for(self, seconds: float) -> None:
        """Extend the shared pause to at least ``seconds`` from now."""

    @abc.abstractmethod
    async def rate(self, model: str) -> float | None:
        """The highest price per second seen for a model."""

    writes: int = 0
    """Transactions that changed something (for the benchmark)."""


def parse_url(url: str | os.PathLike[str]) -> tuple[str, str]:
    """Tell the engine of a ledger URL.

    Args:
        url: A file path, ``sqlite:///PATH`` or ``postgresql://...``.

    Returns:
        ``("sqlite", path)`` or ``("postgresql", url)``.

    Raises:
        LedgerError: A URL that names neither.
    """
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str) or not url.strip():
        raise LedgerError(f"ledger url: must be a file path or a database URL, got {url!r}")
    text = url.strip()
    scheme, sep, _rest = text.partition("://")
    if not sep:
        if text == ":memory:":
            raise LedgerError("ledger url: ':memory:' cannot be shared; give a file path")
        return "sqlite", text
    scheme = scheme.lower()
    if scheme == "sqlite":
        path = text[len("sqlite://") :]
        if path.startswith("/") and not path.startswith("//"):
            path = path[1:] or ""
        if not path or path == ":memory:":
            raise LedgerError(f"ledger url {_redact(text)!r}: sqlite:///PATH needs a file path")
        return "sqlite", path
    if scheme in {"postgresql", "postgres"}:
        parsed = urllib.parse.urlsplit(text)
        try:
            parsed.port  # noqa: B018 - validates the port
        except ValueError:
            raise LedgerError(f"ledger url {_redact(text)!r}: the port is not a number") from None
        if not parsed.hostname and "host=" not in parsed.query:
            raise LedgerError(f"ledger url {_redact(text)!r}: no host")
        return "postgresql", text
    raise LedgerError(
        f"ledger url {_redact(text)!r}: unknown scheme {scheme!r}"
        " (use a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DBNAME)"
    )


def _redact(url: str) -> str:
    """The URL without its password."""
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError:
        return "<malformed url>"
    if parsed.password is None:
        return url
    netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@")
    return urllib.parse.urlunsplit(parsed._replace(netloc=netloc))


redact = _redact
