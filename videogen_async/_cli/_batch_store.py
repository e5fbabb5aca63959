"""Where ``videogen batch`` keeps its lines: a ledger.

``--journal URL`` names the ledger (a file path, ``sqlite:///PATH`` or ``postgresql://...``;
``--no-journal``: one in a temporary directory, removed at the end). Each input line has a
ledger key: the line's own ``key`` field when it has one, else ``batch:NAME:LINE:HASH``
(``NAME`` the input file's name, ``HASH`` the start of the SHA-256 of the validated request
and the service's base URL). The ledger decides in the database that a key is created once,
so a rerun, or several processes running the same batch on one PostgreSQL URL, create each
line once; they wait on the lines with the ledger's shared watchers. A journal of the earlier
format at the path is first made a ledger (:mod:`._batch_import`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path
from typing import Any

import anyio

from .._ledger import Ledger, LedgerEntry
from ._batch_import import import_journal, is_old_journal, request_hash
from ._spending import task_estimate

__all__ = ["line_key", "open_ledger", "read_entries"]


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
    """
    if given is not None:
        return given
    digest = request_hash({"request": dict(request), "service": service.rstrip("/")})
    return f"batch:{batch}:{line_no}:{digest[:16]}"


def _sqlite_path(where: str) -> Path | None:
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
    """Open the batch's ledger, importing a journal of the earlier format at its path first.

    Args:
        where: The ``--journal`` value; ``None`` (``--no-journal``): a throwaway ledger.
        base_url: The service (an imported journal must have been made for it).
        max_credits: The ledger's cap (``--max-credits``).
        lines: Each valid line's number: its key and validated request.

    Yields:
        The ledger, and the number of lines imported from a journal (0 without one).

    Raises:
        UsageError: A journal of the earlier format that cannot be imported.
        LedgerError: A ledger that cannot be opened.
    """
    with contextlib.ExitStack() as stack:
        if where is None:
            where = str(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "batch.db")
        imported = 0
        path = _sqlite_path(where)
        if path is not None and await anyio.to_thread.run_sync(is_old_journal, path):
            imported = await import_journal(path, base_url=base_url, keys=lines)
        async with Ledger.open(
            where,
            max_credits=max_credits,
            price_estimate=lambda model, duration: task_estimate(
                {"model": model, "duration": duration}
            ),
        ) as ledger:
            yield ledger, imported


async def read_entries(ledger: Ledger, keys: Collection[str]) -> dict[str, LedgerEntry]:
    """The entries of ``keys`` that the ledger holds: one query each, or one scan for many."""
    if len(keys) > 200:
        wanted = set(keys)
        return {e.key: e async for e in ledger.entries() if e.key in wanted}
    found = {key: await ledger.get(key) for key in keys}
    return {key: entry for key, entry in found.items() if entry is not None}
