"""``credits``, ``create``, ``status``, ``wait`` and ``download``."""

from __future__ import annotations

import contextlib
import functools
import stat
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from .. import (
    AsyncVideoGen,
    AuthenticationError,
    DownloadResult,
    Task,
    TaskPollError,
    VideoGenError,
)
from .._contract._service import TASK_REQUEST, Body
from .._contract._validation import validate_task_request
from ._common import (
    EXIT_API_ERROR,
    EXIT_OK,
    EXIT_SOME_FAILED,
    EXIT_USAGE,
    TIMED_OUT,
    UNREACHABLE,
    Context,
    UsageError,
    describe_error,
    exit_code_for,
    fmt_credits,
    poll_failure,
    stdin_mode,
    task_row,
    with_client,
)
from ._spending import check_spend, task_estimate

TASK_COLUMNS = ("task id", "status", "credits", "video URL / error")


@with_client
async def cmd_credits(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen credits``: the API credit balance."""
    balance = await client.credits.get()
    ctx.ui.show(
        balance.to_dict(),
        ("available", "total"),
        [[fmt_credits(balance.api_available_credits), fmt_credits(balance.api_total_credits)]],
        title="API credits",
    )
    return EXIT_OK


def request_from_args(args: Any, body: Body) -> dict[str, Any]:
    """The keyword arguments of a create given on the command line (one per field of ``body``)."""
    return {field.name: getattr(args, field.name) for field in body.fields}


def _stdin_is_data() -> bool:
    """Whether stdin is a pipe or a file (not a terminal, not closed)."""
    mode = stdin_mode()
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


async def read_prompt(prompt: str | None) -> str:
    """The prompt as given, or read from stdin for ``-`` (or none, with stdin a pipe).

    Raises:
        UsageError: No prompt, or an empty one on stdin.
    """
    if prompt is not None and prompt != "-":
        return prompt
    if prompt is None and not await anyio.to_thread.run_sync(_stdin_is_data):
        raise UsageError(
            "a prompt is needed: videogen create PROMPT, or - to read it from stdin"
            " (or pipe it in: echo 'a red fox' | videogen create)"
        )
    text: str = await anyio.to_thread.run_sync(sys.stdin.read)
    if not text.strip():
        raise UsageError("the prompt read from stdin is empty")
    return text.strip()


async def cmd_create(ctx: Context) -> int:
    """``videogen create``: one direct video task (``--wait`` waits, ``--download`` saves)."""
    args = ctx.args
    args.prompt = await read_prompt(args.prompt)
    request = request_from_args(args, TASK_REQUEST)
    validate_task_request({k: v for k, v in request.items() if v is not None})
    await check_spend(ctx, "this task", task_estimate(request), task_estimate(request))

    async def work(client: AsyncVideoGen) -> int:
        created = await client.tasks.create(**request)
        charged = created.credits_cost
        if args.max_credits is not None and charged is not None and charged > args.max_credits:
            ctx.ui.warn(
                f"the service charged {fmt_credits(charged)} credits for {created.task_id},"
                f" more than --max-credits {fmt_credits(args.max_credits)}: its prices are"
                " higher than the estimate (see docs/cli.md)"
            )
        show_created = functools.partial(
            ctx.ui.show,
            created.to_dict(),
            ("task id", "status", "credits", "created at"),
            [
                [
                    created.task_id,
                    str(created.status),
                    fmt_credits(created.credits_cost),
                    created.created_at.isoformat() if created.created_at else None,
                ]
            ],
            title="Created",
        )
        if not (args.wait or args.download):
            if show_created():
                ctx.ui.note(f"follow it with: videogen wait {created.task_id}")
            return EXIT_OK
        task_id = created.task_id
        ctx.ui.note(
            f"created {task_id} ({fmt_credits(created.credits_cost)} credits); waiting for it..."
        )
        with shown_if_key_refused(show_created):
            results = await wait_for_ids(ctx, client, [task_id], timeout=args.timeout)
            rows, [data], code = task_report([task_id], results)
        task = results.get(task_id)
        if not isinstance(task, Task):
            ctx.ui.error(f"task {task_id} was created, then {data['error']}")
            ctx.ui.note(f"it may still be running: videogen wait {task_id}")
            ctx.ui.show(data, TASK_COLUMNS, rows)  # the charged id on stdout too
            return code
        if args.download is None or not task.is_succeeded:
            ctx.ui.show(data, TASK_COLUMNS, rows)
            return code
        ctx.ui.table(TASK_COLUMNS, rows)
        saved = await download_with_progress(
            ctx, client, [task], Path(args.download), max_concurrency=1
        )
        if ctx.ui.json_mode:
            ctx.ui.emit_json(
                {**task.to_dict(), "path": str(saved[0].path) if saved[0].ok else None}
            )
        else:
            show_downloads(ctx, saved)
        return download_exit_code(saved)

    return await ctx.with_client(work)


@with_client
async def cmd_status(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen status ID...``: the current state of tasks."""
    ids = list(dict.fromkeys(ctx.args.task_ids))
    found: dict[str, Task | VideoGenError] = {}
    limiter = anyio.Semaphore(8)

    async def one(task_id: str) -> None:
        async with limiter:
            try:
                found[task_id] = await client.tasks.get(task_id)
            except VideoGenError as exc:
                found[task_id] = exc

    async with anyio.create_task_group() as tg:
        for task_id in ids:
            tg.start_soon(one, task_id)
    return _report(ctx, ids, found, waiting=False)


def task_report(
    ids: Sequence[str], found: Mapping[str, Any], *, waiting: bool = True
) -> tuple[list[list[Any]], list[dict[str, Any]], int]:
    """The table rows and JSON of tasks in the order of ``ids``, and the exit code.

    ``waiting``: the tasks were waited for (not only looked at), so a failed one fails the run.

    A refused key (exit 4) is raised: it is about every id, and said once. A command that
    created the ids shows them first (:func:`shown_if_key_refused`).

    An id that could not be read has ``status`` ``None`` and a ``problem`` (``not found``,
    ``unreachable``, ``timed out``, ``unreadable``; in parentheses in the table). The code:
    1 for a failed task (``waiting``) or one running at the deadline, 3 for an id
    the service does not know or could not report.
    """
    for item in found.values():  # a refused key is about every id: said once, exit 4
        cause = item.__cause__ if isinstance(item, TaskPollError) else item
        if isinstance(cause, AuthenticationError):
            raise cause
    code = EXIT_OK
    rows = []
    data = []
    for task_id in ids:
        item = found.get(task_id)
        if isinstance(item, Task):
            rows.append(task_row(item))
            data.append(item.to_dict())
            if waiting and not item.is_succeeded:
                code = max(code, EXIT_SOME_FAILED)
            continue
        problem, text = poll_failure(
            item if isinstance(item, BaseException) else None, waiting=waiting
        )
        rows.append([task_id, f"({problem})", None, text])
        data.append({"task_id": task_id, "status": None, "problem": problem, "error": text})
        code = max(code, EXIT_SOME_FAILED if problem == TIMED_OUT else EXIT_API_ERROR)
    return rows, data, code


@contextlib.contextmanager
def shown_if_key_refused(show_created: Callable[[], object]) -> Iterator[None]:
    """Follow what this command just created; on a refused key, ``show_created()`` first.

    The created ids were charged for: they must reach stdout (and ``--json``) even when the
    key is refused while they are followed. The refusal itself is raised on, to be said once
    with exit 4 where every command's refused key is (``Context.fail``).
    """
    try:
        yield
    except AuthenticationError:
        show_created()
        raise


def _report(
    ctx: Context, ids: Sequence[str], found: dict[str, Any], *, waiting: bool = True
) -> int:
    """Show :func:`task_report`, and how to wait again for tasks the service was lost on."""
    rows, data, code = task_report(ids, found, waiting=waiting)
    ctx.ui.show(data, TASK_COLUMNS, rows)
    lost = [row[0] for row in rows if row[1] == f"({UNREACHABLE})"]
    if lost:
        ctx.ui.note(
            f"the service could not be reached for {len(lost)} task(s); they may still be"
            f" running: videogen wait {' '.join(lost)}"
        )
    return code


async def wait_for_ids(
    ctx: Context,
    client: AsyncVideoGen,
    ids: Sequence[str],
    *,
    timeout: float | None,  # noqa: ASYNC109 - handed to gather_until_done, which owns it
    description: str = "waiting",
) -> dict[str, Task | TaskPollError]:
    """Wait with a progress display: each id's terminal Task, or its TaskPollError."""
    results: dict[str, Task | TaskPollError] = {}
    if not ids:
        return results
    with ctx.ui.progress(description, len(set(ids))) as bar:
        async with client.tasks.gather_until_done(
            ids, timeout=timeout, return_exceptions=True
        ) as items:
            async for item in items:
                results[item.task_id] = item
                seen = items.progress  # the gather's own counts
                unread = f", {seen.errors} could not be read" if seen.errors else ""
                bar.advance(detail=f"{seen.succeeded} succeeded, {seen.failed} failed{unread}")
    return results


@with_client
async def cmd_wait(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen wait ID...``: wait until tasks finish."""
    ids = list(dict.fromkeys(ctx.args.task_ids))
    return _report(ctx, ids, await wait_for_ids(ctx, client, ids, timeout=ctx.args.timeout))


def download_exit_code(results: Sequence[DownloadResult]) -> int:
    """0 when every download worked or kept its file, else the worst error's code (4, 3, 1).

    A source refused before it was sent (a malformed id: ``InvalidRequestError``) is a usage
    error (2) only when every source was: then nothing was sent. Among others that ran it is
    one failed download (1), as the other files were saved.
    """
    codes = [
        exit_code_for(r.error)
        for r in results
        if r.error is not None and _download_outcome(r)[0] == "failed"
    ]
    code = max(codes, default=EXIT_OK)
    return EXIT_SOME_FAILED if code == EXIT_USAGE and len(results) > codes.count(code) else code


def _download_outcome(result: DownloadResult) -> tuple[str, Path | None, str | None]:
    """``saved``, ``skipped`` (the file exists) or ``failed``; the file; why it failed."""
    if result.error is None:
        return "saved", result.path, None
    if isinstance(result.error.__cause__, FileExistsError):  # kept (``--no-overwrite``)
        path = getattr(result.error, "path", None)
        return "skipped", Path(path) if path is not None else None, None
    return "failed", None, describe_error(result.error)


def show_downloads(ctx: Context, results: Sequence[DownloadResult]) -> None:
    """The table (or JSON) of download results; a kept existing file is ``skipped``."""
    outcomes = [_download_outcome(r) for r in results]
    folders = {path.parent for _, path, _ in outcomes if path is not None}
    folder = next(iter(folders)) if len(folders) == 1 else None
    ctx.ui.show(
        [
            {
                "source": r.source,
                "task_id": r.task_id,
                "outcome": outcome,
                "path": str(path) if path else None,
                "size": r.size,
                "error": error,
            }
            for r, (outcome, path, error) in zip(results, outcomes, strict=True)
        ],
        ("source", "outcome", "file", "bytes", "error"),
        [
            [
                r.source,
                outcome if outcome != "skipped" else "skipped (file exists)",
                (path.name if folder is not None else str(path)) if path else None,
                r.size if r.ok else None,
                error,
            ]
            for r, (outcome, path, error) in zip(results, outcomes, strict=True)
        ],
        title=f"Downloads (in {folder})" if folder is not None else "Downloads",
    )


async def download_with_progress(
    ctx: Context,
    client: AsyncVideoGen,
    items: Sequence[Any],
    directory: Path,
    *,
    max_concurrency: int,
    overwrite: bool = True,
) -> list[DownloadResult]:
    """``download_many`` of tasks, task ids or URLs with a progress display, in order."""
    seen: Counter[str] = Counter()
    with ctx.ui.progress("downloading", len(items)) as bar:

        def on_result(result: DownloadResult) -> None:
            seen[_download_outcome(result)[0]] += 1
            kept = seen["skipped"]
            skipped = f", {kept} skipped (file exists)" if kept else ""
            bar.advance(detail=f"{seen['saved']} saved{skipped}, {seen['failed']} failed")

        return await client.download_many(
            items,
            directory,
            on_result=on_result,
            max_concurrency=max_concurrency,
            overwrite=overwrite,
        )


@with_client
async def cmd_download(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen download ID... --to DIR``: save finished videos."""
    args = ctx.args
    results = await download_with_progress(
        ctx,
        client,
        list(dict.fromkeys(args.sources)),
        Path(args.to),
        max_concurrency=args.max_concurrency,
        overwrite=not args.no_overwrite,
    )
    show_downloads(ctx, results)
    return download_exit_code(results)
