"""A process that creates a project and, when told to, a video batch of it through a ledger.

``python _batcher.py URL BASE_URL``. Prints ``ready`` once the project is created, reads a
line, creates the batch ``b1`` and prints ``batch ID ID``.
"""

from __future__ import annotations

import asyncio
import sys

from videogen_async import AsyncVideoGen, Ledger


async def main(url: str, base_url: str) -> None:
    async with (
        AsyncVideoGen(api_key="test-key", base_url=base_url) as client,
        Ledger.open(url) as ledger,
    ):
        reference, products = "https://cdn.example.com/r.mp4", ["https://cdn.example.com/p.png"]
        await ledger.create_project(client, reference, products, key="ad")
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        tasks = await ledger.create_videos(client, "ad", batch_key="b1")
        print("batch", *(task.task_id for task in tasks), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
