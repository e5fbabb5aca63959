"""A consumer of a ledger's changes: ``python _resumer.py URL AFTER COUNT``.

Enters ``changes(after=AFTER)``, prints ``ready``, then ``change POSITION KEY STATE VERSION``
for each of the next COUNT changes, and ends.
"""

from __future__ import annotations

import asyncio
import sys

from videogen_async import Ledger


async def main(url: str, after: int, count: int) -> None:
    async with Ledger.open(url) as ledger, ledger.changes(after=after) as changes:
        print("ready", flush=True)
        for _ in range(count):
            entry = await changes.__anext__()
            print("change", entry.position, entry.key, entry.state, entry.version, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
