"""Type-checked, not run: the public API used as a user would (``mypy --strict``)."""

from __future__ import annotations

from pathlib import Path

import videogen_async as vg
from videogen_async import AsyncVideoGen


async def main() -> None:
    async with AsyncVideoGen(api_key="k", base_url="https://api.example.com") as client:
        balance: vg.CreditBalance = await client.credits.get()
        available: float = balance.api_available_credits
        created: vg.CreatedTask = await client.tasks.create(
            "a cat surfing",
            model=vg.Model.VIDEOMODEL_2_0_FAST,
            function_mode="omni_reference",
            ratio=vg.Ratio.R9_16,
            duration=6,
            image_urls=["https://cdn.example.com/cat.png"],
        )
        task: vg.Task = await client.tasks.get(created.task_id)
        done: bool = task.is_terminal
        url: str | None = task.video_url
        project: vg.CreatedProject = await client.projects.create(
            "https://cdn.example.com/ad.mp4",
            ["https://cdn.example.com/p.png"],
            mode=vg.ProjectMode.MANUAL,
            speech_language_option=vg.SpeechLanguage.ENGLISH,
            resolution=1080,
            out_number=2,
        )
        full: vg.Project = await client.projects.get(project.project_id)
        billing: vg.Billing = full.billing
        batch: vg.VideoBatch = await client.projects.create_videos(project.project_id, out_number=1)
        ids: tuple[str, ...] = batch.task_ids
        quick = client.with_options(timeout=5.0, max_retries=0)
        again: vg.Task = await quick.tasks.get(ids[0])
        try:
            await client.tasks.create("")
        except vg.InvalidRequestError as exc:
            field: str = exc.field
            print(field)
        except vg.APIStatusError as exc:
            status: int | None = exc.status_code
            trace: str | None = exc.trace_id
            print(status, trace)
        del available, done, url, billing, again


async def waiting_and_downloads(client: AsyncVideoGen, ids: list[str]) -> None:
    """The wait, gather and download helpers, with the types a user relies on."""
    task: vg.Task = await client.tasks.wait(ids[0], timeout=60.0, raise_on_failure=True)
    project: vg.Project = await client.projects.wait_for_script("p-1", timeout=600)
    script: str | None = project.view_script
    final: vg.Project = await client.projects.wait("p-1", timeout=None)
    failed: bool = final.is_failed

    gathered = client.tasks.gather_until_done(
        ids, timeout=900, max_concurrency=8, return_exceptions=True
    )
    async with gathered as results:
        async for item in results:
            if isinstance(item, vg.TaskPollError):
                lost: str = item.task_id
                print(lost)
            else:
                done: vg.Task = item
                print(done.video_url)
        progress = results.progress
        counts: tuple[int, int, int] = (progress.total, progress.done, progress.pending)
        print(counts)
    async for item in client.tasks.gather_until_done(ids, return_exceptions=True):
        print(item.task_id)

    policy = vg.PollPolicy(min_interval=0.5, max_interval=10.0)
    backoff = vg.BackoffPolicy(max_retries=5, max_retry_after=120.0)
    fast = client.with_options(poll_policy=policy, backoff=backoff)
    retries: int = fast.backoff.max_retries
    print(retries)
    seen: list[vg.GatherProgress] = []
    gather: vg.GatherResults = vg.gather_until_done(
        fast, ids, timeout=60.0, poll_policy=policy, on_progress=seen.append
    )
    async for item in gather:
        print(item.task_id, seen[-1].done if seen else 0)

    try:
        await client.tasks.wait(ids[0], timeout=1)
    except vg.WaitTimeoutError as exc:
        pending: tuple[str, ...] = exc.pending
        print(pending, exc.last)
    except vg.TaskFailedError as exc:
        failed_task: vg.Task = exc.task
        print(failed_task.error_message)

    path: Path = await client.download(task, Path("videos"), overwrite=False)
    again: Path = await client.download(ids[0], "videos/one.mp4", progress=lambda n, total: None)
    results_list: list[vg.DownloadResult] = await client.download_many(ids, "videos")
    for result in results_list:
        if result.ok:
            written: Path | None = result.path
            print(written, result.size)
        else:
            error: vg.VideoGenError | None = result.error
            print(error)
    async with vg.Ledger.open("tasks.db", max_credits=100.0) as ledger:
        entry: vg.LedgerEntry = await ledger.create_task(client, "a fox", key="fox-1")
        async with ledger.watch(client, stop_when_idle=True) as finished:
            async for record in finished:
                print(record.key, record.state, record.task_id)
        held: vg.LedgerEntry | None = await ledger.get("fox-1")
        print(entry.state, held)
        async with ledger.changes(keys=["fox-1"], after=0) as changes:
            async for change in changes:
                position: int | None = change.position
                print(position)
    del script, failed, path, again


