"""Where ``videogen batch`` keeps its lines: a ledger (``--journal URL``), one key per line.

A journal of the earlier format (tables ``meta`` and ``lines``) is made a ledger on first open:
a line with a task id becomes ``pending``, one whose create may have taken effect ``unknown``,
a refused one nothing (created again). The ledger is written beside it with
``Ledger.create_task`` (a client answering what the journal recorded), then copied over it with
SQLite's backup in one transaction: the path always holds one complete store, and a crash
before the copy commits leaves the journal to import again.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path
from typing import IO, Any

import anyio

from .._contract._validation import json_text

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory lock
    fcntl = None  # type: ignore[assignment]

from .._contract._exceptions import AmbiguousCreateError, VideoGenError
from .._contract._models import CreatedTask
from .._contract._service import REFERENCE_PRICES
from .._ledger import Ledger, LedgerEntry
from ._common import UsageError

_BUSY_TIMEOUT = 10.0


def request_hash(request: Mapping[str, Any]) -> str:
    """The SHA-256 of a request's canonical JSON (sorted keys, no spaces), as journals kept it."""
    return hashlib.sha256(
        json_text(request, "", sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()


def is_old_journal(path: Path) -> bool:
    """Whether ``path`` is a SQLite journal of the earlier format (tables ``meta``, ``lines``)."""
    if not path.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    except sqlite3.DatabaseError:
        return False
    names = {row[0] for row in rows}
    return {"meta", "lines"} <= names and "videogen_ledger_meta" not in names


def _lock(path: Path) -> IO[str] | None:
    """Take the advisory lock earlier versions hold on a journal (``PATH.lock``)."""
    flock = getattr(fcntl, "flock", None)
    if flock is None:  # pragma: no cover - Windows
        return None
    lock_path = path.with_name(path.name + ".lock")
    handle = open(lock_path, "a+")  # noqa: SIM115 - held until _unlock
    try:
        flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise UsageError(
            f"the journal {path} is in use by another videogen batch (lock {lock_path.name})"
        ) from None
    return handle


def _unlock(path: Path, handle: IO[str] | None) -> None:
    if handle is not None:
        path.with_name(path.name + ".lock").unlink(missing_ok=True)
        handle.close()


def _read(path: Path, base_url: str, keys: Mapping[int, tuple[str, Any]]) -> list[Any]:
    """The journal's lines, once its service and every line are found to match the input."""
    _drop(path.with_name(path.name + ".importing"))  # what a run that stopped mid-import left
    with contextlib.closing(sqlite3.connect(path, timeout=_BUSY_TIMEOUT)) as conn:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        rows = conn.execute(
            "SELECT line_no, request_hash, state, task_id, credits, error FROM lines"
            " ORDER BY line_no"
        ).fetchall()
    if meta.get("schema") != "1":
        raise UsageError(f"{path} has journal schema {meta.get('schema')!r}, not 1")
    if meta.get("base_url") != base_url:
        raise UsageError(
            f"the journal {path} was made for {meta.get('base_url')}, not {base_url}: its task"
            " ids mean nothing there. Use another --journal."
        )
    for line_no, digest, *_ in rows:
        line = keys.get(line_no)
        if line is None or request_hash(line[1]) != digest:
            raise UsageError(
                f"line {line_no} of the input differs from the request the journal recorded"
                " for it (or is no longer a valid request line): the input changed since the"
                " journal was written"
            )
    return rows


class _Replay:
    """A client whose one create answers with what the journal recorded for a line."""

    def __init__(self, task_id: str | None, credits: float | None, error: str | None) -> None:
        self._answer = task_id, credits, error
        self.tasks = self.projects = self

    async def create(self, *_: Any, **__: Any) -> CreatedTask:
        task_id, credits, error = self._answer
        if task_id is None:
            raise VideoGenError(error or "", request_may_have_taken_effect=True)
        return CreatedTask(task_id=task_id, credits_cost=float(credits or 0.0))

    get = create_videos = create


def _replace(source: Path, target: Path) -> None:
    """Copy the ledger over the journal in one transaction of the journal's file; drop it."""
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target, timeout=_BUSY_TIMEOUT)) as dst,
    ):
        src.backup(dst)  # through the target's own journal: readers keep a whole file
    _drop(source)


def _drop(ledger: Path) -> None:
    """Remove a SQLite file and whatever beside it carries its name (its WAL, its locks)."""
    for found in ledger.parent.glob(glob.escape(ledger.name) + "*"):
        if found.is_dir():
            shutil.rmtree(found, ignore_errors=True)
        else:
            found.unlink(missing_ok=True)


