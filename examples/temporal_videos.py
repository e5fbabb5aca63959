"""Temporal workflows that each generate a video, on a worker that waits without a slot.

Each workflow calls ``generate_video``: its activity creates the task through the ledger
(keyed by the workflow, its run and the activity, so a retried activity never pays twice),
leaves its task token on the ledger entry and returns at once, freeing the worker's slot.
The worker's companions (``run_completions``: one watch of the ledger polling every video
with one adaptive gather, one dispatch completing each activity when its video is done)
run beside the worker, here in the same process.

Start a Temporal server (``temporal server start-dev``), then::

    python examples/temporal_videos.py worker
    python examples/temporal_videos.py start "a paper boat at dawn" "a red fox in the snow"

``--temporal`` is the server's address (``localhost:7233``), ``--ledger`` the ledger (a file
path or a PostgreSQL URL shared by every worker; ``temporal_videos.ledger.db``). Without
``VIDEOGEN_BASE_URL`` / ``VIDEOGEN_API_KEY`` the worker runs a local sandbox.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():  # not re-imported in the workflow sandbox
    import argparse
    import asyncio
    import contextlib
    import os
    import uuid
    from collections.abc import AsyncIterator

    import anyio
    from temporalio.client import Client
    from temporalio.worker import Worker

    from videogen_async import AsyncVideoGen, Ledger
    from videogen_async.temporal import VideoActivities, generate_video, run_completions
    from videogen_async.testing import SandboxServer

QUEUE = "videos"


@workflow.defn
class PublishVideo:
    """Generate a video for a prompt and return where it is."""

    @workflow.run
    async def run(self, prompt: str) -> str:
        task = await generate_video(prompt, duration=5, metadata={"source": "temporal-example"})
        # A real workflow would go on: publish the video, notify the user, bill the tenant.
        return task.video_url or ""


@contextlib.asynccontextmanager
async def video_client() -> AsyncIterator[AsyncVideoGen]:
    """The service named by the environment, else a local sandbox (10x faster)."""
    if os.environ.get("VIDEOGEN_BASE_URL"):
        async with AsyncVideoGen() as client:
            yield client
        return
    async with SandboxServer(time_scale=0.1) as sandbox, sandbox.client() as client:
        yield client


async def run_worker(address: str, ledger_path: str) -> None:
    """Run the worker and its companions until cancelled."""
    temporal = await Client.connect(address)
    async with video_client() as client, Ledger.open(ledger_path) as ledger:
        videos = VideoActivities(ledger, client)
        worker = Worker(
            temporal, task_queue=QUEUE, workflows=[PublishVideo], activities=videos.activities
        )
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            group.start_soon(run_completions, ledger, client, temporal)
            print(f"worker ready on task queue {QUEUE!r}", flush=True)


async def start(address: str, prompts: list[str]) -> None:
    """Start one workflow per prompt and print each video as its workflow finishes."""
    temporal = await Client.connect(address)
    handles = [
        await temporal.start_workflow(
            PublishVideo.run, prompt, id=f"video-{uuid.uuid4().hex}", task_queue=QUEUE
        )
        for prompt in prompts
    ]
    for prompt, handle in zip(prompts, handles, strict=True):
        print(f"{prompt!r}: {await handle.result()}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temporal", default="localhost:7233", help="the server's address")
    parser.add_argument("--ledger", default="temporal_videos.ledger.db", help="the ledger")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("worker", help="run the worker and its companions")
    starting = commands.add_parser("start", help="start workflows, print their videos")
    starting.add_argument("prompts", nargs="+")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command == "worker":
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_worker(args.temporal, args.ledger))
    else:
        asyncio.run(start(args.temporal, args.prompts))


if __name__ == "__main__":
    main()
