"""``videogen batch`` on a disk that refuses writes: the charged ids still reach the user.

The journal (a SQLite ledger), the ledger's spool and the manifest sit on a small tmpfs that
the service of the test's own fills from inside its POST handler, while the create is at it:
the task is charged, and nothing of the batch can be written anywhere any more. Mounting the
tmpfs needs root; elsewhere the test is skipped with the reason (``small_fs``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from .._disk import files_in, fill
from ..ledger._service import Service
from .conftest import CREATE_ROUTE, Run, ThreadedSandbox, subprocess_env

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
    # The ledger never recorded it, but the line carries it, charged by this run: the
    # manifest's line (on stdout) and the summary count it.
    assert f'"task_id": "{task_id}"' in out
    assert '"status": "pending"' in out
    assert "this run charged 0" not in out
    assert f"writing {manifest} failed: [Errno 28] No space left on device" in err
    # The error says "its id was logged at ERROR": the log record is on stderr, --debug or not.
    logged = [line for line in err.splitlines() if " ERROR videogen_async: " in line]
    assert len(logged) == 1, err
    assert f"created {task_id}, but neither the ledger" in logged[0]
    assert f"nor the spool in {small_fs / 'spool'} (" in logged[0]  # where it was refused
    assert "keep this id" in logged[0]
    # No spool file outlives the command: the error does not promise a write back by another.
    assert "written back by this process if the database answers" in out + err
    assert "Traceback" not in err
    # Nothing half-written left where a reader would take it for whole.
    leftovers = [n for n in files_in(small_fs) if n != "filler" and not n.startswith("batch.db")]
    assert leftovers == []


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_batch_without_journal_whose_manifest_the_disk_refuses_prints_its_lines(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    small_fs: Path,
    tmp_path: Path,
    json_mode: bool,
) -> None:
    # With --no-journal the manifest is the only record of the tasks charged: a disk that
    # refuses it must not lose them. Its lines go to stdout, the error names the file.
    prompts = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"a fox, take {n}", "duration": 4}) for n in range(3)]
    prompts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    manifest = small_fs / "results.jsonl"
    fill(small_fs / "filler")
    run = cli(
        *(["--json"] if json_mode else []),
        *("batch", str(prompts), "--no-journal", "--manifest", str(manifest)),
    )
    assert sandbox.routes(CREATE_ROUTE) == 3, run
    assert run.code == 1, run
    assert f"writing {manifest} failed: [Errno 28] No space left on device" in run.err
    if json_mode:
        printed = run.json()
        assert printed["manifest_error"] in run.err
        rows = printed["manifest_lines"]
    else:
        rows = [json.loads(line) for line in run.out.splitlines() if line.startswith("{")]
    assert [(r["line"], r["status"]) for r in rows] == [(n, "succeeded") for n in (1, 2, 3)]
    assert {r["task_id"] for r in rows} == set(sandbox.task_ids())
    assert files_in(small_fs) == ["filler"]
