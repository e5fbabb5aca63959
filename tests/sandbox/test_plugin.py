"""The pytest plugin: fixtures here (auto mode) and in a strict-mode suite of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from videogen_async.testing import SandboxServer

from .conftest import Api


async def test_videogen_sandbox_fixture(videogen_sandbox: SandboxServer) -> None:
    assert videogen_sandbox.started
    assert videogen_sandbox.clock.time_scale == 0.01  # the fixture's fast default
    async with aiohttp.ClientSession() as session:
        api = Api(session, videogen_sandbox)
        created = await api.create_task()
        assert (await api.task(created["task_id"]))["status"] == "running"


async def test_factory_fixture(
    videogen_sandbox_factory: Callable[..., Awaitable[SandboxServer]],
) -> None:
    one = await videogen_sandbox_factory(credits=5, manual_clock=True)
    two = await videogen_sandbox_factory(api_key="other")
    assert one.started
    assert two.started
    assert one.port != two.port
    assert one.clock.paused
    assert one.clock.time_scale == 0.01  # still based on videogen_sandbox_options
    assert two.api_key == "other"
    async with aiohttp.ClientSession() as session:
        assert (await Api(session, one).credits())["api_total_credits"] == 5


class TestOptionsOverride:
    @pytest.fixture
    def videogen_sandbox_options(self) -> dict[str, Any]:
        return {"manual_clock": True, "credits": 42}

    async def test_override(self, videogen_sandbox: SandboxServer) -> None:
        assert videogen_sandbox.clock.paused
        assert videogen_sandbox.credits()["api_total_credits"] == 42


def run_pytest(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user_suite.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n", encoding="utf-8"
    )
    return subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(tmp_path)],
        cwd=tmp_path,
        # As a user's own run: nothing of this run's pytest-xdist worker (PYTEST_XDIST_*).
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


STRICT_SUITE = """
    import aiohttp
    import pytest

    @pytest.mark.asyncio
    async def test_uses_the_sandbox(videogen_sandbox):
        headers = {"Authorization": f"Bearer {videogen_sandbox.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            async with session.get(videogen_sandbox.url("/v1/credits")) as response:
                assert response.status == 200

    @pytest.mark.asyncio
    async def test_factory(videogen_sandbox_factory):
        server = await videogen_sandbox_factory(credits=3)
        assert server.credits()["api_total_credits"] == 3

    def test_plain():
        assert True
"""


def test_strict_mode_suite(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, STRICT_SUITE, "-o", "asyncio_mode=strict", "-W", "error")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


def test_suite_without_asyncio_plugin_is_unaffected(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, "def test_plain():\n    assert 1 + 1 == 2\n", "-p", "no:asyncio")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
