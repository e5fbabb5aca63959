"""Every error path of the service routes: auth, validation, bad JSON, unknown ids, routes."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

import pytest

from videogen_async.testing import SandboxServer

from .conftest import PRODUCT, REFERENCE, SCRIPT_READY, Api

SERVICE_ROUTES = [
    ("POST", "/v1/video/videomodel-2"),
    ("GET", "/v1/tasks?task_id=x"),
    ("GET", "/v1/credits"),
    ("POST", "/v1/video/viral-ads-clone"),
    ("GET", "/v1/video/viral-ads-clone/x"),
    ("POST", "/v1/video/viral-ads-clone/x/videos"),
]


@pytest.mark.parametrize(("method", "path"), SERVICE_ROUTES)
@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer wrong-key", "Basic c2FuZGJveC1rZXk=", "sandbox-key", "Bearer"],
)
async def test_missing_or_invalid_key_is_401(
    api: Api, method: str, path: str, header: str | None
) -> None:
    headers = {} if header is None else {"Authorization": header}
    reply = await api.call(method, path, json={"prompt": "x"}, headers=headers, auth=False)
    message = reply.error(401)
    assert "sandbox-key" not in message
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert api.server.task_ids == ()


async def test_a_client_gone_mid_request_is_logged_as_499_not_as_a_sandbox_failure(
    sandbox: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="videogen_async.testing")
    _, writer = await asyncio.open_connection(sandbox.host, sandbox.port)
    head = (
        "POST /v1/video/videomodel-2 HTTP/1.1\r\nHost: sandbox\r\n"
        f"Authorization: Bearer {sandbox.api_key}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n"
    )
    writer.write(head.encode() + b'{"prompt"')  # the body cut short: the client then vanishes
    await writer.drain()
    await sandbox.wait_until(lambda: sandbox.stats().in_flight == 1)
    writer.transport.abort()
    await sandbox.wait_until(lambda: len(sandbox.request_log) == 1)
    assert sandbox.request_log[0].status == 499
    assert sandbox.stats().by_status == {"499": 1}
    assert sandbox.task_ids == ()
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert failures == [], [r.getMessage() for r in failures]


async def test_bearer_scheme_is_case_insensitive(api: Api) -> None:
    reply = await api.call(
        "GET", "/v1/credits", headers={"Authorization": "bearer sandbox-key"}, auth=False
    )
    assert reply.status == 200


async def test_custom_api_key(session: Any) -> None:
    async with SandboxServer(api_key="k-123") as server:
        api = Api(session, server)
        assert (await api.call("GET", "/v1/credits")).status == 200
        bad = await api.call("GET", "/v1/credits", headers={"Authorization": "Bearer sandbox-key"})
        bad.error(401)


TASK_CASES: list[tuple[dict[str, Any], str]] = [
    ({}, "prompt"),
    ({"prompt": "  "}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "x", "model": "videomodel_3"}, "model"),
    ({"prompt": "x", "ratio": "2:1"}, "ratio"),
    ({"prompt": "x", "function_mode": "magic"}, "function_mode"),
    ({"prompt": "x", "duration": 3}, "duration"),
    ({"prompt": "x", "duration": 16}, "duration"),
    ({"prompt": "x", "duration": "5"}, "duration"),
    ({"prompt": "x", "image_urls": ["https://e.com/i.png"] * 10}, "image_urls"),
    ({"prompt": "x", "audio_urls": ["https://e.com/a.mp3"] * 4}, "audio_urls"),
    ({"prompt": "x", "video_urls": ["https://e.com/v.mp4"] * 4}, "video_urls"),
    ({"prompt": "x", "image_urls": ["ftp://e.com/i.png"]}, "image_urls[0]"),
    ({"prompt": "x", "image_urls": "https://e.com/i.png"}, "image_urls"),
    (
        {
            "prompt": "x",
            "function_mode": "first_last_frames",
            "image_urls": ["https://e.com/1.png"] * 3,
        },
        "image_urls",
    ),
    ({"prompt": "x", "audio_urls": ["https://e.com/a.mp3"]}, "audio_urls"),
    ({"prompt": "x", "functionMode": "omni_reference"}, "functionMode"),
]


@pytest.mark.parametrize(("body", "field"), TASK_CASES)
async def test_task_validation_names_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    reply = await api.call("POST", "/v1/video/videomodel-2", json=body)
    assert reply.error(400).startswith(f"{field}:")
    assert api.server.task_ids == ()
    assert await api.available() == 10_000


async def test_integral_json_numbers_count_as_integers(api: Api) -> None:
    reply = await api.call(
        "POST",
        "/v1/video/videomodel-2",
        data=b'{"prompt": "x", "duration": 6.0}',
        headers={"Content-Type": "application/json"},
    )
    assert reply.data["credits_cost"] == 12
    reply = await api.call(
        "POST",
        "/v1/video/videomodel-2",
        data=b'{"prompt": "x", "duration": 6.5}',
        headers={"Content-Type": "application/json"},
    )
    assert reply.error(400).startswith("duration:")


async def test_valid_edge_cases_of_tasks_are_accepted(api: Api) -> None:
    await api.create_task(duration=4)
    await api.create_task(duration=15)
    await api.create_task(
        function_mode="first_last_frames", image_urls=["https://e.com/1.png", "https://e.com/2.png"]
    )
    await api.create_task(audio_urls=["https://e.com/a.mp3"], video_urls=["https://e.com/v.mp4"])
    await api.create_task(function_mode="first_last_frames", audio_urls=["https://e.com/a.mp3"])
    await api.create_task(model=None, ratio=None)  # null counts as omitted
    assert len(api.server.task_ids) == 6


PROJECT_CASES: list[tuple[dict[str, Any], str]] = [
    ({"product_image_urls": [PRODUCT]}, "reference_video_url"),
    ({"reference_video_url": REFERENCE}, "product_image_urls"),
    ({"reference_video_url": REFERENCE, "product_image_urls": []}, "product_image_urls"),
    ({"reference_video_url": "not a url", "product_image_urls": [PRODUCT]}, "reference_video_url"),
    (
        {"reference_video_url": REFERENCE, "product_image_urls": [PRODUCT], "out_number": 5},
        "out_number",
    ),
    (
        {"reference_video_url": REFERENCE, "product_image_urls": [PRODUCT], "mode": "semi"},
        "mode",
    ),
    (
        {"reference_video_url": REFERENCE, "product_image_urls": [PRODUCT], "aspect_ratio": "4:3"},
        "aspect_ratio",
    ),
    (
        {
            "reference_video_url": REFERENCE,
            "product_image_urls": [PRODUCT],
            "speech_language_option": "klingon",
        },
        "speech_language_option",
    ),
    (
        {"reference_video_url": REFERENCE, "product_image_urls": [PRODUCT], "duration": 0},
        "duration",
    ),
    (
        {"reference_video_url": REFERENCE, "product_image_urls": [PRODUCT], "resolution": " "},
        "resolution",
    ),
    (
        {"reference_video_url": REFERENCE, "product_image_urls": [PRODUCT], "extra": 1},
        "extra",
    ),
]


@pytest.mark.parametrize(("body", "field"), PROJECT_CASES)
async def test_project_validation_names_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    reply = await api.call("POST", "/v1/video/viral-ads-clone", json=body)
    assert reply.error(400).startswith(f"{field}:")
    assert api.server.project_ids == ()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"script": "   "}, "script"),
        ({"out_number": 0}, "out_number"),
        ({"aspect_ratio": "21:9"}, "aspect_ratio"),
        ({"resolution": -1}, "resolution"),
        ({"scripts": "x"}, "scripts"),
    ],
)
async def test_videos_validation_names_the_field(
    api: Api, sandbox: SandboxServer, body: dict[str, Any], field: str
) -> None:
    pid = (await api.create_project(mode="manual"))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    reply = await api.create_videos(pid, **body)
    assert reply.error(400).startswith(f"{field}:")
    assert sandbox.task_ids == ()


async def test_videos_with_empty_body_uses_project_defaults(
    api: Api, sandbox: SandboxServer
) -> None:
    pid = (await api.create_project(mode="manual", out_number=3))["project_id"]
    sandbox.clock.advance(SCRIPT_READY)
    reply = await api.call("POST", f"/v1/video/viral-ads-clone/{pid}/videos")
    assert len(reply.data["task_ids"]) == 3


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b'{"prompt": NaN}', "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'"prompt"', "must be a JSON object"),
        (b"null", "must be a JSON object"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/video/videomodel-2", "/v1/video/viral-ads-clone"])
async def test_bad_json_is_400(api: Api, raw: bytes, expected: str, path: str) -> None:
    reply = await api.call("POST", path, data=raw, headers={"Content-Type": "application/json"})
    assert expected in reply.error(400)


async def test_unknown_ids_are_404(api: Api) -> None:
    assert "Task not found" in (await api.call("GET", "/v1/tasks?task_id=nope")).error(404)
    assert "Project not found" in (await api.call("GET", "/v1/video/viral-ads-clone/nope")).error(
        404
    )
    reply = await api.call("POST", "/v1/video/viral-ads-clone/nope/videos", json={})
    assert "Project not found" in reply.error(404)


async def test_missing_or_blank_task_id_is_400(api: Api) -> None:
    assert (await api.call("GET", "/v1/tasks")).error(400) == (
        "task_id: is required (query parameter)"
    )
    assert (await api.call("GET", "/v1/tasks?task_id=%20")).error(400).startswith("task_id:")


async def test_unknown_route_and_method(api: Api) -> None:
    assert "No such endpoint" in (await api.call("GET", "/v2/tasks")).error(404)
    reply = await api.call("DELETE", "/v1/credits")
    reply.error(405)
    assert "GET" in reply.headers["Allow"]


async def test_too_large_body_is_413(api: Api) -> None:
    body = io.BytesIO(json.dumps({"prompt": "x" * (2 * 1024 * 1024)}).encode())
    reply = await api.call(
        "POST", "/v1/video/videomodel-2", data=body, headers={"Content-Type": "application/json"}
    )
    reply.error(413)
    assert api.server.task_ids == ()


async def test_every_response_has_a_fresh_trace_id(api: Api) -> None:
    replies = [await api.call("GET", "/v1/credits") for _ in range(5)]
    replies.append(await api.call("GET", "/v1/tasks"))
    traces = [r.body["trace_id"] for r in replies]
    assert len(set(traces)) == len(traces)
    assert all(r.headers["X-Trace-Id"] == r.body["trace_id"] for r in replies)
    assert all(r.body["message"] is None for r in replies[:5])


async def test_the_request_log_keeps_each_answers_code_and_the_task_its_prompt(api: Api) -> None:
    created = await api.call("POST", "/v1/video/videomodel-2", json={"prompt": "a red kite"})
    assert created.status == 200
    (await api.call("GET", "/v1/tasks?task_id=nope")).error(404)
    ok, missing = api.server.request_log[-2:]
    assert (ok.status, ok.code) == (200, 200)
    assert (missing.status, missing.code) == (404, 404)
    task_id = api.server.task_ids[-1]
    assert api.server.describe_task(task_id)["prompt"] == "a red kite"