async def observability() -> None:
    """Request ids, raw responses, event hooks and progress callbacks."""

    def on_request(event: vg.RequestEvent) -> None:
        print(event.method, event.path, event.attempt)

    async def on_response(event: vg.ResponseEvent) -> None:
        status: int = event.status_code
        trace: str | None = event.trace_id
        print(status, trace, event.elapsed)

    def on_retry(event: vg.RetryEvent) -> None:
        delay: float = event.delay
        print(delay, event.reason)

    def on_poll(event: vg.PollEvent) -> None:
        print(event.kind, event.id, event.status, event.current_step, event.is_terminal)

    hooks: dict[str, list[vg.EventHook]] = {
        "request": [on_request],
        "response": [on_response],
        "retry": [on_retry],
        "poll": [on_poll],
    }
    async with AsyncVideoGen(event_hooks=hooks) as client:
        created = await client.tasks.create("a boat")
        request_id: str | None = created._request_id
        info: vg.ResponseInfo | None = created._response
        if info is not None:
            headers_seen: str | None = info.headers.get("content-type")
            print(headers_seen, info.status_code, info.attempts, info.elapsed, info.url)
        raw: vg.RawResponse[vg.Task] = await client.with_raw_response.tasks.get(created.task_id)
        task: vg.Task = raw.parse()
        status: int = raw.status_code
        trace: str | None = raw.request_id
        request: vg.HTTPRequestInfo = raw.http_request
        balance: vg.CreditBalance = (await client.with_raw_response.credits.get()).parse()
        same: vg.RawResponse[vg.Task] = await client.tasks.with_raw_response.get(created.task_id)
        print(same.parse().status, vg.ConfigurationError("no key").request_id)
        batch: vg.RawResponse[
            vg.VideoBatch
        ] = await client.with_raw_response.projects.create_videos("p-1", out_number=1)

        def show(state: vg.Task) -> None:
            print(state.status)

        async def edit(project: vg.Project) -> None:
            print(project.current_step)

        final: vg.Task = await client.tasks.wait(created.task_id, on_update=show)
        script: vg.Project = await client.projects.wait_for_script("p-1", on_update=edit)
        done: vg.Project = await client.projects.wait("p-1", on_update=print)
        async for state in client.tasks.watch(created.task_id, timeout=60.0):
            current: vg.Task = state
            print(current.status)
        del request_id, task, status, trace, request, balance, batch, final, script, done


def blocking() -> None:
    with vg.VideoGen(api_key="k", base_url="https://api.example.com", max_retries=1) as client:
        created: vg.CreatedTask = client.tasks.create(
            "a cat", extra_body={"model": "videomodel_2_1"}, extra_headers={"X-A": "b"}, timeout=5
        )
        balance: vg.CreditBalance = client.credits.get(timeout=vg.Timeout(read=5.0))
        task: vg.Task = client.tasks.wait(created.task_id, timeout=600, extra_query={"a": 1})
        with client.tasks.gather_until_done([created.task_id], timeout=60) as results:
            for result in results:
                done: vg.Task | vg.TaskPollError = result
                progress: vg.GatherProgress = results.progress
                print(done, progress)
        for state in client.tasks.watch(created.task_id):
            print(state.status)
        raw: vg.RawResponse[vg.Project] = client.with_raw_response.projects.get("p-1")
        quick: vg.VideoGen = client.with_options(max_retries=0)
        path: Path = quick.download(task, "out.mp4")
        print(balance, raw.parse(), path, client.is_closed)


async def per_call_options(client: AsyncVideoGen) -> None:
    """The per-call options are typed on every call: a misspelled or mistyped one is an error
    (``warn_unused_ignores`` fails this file if one is not)."""
    await client.tasks.get("t", extra_header={"X-A": "b"})  # type: ignore[call-arg]
    await client.credits.get(timeout="5")  # type: ignore[arg-type]
    await client.tasks.wait("t", extra_body={"a": 1})  # type: ignore[call-arg]
    await client.projects.create_videos("p", extra_query={"a": [1]})  # type: ignore[dict-item]
    vg.VideoGen().credits.get(extra_headers={"X-A": 1})  # type: ignore[dict-item]
