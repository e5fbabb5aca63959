"""``videogen batch`` on a disk that refuses writes: the charged ids still reach the user.

The journal (a SQLite ledger), the ledger's spool and the manifest sit on a small tmpfs that
the service of the test's own fills from inside its POST handler, while the create is at it:
the task is charged, and nothing of the batch can be written anywhere any more. Mounting the
tmpfs needs root; elsewhere the test is skipped with the reason (``small_fs``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from .._disk import files_in, fill
from ..ledger._service import Service
from .conftest import subprocess_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="tmpfs is Linux's")


async def test_a_batch_whose_disk_fills_during_a_create_hands_over_the_charged_id(
    small_fs: Path, tmp_path: Path
) -> None:
    filler = small_fs / "filler"

    async def fill_disk(number: int) -> None:
        await anyio.to_thread.run_sync(fill, filler)

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "a fox", "duration": 4}) + "\n", encoding="utf-8")
    manifest = small_fs / "results.jsonl"
    async with Service(on_post=fill_disk) as service:
        env = {
            "VIDEOGEN_BASE_URL": service.base_url,
            "VIDEOGEN_API_KEY": "test-key",
            "VIDEOGEN_LEDGER_SPOOL": str(small_fs / "spool"),
        }
        done = await anyio.run_process(
            [
                *(sys.executable, "-m", "videogen_async", "batch", str(prompts)),
                *("--journal", str(small_fs / "batch.db"), "--manifest", str(manifest)),
            ],
            env=subprocess_env(env),
            check=False,
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert service.posts == 1
    (task_id,) = service.ids
    # Neither the journal, nor the spool, nor the manifest could take the charged id: it is
    # on stdout (the manifest's lines, and the summary) and in the log at ERROR on stderr.
    assert done.returncode == 1, (out, err)
    assert f'"task_id": "{task_id}"' not in out  # the ledger never recorded it...
    assert task_id in out  # ...but the line's error says which task was charged
    assert f"writing {manifest} failed: [Errno 28] No space left on device" in err
    assert any("ERROR" in line and task_id in line for line in err.splitlines()), err
    assert "Traceback" not in err
    # Nothing half-written left where a reader would take it for whole.
    leftovers = [n for n in files_in(small_fs) if n != "filler" and not n.startswith("batch.db")]
    assert leftovers == []
