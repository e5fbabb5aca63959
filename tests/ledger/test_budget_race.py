"""The spending cap while a price is unknown: one such create in flight, across every process.

The sandbox charges 2 credits per second of ``videomodel_2_0``: 8 for each 4 s task, a price
the fresh ledger does not know. Its counts are the truth: how many creates it received and
what it charged. Its creates are slow (0.2 s): the other creates decide while one is at it.
"""

from __future__ import annotations

import asyncio
import sys

import anyio
import pytest

from videogen_async import BudgetExceededError, Ledger, LedgerEntry
from videogen_async.testing import FaultRule, SandboxServer

from ._procs import Creator

POST = "POST /v1/video/videomodel-2"
SLOW = FaultRule(POST, latency=0.2)

# (max_credits, creates sent, credits spent): the first create, of unknown price, goes while
# budget remains (it may pass the cap, by its own price, as with 5); then the price decides.
CASES = [(12, 1, 8), (5, 1, 8), (20, 2, 16)]


def _charged(server: SandboxServer) -> float:
    credits = server.credits()
    return float(credits["api_total_credits"]) - float(credits["api_available_credits"])


@pytest.mark.parametrize(("cap", "sent", "spent"), CASES)
async def test_creates_racing_on_an_unknown_price_in_one_process(
    ledger_url: str, cap: float, sent: int, spent: float
) -> None:
    async with (
        SandboxServer(manual_clock=True, seed=1, faults=SLOW) as server,
        server.client() as client,
        Ledger.open(ledger_url, max_credits=cap) as ledger,
    ):
        results = await asyncio.gather(
            *(ledger.create_task(client, f"clip {i}", key=f"k{i}", duration=4) for i in range(4)),
            return_exceptions=True,
        )
        summary = await ledger.summary()
    assert server.stats().tasks_created == sent
    assert _charged(server) == spent
    assert sum(isinstance(r, LedgerEntry) for r in results) == sent
    assert sum(isinstance(r, BudgetExceededError) for r in results) == 4 - sent
    assert summary["spent"] == spent
    assert summary["reserved"] == 0


@pytest.mark.parametrize(("cap", "sent", "spent"), CASES[:1] + CASES[2:])
async def test_four_processes_racing_on_an_unknown_price(
    ledger_url: str, cap: float, sent: int, spent: float
) -> None:
    async with SandboxServer(manual_clock=True, seed=2, faults=SLOW) as server:
        creators = []
        try:
            for n in range(4):
                creators.append(
                    await Creator.start(ledger_url, server.base_url, server.api_key, cap, f"p{n}")
                )
            with anyio.fail_after(60):
                for creator in creators:
                    await creator.go()
                outputs = [await creator.finish() for creator in creators]
        finally:
            for creator in creators:
                if creator.process.returncode is None:
                    await creator.kill()
    outcomes = [line.split()[0] for lines in outputs for line in lines[1:]]
    assert sorted(outcomes) == sorted(["created"] * sent + ["budget"] * (4 - sent)), outputs
    assert server.stats().tasks_created == sent
    assert _charged(server) == spent
    async with Ledger.open(ledger_url) as ledger:
        summary = await ledger.summary()
    assert summary["spent"] == spent
    assert summary["reserved"] == 0


pytestmark = [pytest.mark.slow]
if sys.platform == "win32":  # pragma: no cover
    pytestmark.append(pytest.mark.skip(reason="the processes are killed with SIGKILL"))
