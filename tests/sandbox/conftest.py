"""Fixtures of the sandbox's own tests: a sandbox on a manual clock and a raw aiohttp client.

The tests talk to the sandbox as an independent client would, from the spec alone: plain
aiohttp requests, no SDK code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import attrs
import pytest

from videogen_async.testing import ProjectTiming, SandboxServer

TASK_SECONDS = 30.0
MEDIA_SECONDS = 2.0
ANALYSIS_SECONDS = 10.0
SCRIPT_SECONDS = 10.0
SCRIPT_READY = MEDIA_SECONDS + ANALYSIS_SECONDS + SCRIPT_SECONDS

REFERENCE = "https://cdn.example.com/ads/reference.mp4"
PRODUCT = "https://cdn.example.com/products/bottle.png"


def exact_options(**overrides: Any) -> dict[str, Any]:
    """Sandbox options with fixed durations and a paused clock: every instant is known."""
    options: dict[str, Any] = {
        "manual_clock": True,
        "seed": 7,
        "task_duration": TASK_SECONDS,
        "project_timing": ProjectTiming(
            preparing_media=MEDIA_SECONDS,
            analyzing=ANALYSIS_SECONDS,
            generating_script=SCRIPT_SECONDS,
        ),
    }
    options.update(overrides)
    return options


@attrs.frozen
class Reply:
    status: int
    body: Any
    headers: Any

    @property
    def data(self) -> Any:
        assert self.status == 200, (self.status, self.body)
        assert self.body["code"] == 200, self.body
        return self.body["data"]

    def error(self, status: int, code: int | None = None) -> str:
        """Assert an error envelope and return its message."""
        assert self.status == status, (self.status, self.body)
        assert set(self.body) == {"code", "trace_id", "message", "data"}, self.body
        assert self.body["code"] == (status if code is None else code), self.body
        assert self.body["data"] is None
        assert isinstance(self.body["trace_id"], str)
        assert self.body["trace_id"]
        assert isinstance(self.body["message"], str)
        assert self.body["message"]
        return str(self.body["message"])


class Api:
    """A raw HTTP client of one sandbox."""

    def __init__(self, session: aiohttp.ClientSession, server: SandboxServer) -> None:
        self.session = session
        self.server = server
        self.auth = {"Authorization": f"Bearer {server.api_key}"}

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        data: Any = None,
        params: Any = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> Reply:
        all_headers = dict(self.auth) if auth else {}
        all_headers.update(headers or {})
        async with self.session.request(
            method,
            self.server.url(path),
            json=json,
            data=data,
            params=params,
            headers=all_headers,
        ) as response:
            raw = await response.read()
            try:
                body = await response.json(content_type=None) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            return Reply(response.status, body, response.headers)

    async def create_task(self, **body: Any) -> dict[str, Any]:
        body.setdefault("prompt", "a red fox running through fresh snow")
        return (await self.call("POST", "/v1/video/videomodel-2", json=body)).data

    async def task(self, task_id: str) -> dict[str, Any]:
        return (await self.call("GET", "/v1/tasks", params={"task_id": task_id})).data

    async def credits(self) -> dict[str, Any]:
        return (await self.call("GET", "/v1/credits")).data

    async def available(self) -> float:
        return float((await self.credits())["api_available_credits"])

    async def create_project(self, **body: Any) -> dict[str, Any]:
        body.setdefault("reference_video_url", REFERENCE)
        body.setdefault("product_image_urls", [PRODUCT])
        return (await self.call("POST", "/v1/video/viral-ads-clone", json=body)).data

    async def project(self, project_id: str) -> dict[str, Any]:
        return (await self.call("GET", f"/v1/video/viral-ads-clone/{project_id}")).data

    async def create_videos(self, project_id: str, **body: Any) -> Reply:
        return await self.call("POST", f"/v1/video/viral-ads-clone/{project_id}/videos", json=body)


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(**exact_options()) as server:
        yield server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client_session:
        yield client_session


@pytest.fixture
def api(sandbox: SandboxServer, session: aiohttp.ClientSession) -> Api:
    return Api(session, sandbox)
