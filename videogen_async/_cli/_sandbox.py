"""``videogen sandbox`` and ``videogen demo``: the whole service, in memory, on this machine.

``sandbox`` serves on a port until Ctrl-C or SIGTERM (the sandbox's own ``serve``); ``demo``
runs one in-process, sped up, with no network nor key, through every call (``docs/cli.md``).
"""

from __future__ import annotations

import asyncio
import errno
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from .. import AsyncVideoGen, BackoffPolicy, Model, PollPolicy, Project, Task
from ..testing import DEFAULT_API_KEY, SandboxServer, sandbox_options_from_args, serve
from ..testing._cli import announce
from ._common import (
    EXIT_OK,
    EXIT_SOME_FAILED,
    Context,
    UsageError,
    fmt_credits,
    logging_to,
    on_signal,
    task_row,
)
from ._projects import billing_row, show_project
from ._tasks import TASK_COLUMNS, download_with_progress, show_downloads, wait_for_ids


async def cmd_sandbox(ctx: Context) -> int:
    """``videogen sandbox``: serve until Ctrl-C or SIGTERM."""
    options = sandbox_options_from_args(ctx.args)
    stop = asyncio.Event()
    ctx.stop_on_interrupt(stop.set)

    def ready(server: Any) -> None:
        # the default key is no secret
        announce(server, show_key=options["api_key"] == DEFAULT_API_KEY, write=ctx.ui.print)
        ctx.ui.note("try: videogen credits   (with the two variables above exported)")
        ctx.ui.note(f"console: {server.url('/_sandbox/console')}   (open it in a browser)")

    wanted = ctx.args.log_level  # --debug already logs everything to stderr
    try:
        with (
            on_signal(signal.SIGTERM, stop.set),
            logging_to(
                ctx.ui.err if wanted and not ctx.ui.debug else None,
                str(wanted or "warning").upper(),
            ),
        ):
            await serve(ready=ready, stop=stop, **options)
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise UsageError(
                f"cannot listen on {ctx.args.host}:{ctx.args.port}: {exc.strerror or exc}."
                " Choose another --port (--port 0 picks a free one)"
            ) from None
        raise
    except ValueError as exc:
        raise UsageError(f"bad sandbox option: {exc}") from None
    return EXIT_OK


DEMO_PROMPTS = (
    "a paper boat drifting down a rainy street, macro lens",
    "a red fox trotting through fresh snow at dawn",
    "a lighthouse in a storm, waves crashing, cinematic",
    "time-lapse of a city skyline from dusk to night",
    "a barista pouring latte art in slow motion",
    "a hummingbird hovering at a purple flower",
    "an astronaut planting a flag on a pastel moon",
    "a hot air balloon over misty hills at sunrise",
    "a cat playing a tiny piano, studio lighting",
    "waves over a coral reef, underwater sunlight",
)
FAILING_PROMPT = "sandbox-fail: this prompt asks the sandbox to fail, to show a refund"
REFERENCE_AD = "https://cdn.example.com/ads/reference-ad.mp4"
PRODUCT_IMAGES = ("https://cdn.example.com/products/bottle-front.png",)
CUSTOM_SCRIPT = (
    "0-5s: close-up of the bottle on a sunlit kitchen counter, water droplets.\n"
    "5-10s: a runner grabs the bottle and drinks, city park background.\n"
    "10-15s: logo and tagline: stay cold, all day."
)


#: Short backoffs after a failure, for the sandbox's sped-up clock.
_DEMO_BACKOFF = BackoffPolicy(initial_delay=0.05, max_delay=0.5, rate_limit_pause=0.05)


def _demo_policy(time_scale: float) -> PollPolicy:
    """Poll gaps scaled to the sandbox's sped-up clock (a real service needs the defaults)."""
    scale = max(time_scale, 0.001)
    return PollPolicy(
        min_interval=max(0.02, 1.0 * scale * 5),
        max_interval=max(0.1, 15.0 * scale),
        dense_interval=max(0.02, 0.85 * scale * 5),
        sparse_cap=max(0.1, 30.0 * scale),
    )


def _demo_row(task: Task) -> list[Any]:
    """A task's row of the demo's table: the status table's, with how long it took."""
    took = (
        f"{(task.finished_at - task.created_at).total_seconds():.1f} s"
        if task.created_at is not None and task.finished_at is not None
        else "-"
    )
    return [*task_row(task)[:3], took, task_row(task)[3]]


async def cmd_demo(ctx: Context) -> int:
    """Run the demo (see the module docstring)."""
    args = ctx.args
    started = time.monotonic()
    directory = Path(args.to) if args.to else Path(tempfile.mkdtemp(prefix="videogen-demo-"))
    summary: dict[str, Any] = {}
    ui = ctx.ui
    async with SandboxServer(time_scale=args.time_scale, seed=args.seed, credits=1000) as server:
        ui.print("videogen demo: the whole service against a local sandbox (no network, no key)")
        ui.print(
            f"sandbox at {server.base_url}; its clock runs {1 / args.time_scale:g}x faster than"
            f" real time (a 30 s generation takes {30 * args.time_scale:g} s here)"
        )
        ui.print(f"console: {server.url('/_sandbox/console')} (open it while the demo runs)")
        async with server.client(
            poll_policy=_demo_policy(args.time_scale), backoff=_DEMO_BACKOFF
        ) as client:
            code = EXIT_OK
            with ctx.cancellable():
                code = await _run(ctx, client, directory, summary)
    summary["seconds"] = round(time.monotonic() - started, 2)
    if ui.json_mode:
        ui.emit_json(summary)
    elif not ctx.interrupted:
        ui.print(f"\ndemo finished in {summary['seconds']:.1f} s; videos are in {directory}")
    return code


