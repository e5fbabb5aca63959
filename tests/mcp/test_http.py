"""``videogen mcp --http``: a bearer token off loopback, a port clash said in one line."""

from __future__ import annotations

import socket

import anyio
import httpx2 as httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import Agent, Servers, free_port, server_env

TOKEN = "vg-mcp-token-SECRET-6262"
HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def test_off_loopback_a_caller_without_the_token_is_refused_before_any_tool_runs(
    servers: Servers,
) -> None:
    # The server binds 0.0.0.0, every interface: the bind that needs a token (it refuses to
    # start without one). The test reaches it through loopback, the one interface a test can
    # count on; what is proved is the check of a server bound off loopback, which applies to
    # whichever interface a caller comes in by.
    env = {"VIDEOGEN_MCP_TOKEN": TOKEN}
    async with servers.serving("--allow-remote", bind="0.0.0.0", env=env) as url:  # noqa: S104
        async with httpx.AsyncClient() as http:
            missing = await http.post(url, json=HELLO, headers=ACCEPT)
            wrong = await http.post(
                url, json=HELLO, headers={**ACCEPT, "Authorization": "Bearer not-the-token"}
            )
            base = url.removesuffix("/mcp")
            metadata = await http.get(f"{base}/.well-known/oauth-protected-resource/mcp")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx.AsyncClient(headers=headers) as client,
            streamable_http_client(url, http_client=client) as streams,
            ClientSession(*streams[:2]) as session,
        ):
            await session.initialize()
            agent = Agent(session, servers.texts)
            balance = await agent.data("credits_balance", {})
    assert missing.status_code == 401
    assert wrong.status_code == 401
    assert "resource_metadata" in missing.headers["www-authenticate"]
    assert metadata.status_code == 200
    assert metadata.json()["resource"].endswith("/mcp")
    assert balance["available"] > 0
    assert servers.sandbox.stats().by_route.get("GET /v1/credits") == 1  # only the one allowed
    assert TOKEN not in servers.stderr()


async def test_a_port_in_use_is_one_line_naming_it(servers: Servers) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = servers.command("--http", f"127.0.0.1:{port}")
        env = {**server_env(servers.sandbox), "PATH": "/usr/bin:/bin"}
        run = await anyio.run_process(command, env=env, check=False)
    stderr = run.stderr.decode()
    servers.texts.append(stderr)
    assert run.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert f"127.0.0.1:{port}" in lines[0]
    assert "choose another port" in lines[0]


@pytest.mark.parametrize(
    ("args", "said"), [(["--allow-remote"], "VIDEOGEN_MCP_TOKEN"), ([], "--allow-remote")]
)
async def test_off_loopback_without_a_token_and_leave_it_does_not_start(
    servers: Servers, args: list[str], said: str
) -> None:
    command = servers.command("--http", f"0.0.0.0:{free_port()}", *args)
    env = {**server_env(servers.sandbox), "PATH": "/usr/bin:/bin", "VIDEOGEN_MCP_TOKEN": ""}
    run = await anyio.run_process(command, env=env, check=False)
    servers.texts.append(run.stderr.decode())
    assert run.returncode == 2
    assert said in run.stderr.decode()
