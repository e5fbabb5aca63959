"""Benchmark: agents waiting on videos through one ``videogen mcp`` server, against one gather.

Run it with ``nox -s bench`` or directly (``pip install -e '.[mcp]'``)::

    python bench/mcp.py                 # 50 agents, videos of 20-40 s (the sandbox's pace)
    python bench/mcp.py --quick         # 20 agents, the sandbox's clock 5x faster

Each strategy gets a fresh sandbox (same seed) in this process:

* ``gather`` (the baseline "a"): one process creates the videos with one client and waits for
  them with one ``gather_until_done``;
* ``mcp``: one ``videogen mcp --http --confirm-above none`` server process (a fresh SQLite
  ledger, the server's default wait bound of 45 s per call); ``N`` MCP client sessions (the
  ``mcp`` package's streamable HTTP client) at once, each calling ``create_video`` with a key
  of its own, then ``wait_for_video`` on it again and again until it answers ``done``, as an
  agent in a host with a 60 s limit on a call does.

Columns: requests to the service per video (creates plus every status query, as the sandbox
counted them), and the time from each video's finish (the sandbox's wall time of it) to its
result: the gather's yield, or the ``wait_for_video`` answer read by the agent (median, p95,
max); for ``mcp``, also from the watcher's record of the finish in the ledger to that answer
(what the server adds to the polling's lag). Targets: requests per video at most 1.1x the
gather's; p95 at most 0.5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on the path, and this file is "mcp".
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]

from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from videogen_async.testing import SandboxServer  # noqa: E402

SEED = "20261127"
KEY = "bench-mcp-key-0123456789"


def sandbox(scale: float) -> SandboxServer:
    return SandboxServer(api_key=KEY, time_scale=scale, task_duration=(20.0, 40.0), seed=SEED)


async def gather(agents: int, scale: float) -> tuple[float, list[float]]:
    """Requests per video of one ``gather_until_done``, and each video's finish-to-result time."""
    async with sandbox(scale) as server, server.client() as client:
        created = [await client.tasks.create(f"a fox, take {i}") for i in range(agents)]
        seen: dict[str, float] = {}
        async with client.tasks.gather_until_done([t.task_id for t in created]) as results:
            async for task in results:
                seen[getattr(task, "task_id", "")] = time.time()
        latencies = [
            at - server.describe_task(task_id)["schedule"]["finish_at_wall"]
            for task_id, at in seen.items()
        ]
        return server.stats().requests / agents, latencies


async def _accepting(port: int) -> None:
    while True:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(0.05)
            continue
        await stream.aclose()
        return


async def through_mcp(agents: int, scale: float) -> tuple[float, list[float], list[float]]:
    """Requests per video, and each video's finish-to-answer latency, through one server."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with sandbox(scale) as server:
        env = {
            **os.environ,
            "VIDEOGEN_API_KEY": KEY,
            "VIDEOGEN_BASE_URL": server.base_url,
            "PYTHONPATH": str(ROOT),
        }
        ledger = str(Path(tempfile.mkdtemp()) / "ledger.sqlite")
        command = [sys.executable, "-m", "videogen_async", "mcp", "--ledger", ledger]
        command += ["--http", f"127.0.0.1:{port}", "--confirm-above", "none"]
        process = await anyio.open_process(command, env=env, stdout=None, stderr=None)
        answered: dict[str, tuple[str, float]] = {}
        waits: list[int] = []
        pushed: list[float] = []  # from the watcher's record of the finish to the answer
        try:
            await _accepting(port)

            async def agent(i: int) -> None:
                url = f"http://127.0.0.1:{port}/mcp"
                async with (
                    streamable_http_client(url) as streams,
                    ClientSession(*streams[:2]) as session,
                ):
                    await session.initialize()
                    key = f"agent-{i}"
                    args: dict[str, Any] = {"prompt": f"a fox, take {i}", "key": key}
                    await session.call_tool("create_video", args)
                    data: dict[str, Any] = {}
                    while not data.get("done"):  # each call at most the server's bound
                        result = await session.call_tool("wait_for_video", {"key": key})
                        data = result.structured_content or {}
                        waits.append(1)
                    at = time.time()
                    assert data.get("state") == "succeeded", result.content
                    answered[key] = (data["task_id"], at)
                    pushed.append(at - datetime.fromisoformat(data["finished_at"]).timestamp())

            async with anyio.create_task_group() as group:
                for i in range(agents):
                    group.start_soon(agent, i)
        finally:
            process.terminate()
            await process.wait()
        print(f"mcp: {len(waits)} wait_for_video calls for {agents} videos")
        requests = server.stats().requests / agents
        latencies = [
            at - server.describe_task(task_id)["schedule"]["finish_at_wall"]
            for task_id, at in answered.values()
        ]
        return requests, latencies, pushed


def _p95(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=20, method="inclusive")[-1]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="20 agents, the clock 5x faster")
    args = parser.parse_args()
    agents, scale = (20, 0.2) if args.quick else (args.agents, args.time_scale)
    print(f"{agents} agents, videos of 20-40 s at time scale {scale:g}")
    base, gathered = await gather(agents, scale)
    per_video, latencies, pushed = await through_mcp(agents, scale)
    print(f"{'strategy':<8} {'requests/video':>15} {'ratio':>6}  finish -> answer (s)")
    for name, requests, lags in (("gather", base, gathered), ("mcp", per_video, latencies)):
        p50, p95, top = statistics.median(lags), _p95(lags), max(lags)
        print(
            f"{name:<8} {requests:>15.2f} {requests / base:>6.2f}  "
            f"median {p50:.3f}  p95 {p95:.3f}  max {top:.3f}"
        )
    p50, p95, top = statistics.median(pushed), _p95(pushed), max(pushed)
    print(
        f"mcp: from the ledger's record of a finish to the agent's answer: median {p50:.3f}"
        f"  p95 {p95:.3f}  max {top:.3f}"
    )
    p95 = _p95(latencies)
    met, fast = ("met" if ok else "MISSED" for ok in (per_video <= 1.1 * base, p95 <= 0.5))
    print(f"targets: requests/video <= 1.1x ({met}), p95 <= 0.5 s ({fast})")


if __name__ == "__main__":
    asyncio.run(main())