async def _direct_tasks(ctx: Context, client: AsyncVideoGen, count: int) -> list[Task]:
    """2. A batch of direct tasks, gathered as they finish; the last one fails on purpose."""
    prompts = [DEMO_PROMPTS[i % len(DEMO_PROMPTS)] for i in range(count - 1)] + [FAILING_PROMPT]
    ctx.ui.heading(f"2. A batch of {count} direct tasks")
    created = []
    for index, prompt in enumerate(prompts):
        fast = index % 2 == 1
        created.append(
            await client.tasks.create(
                prompt,
                model=Model.VIDEOMODEL_2_0_FAST if fast else Model.VIDEOMODEL_2_0,
                duration=5 if fast else 6,
                ratio="9:16" if index % 3 == 0 else "16:9",
            )
        )
    ctx.ui.print(
        f"created {len(created)} tasks for {fmt_credits(sum(c.credits_cost for c in created))}"
        " credits; gathering them as they finish (the last prompt asks the sandbox to fail):"
    )
    ids = [c.task_id for c in created]
    results = await wait_for_ids(ctx, client, ids, timeout=120, description="generating")
    tasks = [r for r in (results.get(i) for i in ids) if isinstance(r, Task)]
    ctx.ui.table(
        (*TASK_COLUMNS[:3], "generated in", TASK_COLUMNS[3]), [_demo_row(t) for t in tasks]
    )
    refunded = [t for t in tasks if t.is_failed]
    if refunded:
        ctx.ui.print(
            f"{len(refunded)} task failed and was refunded (credits 0): a failed task is a"
            " result you can read, not an exception."
        )
    return tasks


async def _project(ctx: Context, client: AsyncVideoGen) -> tuple[Project, list[Task]]:
    """3. A manual project: its script, then two batches of videos; the project and its tasks."""
    ui = ctx.ui
    ui.heading("3. A viral ad clone project, in manual mode")
    project = await client.projects.create(
        REFERENCE_AD,
        list(PRODUCT_IMAGES),
        prompt="Highlight that it keeps drinks cold for 24 hours; upbeat tone.",
        mode="manual",
        out_number=2,
        duration=15,
    )
    ui.print(
        f"created project {project.project_id} ({fmt_credits(project.credits_cost)} credits for"
        " the script); waiting for its script..."
    )
    ready = await client.projects.wait_for_script(project.project_id, timeout=120)
    ui.print("the script, ready for review:")
    for line in (ready.view_script or "").splitlines():
        ui.print(f"  {line}")
    first = await client.projects.create_videos(project.project_id)
    ui.print(f"batch 1: {len(first.task_ids)} videos from the project's script")
    second = await client.projects.create_videos(
        project.project_id, script=CUSTOM_SCRIPT, out_number=1, aspect_ratio="1:1"
    )
    ui.print(f"batch 2: {len(second.task_ids)} video from a script of its own (this batch only)")
    ids = [*first.task_ids, *second.task_ids]
    results = await wait_for_ids(ctx, client, ids, timeout=120, description="generating")
    final = await client.projects.wait(project.project_id, timeout=120)
    if not ui.json_mode:  # in --json mode the demo prints one summary document at the end
        show_project(ctx, final)
    return final, [r for r in (results.get(i) for i in ids) if isinstance(r, Task)]


async def _run(
    ctx: Context, client: AsyncVideoGen, directory: Path, summary: dict[str, Any]
) -> int:
    ui = ctx.ui
    ui.heading("1. Your balance")
    before = await client.credits.get()
    ui.table(
        ("available", "total"),
        [[fmt_credits(c) for c in (before.api_available_credits, before.api_total_credits)]],
    )
    tasks = await _direct_tasks(ctx, client, max(1, ctx.args.tasks))
    final, project_tasks = await _project(ctx, client)

    finished = [t for t in [*tasks, *project_tasks] if t.is_succeeded]
    ui.heading(f"4. Downloading {len(finished)} videos to {directory}")
    downloads = await download_with_progress(ctx, client, finished, directory, max_concurrency=4)
    if not ui.json_mode:
        show_downloads(ctx, downloads)

    ui.heading("5. Final balance and the project's billing")
    after = await client.credits.get()
    had, has = before.api_available_credits, after.api_available_credits
    ui.table(
        ("before", "spent", "after"),
        [[fmt_credits(v) for v in (had, had - has, has)]],
        title="Balance",
    )

    ui.table(("script", "videos", "total"), [billing_row(final)], title="Billing")
    summary.update(
        balance_before=before.to_dict(),
        tasks=[t.to_dict() for t in tasks],
        project=final.to_dict(),
        downloads=[
            {"task_id": d.task_id, "path": str(d.path) if d.path else None, "size": d.size}
            for d in downloads
        ],
        balance_after=after.to_dict(),
    )
    return (
        EXIT_OK
        if all(d.ok for d in downloads) and len(tasks) == max(1, ctx.args.tasks)
        else EXIT_SOME_FAILED
    )
