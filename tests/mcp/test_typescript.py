"""The official TypeScript SDK as a second client: the one most desktop and IDE hosts are built on.

``ts/client.mjs`` (``@modelcontextprotocol/sdk``, pinned by ``ts/package-lock.json``) keeps the
SDK's default request timeout of 60 s, as those hosts do, over stdio (it starts ``videogen mcp``
itself) and over streamable HTTP with a bearer token. The packages are installed here with
``npm ci`` when ``ts/node_modules`` is missing; without the registry the tests skip, saying how
to enable them (under ``CI=true`` they fail instead).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from videogen_async.testing import SandboxServer

from .conftest import KEY, Servers, server_env

TS = Path(__file__).resolve().parent / "ts"
TOKEN = "vg-mcp-ts-token-SECRET-7373"


@pytest.fixture(scope="session")
def node() -> str:
    """``node``, with the pinned packages installed (once, whichever worker comes first)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are not on PATH")
    with (TS / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
            run = subprocess.run(  # noqa: S603 - npm, from PATH
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=TS,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if run.returncode != 0:
                _unavailable(f"npm ci failed in {TS}: {run.stderr.strip()[-500:]}")
    return node


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI needs Node.js 18+ and the npm registry)")
    pytest.skip(f"{why}: install Node.js 18+ and run `npm ci` in {TS} to run these tests")


async def _client(node: str, servers: Servers, mode: str) -> dict[str, Any]:
    """Run ``client.mjs`` against a server of ``servers``; its one line of JSON."""
    env = {**os.environ, **server_env(servers.sandbox)}
    if mode == "stdio":
        command = [node, "client.mjs", "stdio", sys.executable, servers.ledger]
        run = await anyio.run_process(command, cwd=TS, env=env, check=False)
    else:
        # The client can ask its user: every create asks (not the tests' --confirm-above none).
        async with servers.serving(
            "--confirm-above", "0", env={"VIDEOGEN_MCP_TOKEN": TOKEN}
        ) as url:
            env["VIDEOGEN_MCP_TOKEN"] = TOKEN
            run = await anyio.run_process(
                [node, "client.mjs", "http", url], cwd=TS, env=env, check=False
            )
    servers.texts += [run.stdout.decode(), run.stderr.decode()]
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    result: dict[str, Any] = json.loads(run.stdout.decode().strip().splitlines()[-1])
    return result


def _check(result: dict[str, Any], mode: str) -> None:
    tools = {tool["name"]: tool for tool in result["tools"]}
    assert len(tools) == 7
    assert all(tool["title"] and tool["outputSchema"] == "object" for tool in tools.values())
    assert tools["wait_for_video"]["annotations"]["readOnlyHint"] is True
    create = tools["create_video"]["annotations"]
    assert (create["readOnlyHint"], create["destructiveHint"], create["idempotentHint"]) == (
        False,
        False,
        True,
    )
    assert "key" in tools["create_video"]["inputRequired"]
    assert len(result["asked"]) == 1
    assert "a fox, from TypeScript" in result["asked"][0]
    assert result["created"]["key"] == f"ts-{mode}"
    assert result["entry"]["state"] == "succeeded"
    assert result["entry"]["video_url"]


@pytest.fixture
async def long_sandbox() -> AsyncIterator[SandboxServer]:
    """Real time: every video takes 66 s, longer than a host lets one request take (60 s)."""
    async with SandboxServer(api_key=KEY, time_scale=1, task_duration=66, seed=9) as server:
        yield server


@pytest.mark.parametrize("mode", ["stdio", "http"])
async def test_the_typescript_sdk_lists_the_tools_creates_and_waits(
    node: str, servers: Servers, mode: str
) -> None:
    result = await _client(node, servers, mode)
    _check(result, mode)
    assert servers.sandbox.stats().tasks_created == 1


@pytest.mark.slow
async def test_a_video_longer_than_a_request_through_waits_none_of_which_times_out(
    node: str, long_sandbox: SandboxServer, tmp_path: Path
) -> None:
    # Both transports at once: the test waits (over a minute), it does not compute.
    servers = Servers(long_sandbox, tmp_path)
    results: dict[str, dict[str, Any]] = {}

    async def one(mode: str) -> None:
        results[mode] = await _client(node, servers, mode)

    async with anyio.create_task_group() as group:
        for mode in ("stdio", "http"):
            group.start_soon(one, mode)
    for mode, result in results.items():
        _check(result, mode)
        assert result["seconds"] >= 60  # longer than one request may take
        assert len(result["waits"]) >= 2
        assert all(wait["seconds"] < 50 for wait in result["waits"])
        assert "call wait_for_video again" in result["waits"][0]["text"]
    assert KEY not in " ".join(servers.texts)
