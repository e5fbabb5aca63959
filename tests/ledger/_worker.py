"""A worker process of the multi-process tests: creates the same keys as its peers, then watches.

``python _worker.py URL BASE_URL API_KEY NAME COUNT LEASE``. Prints ``created`` once its
creates are done and ``yield KEY`` per entry its watcher yields, flushing each line.
"""

from __future__ import annotations

import asyncio
import sys

from videogen_async import AsyncVideoGen, Ledger


async def main(url: str, base_url: str, api_key: str, name: str, count: int, lease: float) -> None:
    async with (
        AsyncVideoGen(
            api_key=api_key, base_url=base_url, default_headers={"User-Agent": name}
        ) as client,
        Ledger.open(url) as ledger,
    ):
        sem = asyncio.Semaphore(8)

        async def create(i: int) -> None:
            async with sem:
                await ledger.create_task(client, f"line {i}", key=f"line-{i:03d}")

        await asyncio.gather(*(create(i) for i in range(count)))
        print("created", flush=True)
        watch = ledger.watch(
            client,
            lease=lease,
            claim_size=4,
            claim_interval=0.05,
            stop_when_idle=True,
        )
        async with watch as finished:
            async for entry in finished:
                print("yield", entry.key, flush=True)


if __name__ == "__main__":
    url, base_url, api_key, name, count, lease = sys.argv[1:7]
    asyncio.run(main(url, base_url, api_key, name, int(count), float(lease)))
