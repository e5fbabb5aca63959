"""The SDK end to end against the sandbox: every resource call and the error mapping."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from videogen_async import (
    APIConnectionError,
    APIResponseError,
    AsyncVideoGen,
    AuthenticationError,
    ConflictError,
    CreditBalance,
    InsufficientCreditsError,
    InvalidRequestError,
    MediaStorageError,
    NotFoundError,
    PollPolicy,
    ProjectFailedError,
    RateLimitError,
    ServerError,
    TaskStatus,
)
from videogen_async.testing import SandboxServer

from .conftest import PRODUCT, REFERENCE, SCRIPT_READY, TASK_SECONDS, exact_options

FAST_POLLS = PollPolicy(min_interval=0.01, max_interval=0.05, dense_interval=0.01)


@pytest.fixture
async def client(sandbox: SandboxServer) -> AsyncIterator[AsyncVideoGen]:
    async with sandbox.client(max_retries=0) as sdk:
        yield sdk


async def test_credits(client: AsyncVideoGen) -> None:
    assert await client.credits.get() == CreditBalance(10_000, 10_000)


async def test_tasks_create_and_get(client: AsyncVideoGen, sandbox: SandboxServer) -> None:
    created = await client.tasks.create(
        "a koi pond at dawn", model="videomodel_2_0_fast", duration=8
    )
    assert created.status == TaskStatus.RUNNING
    assert created.credits_cost == 8
    assert created.created_at is not None
    task = await client.tasks.get(created.task_id)
    assert task.status == "running"
    assert task.result is None
    assert not task.is_terminal
    sandbox.clock.advance(TASK_SECONDS)
    task = await client.tasks.get(created.task_id)
    assert task.is_succeeded
    assert task.video_url == sandbox.url(f"/media/{created.task_id}.mp4")
    assert task.finished_at is not None
    assert task.model == "videomodel_2_0_fast"
    sandbox.schedule_task(
        (await client.tasks.create("x")).task_id, finish_in=0, outcome="failed", error_message="no"
    )
    failed = await client.tasks.get(sandbox.task_ids[-1])
    assert failed.is_failed
    assert failed.error_message == "no"
    assert failed.credits_cost == 0


async def test_projects_create_get_and_create_videos(
    client: AsyncVideoGen, sandbox: SandboxServer
) -> None:
    created = await client.projects.create(REFERENCE, [PRODUCT], mode="manual", out_number=2)
    assert (created.status, created.current_step, created.mode) == (
        "draft",
        "preparing_media",
        "manual",
    )
    assert created.credits_cost == 10
    project = await client.projects.get(created.project_id)
    assert not project.has_script
    with pytest.raises(ConflictError) as info:
        await client.projects.create_videos(created.project_id)
    assert info.value.code == 409
    sandbox.clock.advance(SCRIPT_READY)
    project = await client.projects.get(created.project_id)
    assert project.has_script
    assert project.status == "succeeded"
    batch = await client.projects.create_videos(created.project_id, out_number=1, resolution=1080)
    assert batch.project_status == "running"
    assert batch.current_step == "generating_video"
    assert len(batch.task_ids) == 1
    project = await client.projects.get(created.project_id)
    assert project.task_ids == batch.task_ids
    assert project.tasks[0].credits_cost == 45
    assert project.billing.total_credits_cost == 55


async def test_errors_map_to_the_documented_exceptions(
    client: AsyncVideoGen, sandbox: SandboxServer
) -> None:
    with pytest.raises(InvalidRequestError):
        await client.tasks.create("x", duration=99)
    assert sandbox.request_log == ()  # refused before sending
    with pytest.raises(NotFoundError) as nf:
        await client.tasks.get("no-such-task")
    assert nf.value.status_code == 404
    assert nf.value.trace_id
    with pytest.raises(NotFoundError):
        await client.projects.get("no-such-project")
    with pytest.raises(MediaStorageError) as media:
        await client.projects.create("https://cdn.invalid/a.mp4", [PRODUCT])
    assert (media.value.status_code, media.value.code) == (409, 100099)
    sandbox.set_credits(available=1)
    with pytest.raises(InsufficientCreditsError) as broke:
        await client.tasks.create("x")
    assert broke.value.message.endswith("Insufficient API credits")
    assert broke.value.code == 300111
    with pytest.raises(InsufficientCreditsError):
        await client.projects.create(REFERENCE, [PRODUCT])
    async with AsyncVideoGen(api_key="wrong", base_url=sandbox.base_url) as other:
        with pytest.raises(AuthenticationError) as auth:
            await other.credits.get()
    assert "wrong" not in str(auth.value)
    assert sandbox.task_ids == ()
    assert sandbox.project_ids == ()


async def test_injected_faults_map_to_the_documented_exceptions(
    client: AsyncVideoGen, sandbox: SandboxServer
) -> None:
    sandbox.faults.set("GET /v1/credits", error_rate=1.0, error_statuses=[503], times=1)
    with pytest.raises(ServerError) as failed:
        await client.credits.get()
    assert failed.value.status_code == 503
    sandbox.faults.set("GET /v1/credits", rate_limit_rate=1.0, retry_after=3, times=1)
    with pytest.raises(RateLimitError) as limited:
        await client.credits.get()
    assert limited.value.retry_after == 3
    sandbox.faults.set("GET /v1/credits", html_rate=1.0, times=1)
    with pytest.raises((APIResponseError, ServerError)) as html:
        await client.credits.get()
    assert html.value.status_code == 502
    # aiohttp itself retries an idempotent request once on a dropped keep-alive connection,
    # so drop the retry as well.
    sandbox.faults.set("GET /v1/credits", drop_before_rate=1.0, times=2)
    with pytest.raises(APIConnectionError):
        await client.credits.get()


async def test_drop_after_create_is_not_retried(sandbox: SandboxServer) -> None:
    sandbox.faults.set("POST /v1/video/videomodel-2", drop_after_rate=1.0, times=1)
    async with sandbox.client(max_retries=3) as sdk:
        with pytest.raises(APIConnectionError) as info:
            await sdk.tasks.create("once only")
    assert info.value.request_may_have_taken_effect
    assert len(sandbox.task_ids) == 1  # created once, never a second time
    assert sandbox.stats().by_route["POST /v1/video/videomodel-2"] == 1


async def test_reads_are_retried_through_faults(sandbox: SandboxServer) -> None:
    sandbox.faults.set("GET /v1/credits", error_rate=1.0, error_statuses=[502], times=2)
    async with sandbox.client(max_retries=3) as sdk:
        assert (await sdk.credits.get()).api_total_credits == 10_000
    assert sandbox.stats().by_route["GET /v1/credits"] == 3


async def test_waits_on_a_fast_clock() -> None:
    options = exact_options(manual_clock=False, time_scale=0.001)
    async with SandboxServer(**options) as server, server.client(poll_policy=FAST_POLLS) as sdk:
        created = await sdk.tasks.create("a fast one")
        task = await sdk.tasks.wait(created.task_id, timeout=10)
        assert task.is_succeeded
        project = await sdk.projects.create(REFERENCE, [PRODUCT], out_number=2)
        ready = await sdk.projects.wait_for_script(project.project_id, timeout=10)
        assert ready.has_script
        done = await sdk.projects.wait(project.project_id, timeout=10)
        assert done.status == "succeeded"
        assert len(done.task_ids) == 2
        ids = [(await sdk.tasks.create(f"clip {i}")).task_id for i in range(5)]
        seen = [t.task_id async for t in sdk.tasks.gather_until_done(ids, timeout=10)]
        assert sorted(seen) == sorted(ids)
        failing = await sdk.projects.create("https://e.com/sandbox-fail.mp4", [PRODUCT])
        with pytest.raises(ProjectFailedError):
            await sdk.projects.wait_for_script(failing.project_id, timeout=10)