async def import_journal(path: Path, *, base_url: str, keys: Mapping[int, tuple[str, Any]]) -> int:
    """Make the journal at ``path`` a ledger at the same path; the number of lines imported.

    ``keys`` maps each valid input line's number to its ledger key and request.

    Raises:
        UsageError: The journal is in use, of another service or input, or unreadable.
    """
    importing = path.with_name(path.name + ".importing")
    try:
        lock = await anyio.to_thread.run_sync(_lock, path)
    except OSError as exc:
        raise UsageError(f"the journal {path} could not be locked: {exc}") from exc
    try:
        rows = await anyio.to_thread.run_sync(_read, path, base_url, keys)
        async with Ledger.open(importing) as ledger:
            for line_no, _digest, state, task_id, credits, error in rows:
                if state == "refused":
                    continue  # nothing was created: the batch sends it again
                key, request = keys[line_no]
                with contextlib.suppress(AmbiguousCreateError):
                    await ledger.create_task(
                        _Replay(
                            task_id if state in ("created", "done") else None,
                            credits,
                            error or "the earlier run stopped mid-create",
                        ),
                        key=key,
                        **request,
                    )
        await anyio.to_thread.run_sync(_replace, importing, path)
    except (sqlite3.Error, OSError) as exc:
        raise UsageError(f"the journal {path} could not be imported into a ledger: {exc}") from exc
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_unlock, path, lock)
    return sum(1 for row in rows if row[2] != "refused")


def line_key(
    batch: str, line_no: int, request: Mapping[str, Any], given: str | None, service: str
) -> str:
    """The ledger key of an input line: its own ``key``, else ``batch:NAME:LINE:HASH``.

    ``NAME`` is the input file's name, ``HASH`` the start of the SHA-256 of the request and of
    the service's base URL (a batch sent to another service is another batch).
    """
    if given is not None:
        return given
    digest = request_hash({"request": dict(request), "service": service.rstrip("/")})
    return f"batch:{batch}:{line_no}:{digest[:16]}"


def sqlite_path(where: str) -> Path | None:
    """The file of a SQLite ledger URL (a path or ``sqlite:///PATH``); ``None`` for another."""
    if where.startswith("sqlite:///"):
        return Path(where.removeprefix("sqlite:///"))
    return None if "://" in where else Path(where)


@contextlib.asynccontextmanager
async def open_ledger(
    where: str | None,
    *,
    base_url: str,
    max_credits: float | None,
    lines: Mapping[int, tuple[str, Any]],
) -> AsyncIterator[tuple[Ledger, int]]:
    """The batch's ledger and the number of lines imported into it from a journal.

    ``where`` is ``--journal`` (``None``, ``--no-journal``: a ledger in a temporary directory);
    ``lines`` maps each valid line's number to its key and request.

    Raises:
        UsageError: A journal of the earlier format that cannot be imported.
        LedgerError: A ledger that cannot be opened.
    """
    async with contextlib.AsyncExitStack() as stack:
        if where is None:  # made and removed off the event loop: file system calls block
            folder = await anyio.to_thread.run_sync(tempfile.TemporaryDirectory)
            stack.push_async_callback(anyio.to_thread.run_sync, folder.cleanup)
            where = str(Path(folder.name) / "batch.db")
        imported = 0
        path = sqlite_path(where)
        if path is not None and await anyio.to_thread.run_sync(is_old_journal, path):
            imported = await import_journal(path, base_url=base_url, keys=lines)
        async with Ledger.open(
            where,
            max_credits=max_credits,
            price_estimate=REFERENCE_PRICES.task_cost,
        ) as ledger:
            yield ledger, imported


async def input_of(ledger: Ledger) -> str | None:
    """The name of the input file whose lines the ledger holds (``None``: none yet).

    Read from the first ``batch:NAME:LINE:HASH`` key (lines with keys of their own say nothing).
    """
    async for entry in ledger.entries():
        prefix, _, rest = entry.key.partition(":")
        if prefix == "batch" and rest.count(":") >= 2:
            return rest.rsplit(":", 2)[0]
    return None


async def read_entries(ledger: Ledger, keys: Collection[str]) -> dict[str, LedgerEntry]:
    """The entries of ``keys`` that the ledger holds: one query each, or one scan for many."""
    if len(keys) > 200:
        wanted = set(keys)
        return {e.key: e async for e in ledger.entries() if e.key in wanted}
    return {key: entry for key in keys if (entry := await ledger.get(key)) is not None}
