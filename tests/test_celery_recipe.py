"""The Celery recipe (``examples/celery_videos.py``, shown in ``docs/celery.md``), run for real.

A Redis broker, a Celery worker process and the recipe's dispatcher process, with a sandbox
in the test: jobs enqueued by another Celery app (as a web app would) each create their video
once; a job delivered again with the same job id (what the broker does after losing a worker
under ``acks_late``) sends nothing; each finished video's follow-up job runs. The sandbox's
counts are the truth on paying twice.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from tests._services import Lines, require
from videogen_async import Ledger
from videogen_async.testing import SandboxServer

#: redis-py deprecates a call Celery's Redis transport makes (not ours to change).
pytestmark = pytest.mark.filterwarnings("ignore:Call to deprecated:DeprecationWarning")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HINT = "pip install -e '.[test]' (celery[redis]) to run the Celery recipe's test"
JOBS = 5


async def start(command: list[str], env: dict[str, str], ready: str) -> Lines:
    process = await anyio.open_process(command, cwd=EXAMPLES, env=env, stderr=-2)  # STDOUT
    lines = Lines(process)
    with anyio.fail_after(60):
        await lines.until(ready)
    return lines


async def stop(lines: Lines) -> None:
    with anyio.CancelScope(shield=True):
        if lines.process.returncode is None:
            lines.process.terminate()
            with anyio.move_on_after(30):
                await lines.finish()
            if lines.process.returncode is None:
                lines.process.kill()
                await lines.process.wait()
        await lines.process.aclose()


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(time_scale=0.01, seed=5) as server:
        yield server


async def test_each_job_creates_once_and_each_video_enqueues_its_follow_up(
    redis_url: str, sandbox: SandboxServer, tmp_path: Path
) -> None:
    celery = require("celery", HINT)
    require("redis", HINT)
    ledger = tmp_path / "videos.ledger.db"
    async with Ledger.open(ledger):  # created once, before the processes share it
        pass
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
    env |= {
        "REDIS_URL": redis_url,
        "VIDEOGEN_LEDGER": str(ledger),
        "VIDEOGEN_BASE_URL": sandbox.base_url,
        "VIDEOGEN_API_KEY": sandbox.api_key,
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
    }
    worker_command = [sys.executable, "-m", "celery", "-A", "celery_videos", "worker"]
    worker_command += ["--pool", "solo", "--loglevel", "INFO", "--without-gossip"]
    worker_command += ["--without-mingle", "--without-heartbeat", "--hostname", "recipe@test"]
    worker = await start(worker_command, env, r"ready\.")
    try:
        dispatcher = await start([sys.executable, "celery_videos.py"], env, "dispatcher ready")
        try:
            sender: Any = celery.Celery("web", broker=redis_url, set_as_current=False)
            sender.conf.broker_connection_retry_on_startup = True
            jobs = [f"job-{i}" for i in range(JOBS)]
            for i, job in enumerate(jobs):
                await anyio.to_thread.run_sync(
                    lambda i=i, job=job: sender.send_task(
                        "videos.create", args=[f"video {i}"], task_id=job
                    )
                )
            with anyio.fail_after(60):
                published = {
                    (await worker.until(r"published (celery/\S+): succeeded http"))[1] for _ in jobs
                }
            assert published == {f"celery/{job}" for job in jobs}
            created = r"created celery/job-2: task (\S+)"
            first = next(filter(None, (re.search(created, line) for line in worker.lines)))

            # The broker delivers job-2 again (same job id): it finds its entry, sends nothing.
            await anyio.to_thread.run_sync(
                lambda: sender.send_task("videos.create", args=["video 2"], task_id="job-2")
            )
            with anyio.fail_after(60):
                again = await worker.until(created)
            assert again[1] == first[1]
            sender.close()

            assert len(sandbox.task_ids) == JOBS
            assert sandbox.stats().by_route["POST /v1/video/videomodel-2"] == JOBS
            assert sorted(sandbox.describe_task(t)["prompt"] for t in sandbox.task_ids) == [
                f"video {i}" for i in range(JOBS)
            ]
        finally:
            await stop(dispatcher)
    finally:
        await stop(worker)
