"""A batch journal of the earlier format is imported into a ledger once, then only the ledger.

The journals are written by a child process with the earlier version's own schema and
statements (copied from ``videogen_async/_cli/_journal.py`` as it was before the ledger
replaced it), which then exits without closing the file, as a killed batch did: the last
writes are still in the file's WAL.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .._disk import fill
from .conftest import CREATE_ROUTE, Run, ThreadedSandbox, read_manifest

# The earlier version's journal, statement for statement.
_OLD_JOURNAL = r'''
import datetime, hashlib, json, os, sqlite3, sys

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lines (
    line_no      INTEGER PRIMARY KEY,
    request_hash TEXT    NOT NULL,
    request      TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('attempted', 'created', 'unknown', 'refused', 'done')),
    task_id      TEXT,
    credits      REAL,
    status       TEXT,
    video_url    TEXT,
    error        TEXT,
    path         TEXT,
    attempts     INTEGER NOT NULL DEFAULT 0,
    updated_at   TEXT    NOT NULL,
    CHECK (state NOT IN ('created', 'done') OR task_id IS NOT NULL)
);
CREATE UNIQUE INDEX IF NOT EXISTS lines_task_id ON lines (task_id) WHERE task_id IS NOT NULL;
"""


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def request_hash(request):
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def write(conn, sql, params):
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        return conn.execute(sql, params).rowcount


path, base_url, lines = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
conn = sqlite3.connect(path, isolation_level=None, timeout=10.0)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=FULL")
conn.executescript(SCHEMA)
with conn:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?)",
        [("schema", "1"), ("base_url", base_url), ("created_at", now())],
    )
for line_no, request, outcome, task_id in lines:
    text = json.dumps(request, sort_keys=True, ensure_ascii=False)
    write(conn,
        "INSERT INTO lines (line_no, request_hash, request, state, attempts, updated_at)"
        " VALUES (?, ?, ?, 'attempted', 1, ?)"
        " ON CONFLICT (line_no) DO UPDATE SET state = 'attempted',"
        " request_hash = excluded.request_hash, request = excluded.request,"
        " error = NULL, attempts = lines.attempts + 1, updated_at = excluded.updated_at"
        " WHERE lines.task_id IS NULL",
        (line_no, request_hash(request), text, now()))
    if outcome in ("created", "done"):
        write(conn,
            "UPDATE lines SET state = 'created', task_id = ?, credits = ?, error = NULL,"
            " updated_at = ? WHERE line_no = ? AND task_id IS NULL",
            (task_id, 10.0, now(), line_no))
    if outcome in ("unknown", "refused"):
        write(conn,
            "UPDATE lines SET state = ?, error = ?, updated_at = ?"
            " WHERE line_no = ? AND task_id IS NULL",
            (outcome, "dropped", now(), line_no))
    if outcome == "done":
        write(conn,
            "UPDATE lines SET state = 'done', status = ?, video_url = ?, error = ?,"
            " credits = ?, updated_at = ? WHERE line_no = ? AND task_id IS NOT NULL",
            ("succeeded", "https://old.example/v.mp4", None, 10.0, now(), line_no))
