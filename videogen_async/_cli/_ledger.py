"""``videogen ledger list|summary URL``: what a ledger holds (no API key needed).

``list`` shows the entries (``--state`` keeps those of one or more states, ``--kind`` those of
one kind); ``summary`` counts them per state with the credits spent and reserved. Both only
read the ledger: nothing is sent to the service and nothing is written.
"""

from __future__ import annotations

from typing import Any

import anyio

from .._contract._exceptions import LedgerError
from .._ledger import Ledger, LedgerEntry
from ._batch_report import redact_url
from ._batch_store import is_old_journal, sqlite_path
from ._common import EXIT_OK, EXIT_USAGE, Context, fmt_credits

__all__ = ["LEDGER_STATES", "cmd_ledger_list", "cmd_ledger_summary"]

LEDGER_STATES = ("creating", "unknown", "refused", "pending", "succeeded", "failed", "error")
"""Every state of a ledger entry (the choices of ``--state``; ``LedgerEntry.state``)."""


async def _check_file(ctx: Context, url: str) -> bool:
    """A SQLite ledger must exist already: reading never creates one."""
    path = sqlite_path(url)
    if path is None:
        return True
    if not await anyio.Path(path).is_file():
        ctx.ui.error(f"ledger {url}: no such file")
        return False
    if await anyio.to_thread.run_sync(is_old_journal, path):
        ctx.ui.error(
            f"ledger {url}: a batch journal of the earlier format, not a ledger yet (the next"
            " videogen batch run with --journal on it imports it into a ledger)"
        )
        return False
    return True


def _entry_json(entry: LedgerEntry) -> dict[str, Any]:
    task = entry.task
    return {
        "key": entry.key,
        "state": entry.state,
        "kind": entry.kind,
        "task_id": entry.task_id,
        "project_id": entry.project_id,
        "credits": entry.credits_cost,
        "video_url": task.video_url if task is not None else None,
        "error": entry.error,
        "created_at": entry.created_at.isoformat() if entry.created_at else None,
        "updated_at": entry.updated_at.isoformat() if entry.updated_at else None,
    }


async def cmd_ledger_list(ctx: Context) -> int:
    """``videogen ledger list URL [--state S ...] [--kind K] [--limit N]``."""
    args = ctx.args
    states = set(args.state or ())
    if not await _check_file(ctx, str(args.url)):
        return EXIT_USAGE
    rows: list[dict[str, Any]] = []
    try:
        async with Ledger.open(args.url) as ledger:
            async for entry in ledger.entries():
                if states and entry.state not in states:
                    continue
                if args.kind and entry.kind != args.kind:
                    continue
                rows.append(_entry_json(entry))
                if args.limit is not None and len(rows) >= args.limit:
                    break
    except LedgerError as exc:
        ctx.ui.error(f"ledger {redact_url(str(args.url))}: {exc}")
        return EXIT_USAGE
    if ctx.ui.json_mode:
        ctx.ui.emit_json(rows)
        return EXIT_OK
    ctx.ui.table(
        ("key", "state", "task id", "credits", "updated", "video or error"),
        [
            (
                row["key"],
                row["state"],
                row["task_id"] or row["project_id"],
                fmt_credits(row["credits"]),
                (row["updated_at"] or "")[:19].replace("T", " "),
                row["video_url"] or row["error"],
            )
            for row in rows
        ],
    )
    ctx.ui.print(f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    return EXIT_OK


async def cmd_ledger_summary(ctx: Context) -> int:
    """``videogen ledger summary URL``."""
    args = ctx.args
    if not await _check_file(ctx, str(args.url)):
        return EXIT_USAGE
    try:
        async with Ledger.open(args.url) as ledger:
            summary = await ledger.summary()
    except LedgerError as exc:
        ctx.ui.error(f"ledger {redact_url(str(args.url))}: {exc}")
        return EXIT_USAGE
    counts = {state: int(summary["states"].get(state, 0)) for state in LEDGER_STATES}
    spent = float(summary["spent"] or 0.0)
    reserved = float(summary["reserved"] or 0.0)
    total = sum(counts.values())
    result = {"states": counts, "entries": total, "spent": spent, "reserved": reserved}
    if ctx.ui.json_mode:
        ctx.ui.emit_json(result)
        return EXIT_OK
    ctx.ui.table(("state", "entries"), [(s, n) for s, n in counts.items() if n])
    ctx.ui.print(
        f"{total} entries; {fmt_credits(spent)} credits spent,"
        f" {fmt_credits(reserved)} reserved by creates in flight"
    )
    if counts["unknown"]:
        ctx.ui.note(
            f"{counts['unknown']} entr{'y has' if counts['unknown'] == 1 else 'ies have'} an"
            " unknown outcome: a paid task may exist (see `videogen ledger list URL --state"
            " unknown`)"
        )
    return EXIT_OK
