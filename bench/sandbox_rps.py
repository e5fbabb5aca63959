"""How many task-status requests per second the sandbox serves to the SDK.

Measures ``AsyncVideoGen.tasks.get`` at a fixed concurrency (64 by default) for a fixed
number of requests, against the sandbox in a separate process (``python -m
videogen_async.testing --port 0``) and in the same process (sharing the event loop with the
client), and reports each as a ratio against a raw aiohttp GET loop measured in the same run
against the same server. The server's own view (requests counted, peak in-flight) comes from
``GET /_sandbox/stats``. Loopback only; a few seconds in all.

    python bench/sandbox_rps.py [--requests 3000] [--concurrency 64] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from videogen_async import AsyncVideoGen
from videogen_async.testing import SandboxProcess, SandboxServer

KEY = "sandbox-key"


async def control(session: aiohttp.ClientSession, base: str, method: str, path: str) -> Any:
    async with session.request(method, base + path) as response:
        return (await response.json())["data"]


async def run_workers(total: int, concurrency: int, one: Callable[[], Awaitable[None]]) -> float:
    remaining = total

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await one()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


async def measure(base: str, task_id: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {KEY}"}
    rows: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with (
        aiohttp.ClientSession(connector=connector, headers=headers) as raw,
        aiohttp.ClientSession(headers=headers) as ctl,
        AsyncVideoGen(
            api_key=KEY, base_url=base, max_retries=0, connection_limit=args.concurrency
        ) as sdk,
    ):
        url = f"{base}/v1/tasks"

        async def raw_get() -> None:
            async with raw.get(url, params={"task_id": task_id}) as response:
                body = await response.json()
                assert body["code"] == 200

        async def sdk_get() -> None:
            task = await sdk.tasks.get(task_id)
            assert task.task_id == task_id

        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.rounds):
            for name, one in (("raw aiohttp", raw_get), ("SDK tasks.get", sdk_get)):
                await run_workers(min(500, args.requests), args.concurrency, one)  # warm up
                await control(ctl, base, "POST", "/_sandbox/reset-stats")
                seconds = await run_workers(args.requests, args.concurrency, one)
                stats = await control(ctl, base, "GET", "/_sandbox/stats")
                assert stats["requests"] == args.requests, stats
                row = {
                    "client": name,
                    "seconds": seconds,
                    "rps": args.requests / seconds,
                    "peak": stats["peak_in_flight"],
                }
                if name not in best or row["rps"] > best[name]["rps"]:
                    best[name] = row
        rows.extend(best.values())
    return rows


async def create_task(base: str) -> str:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.post(f"{base}/v1/video/videomodel-2", json={"prompt": "bench"}) as response,
    ):
        return str((await response.json())["data"]["task_id"])


async def main_async(args: argparse.Namespace) -> None:
    results: list[tuple[str, list[dict[str, Any]]]] = []
    child = SandboxProcess("--manual-clock", api_key=KEY)
    await asyncio.to_thread(child.start)
    try:
        base = child.base_url
        assert urlsplit(base).hostname == "127.0.0.1", base
        task_id = await create_task(base)
        results.append(("separate process", await measure(base, task_id, args)))
    finally:
        await asyncio.to_thread(child.close)
    async with SandboxServer(manual_clock=True, api_key=KEY) as server:
        task_id = await create_task(server.base_url)
        results.append(("in-process", await measure(server.base_url, task_id, args)))

    print(
        f"\nGET /v1/tasks, {args.requests} requests at concurrency {args.concurrency}"
        f" (best of {args.rounds}), Python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}"
    )
    header = f"{'sandbox':<17} {'client':<14} {'seconds':>8} {'req/s':>9} {'vs raw':>7} {'peak':>5}"
    print(header)
    print("-" * len(header))
    for where, rows in results:
        raw_rps = rows[0]["rps"]
        for row in rows:
            print(
                f"{where:<17} {row['client']:<14} {row['seconds']:>8.2f} {row['rps']:>9.0f}"
                f" {row['rps'] / raw_rps:>6.2f}x {row['peak']:>5}"
            )
    print("(peak: the most requests in flight as the sandbox saw them)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one round of 1,000 requests")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = min(args.requests, 1000), 1
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