os._exit(0)  # killed, as a batch can be: the last writes stay in the WAL
'''


def request_of(no: int) -> dict[str, Any]:
    return {"prompt": f"line {no} of the batch", "duration": 4 + no % 3}


def write_input(folder: Path, count: int) -> Path:
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(request_of(no)) + "\n" for no in range(1, count + 1)))
    return path


def write_old_journal(path: Path, base_url: str, lines: dict[int, tuple[str, str | None]]) -> None:
    """Line number -> (outcome, task id): created, done, attempted, unknown or refused."""
    rows = [[no, request_of(no), outcome, task_id] for no, (outcome, task_id) in lines.items()]
    subprocess.run(  # noqa: S603 - our own interpreter and program
        [sys.executable, "-c", _OLD_JOURNAL, str(path), base_url, json.dumps(rows)],
        check=True,
        timeout=60,
    )


def tables(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_a_journal_of_the_earlier_format_is_imported_into_a_ledger_once(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = write_input(tmp_path, 6)
    scratch = cli("batch", str(path), "--journal", str(tmp_path / "scratch.db"))
    assert scratch.code == 0, scratch
    ids = [r["task_id"] for r in read_manifest(tmp_path / "prompts.results.jsonl")]
    journal = tmp_path / "prompts.journal.sqlite"  # the default name
    write_old_journal(
        journal,
        sandbox.base_url,
        {
            1: ("created", ids[0]),
            2: ("attempted", None),  # stopped between the send and its answer
            3: ("unknown", None),
            4: ("refused", None),
            5: ("done", ids[4]),
        },
    )
    assert Path(f"{journal}-wal").stat().st_size > 0  # the killed writer's last writes
    sent = sandbox.routes(CREATE_ROUTE)

    run = cli("batch", str(path))
    assert run.code == 1, run  # lines 2 and 3 stay unknown
    assert "imported 4 line(s) of the journal" in run.err
    manifest = read_manifest(tmp_path / "prompts.results.jsonl")
    assert [r["status"] for r in manifest] == [
        "succeeded", "unknown", "unknown", "succeeded", "succeeded", "succeeded",
    ]  # fmt: skip
    assert manifest[0]["task_id"] == ids[0]
    assert manifest[4]["task_id"] == ids[4]
    assert manifest[4]["video_url"].startswith(sandbox.base_url)  # polled again, not copied
    assert sandbox.routes(CREATE_ROUTE) == sent + 2  # lines 4 and 6; none with an id again
    assert tables(journal) >= {"videogen_ledger_meta", "videogen_ledger_entries"}
    assert not tables(journal) & {"meta", "lines"}  # only the ledger remains
    assert not [p.name for p in tmp_path.glob("*.importing*")] + [
        p.name for p in tmp_path.glob("*.lock")
    ]

    listed = cli("--json", "ledger", "list", str(journal), "--state", "unknown")
    assert len(listed.json()) == 2
    again = cli("batch", str(path))
    assert again.code == 1, again
    assert "imported" not in again.err
    assert sandbox.routes(CREATE_ROUTE) == sent + 2  # nothing imported or sent twice
    assert read_manifest(tmp_path / "prompts.results.jsonl") == manifest


def test_a_journal_of_another_input_or_service_is_refused_and_left_as_it_is(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = write_input(tmp_path, 2)
    journal = tmp_path / "prompts.journal.sqlite"
    write_old_journal(journal, "http://127.0.0.1:1", {1: ("created", "t-1")})
    other = cli("batch", str(path))
    assert other.code == 2, other
    assert "was made for http://127.0.0.1:1" in other.err
    journal.unlink()
    Path(f"{journal}-wal").unlink(missing_ok=True)
    Path(f"{journal}-shm").unlink(missing_ok=True)
    write_old_journal(journal, sandbox.base_url, {1: ("created", "t-1"), 2: ("unknown", None)})
    path.write_text(path.read_text().replace("line 2", "line two"))
    changed = cli("batch", str(path))
    assert changed.code == 2, changed
    assert "line 2 of the input differs" in changed.err
    assert {"meta", "lines"} <= tables(journal)  # nothing was imported or written
    assert "videogen_ledger_meta" not in tables(journal)
    assert sandbox.routes(CREATE_ROUTE) == 0
    listed = cli("ledger", "list", str(journal))
    assert listed.code == 2
    assert "earlier format" in listed.err


def test_a_journal_of_the_earlier_format_in_use_is_refused(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    fcntl = pytest.importorskip("fcntl")
    path = write_input(tmp_path, 1)
    journal = tmp_path / "prompts.journal.sqlite"
    write_old_journal(journal, sandbox.base_url, {})
    with open(tmp_path / "prompts.journal.sqlite.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        run = cli("batch", str(path))
    assert run.code == 2
    assert "in use by another videogen batch" in run.err
    assert sandbox.routes(CREATE_ROUTE) == 0
    assert "videogen_ledger_meta" not in tables(journal)


def test_a_journal_import_on_a_full_disk_is_refused_and_keeps_the_journal_whole(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], small_fs: Path, tmp_path: Path
) -> None:
    # The journal holds a charged task id; its disk is full when a batch imports it into a
    # ledger. The import is refused, naming the journal, and the journal keeps every line:
    # once there is room again the import runs, and the charged line is not sent again.
    path = write_input(tmp_path, 2)
    scratch = cli("batch", str(path), "--journal", str(tmp_path / "scratch.db"))
    assert scratch.code == 0, scratch
    charged = read_manifest(tmp_path / "prompts.results.jsonl")[0]["task_id"]
    journal = small_fs / "prompts.journal.sqlite"
    write_old_journal(journal, sandbox.base_url, {1: ("created", charged)})
    fill(small_fs / "filler")
    full = cli("batch", str(path), "--journal", str(journal))
    assert full.code == 2, full
    assert f"--journal {journal}: " in full.err
    assert "full" in full.err
    assert "Traceback" not in full.err
    assert sandbox.routes(CREATE_ROUTE) == 2  # the scratch batch's
    assert "videogen_ledger_meta" not in tables(journal)  # still the journal, whole
    with contextlib.closing(sqlite3.connect(f"file:{journal}?mode=ro", uri=True)) as conn:
        assert conn.execute("SELECT line_no, task_id FROM lines").fetchall() == [(1, charged)]
    (small_fs / "filler").unlink()
    again = cli("batch", str(path), "--journal", str(journal))
    assert again.code == 0, again
    assert "imported 1 line(s) of the journal" in again.err
    assert sandbox.routes(CREATE_ROUTE) == 3  # line 2 only
    assert read_manifest(tmp_path / "prompts.results.jsonl")[0]["task_id"] == charged
