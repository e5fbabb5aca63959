"""A Temporal worker, or its companions, as a real process of the Temporal tests.

    python -m tests.temporal._app worker ADDRESS QUEUE LEDGER SLOTS
    python -m tests.temporal._app companions ADDRESS LEDGER

The client is configured by ``VIDEOGEN_BASE_URL`` and ``VIDEOGEN_API_KEY``. Each prints
``ready`` once started and runs until killed; ``SIGTERM`` stops it cleanly, releasing its
Temporal client before the interpreter exits.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys

from temporalio.client import Client
from temporalio.worker import Worker

from tests.temporal._workflows import GenerateAd, GenerateVideo
from videogen_async import AsyncVideoGen, Ledger, PollPolicy
from videogen_async.temporal import VideoActivities, run_completions

#: The watch polls at least every second: the tests finish videos at once and want to see it.
FAST_POLLS = PollPolicy(max_interval=1.0, sparse_cap=1.0)


async def worker(address: str, queue: str, ledger_path: str, slots: int) -> None:
    temporal = await Client.connect(address)
    async with AsyncVideoGen() as client, Ledger.open(ledger_path) as ledger:
        videos = VideoActivities(ledger, client)
        async with Worker(
            temporal,
            task_queue=queue,
            workflows=[GenerateVideo, GenerateAd],
            activities=videos.activities,
            max_concurrent_activities=slots,
        ):
            print("ready", flush=True)
            await asyncio.Event().wait()


async def companions(address: str, ledger_path: str) -> None:
    temporal = await Client.connect(address)
    async with AsyncVideoGen() as client, Ledger.open(ledger_path) as ledger:
        print("ready", flush=True)
        await run_completions(ledger, client, temporal, lease=5.0, poll_policy=FAST_POLLS)


async def main(argv: list[str]) -> None:
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    role, *args = argv
    try:
        if role == "worker":
            await worker(args[0], args[1], args[2], int(args[3]))
        else:
            await companions(args[0], args[1])
    except asyncio.CancelledError:
        pass


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
    gc.collect()  # no Temporal client left for the interpreter's shutdown
