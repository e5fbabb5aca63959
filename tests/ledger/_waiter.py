"""A waiting process: ``python _waiter.py URL KEY [KEY ...]``.

Opens the ledger, enters ``changes()`` and starts a ``wait`` per key, then prints ``ready``.
Prints ``change KEY STATE VERSION`` for each change it hears of, ``done KEY STATE VERSION``
as each wait returns, and ends at a line on stdin. It has no client: it cannot send a request
to the service.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import anyio

from videogen_async import Ledger


async def main(url: str, keys: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="log %(levelname)s %(message)s")
    async with Ledger.open(url) as ledger, ledger.changes() as changes:

        async def consume() -> None:
            async for entry in changes:
                print("change", entry.key, entry.state, entry.version, flush=True)

        async def wait(key: str) -> None:
            entry = await ledger.wait(key, timeout=120)
            print("done", entry.key, entry.state, entry.version, flush=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            for key in keys:
                tg.start_soon(wait, key)
            print("ready", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
