"""``videogen mcp`` as agents reach it: real server processes, the mcp package's own client."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import anyio
import jsonschema
import pytest

from videogen_async import Model
from videogen_async._contract import _service as service
from videogen_async._mcp import EXTRA_MISSING

from .conftest import CREATE_ROUTE, KEY, ROOT, Servers, mcp_command, server_env

TOOLS = {
    "create_video",
    "create_ad_clone_project",
    "get_video",
    "wait_for_video",
    "credits_balance",
    "list_videos",
    "estimate_cost",
}
READ_ONLY = {"get_video", "wait_for_video", "credits_balance", "list_videos", "estimate_cost"}


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run our own interpreter on our own program, with this tree on the path."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env}
    return subprocess.run(  # noqa: S603 - our own interpreter and program
        command, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def creates(servers: Servers) -> int:
    return servers.sandbox.stats().by_route.get(CREATE_ROUTE, 0)


async def test_the_tools_and_their_schemas_come_from_the_statement(servers: Servers) -> None:
    async with servers.stdio() as agent:
        tools = {tool.name: tool for tool in (await agent.session.list_tools()).tools}
        templates = (await agent.session.list_resource_templates()).resource_templates
        agent.texts.append(json.dumps([tool.model_dump(mode="json") for tool in tools.values()]))
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.title
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (tool.name in READ_ONLY)
    for name in ("create_video", "create_ad_clone_project"):
        hints = tools[name].annotations
        assert hints is not None
        assert (hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint) == (
            False,
            True,
            True,
        )
    assert "video_url" in tools["wait_for_video"].output_schema["properties"]  # type: ignore[index]
    video = tools["create_video"].input_schema
    duration = video["properties"]["duration"]
    assert (duration["minimum"], duration["maximum"]) == (
        service.DURATION_MIN,
        service.DURATION_MAX,
    )
    assert [m for m in video["properties"]["model"]["enum"] if m] == list(Model.values())
    assert video["properties"]["image_urls"]["maxItems"] == service.MAX_IMAGE_URLS
    assert "$ref" not in json.dumps(video)  # every part inlined: an agent reads one schema
    assert set(video["required"]) == {"prompt", "key"}
    assert "wait_for_video" in (tools["create_video"].description or "")
    assert "CREDITS" in (tools["create_video"].description or "")
    assert "wait_for_video" in (tools["create_video"].description or "")
    assert [t.uri_template for t in templates] == ["videogen://entries/{key}"]


async def test_a_key_sent_twice_creates_once(servers: Servers) -> None:
    async with servers.stdio() as agent:
        first = await agent.data("create_video", {"prompt": "a red fox", "key": "fox-1"})
        again = await agent.data("create_video", {"prompt": "a red fox", "key": "fox-1"})
    assert first["task_id"] == again["task_id"]
    assert first["key"] == "fox-1"
    assert servers.sandbox.stats().tasks_created == 1
    assert creates(servers) == 1


async def test_two_server_processes_on_one_ledger_create_a_key_once(servers: Servers) -> None:
    answers: list[dict[str, Any]] = []

    async def agent_creates() -> None:
        async with servers.stdio() as agent:
            answers.append(await agent.data("create_video", {"prompt": "a fox", "key": "shared"}))

    async with anyio.create_task_group() as group:
        group.start_soon(agent_creates)
        group.start_soon(agent_creates)
    assert len(answers) == 2
    assert answers[0]["task_id"] == answers[1]["task_id"]
    assert servers.sandbox.stats().tasks_created == 1


async def test_the_cap_refuses_the_create_that_would_pass_it_with_nothing_sent(
    servers: Servers,
) -> None:
    async with servers.stdio("--max-credits", "15") as agent:
        await agent.data("create_video", {"prompt": "one", "key": "a", "duration": 5})
        refused = await agent.refusal("create_video", {"prompt": "two", "key": "b", "duration": 5})
        balance = await agent.data("credits_balance", {})
    text = refused["message"]
    assert "Spending cap reached" in text
    assert "max_credits=15" in text
    assert "5 left" in text
    assert "Nothing was sent" in text
    assert "--max-credits" in text
    assert creates(servers) == 1
    figures = {"max_credits": 15, "spent": 10, "reserved": 0, "left": 5}
    assert {name: refused[name] for name in figures} == figures
    assert refused["cost"] == 10
    assert refused["reason"] == "BudgetExceededError"
    assert {name: balance[name] for name in figures} == figures


async def test_a_wait_returns_the_succeeded_entry_with_progress_and_then_reads_send_nothing(
    servers: Servers,
) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async with servers.stdio() as agent:
        await agent.data("create_video", {"prompt": "a fox", "key": "w-1"})
        entry = await agent.data("wait_for_video", {"key": "w-1"}, progress_callback=on_progress)
        servers.sandbox.reset_stats()
        again = await agent.data("get_video", {"key": "w-1"})
        resource = await agent.session.read_resource("videogen://entries/w-1")
        agent.texts += [c.text for c in resource.contents if hasattr(c, "text")]
        listed = await agent.data("list_videos", {"state": "succeeded"})
        assert servers.sandbox.stats().requests == 0  # a terminal entry: nothing sent
    assert entry["state"] == "succeeded"
    assert entry["done"] is True
    assert entry["video_url"]
    assert entry["video_url"].endswith(".mp4")
    assert [message for _, message in progress][-1] == "succeeded"
    assert [value for value, _ in progress] == sorted({value for value, _ in progress})
    assert again == entry
    assert json.loads(resource.contents[0].text)["state"] == "succeeded"  # type: ignore[union-attr]
    assert [e["key"] for e in listed["entries"]] == ["w-1"]


async def test_get_video_by_task_id_reads_the_ledger_first_then_the_service_once(
    servers: Servers,
) -> None:
    async with servers.sandbox.client() as client, servers.stdio() as agent:
        created = await agent.data("create_video", {"prompt": "a fox", "key": "t-1"})
        await agent.data("wait_for_video", {"key": "t-1"})
        servers.sandbox.reset_stats()
        held = await agent.data("get_video", {"task_id": created["task_id"]})
        assert servers.sandbox.stats().requests == 0  # the ledger's terminal entry: nothing sent
        other = await client.tasks.create("not through the ledger")
        read = await agent.data("get_video", {"task_id": other.task_id})
        both = await agent.refusal("get_video", {"key": "t-1", "task_id": created["task_id"]})
    assert held["key"] == "t-1"
    assert read["task_id"] == other.task_id
    assert read.get("key") is None  # not the ledger's
    assert read["task_status"] in ("running", "queued", "succeeded")
    assert "either key or task_id" in both["message"]


async def test_an_invalid_duration_is_refused_naming_the_rule_with_nothing_sent(
    servers: Servers,
) -> None:
    async with servers.stdio() as agent:
        refused = await agent.refusal(
            "create_video", {"prompt": "a fox", "key": "d", "duration": 16}
        )
        keyless = await agent.call("create_video", {"prompt": "x"})  # the SDK's check
        option = await agent.data(
            "create_video",
            {"prompt": "x", "key": "o", "extra_headers": {"User-Agent": "smuggled"}},
        )
        unknown = await agent.refusal("get_video", {"key": "never-created"})
        estimate = await agent.refusal("estimate_cost", {"duration": 99})
        listed = await agent.data("list_videos", {})
    text = refused["message"]
    assert "duration" in text
    assert "4 to 15" in text
    assert "Nothing was sent" in text
    assert keyless.is_error
    assert option["state"] == "pending"  # an argument outside the schema is not passed on:
    assert "smuggled" not in {r.user_agent for r in servers.sandbox.request_log}
    assert "list_videos" in unknown["message"]
    assert "duration" in estimate["message"]
    assert [entry["key"] for entry in listed["entries"]] == ["o"]
    assert creates(servers) == 1


async def test_streamable_http_serves_the_same_tools(servers: Servers) -> None:
    async with servers.http() as agent:
        tools = (await agent.session.list_tools()).tools
        await agent.data("create_video", {"prompt": "a fox", "key": "h-1"})
        entry = await agent.data("wait_for_video", {"key": "h-1"})
    assert {tool.name for tool in tools} == TOOLS
    assert entry["state"] == "succeeded"
    assert servers.sandbox.stats().tasks_created == 1


async def test_the_server_exits_cleanly_when_its_client_goes_away(servers: Servers) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    command = mcp_command("--ledger", servers.ledger)
    env = {**server_env(servers.sandbox), "PATH": "/usr/bin:/bin"}
    async with await anyio.open_process(command, env=env) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        await process.stdin.send(json.dumps(hello).encode() + b"\n")
        answer = json.loads((await process.stdout.receive()).decode())
        servers.texts.append(json.dumps(answer))
        await process.stdin.aclose()  # the client goes away
        with anyio.fail_after(30):
            code = await process.wait()
    assert answer["id"] == 1
    assert "result" in answer
    assert code == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--http", "0.0.0.0:8787"], "VIDEOGEN_MCP_TOKEN"),
        (["--http", "localhost"], "HOST:PORT"),
    ],
)
def test_refusals_of_the_command_line(args: list[str], said: str, tmp_path: Any) -> None:
    env = {"VIDEOGEN_API_KEY": KEY}
    run = _run([*mcp_command("--ledger", str(tmp_path / "l.db"), *args)], env)
    assert run.returncode == 2
    assert said in run.stderr
    assert KEY not in run.stderr


@pytest.mark.parametrize("before", [["--api-key", KEY], []], ids=["as an option", "none"])
def test_the_key_is_taken_from_the_environment_only(before: list[str]) -> None:
    run = _run([sys.executable, "-m", "videogen_async", *before, "mcp"], {})
    assert run.returncode == 2
    assert "VIDEOGEN_API_KEY only" in run.stderr
    assert KEY not in run.stderr


def test_without_the_extra_the_command_names_it(tmp_path: Any) -> None:
    program = (
        "import sys; sys.modules['mcp'] = None\n"
        "from videogen_async._cli import main\n"
        f"sys.exit(main(['mcp', '--ledger', {str(tmp_path / 'l.db')!r}]))"
    )
    env = {"VIDEOGEN_API_KEY": KEY, "VIDEOGEN_BASE_URL": "http://127.0.0.1:9"}
    run = _run([sys.executable, "-c", program], env)
    assert run.returncode == 2, run.stderr
    assert EXTRA_MISSING in run.stderr


async def test_the_service_refusing_is_a_tool_error_saying_what_to_do(servers: Servers) -> None:
    servers.sandbox.set_credits(available=0)
    async with servers.stdio() as agent:
        refused = await agent.refusal("create_video", {"prompt": "a fox", "key": "poor"})
        entry = await agent.data("get_video", {"key": "poor"})
    text = refused["message"]
    assert "insufficient credits" in text
    assert "top up" in text
    assert entry["state"] == "refused"
    assert servers.sandbox.stats().tasks_created == 0
