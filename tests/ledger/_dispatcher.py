"""A dispatching process: ``python _dispatcher.py URL RECEIVER_URL NAME LEASE``.

Opens the ledger, prints ``ready`` and waits for a line on stdin (the test's dispatchers
start together: none may have finished, and closed its stdin, before the last is ready),
then dispatches every terminal entry (the backlog too) to the webhook ``RECEIVER_URL`` (its
secret in ``VIDEOGEN_TEST_SECRET``, its header ``X-Dispatcher: NAME``) until idle, and prints
``delivered N``.
"""

from __future__ import annotations

import asyncio
import os
import sys

from videogen_async import Ledger, webhook


async def main(url: str, receiver: str, name: str, lease: float) -> None:
    async with Ledger.open(url) as ledger:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        deliver = webhook(
            receiver, os.environ["VIDEOGEN_TEST_SECRET"], headers={"X-Dispatcher": name}
        )
        count = await ledger.dispatch(
            "app-hook", deliver, backlog=True, stop_when_idle=True, lease=lease
        )
        print("delivered", count, flush=True)


if __name__ == "__main__":
    url, receiver, name, lease = sys.argv[1:5]
    asyncio.run(main(url, receiver, name, float(lease)))
