"""``project create | get | script | videos | wait``: viral ad clone projects."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio

from .. import (
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    AsyncVideoGen,
    AuthenticationError,
    Project,
    WaitTimeoutError,
)
from .._contract._service import PROJECT_REQUEST, REFERENCE_PRICES, VIDEOS_REQUEST
from .._contract._validation import validate_project_request, validate_videos_request
from ._common import (
    EXIT_API_ERROR,
    EXIT_OK,
    EXIT_SOME_FAILED,
    Context,
    UsageError,
    fmt_credits,
    poll_failure,
    with_client,
)
from ._spending import SCRIPT_CREDITS, USUAL_PROJECT, check_spend, project_video_estimate
from ._tasks import (
    TASK_COLUMNS,
    download_exit_code,
    download_with_progress,
    request_from_args,
    show_downloads,
    shown_if_key_refused,
    task_report,
    wait_for_ids,
)


def parse_resolution(text: str) -> int | str:
    """``720`` as an integer, anything else (``"1080p"``) as the text."""
    stripped = text.strip()
    return int(stripped) if stripped.isdigit() else stripped


def project_rows(project: Project) -> list[list[Any]]:
    """The tasks a project lists, as table rows."""
    rows = []
    listed = {t.task_id: t for t in project.tasks if t.task_id}
    for task_id in project.task_ids:
        task = listed.get(task_id)
        if task is None:
            rows.append([task_id, None, None, None])
            continue
        result = task.result
        rows.append(
            [
                task_id,
                None if task.status is None else str(task.status),
                fmt_credits(task.credits_cost),
                None if result is None else result.video_url or result.error_message,
            ]
        )
    return rows


def billing_row(project: Project) -> list[str]:
    """A project's script, videos and total credits, as shown to a user."""
    bill = project.billing
    return [
        fmt_credits(c)
        for c in (bill.script_credits_cost, bill.video_credits_cost, bill.total_credits_cost)
    ]


def show_project(ctx: Context, project: Project, *, script: bool = False) -> None:
    """A project as a summary, its billing and its tasks (or as JSON)."""
    if not ctx.ui.show(
        project.to_dict(),
        ("project id", "status", "step", "mode", "script", "videos", "total credits"),
        [
            [
                project.project_id,
                str(project.status),
                str(project.current_step),
                str(project.mode),
                *billing_row(project),
            ]
        ],
        title="Project",
    ):
        return
    if project.error_message:
        ctx.ui.print(f"error: {project.error_message}")
    if project.task_ids:
        ctx.ui.table(TASK_COLUMNS, project_rows(project), title="Video tasks")
    if script and project.view_script:
        ctx.ui.heading("Script")
        ctx.ui.print(project.view_script)


async def cmd_project_create(ctx: Context) -> int:
    """``videogen project create``: a new project (its script, then in auto mode its videos)."""
    args = ctx.args
    # Checked, then its spending guarded: the script, in auto mode its videos.
    request = validate_project_request(request_from_args(args, PROJECT_REQUEST))
    what = f"its script, then {args.out_number or 1} video(s) made automatically"
    await check_spend(
        ctx,
        f"this project ({'its script' if args.mode == 'manual' else what})",
        REFERENCE_PRICES.project_cost(request),
        USUAL_PROJECT,
        why_unknown=f"no price is known for resolution {args.resolution!r}",
    )

    async def work(client: AsyncVideoGen) -> int:
        created = await client.projects.create(**request_from_args(args, PROJECT_REQUEST))
        show_created = functools.partial(
            ctx.ui.show,
            created.to_dict(),
            ("project id", "status", "step", "mode", "credits"),
            [
                [
                    created.project_id,
                    str(created.status),
                    str(created.current_step),
                    str(created.mode),
                    fmt_credits(created.credits_cost),
                ]
            ],
            title="Created project",
        )
        if not args.wait:
            if show_created():
                ctx.ui.note(
                    f"next: videogen project script {created.project_id}   (waits for the script)"
                )
            return EXIT_OK
        ctx.ui.note(f"created project {created.project_id}; waiting for it to finish...")
        with shown_if_key_refused(show_created):
            return await _wait_and_show(ctx, client, created.project_id)

    return await ctx.with_client(work)


