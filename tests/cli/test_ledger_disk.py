"""The command line on a ledger the disk refuses (a file size limit: no root needed).

What the user reads is one line naming the ledger once and the disk's refusal, and the class
they could catch (``LedgerError``), never an internal one.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from videogen_async import Ledger

from .._disk import run_limited

pytestmark = pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE is POSIX's")

MAIN = "import sys; from videogen_async._cli import main; sys.exit(main(sys.argv[1:]))"


def test_listing_a_ledger_the_disk_refuses_names_it_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"

    async def make() -> None:
        async with Ledger.open(str(path)):
            pass

    asyncio.run(make())
    # Its shared-memory file cannot grow: opening it fails, as on a full disk.
    done = run_limited(MAIN, "ledger", "list", str(path), size=2000)
    assert done.returncode == 2
    assert done.stderr.count(str(path)) == 1, done.stderr
    assert "disk I/O error" in done.stderr


def test_a_server_whose_new_ledger_the_disk_refuses_names_the_public_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.db"
    env = {"VIDEOGEN_API_KEY": "key", "VIDEOGEN_BASE_URL": "http://127.0.0.1:9"}
    done = run_limited(MAIN, "mcp", "--ledger", str(path), size=2000, env=env)
    assert done.returncode == 1
    assert f"videogen: error: LedgerError: ledger '{path}': " in done.stderr, done.stderr
    assert "DatabaseUnavailable" not in done.stderr
