"""Where ``videogen batch`` keeps its lines: a ledger, or a journal of the earlier format.

``--journal URL`` names a ledger (a file path, ``sqlite:///PATH`` or ``postgresql://...``).
Each input line has a ledger key: the line's own ``key`` field when it has one, else
``batch:NAME:LINE:HASH`` (``NAME`` the input file's name, ``HASH`` the start of the SHA-256
of the validated request and the service's base URL). The ledger decides in the database
that a key is created once, so a rerun, or several processes running the same batch on one
PostgreSQL URL, create each line once; they wait on the lines with the ledger's shared
watchers.

A SQLite journal written by earlier versions (tables ``meta`` and ``lines``) keeps working: it
is detected by its tables and used as before, with one process at a time (:mod:`._journal`).
``--no-journal`` keeps such a journal in memory.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import attrs

from .._contract._exceptions import AmbiguousCreateError, VideoGenError
from .._ledger import Ledger, LedgerEntry
from ._common import describe_error
from ._journal import (
    CREATED,
    DONE,
    REFUSED,
    UNKNOWN,
    Journal,
    JournalEntry,
    JournalError,
    request_hash,
)
from ._spending import task_estimate
from ._tasks import wait_for_ids

if TYPE_CHECKING:
    from .._client import AsyncVideoGen
    from .._contract._exceptions import TaskPollError
    from .._contract._models import Task
    from ._common import Context

__all__ = [
    "JournalLines",
    "LedgerLines",
    "LineStore",
    "Waiting",
    "is_old_journal",
    "line_key",
    "open_store",
]

OnResult = Callable[[int, "Task | TaskPollError"], Awaitable[None]]


@attrs.frozen
class Waiting:
    """The lines a batch waits on, and how.

    Attributes:
        lines: ``(line number, key, task id)`` of each line.
        timeout: The batch's ``--timeout`` (a deadline for all), or ``None``.
        max_concurrency: Polls in flight at most.
        on_result: Called with each line's number and result as it finishes.
    """

    lines: list[tuple[int, str, str]]
    timeout: float | None
    max_concurrency: int
    on_result: OnResult


def line_key(
    batch: str, line_no: int, request: Mapping[str, Any], given: str | None, service: str
) -> str:
    """The ledger key of an input line.

    Args:
        batch: The batch's name (the input file's name).
        line_no: The line number.
        request: The validated request.
        given: The line's own ``key`` field, if any (used as it is).
        service: The service's base URL (a batch sent to another service is another batch).

    Returns:
        The key.
    """
    if given is not None:
        return given
    digest = request_hash({"request": dict(request), "service": service.rstrip("/")})
    return f"batch:{batch}:{line_no}:{digest[:16]}"


def is_old_journal(path: Path) -> bool:
    """Whether ``path`` is a SQLite journal of the earlier format (tables ``meta``, ``lines``)."""
    if not path.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            names = {
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
    except sqlite3.DatabaseError:
        return False
    return {"meta", "lines"} <= names and not any(n.startswith("videogen_ledger") for n in names)


class LineStore(Protocol):
    """What a batch needs from where it keeps its lines."""

    label: str
    enforces_cap: bool

    async def load(self, lines: Mapping[int, tuple[str, dict[str, Any]]]) -> dict[int, Any]: ...

    async def create(
        self, client: AsyncVideoGen, line_no: int, key: str, request: dict[str, Any], resend: bool
    ) -> JournalEntry: ...

    async def finished(self, line_no: int, task: Task) -> None: ...

    async def downloaded(self, line_no: int, path: str) -> None: ...

    async def wait(self, ctx: Context, client: AsyncVideoGen, waiting: Waiting) -> list[int]: ...

    async def close(self) -> None: ...


class JournalLines:
    """A journal of the earlier format, used as before (one process at a time)."""

    enforces_cap = False

    def __init__(self, journal: Journal, label: str) -> None:
        self.journal = journal
        self.label = label

    async def load(self, lines: Mapping[int, tuple[str, dict[str, Any]]]) -> dict[int, Any]:
        entries = await self.journal.entries()
        for line_no, entry in entries.items():
            line = lines.get(line_no)
            if line is None:
                raise JournalError(
                    f"the journal has line {line_no}, which is not a valid request line of"
                    " the input now: the input changed since the journal was written"
                )
            if request_hash(line[1]) != entry.request_hash:
                raise JournalError(
                    f"line {line_no} of the input differs from the request the journal"
                    " recorded for it: the input changed since the journal was written"
                )
        return dict(entries)

    async def create(
        self, client: AsyncVideoGen, line_no: int, key: str, request: dict[str, Any], resend: bool
    ) -> JournalEntry:
        await self.journal.mark_attempted(line_no, request)
        try:
            created = await client.tasks.create(**request)
        except VideoGenError as exc:
            await self.journal.mark_failed_create(
                line_no, unknown=exc.request_may_have_taken_effect, error=describe_error(exc)
            )
            raise
        await self.journal.mark_created(line_no, created.task_id, created.credits_cost)
        return JournalEntry(
            line_no, "", CREATED, task_id=created.task_id, credits=created.credits_cost
        )

    async def finished(self, line_no: int, task: Task) -> None:
        await self.journal.mark_done(
            line_no,
            status=str(task.status),
            video_url=task.video_url,
            error=task.error_message,
            credits=task.credits_cost,
        )

    async def downloaded(self, line_no: int, path: str) -> None:
        await self.journal.mark_downloaded(line_no, path)

    async def wait(self, ctx: Context, client: AsyncVideoGen, waiting: Waiting) -> list[int]:
        line_of = {task_id: no for no, _, task_id in waiting.lines}

        async def each(task_id: str, item: Task | TaskPollError) -> None:
            await waiting.on_result(line_of[task_id], item)

        await wait_for_ids(
            ctx,
            client,
            list(line_of),
            timeout=waiting.timeout,
            max_concurrency=waiting.max_concurrency,
            on_result=each,
        )
        return []

    async def close(self) -> None:
        await self.journal.close()


def _entry_of(line_no: int, entry: LedgerEntry) -> JournalEntry | None:
    task = entry.task
    if entry.state == "pending":
        return JournalEntry(line_no, "", CREATED, task_id=entry.task_id, credits=entry.credits_cost)
    if entry.state in ("unknown", "refused"):
        state = UNKNOWN if entry.state == "unknown" else REFUSED
        return JournalEntry(line_no, "", state, error=entry.error)
    if entry.is_terminal:
        return JournalEntry(
            line_no,
            "",
            DONE,
            task_id=entry.task_id,
            credits=entry.credits_cost,
            status=entry.state,
            video_url=task.video_url if task is not None else None,
            error=(task.error_message if task is not None else None) or entry.error,
        )
    return None  # creating: another process is sending it; create_task waits for it


class LedgerLines:
    """The batch on a ledger: creates by key, waits with the ledger's shared watchers."""

    enforces_cap = True

    def __init__(self, ledger: Ledger, label: str) -> None:
        self.ledger = ledger
        self.label = label
        self.keys: dict[int, str] = {}

    async def load(self, lines: Mapping[int, tuple[str, dict[str, Any]]]) -> dict[int, Any]:
        found: dict[int, Any] = {}
        for line_no, (key, _) in lines.items():
            self.keys[line_no] = key
            entry = await self.ledger.get(key)
            known = None if entry is None else _entry_of(line_no, entry)
            if known is not None:
                found[line_no] = known
        return found

    async def create(
        self, client: AsyncVideoGen, line_no: int, key: str, request: dict[str, Any], resend: bool
    ) -> JournalEntry:
        fields = {name: value for name, value in request.items() if name != "prompt"}
        try:
            if resend:
                entry = await self.ledger.resend(client, key)
            else:
                entry = await self.ledger.create_task(client, request["prompt"], key=key, **fields)
        except AmbiguousCreateError as exc:
            cause = exc.__cause__
            if isinstance(cause, VideoGenError):
                raise cause from None
            raise
        known = _entry_of(line_no, entry)
        if known is None:  # pragma: no cover - create_task answers only settled entries
            raise VideoGenError(f"ledger key {key!r}: left in state {entry.state!r}")
        return known

    async def finished(self, line_no: int, task: Task) -> None:
        return None  # the watcher wrote it

    async def downloaded(self, line_no: int, path: str) -> None:
        return None  # the manifest has the path; the ledger keeps the task

    async def wait(self, ctx: Context, client: AsyncVideoGen, waiting: Waiting) -> list[int]:
        line_of = {key: no for no, key, _ in waiting.lines}
        remaining = dict(line_of)
        with ctx.ui.progress("waiting", len(line_of)) as bar:

            async def settle(entry: LedgerEntry) -> None:
                no = remaining.pop(entry.key, None)
                if no is not None and entry.task is not None:
                    await waiting.on_result(no, entry.task)
                    bar.advance(detail=f"{len(line_of) - len(remaining)} finished")

            async def look(tg: Any) -> None:
                # Lines finished by the watchers of other processes.
                while remaining:
                    if len(remaining) > 200:  # one paged scan rather than a query per line
                        found = [e async for e in self.ledger.entries() if e.key in remaining]
                    else:
                        keys = list(remaining)
                        found = [e for e in [await self.ledger.get(k) for k in keys] if e]
                    for entry in found:
                        if entry.is_terminal:
                            await settle(entry)
                    if not remaining:
                        break
                    await anyio.sleep(1.0)
                tg.cancel_scope.cancel()

            timeout = waiting.timeout
            with anyio.move_on_after(timeout if timeout is not None else float("inf")):
                async with (
                    self.ledger.watch(
                        client, max_concurrency=waiting.max_concurrency, claim_interval=0.5
                    ) as finished,
                    anyio.create_task_group() as tg,
                ):
                    tg.start_soon(look, tg)
                    async for entry in finished:
                        await settle(entry)
                        if not remaining:
                            tg.cancel_scope.cancel()
                            break
        return sorted(remaining.values())

    async def close(self) -> None:
        await self.ledger.aclose()


async def open_store(where: str | None, *, base_url: str, max_credits: float | None) -> LineStore:
    """Open what ``--journal`` names: a ledger, or a journal of the earlier format.

    Args:
        where: The ``--journal`` value; ``None`` (``--no-journal``): a journal in memory.
        base_url: The service (a journal of the earlier format is bound to one).
        max_credits: The ledger's cap (``--max-credits``).

    Returns:
        The store.

    Raises:
        JournalError: A journal of the earlier format that cannot be used.
        LedgerError: A ledger that cannot be opened.
    """
    if where is None:
        return JournalLines(await Journal.open(None, base_url=base_url), "(in memory)")
    is_url = "://" in where
    if not is_url and await anyio.to_thread.run_sync(is_old_journal, Path(where)):
        return JournalLines(await Journal.open(where, base_url=base_url), where)
    ledger = await Ledger.open(
        where,
        max_credits=max_credits,
        price_estimate=lambda model, duration: task_estimate(
            {"model": model, "duration": duration}
        ),
    )
    return LedgerLines(ledger, where)