@with_client
async def cmd_project_get(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen project get ID``: the project as it is now."""
    show_project(ctx, await client.projects.get(ctx.args.project_id), script=ctx.args.script)
    return EXIT_OK


@with_client
async def cmd_project_script(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen project script ID``: wait for the script and print it."""
    args = ctx.args
    if args.no_wait:
        project = await client.projects.get(args.project_id)
        if not project.has_script:
            ctx.ui.error(
                f"the script of {project.project_id} is not ready (step {project.current_step})"
            )
            return EXIT_SOME_FAILED
    else:
        ctx.ui.note(f"waiting for the script of {args.project_id}...")
        project = await client.projects.wait_for_script(args.project_id, timeout=args.timeout)
    if ctx.ui.json_mode:
        ctx.ui.emit_json({"project_id": project.project_id, "view_script": project.view_script})
    else:
        ctx.ui.print(project.view_script or "")
    return EXIT_OK


async def cmd_project_videos(ctx: Context) -> int:
    """``videogen project videos ID``: a new batch of videos from the script."""
    args = ctx.args
    script = args.script
    if args.script_file is not None:
        try:
            script = await anyio.Path(args.script_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read --script-file: {exc}") from None

    async def work(client: AsyncVideoGen) -> int:
        request = {**request_from_args(args, VIDEOS_REQUEST), "script": script}
        validate_videos_request(request)
        if args.max_credits is not None or not args.yes:
            # the real price of this project's videos, when it already has some
            project = await client.projects.get(args.project_id)
            video = project_video_estimate(
                args.resolution,
                max([t.credits_cost for t in project.tasks if t.credits_cost], default=None),
            )
            count = args.out_number or 1
            await check_spend(
                ctx,
                f"this batch of {count} video(s)",
                None if video is None else count * video,
                USUAL_PROJECT - SCRIPT_CREDITS,
                why_unknown=f"no price is known for resolution {args.resolution!r}",
            )
        batch = await client.projects.create_videos(args.project_id, **request)
        show_created = functools.partial(
            ctx.ui.show,
            batch.to_dict(),
            ("task id",),
            [[t] for t in batch.task_ids],
            title="Created video tasks",
        )
        if not args.wait:
            if show_created():
                ctx.ui.note(f"follow them with: videogen wait {' '.join(batch.task_ids)}")
            return EXIT_OK
        with shown_if_key_refused(show_created):
            rows, tasks, code = task_report(
                batch.task_ids,
                await wait_for_ids(ctx, client, batch.task_ids, timeout=args.timeout),
            )
        ctx.ui.show({**batch.to_dict(), "tasks": tasks}, TASK_COLUMNS, rows, title="Video tasks")
        return code

    return await ctx.with_client(work)


async def _wait_and_show(
    ctx: Context, client: AsyncVideoGen, project_id: str, *, download: str | None = None
) -> int:
    try:
        project = await client.projects.wait(project_id, timeout=ctx.args.timeout)
    except WaitTimeoutError as exc:
        ctx.ui.error(f"project {project_id} was not done when --timeout ended")
        if isinstance(exc.last, Project):
            show_project(ctx, exc.last)
        return EXIT_SOME_FAILED
    except AuthenticationError:
        raise  # about the key, not this project: said once with exit 4 (``Context.fail``)
    except (APIConnectionError, APIStatusError, APIResponseError) as exc:
        ctx.ui.error(f"project {project_id}: {poll_failure(exc)[1]}")
        if isinstance(exc, APIConnectionError):
            ctx.ui.note(f"it may still be running: videogen project wait {project_id}")
        return EXIT_API_ERROR
    if download is None or not ctx.ui.json_mode:
        show_project(ctx, project)
    code = (
        EXIT_SOME_FAILED
        if project.is_failed
        or any(t.is_terminal and t.status != "succeeded" for t in project.tasks)
        else EXIT_OK
    )
    if download is not None:
        code = max(code, await _download_project(ctx, client, project, download))
    return code


async def _download_project(
    ctx: Context,
    client: AsyncVideoGen,
    project: Project,
    directory: str,
    *,
    max_concurrency: int = 4,
    overwrite: bool = True,
) -> int:
    """Save the succeeded videos of a project; the exit code of the downloads."""
    done = [t for t in project.tasks if t.task_id and t.status == "succeeded"]
    if not done:
        ctx.ui.note(f"project {project.project_id} has no finished video to download yet")
        if ctx.ui.json_mode:
            ctx.ui.emit_json([])
        return EXIT_SOME_FAILED if project.task_ids else EXIT_OK
    skipped = len(project.task_ids) - len(done)
    if skipped:
        ctx.ui.note(f"{skipped} video(s) of the project are not finished or failed: not saved")
    results = await download_with_progress(
        ctx, client, done, Path(directory), max_concurrency=max_concurrency, overwrite=overwrite
    )
    show_downloads(ctx, results)
    return download_exit_code(results)


@with_client
async def cmd_project_wait(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen project wait ID``: wait until the project and its videos are done."""
    return await _wait_and_show(ctx, client, ctx.args.project_id, download=ctx.args.download)


@with_client
async def cmd_project_download(ctx: Context, client: AsyncVideoGen) -> int:
    """``videogen project download ID DIR``: save the project's finished videos."""
    args = ctx.args
    project = await client.projects.get(args.project_id)
    code = await _download_project(
        ctx,
        client,
        project,
        args.directory,
        max_concurrency=args.max_concurrency,
        overwrite=not args.no_overwrite,
    )
    unfinished = [t for t in project.tasks if not t.is_terminal]
    if unfinished:
        ctx.ui.note(
            f"{len(unfinished)} video(s) still running: videogen project wait"
            f" {project.project_id} --download {args.directory}"
        )
    return (
        max(code, EXIT_SOME_FAILED) if any(t.status != "succeeded" for t in project.tasks) else code
    )
