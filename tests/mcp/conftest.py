"""Fixtures of the MCP server's tests: a sandbox in the test's loop, ``videogen mcp`` processes.

Each server is a real ``videogen mcp`` subprocess (PYTHONPATH passed through, so that this tree
is what runs), reached by the ``mcp`` package's own client over stdio or streamable HTTP. Every
answer a test reads goes through :class:`Agent`, which keeps its text (the tests assert that
the API key is in none of them, nor in the servers' stderr) and holds its ``structuredContent``
to the tool's ``outputSchema`` with ``jsonschema``: every answer, refusals included.

The servers start with ``--confirm-above none`` (the operator consents: these clients cannot
be asked) unless a test gives its own.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp", reason="needs the mcp extra: pip install videogen-async[mcp]")
import jsonschema  # the mcp extra brings it
from mcp import ClientSession
from mcp.client.session import ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from videogen_async.testing import SandboxServer

KEY = "vg-mcp-test-SECRET-key-5151"
CREATE_ROUTE = "POST /v1/video/videomodel-2"
ROOT = Path(__file__).resolve().parent.parent.parent


def server_env(sandbox: SandboxServer) -> dict[str, str]:
    """The environment of a ``videogen mcp`` process: the key, the sandbox, this tree."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {"VIDEOGEN_API_KEY": KEY, "VIDEOGEN_BASE_URL": sandbox.base_url, "PYTHONPATH": path}


def mcp_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "videogen_async", "mcp", *args]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Agent:
    """One MCP client session, keeping the text of every answer it read."""

    def __init__(self, session: ClientSession, texts: list[str]) -> None:
        self.session, self.texts = session, texts
        self.schemas: dict[str, Any] = {}

    async def call(self, name: str, arguments: dict[str, Any], **options: Any) -> CallToolResult:
        """A call; its structured answer (an error's too) must fit the tool's output schema."""
        if not self.schemas:
            tools = (await self.session.list_tools()).tools
            self.schemas = {tool.name: tool.output_schema for tool in tools}
        result = await self.session.call_tool(name, arguments, **options)
        self.texts += [block.text for block in result.content if hasattr(block, "text")]
        self.texts.append(json.dumps(result.structured_content))
        if result.structured_content is None:  # only the SDK's own check of the arguments
            assert result.is_error, result.content
            assert "validation error" in result.content[0].text  # type: ignore[union-attr]
        else:
            jsonschema.validate(result.structured_content, self.schemas[name])
        return result

    async def refusal(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A call's refusal, which must be an error whose text is the refusal's message."""
        result = await self.call(name, arguments)
        assert result.is_error, result.structured_content
        assert result.structured_content is not None
        refusal: dict[str, Any] = result.structured_content["refusal"]
        assert result.content[0].text == refusal["message"]  # type: ignore[union-attr]
        return refusal

    async def data(self, name: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
        """A call's answer, which must not be an error."""
        result = await self.call(name, arguments, **options)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return result.structured_content


class Servers:
    """Starts ``videogen mcp`` processes against one sandbox; every answer and stderr kept."""

    def __init__(self, sandbox: SandboxServer, tmp_path: Path) -> None:
        self.sandbox, self.tmp_path = sandbox, tmp_path
        self.ledger = str(tmp_path / "ledger.sqlite")
        self.texts: list[str] = []
        self.stderr_paths: list[Path] = []

    def stderr(self) -> str:
        return "".join(path.read_text(errors="replace") for path in self.stderr_paths)

    def _errlog(self) -> Any:
        path = self.tmp_path / f"stderr-{len(self.stderr_paths)}.txt"
        self.stderr_paths.append(path)
        return path.open("w")

    def command(self, *args: str) -> list[str]:
        return mcp_command("--ledger", self.ledger, "--confirm-above", "none", *args)

    @asynccontextmanager
    async def stdio(
        self, *args: str, elicitation: ElicitationFnT | None = None
    ) -> AsyncIterator[Agent]:
        """A session with a new ``videogen mcp`` process over stdio (on the shared ledger)."""
        command = self.command(*args)
        params = StdioServerParameters(
            command=command[0], args=command[1:], env=server_env(self.sandbox)
        )
        with self._errlog() as errlog:
            async with stdio_client(params, errlog=errlog) as streams:
                async with ClientSession(*streams, elicitation_callback=elicitation) as session:
                    await session.initialize()
                    yield Agent(session, self.texts)

    @asynccontextmanager
    async def serving(
        self, *args: str, bind: str = "127.0.0.1", env: dict[str, str] | None = None
    ) -> AsyncIterator[str]:
        """A ``videogen mcp --http`` process on ``bind``; its URL through loopback."""
        port = free_port()
        command = self.command("--http", f"{bind}:{port}", *args)
        env = {**os.environ, **server_env(self.sandbox), **(env or {})}
        with self._errlog() as errlog:
            process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
            try:
                with anyio.fail_after(60):
                    await _accepting(port)
                yield f"http://127.0.0.1:{port}/mcp"
            finally:
                process.terminate()
                with anyio.fail_after(30):
                    await process.wait()

    @asynccontextmanager
    async def http(self, *args: str) -> AsyncIterator[Agent]:
        """A session with a new ``videogen mcp --http`` process (on the shared ledger)."""
        async with self.serving(*args) as url:
            async with streamable_http_client(url) as streams:
                async with ClientSession(*streams[:2]) as session:
                    await session.initialize()
                    yield Agent(session, self.texts)


async def _accepting(port: int) -> None:
    """Wait until the server accepts connections on ``port``."""
    while True:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(0.05)  # the process is still starting: nothing to wait on
            continue
        await stream.aclose()
        return


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(api_key=KEY, time_scale=0.005, task_duration=4, seed=5) as server:
        yield server


@pytest.fixture
async def servers(sandbox: SandboxServer, tmp_path: Path) -> AsyncIterator[Servers]:
    """The servers of a test; afterwards, the key is in none of their answers nor stderr."""
    servers = Servers(sandbox, tmp_path)
    yield servers
    assert servers.texts
    assert not [text for text in servers.texts if KEY in text]
    assert KEY not in servers.stderr()
