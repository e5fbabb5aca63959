"""``videogen ledger list|summary|dispatch URL``: what a ledger holds, and its webhooks.

``list`` and ``summary`` only read the ledger. ``dispatch`` reads its webhook's secret from an
environment variable, never from the command line (which ``ps`` shows to everyone).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio

from .._contract._exceptions import InvalidRequestError, LedgerError
from .._contract._redact import redact_url
from .._http._webhooks import webhook
from .._ledger import Ledger
from .._ledger._entry import STATES as LEDGER_STATES
from ._batch_store import is_old_journal, sqlite_path
from ._common import EXIT_OK, EXIT_SOME_FAILED, Context, UsageError, fmt_credits


@contextlib.asynccontextmanager
async def _opened(url: str) -> AsyncIterator[Ledger]:
    """The ledger at ``url``, opened; an error in opening is a usage error naming it.

    A SQLite ledger must exist already: reading never creates one.
    """
    path = sqlite_path(url)
    if path is not None and not await anyio.Path(path).is_file():
        raise UsageError(f"ledger {url}: no such file")
    if path is not None and await anyio.to_thread.run_sync(is_old_journal, path):
        raise UsageError(
            f"ledger {url}: a batch journal of the earlier format, not a ledger yet (the next"
            " videogen batch run with --journal on it imports it into a ledger)"
        )
    async with contextlib.AsyncExitStack() as stack:
        try:
            ledger = await stack.enter_async_context(Ledger.open(url))
        except LedgerError as exc:  # it names the ledger (a URL's password hidden)
            raise UsageError(str(exc)) from None
        except InvalidRequestError as exc:
            raise UsageError(f"ledger {redact_url(url)}: {exc}") from None
        yield ledger


def _delivered(name: str, totals: dict[str, Any]) -> str:
    """A dispatch destination's totals, as ``summary`` and ``dispatch`` print them."""
    return f"{name}: " + ", ".join(f"{totals[k]} {k}" for k in ("delivered", "pending", "dead"))


async def cmd_ledger_list(ctx: Context) -> int:
    """``videogen ledger list URL [--state S ...] [--kind K] [--limit N]``.

    ``--json`` prints each entry's own ``to_dict()`` (the fields of :class:`LedgerEntry`).
    """
    args = ctx.args
    states = set(args.state or ())
    entries = []
    async with _opened(args.url) as ledger:
        async for entry in ledger.entries():
            if (states and entry.state not in states) or args.kind not in (None, entry.kind):
                continue
            entries.append(entry)
            if len(entries) == args.limit:
                break
    rows = [
        (
            e.key,
            e.state,
            e.task_id or e.project_id,
            fmt_credits(e.credits_cost),
            e.updated_at and e.updated_at.isoformat(" ", "seconds")[:19],
            e.video_url or e.error,
        )
        for e in entries
    ]
    if ctx.ui.show(
        [e.to_dict() for e in entries],
        ("key", "state", "task id", "credits", "updated", "video or error"),
        rows,
    ):
        ctx.ui.print(f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    return EXIT_OK


async def cmd_ledger_summary(ctx: Context) -> int:
    """``videogen ledger summary URL``."""
    args = ctx.args
    async with _opened(args.url) as ledger:
        summary = await ledger.summary(group_by=args.group_by)
    counts = {state: summary["states"].get(state, 0) for state in LEDGER_STATES}
    spent = float(summary["spent"] or 0.0)
    reserved = float(summary["reserved"] or 0.0)
    total = sum(counts.values())
    result = {
        "states": counts,
        "entries": total,
        "spent": spent,
        "reserved": reserved,
        "destinations": summary["destinations"],
    }
    groups = [
        {"value": value, "entries": sum(group["states"].values()), **group}
        for value, group in summary.get("groups", {}).items()
    ]
    if args.group_by is not None:
        result["groups"] = groups
    if not ctx.ui.show(result, ("state", "entries"), [(s, n) for s, n in counts.items() if n]):
        return EXIT_OK
    ctx.ui.print(
        f"{total} entries; {fmt_credits(spent)} credits spent,"
        f" {fmt_credits(reserved)} reserved by creates in flight"
    )
    for g in groups:
        ctx.ui.print(
            f"{args.group_by} {g['value']}: {g['entries']}, {fmt_credits(g['spent'])} credits"
        )
    for name, totals in summary["destinations"].items():
        ctx.ui.print(_delivered(name, totals))
    if counts["unknown"]:
        ctx.ui.note(
            f"{counts['unknown']} entr{'y has' if counts['unknown'] == 1 else 'ies have'} an"
            " unknown outcome: a paid task may exist (see `videogen ledger list URL --state"
            " unknown`)"
        )
    return EXIT_OK


async def cmd_ledger_dispatch(ctx: Context) -> int:
    """``videogen ledger dispatch URL --webhook URL --secret-env NAME [--name NAME]``."""
    args = ctx.args
    secret = os.environ.get(args.secret_env, "")
    if not secret.strip():
        raise UsageError(
            f"--secret-env {args.secret_env}: no such environment variable (export it with the"
            " destination's whsec_... secret)"
        )
    try:
        deliver = webhook(args.webhook, secret)
    except InvalidRequestError as exc:
        raise UsageError(
            f"{'--secret-env' if exc.field == 'secret' else '--webhook'}: {exc.rule}"
        ) from None

    async with _opened(args.url) as ledger:
        with anyio.CancelScope() as scope:
            ctx.stop_on_interrupt(scope.cancel)
            ctx.ui.note(
                f"delivering the terminal entries of {redact_url(args.url)} to {deliver!r} as"
                f" {args.name!r} (Ctrl-C stops)"
            )
            await ledger.dispatch(
                args.name, deliver, backlog=args.backlog, stop_when_idle=args.stop_when_idle
            )
        totals = (await ledger.summary())["destinations"].get(args.name) or dict.fromkeys(
            ("pending", "delivered", "dead"), 0
        )
    if ctx.ui.json_mode:
        ctx.ui.emit_json({"destination": args.name, **totals})
    else:
        ctx.ui.print(_delivered(args.name, totals))
    return EXIT_SOME_FAILED if totals["dead"] else EXIT_OK
