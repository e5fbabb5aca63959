"""What hosts expect of ``videogen mcp``: consent before spending, calls within a bound, updates.

The clients are the ``mcp`` package's own ``Client``, of either generation of the protocol:
``legacy`` (the initialize handshake: the server asks the user mid-call) and ``auto`` (the
2026-07-28 protocol: the server answers that it needs input, and the client calls again).
Every create is counted at the sandbox: nothing is sent unless someone consented.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import ElicitRequestParams, ElicitResult

from videogen_async import LedgerEntry
from videogen_async._mcp._tools import UNREAD, VideoTools
from videogen_async.testing import Pricing, SandboxServer

from .conftest import CREATE_ROUTE, KEY, Servers, server_env

GENERATIONS = ["legacy", "auto"]


class Host:
    """A ``Client`` of ``videogen mcp`` over stdio, its answers held to the output schemas."""

    def __init__(self, client: Client, servers: Servers, asked: list[str]) -> None:
        self.client, self.servers, self.asked = client, servers, asked
        self.schemas: dict[str, Any] = {}

    async def call(self, name: str, arguments: dict[str, Any], **options: Any) -> dict[str, Any]:
        if not self.schemas:
            tools = (await self.client.list_tools()).tools
            self.schemas = {tool.name: tool.output_schema for tool in tools}
        result = await self.client.call_tool(name, arguments, **options)
        assert result.structured_content is not None, result.content
        jsonschema.validate(result.structured_content, self.schemas[name])
        self.servers.texts.append(str(result.model_dump()))
        assert result.is_error == ("refusal" in result.structured_content)
        return result.structured_content


@asynccontextmanager
async def host(
    servers: Servers, *args: str, mode: str = "legacy", answer: str | None = None
) -> AsyncIterator[Host]:
    """A host over stdio; ``answer``: what its user answers when asked (``None``: cannot ask)."""
    asked: list[str] = []

    async def elicit(context: Any, params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action=answer, content={} if answer == "accept" else None)  # type: ignore[arg-type]

    command = ["-m", "videogen_async", "mcp", "--ledger", servers.ledger, *args]
    params = StdioServerParameters(
        command=sys.executable, args=command, env=server_env(servers.sandbox)
    )
    callback = None if answer is None else elicit
    async with Client(params, mode=mode, elicitation_callback=callback) as client:  # type: ignore[arg-type]
        yield Host(client, servers, asked)


def creates(servers: Servers) -> int:
    return servers.sandbox.stats().by_route.get(CREATE_ROUTE, 0)


@pytest.mark.parametrize("mode", GENERATIONS)
@pytest.mark.parametrize("answer", ["accept", "decline", "cancel"])
async def test_a_create_asks_the_user_and_sends_nothing_unless_accepted(
    servers: Servers, mode: str, answer: str
) -> None:
    async with host(servers, mode=mode, answer=answer) as agent:
        made = await agent.call("create_video", {"prompt": "a red fox", "key": "f", "duration": 6})
        asked = agent.asked
        again = await agent.call("get_video", {"key": "f"})
        modern = agent.client.protocol_version >= "2026-07-28"
    assert modern == (mode == "auto")
    assert len(asked) == 1
    assert "a red fox" in asked[0]
    assert "videomodel_2_0" in asked[0]
    assert "duration: 6" in asked[0]
    assert "credits: 12" in asked[0]
    if answer == "accept":
        assert made["state"] == "pending"
        assert creates(servers) == 1
    else:
        assert made["refusal"]["reason"] == "Declined"
        assert f"did not consent to this create ({answer})" in made["refusal"]["message"]
        assert again["refusal"]["reason"] == "InvalidRequestError"  # nothing written
        assert servers.sandbox.stats().requests == 0


@pytest.mark.parametrize("mode", GENERATIONS)
async def test_an_auto_project_is_asked_for_at_its_script_and_videos(
    servers: Servers, mode: str
) -> None:
    project = {
        "reference_video_url": "https://cdn.example.com/ads/ref.mp4",
        "product_image_urls": ["https://cdn.example.com/p/bottle.png"],
        "resolution": 1080,
        "out_number": 2,
    }
    async with host(servers, "--confirm-above", "50", mode=mode, answer="decline") as agent:
        auto = await agent.call("create_ad_clone_project", {**project, "key": "auto"})
        manual = await agent.call(
            "create_ad_clone_project", {**project, "key": "manual", "mode": "manual"}
        )
        asked = agent.asked
    assert len(asked) == 1  # the auto project; the manual one is its script: 10, not above 50
    assert "credits: 100" in asked[0]  # 10 for the script + 2 videos x 15 s x 2 x 1.5 (1080)
    assert auto["refusal"]["reason"] == "Declined"
    assert manual["key"] == "manual"
    assert servers.sandbox.stats().projects_created == 1


async def test_a_client_that_cannot_ask_needs_the_operators_consent(servers: Servers) -> None:
    async with host(servers) as agent:
        refused = await agent.call("create_video", {"prompt": "a fox", "key": "n"})
    assert refused["refusal"]["reason"] == "NoConsent"
    assert "--max-credits" in refused["refusal"]["message"]
    assert "--confirm-above none" in refused["refusal"]["message"]
    assert servers.sandbox.stats().requests == 0
    async with host(servers, "--max-credits", "50") as agent:
        made = await agent.call("create_video", {"prompt": "a fox", "key": "n"})
    assert made["state"] == "pending"
    async with host(servers, "--confirm-above", "10", answer="decline") as agent:
        cheap = await agent.call("create_video", {"prompt": "a fox", "key": "c", "duration": 5})
        retried = await agent.call("create_video", {"prompt": "a fox", "key": "n"})
        assert agent.asked == []
    assert cheap["state"] == "pending"  # 10 credits: not above the line
    assert retried["key"] == "n"  # created already: it never pays twice, nobody is asked
    assert creates(servers) == 2


async def test_estimate_cost_sends_nothing_and_learns_the_charged_price(servers: Servers) -> None:
    async with host(servers, "--confirm-above", "none") as agent:
        before = await agent.call("estimate_cost", {"model": "videomodel_2_0_fast", "duration": 8})
        assert servers.sandbox.stats().requests == 0
        await agent.call(
            "create_video",
            {"prompt": "x", "key": "e", "duration": 8, "model": "videomodel_2_0_fast"},
        )
        after = await agent.call("estimate_cost", {"model": "videomodel_2_0_fast", "duration": 8})
    assert before == {
        "model": "videomodel_2_0_fast",
        "duration": 8,
        "credits": 8,
        "statement_credits": 8,
    }
    assert after["learned_credits"] == 8


async def test_an_estimate_is_the_higher_of_the_statement_and_the_ledgers_learned_price(
    tmp_path: Any,
) -> None:
    # A service dearer than the statement: after one create the ledger's learned price (the
    # figure its cap reserves) is the estimate, whatever the statement says.
    dear = Pricing(per_second={"videomodel_2_0_fast": 3.0})
    async with SandboxServer(api_key=KEY, time_scale=0.005, pricing=dear, seed=5) as sandbox:
        servers = Servers(sandbox, tmp_path)
        fields = {"model": "videomodel_2_0_fast", "duration": 8}
        async with host(servers, "--confirm-above", "none") as agent:
            await agent.call("create_video", {"prompt": "x", "key": "d", **fields})
            other = await agent.call("estimate_cost", {**fields, "duration": 9})
            after = await agent.call("estimate_cost", fields)
    assert after == {**fields, "credits": 24, "statement_credits": 8, "learned_credits": 24}
    assert "learned_credits" not in other  # another duration: nothing learned for it


@pytest.fixture
async def slow_sandbox() -> AsyncIterator[SandboxServer]:
    """Videos that take ten minutes: a wait reaches its bound first."""
    async with SandboxServer(api_key=KEY, time_scale=1, task_duration=600, seed=7) as server:
        yield server


async def test_a_wait_answers_at_its_bound_and_a_late_create_is_settled_by_the_server(
    slow_sandbox: SandboxServer, tmp_path: Any
) -> None:
    servers = Servers(slow_sandbox, tmp_path)
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    slow_sandbox.faults.set(CREATE_ROUTE, latency=3, times=1)  # its answer comes after the bound
    async with host(servers, "--confirm-above", "none", "--max-wait", "1") as agent:
        late = await agent.call("create_video", {"prompt": "slow", "key": "s"})
        waited = await agent.call("wait_for_video", {"key": "s"}, progress_callback=on_progress)
        while waited["state"] == "creating":
            waited = await agent.call("wait_for_video", {"key": "s", "timeout": 0.5})
    assert late["state"] == "creating"
    assert late["done"] is False
    assert waited["state"] == "pending"
    assert waited["done"] is False
    assert "call wait_for_video again" in waited["next_step"]
    assert progress
    assert creates(servers) == 1


async def test_a_wait_of_timeout_0_answers_the_entry_as_it_stands(
    slow_sandbox: SandboxServer, tmp_path: Any
) -> None:
    servers = Servers(slow_sandbox, tmp_path)
    async with host(servers, "--confirm-above", "none", "--max-wait", "60") as agent:
        await agent.call("create_video", {"prompt": "a fox", "key": "now"})
        with anyio.fail_after(40):  # far below the 60 s of a wait to the bound
            now = await agent.call("wait_for_video", {"key": "now", "timeout": 0})
    assert now["done"] is False
    assert "call wait_for_video again" in now["next_step"]


async def test_a_subscriber_hears_when_its_entry_changes(servers: Servers) -> None:
    uri = "videogen://entries/sub"
    async with host(servers, "--confirm-above", "none", mode="auto") as agent:
        async with agent.client.listen(resource_subscriptions=[uri]) as events:
            await agent.call("create_video", {"prompt": "a fox", "key": "sub"})
            with anyio.fail_after(60):
                event = await events.__anext__()
    assert event == ResourceUpdated(uri=uri)


async def test_a_service_too_slow_for_the_bound_is_a_refusal_in_time(servers: Servers) -> None:
    servers.sandbox.faults.set("GET /v1/credits", latency=30, times=1)
    async with host(servers, "--confirm-above", "none", "--max-wait", "1") as agent:
        with anyio.fail_after(20):  # far below the 30 s the service takes
            refused = await agent.call("credits_balance", {})
    assert refused["refusal"]["reason"] == "TimeoutError"
    assert "Temporarily unavailable" in refused["refusal"]["message"]


class _LedgerOut:
    """A ledger in an outage: a read never answers."""

    max_credits = None

    async def get(self, key: str) -> None:
        await anyio.sleep_forever()


async def test_a_ledger_that_does_not_answer_does_not_hold_a_call_past_its_bound() -> None:
    async with anyio.create_task_group() as group:
        tools = VideoTools(_LedgerOut(), None, group, max_wait=0.1)  # type: ignore[arg-type]
        with anyio.fail_after(30):  # a guard against the hang, far above the bound
            result = await tools._answer(anyio.sleep_forever(), "late")
        group.cancel_scope.cancel()  # the work left running by the bound
    assert result.structured_content == {"key": "late", "done": False, "next_step": UNREAD}
    assert not result.is_error


class _LedgerPending:
    """A ledger that answers at once: its entry is pending."""

    max_credits = None

    async def get(self, key: str) -> LedgerEntry:
        return LedgerEntry(key, "pending", task_id="t-1")


async def test_an_entry_answered_at_the_bound_says_to_wait_again() -> None:
    # The work (a wait slowed past its own timeout on a busy machine) does not end in time:
    # the call answers the entry as it stands, and an agent still reads what to do next.
    async with anyio.create_task_group() as group:
        tools = VideoTools(_LedgerPending(), None, group, max_wait=0.1)  # type: ignore[arg-type]
        with anyio.fail_after(30):
            result = await tools._answer(anyio.sleep_forever(), "slow")
        group.cancel_scope.cancel()
    assert result.structured_content is not None
    assert result.structured_content["state"] == "pending"
    assert result.structured_content["next_step"] == "Not finished: call wait_for_video again."
