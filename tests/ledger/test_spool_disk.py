"""The spool on a disk that refuses the record: nothing of it left, the error raised.

The spool is the ledger's place of last resort for a charged id (a database away); when the
disk refuses it too, the creator logs the id at ERROR (``_creates.py``). A record half
written would never be read (the spool reads ``*.json``) but would take room on a full disk
and stay there: none may be left. A child process under a file size limit (``RLIMIT_FSIZE``)
is refused by the kernel as a full disk would refuse it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .._disk import files_in, run_limited

pytestmark = pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE is POSIX's")

_PUT = """
import json
from videogen_async._ledger._spool import Spool
spool = Spool("ledger.db", local=True)
try:
    spool.put({"key": "fox", "task_id": "t-1", "problem": "x" * 20000})
except OSError as exc:
    print(json.dumps(["refused", str(exc)]))
print(json.dumps(["kept", spool.put({"key": "hare", "task_id": "t-2"})]))
"""


def test_a_spool_record_the_disk_refuses_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    done = run_limited(_PUT, size=4096, env={"VIDEOGEN_LEDGER_SPOOL": str(spool)})
    assert done.returncode == 0, done.stderr
    (refused, why), (kept, path) = map(json.loads, done.stdout.splitlines())
    assert (refused, kept) == ("refused", "kept")
    assert "File too large" in why
    # Only the record the disk took is there, whole; nothing of the refused one.
    assert files_in(spool) == [Path(path).name]
    assert json.loads(Path(path).read_text())["task_id"] == "t-2"
