"""A batch job: prompts from a CSV or JSON Lines file in, one video task each, a report out.

Each row has a ``prompt`` and, optionally, ``model``, ``ratio`` and ``duration``. The job
creates the tasks with bounded concurrency (a row the SDK rejects is reported, not fatal),
waits for all of them at once with ``gather_until_done`` while printing its progress, and
writes a JSON report with one entry per row::

    python examples/batch_job.py examples/prompts.csv --report report.json

It exits 0 when every row succeeded, 1 otherwise. ``examples/prompts_with_errors.csv`` has
two bad rows on purpose (a duration of 30 s, a ratio of 4:5): they are reported as
``rejected``, cost nothing, and the other rows go on (exit 1).

Without ``VIDEOGEN_BASE_URL`` / ``VIDEOGEN_API_KEY`` it runs against a local sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from videogen_async import (
    AsyncVideoGen,
    InsufficientCreditsError,
    Task,
    TaskPollError,
    VideoGenError,
)
from videogen_async.testing import SandboxServer

OPTION_FIELDS = ("model", "ratio", "duration")


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Read the prompts: CSV with a header row, or JSON Lines (``.jsonl``), one per line.

    Args:
        path: The file.

    Returns:
        One dict per row, with ``line`` (its line number) added.

    Raises:
        ValueError: A row has no ``prompt``.
    """
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", newline="") as file:
        if path.suffix in (".jsonl", ".ndjson"):
            numbered = ((n, json.loads(text)) for n, text in enumerate(file, 1) if text.strip())
        else:
            numbered = ((n, row) for n, row in enumerate(csv.DictReader(file), 2))
        for line, row in numbered:
            if not isinstance(row, dict) or not str(row.get("prompt") or "").strip():
                raise ValueError(f"{path}:{line}: a row needs a non-empty prompt")
            rows.append({"line": line, **row})
    return rows


def create_options(row: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``tasks.create`` given by a row (CSV cells are text)."""
    options = {name: row[name] for name in OPTION_FIELDS if row.get(name) not in (None, "")}
    if isinstance(options.get("duration"), str) and options["duration"].strip().isdigit():
        options["duration"] = int(options["duration"])
    return options


async def create_all(
    client: AsyncVideoGen, rows: list[dict[str, Any]], *, concurrency: int
) -> None:
    """Create one task per row, at most ``concurrency`` creates in flight.

    Each row gets its ``task_id``, or its ``status`` ``"rejected"`` and an ``error``. Once
    the credits run out, the rows not created yet are marked ``"skipped"``.
    """
    limiter = anyio.CapacityLimiter(concurrency)
    out_of_credits = anyio.Event()

    async def create(row: dict[str, Any]) -> None:
        async with limiter:
            if out_of_credits.is_set():
                row.update(status="skipped", error="out of credits")
                return
            try:
                created = await client.tasks.create(row["prompt"], **create_options(row))
            except InsufficientCreditsError as exc:
                out_of_credits.set()
                row.update(status="skipped", error=str(exc))
            except VideoGenError as exc:
                # Invalid rows are refused before anything is sent. A create that failed in
                # a way that may have taken effect says so: such a row is not retried blindly.
                row.update(status="rejected", error=str(exc))
            else:
                row.update(task_id=created.task_id, status=str(created.status))

    async with anyio.create_task_group() as tg:
        for row in rows:
            tg.start_soon(create, row)


def print_progress(progress: Any) -> None:
    """``on_progress`` of the gather: one line on stderr."""
    print(
        f"  {progress.done}/{progress.total} done"
        f" ({progress.succeeded} succeeded, {progress.failed} failed),"
        f" {progress.requests} polls",
        file=sys.stderr,
    )


async def wait_all(
    client: AsyncVideoGen, rows: list[dict[str, Any]], *, deadline: float | None
) -> None:
    """Wait for every created task at once and record its outcome in its row."""
    by_id = {row["task_id"]: row for row in rows if "task_id" in row}
    gather = client.tasks.gather_until_done(
        list(by_id), timeout=deadline, return_exceptions=True, on_progress=print_progress
    )
    async with gather as results:
        async for item in results:
            if isinstance(item, TaskPollError):
                # Could not be polled, or still running at the deadline: keep the id.
                by_id[item.task_id].update(status="unknown", error=str(item))
            else:
                record(by_id[item.task_id], item)


def record(row: dict[str, Any], task: Task) -> None:
    """Store a finished task's outcome in its row."""
    row.update(status=str(task.status), credits_cost=task.credits_cost)
    if task.video_url:
        row["video_url"] = task.video_url
    if task.error_message:
        row["error"] = task.error_message


async def run_batch(
    client: AsyncVideoGen,
    rows: list[dict[str, Any]],
    *,
    concurrency: int = 8,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Create and wait for every row; return the report."""
    await create_all(client, rows, concurrency=concurrency)
    await wait_all(client, rows, deadline=deadline)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return {"counts": counts, "rows": rows}


@asynccontextmanager
async def open_client(time_scale: float) -> AsyncIterator[AsyncVideoGen]:
    """The service's client from the environment, or a local sandbox's."""
    if os.environ.get("VIDEOGEN_BASE_URL"):
        async with AsyncVideoGen() as client:
            yield client
        return
    async with SandboxServer(time_scale=time_scale) as server, server.client() as client:
        yield client


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompts", type=Path, help="a .csv (with a header) or .jsonl file")
    parser.add_argument("--report", type=Path, default=Path("report.json"))
    parser.add_argument("--concurrency", type=int, default=8, help="creates in flight")
    parser.add_argument("--timeout", type=float, default=None, help="seconds for the wait")
    parser.add_argument("--time-scale", type=float, default=0.05, help="local sandbox speed")
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    """Run the batch job; the exit status is 0 when every row succeeded."""

    rows = await anyio.to_thread.run_sync(read_rows, args.prompts)
    async with open_client(args.time_scale) as client:
        report = await run_batch(client, rows, concurrency=args.concurrency, deadline=args.timeout)
    text = json.dumps(report, indent=2, default=str)
    await anyio.Path(args.report).write_text(text + "\n", encoding="utf-8")
    summary = ", ".join(f"{count} {status}" for status, count in sorted(report["counts"].items()))
    print(f"{len(rows)} prompts: {summary}; report written to {args.report}")
    return 0 if report["counts"].get("succeeded", 0) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
