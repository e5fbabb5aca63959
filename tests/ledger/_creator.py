"""A creating process of the fault tests: creates keys at once when told to, then reports.

``python _creator.py URL BASE_URL API_KEY MAX_CREDITS KEY [KEY ...]`` (``MAX_CREDITS`` ``-``:
no cap). Opens the ledger, prints ``ready``, waits for a line on stdin, then creates every key
at once (4 s videos) and prints one line per key: ``created KEY ID``, ``budget KEY`` or
``error KEY TYPE``. The ledger's log goes to stderr, a record a line.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from videogen_async import AsyncVideoGen, BudgetExceededError, Ledger


async def main(url: str, base_url: str, api_key: str, cap: str, keys: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    max_credits = None if cap == "-" else float(cap)
    async with (
        AsyncVideoGen(api_key=api_key, base_url=base_url) as client,
        Ledger.open(url, max_credits=max_credits) as ledger,
    ):
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)

        async def create(key: str) -> None:
            try:
                entry = await ledger.create_task(client, f"clip {key}", key=key, duration=4)
            except BudgetExceededError:
                print("budget", key, flush=True)
            except Exception as exc:
                print("error", key, type(exc).__name__, flush=True)
            else:
                print("created", key, entry.task_id, flush=True)

        await asyncio.gather(*(create(key) for key in keys))


if __name__ == "__main__":
    url, base_url, api_key, cap, *keys = sys.argv[1:]
    asyncio.run(main(url, base_url, api_key, cap, keys))
