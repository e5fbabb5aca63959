"""The end of ``videogen batch``: the downloads, the summary and the command that resumes it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from .._contract._redact import redact_url
from .._contract._validation import json_text
from ._batch_state import UNKNOWN, BatchState
from ._common import Context, describe_error, fmt_credits
from ._tasks import download_with_progress

if TYPE_CHECKING:
    from .._client import AsyncVideoGen


def _resume_command(ctx: Context, journal: str, manifest: Path) -> str:
    args = ctx.args
    parts = ["videogen"]
    if getattr(args, "cfg_base_url", None):
        parts += ["--base-url", args.cfg_base_url]
    parts += [
        "batch",
        str(args.file),
        "--journal",
        redact_url(journal),
        "--manifest",
        str(manifest),
    ]
    for flag, value in {
        "--download": args.download,
        "--max-concurrency": None if args.max_concurrency == 4 else args.max_concurrency,
        "--timeout": args.timeout,
        "--max-credits": args.max_credits,
    }.items():
        if value is not None:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if args.yes:
        parts += ["--yes"]
    return shlex.join(parts)


def print_summary(ctx: Context, run: BatchState, journal: str | None, code: int) -> None:
    """The end of a run: counts, credits, the lines to look at, and how to resume."""
    counts = run.counts()
    # What this run charged, and apart from it what the batch has cost in all (earlier runs
    # included): a rerun of a finished batch charges nothing.
    charged, total_credits = run.credits(run.created_now), run.credits()
    resume = _resume_command(ctx, journal, run.manifest) if journal is not None else None
    rerun = ctx.interrupted or run.needs_rerun()
    # A manifest the disk refused: its lines (the task ids charged) on stdout instead.
    unwritten = run.ordered() if run.manifest_error else None
    if run.manifest_error:
        ctx.ui.error(run.manifest_error)
    if ctx.ui.json_mode:
        ctx.ui.emit_json(
            {
                "manifest": str(run.manifest),
                "manifest_error": run.manifest_error,
                "manifest_lines": unwritten,
                "journal": redact_url(journal) if journal else None,
                "lines": len(run.records),
                "counts": dict(counts),
                "credits_charged": charged,
                "credits_total": total_credits,
                "exit_code": code,
                "resume": resume if rerun else None,
            }
        )
    else:
        ctx.ui.print(
            f"batch: {len(run.records)} line(s); this run charged {fmt_credits(charged)}"
            f" credits ({fmt_credits(total_credits)} for the batch in all)"
        )
        ctx.ui.table(("status", "lines"), sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        attention = [
            [r["line"], r["status"], r["task_id"], r.get("download_error") or r["error"]]
            for r in run.ordered()
            if r["status"] != "succeeded" or r.get("download_error")
        ]
        if attention:
            ctx.ui.table(("line", "status", "task id", "why"), attention[:50], title="Attention")
            if len(attention) > 50:
                ctx.ui.print(f"... and {len(attention) - 50} more (see the manifest)")
        for row in unwritten or ():
            ctx.ui.print(json_text(row, "", ensure_ascii=False))
        ctx.ui.print(f"manifest: {run.manifest}")
    unknown = counts[UNKNOWN] - len(run.in_doubt)  # those in doubt were said at the start
    if unknown:
        ctx.ui.note(
            f"{unknown} line(s) have an unknown outcome: their create may have taken"
            " effect (a paid task may exist). They are not sent again unless you pass"
            " --retry-unknown."
        )
    if rerun or run.fatal is not None:
        ctx.ui.note(
            f"to resume, run:\n  {resume}"
            if resume is not None
            else f"no journal was kept (--no-journal): the ids of the {run.created()} task(s)"
            f" created are in {run.manifest}; running the batch again would create every line"
            " again"
        )


async def download_all(
    ctx: Context, client: AsyncVideoGen, state: BatchState, directory: Path, max_concurrency: int
) -> None:
    """Save each succeeded line's video as ``TASK_ID.mp4``; record where each went."""
    wanted = [r for r in state.ordered() if r["status"] == "succeeded" and r["task_id"]]
    if not wanted:
        return
    # Files appear only complete (an atomic rename): one that exists is kept.
    present = await anyio.to_thread.run_sync(
        lambda: {r["task_id"] for r in wanted if (directory / f"{r['task_id']}.mp4").is_file()}
    )
    for record in wanted:
        if record["task_id"] in present:
            record["path"] = str(directory / f"{record['task_id']}.mp4")
    if present:
        ctx.ui.note(f"{len(present)} video(s) already downloaded to {directory}")
    todo = [r for r in wanted if r["task_id"] not in present]
    if not todo:
        return
    results = await download_with_progress(
        ctx, client, [r["task_id"] for r in todo], directory, max_concurrency=max_concurrency
    )
    for record, result in zip(todo, results, strict=True):
        if result.ok and result.path is not None:
            record["path"] = str(result.path)
        else:
            state.download_failures += 1
            record["download_error"] = describe_error(result.error) if result.error else None
            ctx.ui.warn(f"line {record['line']}: download failed: {record['download_error']}")
