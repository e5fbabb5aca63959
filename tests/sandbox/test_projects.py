"""Viral ad clone projects: steps on the clock, auto and manual mode, batches, billing."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import pytest

from videogen_async.testing import Pricing, SandboxServer

from .conftest import (
    ANALYSIS_SECONDS,
    MEDIA_SECONDS,
    PRODUCT,
    SCRIPT_READY,
    TASK_SECONDS,
    Api,
    exact_options,
)

VIDEO_COST = 30  # 2 credits per second x the default 15 s


def billing_of(project: dict[str, Any]) -> dict[str, Any]:
    billing = project["billing"]
    videos = sum(
        t["credits_cost"] for t in project["tasks"] if t["status"] not in ("failed", "error")
    )
    assert billing["video_credits_cost"] == videos
    assert billing["total_credits_cost"] == billing["script_credits_cost"] + videos
    return billing  # type: ignore[no-any-return]


async def test_creation_answer_and_charge(api: Api) -> None:
    start = await api.available()
    created = await api.create_project()
    assert set(created) == {
        "project_id",
        "status",
        "current_step",
        "mode",
        "credits_cost",
        "created_at",
    }
    assert created["status"] == "draft"
    assert created["current_step"] == "preparing_media"
    assert created["mode"] == "auto"
    assert created["credits_cost"] == 10
    assert await api.available() == start - 10
    assert api.server.project_ids == (created["project_id"],)


async def test_auto_mode_steps_and_single_automatic_batch(api: Api, sandbox: SandboxServer) -> None:
    start = await api.available()
    pid = (await api.create_project(out_number=3))["project_id"]
    seen = []
    for at in (0.0, MEDIA_SECONDS, MEDIA_SECONDS + ANALYSIS_SECONDS, SCRIPT_READY):
        sandbox.clock.advance(at - sandbox.clock.now())
        project = await api.project(pid)
        seen.append((project["status"], project["current_step"]))
        if at < SCRIPT_READY:
            assert project["view_script"] is None
            assert project["tasks"] == []
            assert project["task_ids"] == []
    assert seen == [
        ("draft", "preparing_media"),
        ("running", "analyzing"),
        ("running", "generating_script"),
        ("running", "generating_video"),
    ]
    project = await api.project(pid)
    assert len(project["task_ids"]) == 3
    assert [t["task_id"] for t in project["tasks"]] == project["task_ids"]
    assert {t["status"] for t in project["tasks"]} == {"running"}
    assert {t["batch"] for t in project["tasks"]} == {1}
    assert billing_of(project) == {
        "script_credits_cost": 10,
        "video_credits_cost": 3 * VIDEO_COST,
        "total_credits_cost": 10 + 3 * VIDEO_COST,
    }
    assert await api.available() == start - 10 - 3 * VIDEO_COST
    # The tasks of the batch are ordinary tasks.
    for task_id in project["task_ids"]:
        assert (await api.task(task_id))["status"] == "running"
    sandbox.clock.advance(TASK_SECONDS)
    project = await api.project(pid)
    assert (project["status"], project["current_step"]) == ("succeeded", "script_ready")
    assert {t["status"] for t in project["tasks"]} == {"succeeded"}
    assert all(t["result"]["video_url"] for t in project["tasks"])
    # Never another automatic batch, however long we wait.
    sandbox.clock.advance(10_000)
    assert len((await api.project(pid))["task_ids"]) == 3
    assert len(sandbox.task_ids) == 3


async def test_view_script_has_time_ranges(api: Api, sandbox: SandboxServer) -> None:
    pid = (await api.create_project(duration=12, prompt="stress the 24h battery"))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    script = (await api.project(pid))["view_script"]
    ranges = re.findall(r"^(\d+)-(\d+)s: \S.*$", script, flags=re.MULTILINE)
    assert ranges[0][0] == "0"
    assert ranges[-1][1] == "12"
    assert all(int(a) < int(b) for a, b in ranges)
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
    assert "24h battery" in script


async def test_auto_batch_happens_once_under_concurrent_reads(
    api: Api, sandbox: SandboxServer
) -> None:
    pid = (await api.create_project(out_number=2))["project_id"]
    sandbox.clock.advance(SCRIPT_READY + 1)
    projects = await asyncio.gather(*(api.project(pid) for _ in range(30)))
    credits = await asyncio.gather(*(api.credits() for _ in range(10)))
    assert {tuple(p["task_ids"]) for p in projects} == {tuple(projects[0]["task_ids"])}
    assert len(projects[0]["task_ids"]) == 2
    assert len(sandbox.task_ids) == 2
    assert {c["api_available_credits"] for c in credits} == {10_000 - 10 - 2 * VIDEO_COST}


async def test_auto_batch_is_charged_even_if_never_observed(
    api: Api, sandbox: SandboxServer
) -> None:
    await api.create_project(out_number=4)
    sandbox.clock.advance(SCRIPT_READY)
    assert await api.available() == 10_000 - 10 - 4 * VIDEO_COST


async def test_manual_mode_waits_for_the_videos_call(api: Api, sandbox: SandboxServer) -> None:
    created = await api.create_project(mode="manual", out_number=2)
    pid = created["project_id"]
    assert created["mode"] == "manual"
    early = await api.create_videos(pid)
    message = early.error(409)
    assert "not ready" in message
    assert "preparing_media" in message
    sandbox.clock.advance(SCRIPT_READY)
    project = await api.project(pid)
    assert (project["status"], project["current_step"]) == ("succeeded", "script_ready")
    script = project["view_script"]
    assert script
    assert project["tasks"] == []
    assert billing_of(project)["total_credits_cost"] == 10
    sandbox.clock.advance(1000)
    assert (await api.project(pid))["task_ids"] == []

    batch = (await api.create_videos(pid)).data
    assert batch["project_id"] == pid
    assert batch["project_status"] == "running"
    assert batch["current_step"] == "generating_video"
    assert len(batch["task_ids"]) == 2  # the project's out_number
    second = (
        await api.create_videos(pid, out_number=1, script="0-15s: only the logo.", resolution=1080)
    ).data
    assert len(second["task_ids"]) == 1
    project = await api.project(pid)
    assert project["view_script"] == script  # a batch script never overwrites it
    assert project["task_ids"] == batch["task_ids"] + second["task_ids"]
    assert [t["batch"] for t in project["tasks"]] == [1, 1, 2]
    assert project["tasks"][2]["resolution"] == 1080
    assert billing_of(project)["video_credits_cost"] == 2 * VIDEO_COST + 45  # 1080: x1.5
    assert (project["status"], project["current_step"]) == ("running", "generating_video")
    info = sandbox.describe_project(pid)
    assert info["batches"][1]["script"] == "0-15s: only the logo."
    assert info["batches"][0]["script"] is None


async def test_project_succeeds_when_all_tasks_end_even_if_one_failed(
    api: Api, sandbox: SandboxServer
) -> None:
    pid = (await api.create_project(out_number=2))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    first, _ = (await api.project(pid))["task_ids"]
    sandbox.schedule_task(first, finish_in=1, outcome="failed", error_message="bad frames")
    sandbox.clock.advance(1)
    project = await api.project(pid)
    assert (project["status"], project["current_step"]) == ("running", "generating_video")
    assert billing_of(project)["video_credits_cost"] == VIDEO_COST
    assert project["tasks"][0]["credits_cost"] == 0
    sandbox.clock.advance(TASK_SECONDS)
    project = await api.project(pid)
    assert (project["status"], project["current_step"]) == ("succeeded", "script_ready")
    assert [t["status"] for t in project["tasks"]] == ["failed", "succeeded"]
    assert billing_of(project)["total_credits_cost"] == 10 + VIDEO_COST
    assert await api.available() == 10_000 - 10 - VIDEO_COST
    # A later batch is still possible.
    assert (await api.create_videos(pid)).status == 200
    assert (await api.project(pid))["status"] == "running"


async def test_failure_marker_fails_the_project_and_refunds(
    api: Api, sandbox: SandboxServer
) -> None:
    pid = (
        await api.create_project(reference_video_url="https://cdn.example.com/sandbox-fail.mp4")
    )["project_id"]
    assert await api.available() == 10_000 - 10
    sandbox.clock.advance(MEDIA_SECONDS + ANALYSIS_SECONDS - 0.1)
    assert (await api.project(pid))["current_step"] == "analyzing"
    sandbox.clock.advance(0.1)
    project = await api.project(pid)
    assert (project["status"], project["current_step"]) == ("failed", "failed")
    assert "Analysis failed" in project["error_message"]
    assert project["view_script"] is None
    assert billing_of(project)["total_credits_cost"] == 0
    assert await api.available() == 10_000
    sandbox.clock.advance(1000)
    assert (await api.project(pid))["tasks"] == []
    assert "has failed" in (await api.create_videos(pid)).error(409)


async def test_schedule_project_exactly(api: Api, sandbox: SandboxServer) -> None:
    pid = (await api.create_project(mode="manual"))["project_id"]
    sandbox.schedule_project(pid, script_ready_in=4)
    sandbox.clock.advance(3.9)
    assert (await api.project(pid))["view_script"] is None
    sandbox.clock.advance(0.1)
    assert (await api.project(pid))["current_step"] == "script_ready"
    with pytest.raises(ValueError, match="past its script"):
        sandbox.schedule_project(pid, script_ready_in=1)

    other = (await api.create_project())["project_id"]
    sandbox.schedule_project(other, script_ready_in=5, outcome="failed", error_message="no audio")
    sandbox.clock.advance(5)
    project = await api.project(other)
    assert (project["status"], project["error_message"]) == ("failed", "no audio")
    assert project["tasks"] == []
    with pytest.raises(KeyError):
        sandbox.schedule_project("nope", script_ready_in=1)


async def test_project_failure_rate_is_seeded() -> None:
    async with SandboxServer(**exact_options(project_failure_rate=0.5)) as server:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server)
            ids = [(await api.create_project(mode="manual"))["project_id"] for _ in range(20)]
            server.clock.advance(SCRIPT_READY)
            statuses = [(await api.project(i))["status"] for i in ids]
    assert 3 < statuses.count("failed") < 17
    assert set(statuses) == {"failed", "succeeded"}


async def test_auto_batch_without_credits_fails_the_project(
    api: Api, sandbox: SandboxServer
) -> None:
    sandbox.set_credits(available=30, total=30)
    pid = (await api.create_project(out_number=1))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    project = await api.project(pid)
    assert (project["status"], project["current_step"]) == ("failed", "failed")
    assert "Insufficient API credits" in project["error_message"]
    assert project["view_script"]  # generated and paid for
    assert billing_of(project)["total_credits_cost"] == 10
    assert await api.available() == 20
    assert project["tasks"] == []


async def test_videos_without_credits_creates_nothing(api: Api, sandbox: SandboxServer) -> None:
    pid = (await api.create_project(mode="manual"))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    sandbox.set_credits(available=VIDEO_COST * 2 - 1)
    reply = await api.create_videos(pid, out_number=2)
    assert reply.error(409, 300111) == "Insufficient API credits"
    assert sandbox.task_ids == ()
    assert (await api.create_videos(pid, out_number=1)).status == 200


async def test_media_that_cannot_be_stored(api: Api, sandbox: SandboxServer) -> None:
    for body in (
        {"reference_video_url": "https://cdn.invalid/a.mp4"},
        {"product_image_urls": [PRODUCT, "https://img.example.invalid/b.png"]},
        {"avatar_image_url": "http://invalid/face.png"},
    ):
        reply = await api.call(
            "POST",
            "/v1/video/viral-ads-clone",
            json={"reference_video_url": "https://e.com/r.mp4", "product_image_urls": [PRODUCT]}
            | body,
        )
        assert reply.error(409, 100099) == "Failed to store media from URL"
    assert sandbox.project_ids == ()
    assert await api.available() == 10_000


async def test_media_rejects_predicate_and_insufficient_credits() -> None:
    options = exact_options(media_rejects=lambda url: "blocked" in url, credits=9)
    async with SandboxServer(**options) as server, aiohttp.ClientSession() as session:
        api = Api(session, server)
        body = {"reference_video_url": "https://e.com/blocked.mp4", "product_image_urls": [PRODUCT]}
        reply = await api.call("POST", "/v1/video/viral-ads-clone", json=body)
        assert reply.error(409, 100099) == "Failed to store media from URL"
        body["reference_video_url"] = "https://e.com/fine.mp4"
        reply = await api.call("POST", "/v1/video/viral-ads-clone", json=body)
        assert reply.error(409, 300111) == "Insufficient API credits"
        assert server.project_ids == ()
        assert await api.available() == 9


async def test_custom_pricing() -> None:
    pricing = Pricing(
        script_credits=3, per_second={"videomodel_2_0": 0.5}, project_video_per_second=1
    )
    async with SandboxServer(**exact_options(pricing=pricing)) as server:
        async with aiohttp.ClientSession() as session:
            api = Api(session, server)
            assert (await api.create_task(duration=5))["credits_cost"] == 2.5
            assert (await api.create_project())["credits_cost"] == 3
            server.clock.advance(SCRIPT_READY)
            assert await api.available() == 10_000 - 2.5 - 3 - 15


async def test_batch_script_marker_fails_its_tasks(api: Api, sandbox: SandboxServer) -> None:
    pid = (await api.create_project(mode="manual"))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    batch = (await api.create_videos(pid, script="0-15s: sandbox-fail")).data
    sandbox.clock.advance(TASK_SECONDS)
    project = await api.project(pid)
    assert [t["status"] for t in project["tasks"]] == ["failed"]
    assert project["task_ids"] == batch["task_ids"]
    assert billing_of(project)["total_credits_cost"] == 10
