"""Switching a shared SQLite file to WAL mode while another connection reads it.

Leaving rollback mode needs the file to itself, and SQLite answers ``SQLITE_BUSY`` at once
(without its busy handler) while a reader holds it: the switch must wait the reader out, in
the ledger and in the command line's batch journal alike.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from videogen_async._cli import _journal
from videogen_async._ledger._sqlite_wal import enter_wal, is_busy


@contextlib.contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection holding a read transaction (a shared lock) on ``path`` until the block ends."""
    reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sqlite_master").fetchall()
        yield reader
    finally:
        with contextlib.suppress(sqlite3.Error):
            reader.execute("COMMIT")
        reader.close()


def traced(conn: sqlite3.Connection, attempted: threading.Event) -> None:
    """Set ``attempted`` as ``conn`` starts a journal-mode statement (a worker thread's)."""

    def trace(statement: str) -> None:
        if "journal_mode" in statement:
            attempted.set()

    conn.set_trace_callback(trace)


def new_rollback_file(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE other (a)")
        conn.commit()
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_the_switch_waits_for_a_reader_to_finish(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    new_rollback_file(path)
    attempted = threading.Event()
    failure: list[BaseException] = []
    with reading(path) as reader:
        # No busy handler: SQLite's answer to a switch that meets a reader mid-open is an
        # immediate SQLITE_BUSY, and it is the retrying that must wait.
        writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0)
        traced(writer, attempted)

        def switch() -> None:
            try:
                enter_wal(writer, timeout=30.0)
            except BaseException as exc:  # handed to the test's thread
                failure.append(exc)

        worker = threading.Thread(target=switch)
        worker.start()
        assert attempted.wait(10), "the switch was never tried"
        # The first try met the reader's lock; the switch must still be waiting, not failed.
        assert not failure
        reader.execute("COMMIT")
    worker.join(10)
    assert not worker.is_alive()
    assert not failure, failure
    assert writer.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    writer.close()


def test_a_reader_held_past_the_timeout_raises_busy(tmp_path: Path) -> None:
    path = tmp_path / "held.db"
    new_rollback_file(path)
    with reading(path), contextlib.closing(sqlite3.connect(path, timeout=0)) as writer:
        with pytest.raises(sqlite3.OperationalError) as caught:
            enter_wal(writer, timeout=0.05)
        assert is_busy(caught.value)


async def test_a_new_journal_opened_while_a_reader_holds_it_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "batch.journal"
    new_rollback_file(path)
    attempted = threading.Event()

    def watched(conn: sqlite3.Connection, *, timeout: float) -> None:
        traced(conn, attempted)
        conn.execute("PRAGMA busy_timeout = 0")  # busy at once, as a reader mid-open makes it
        enter_wal(conn, timeout=timeout)
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")

    monkeypatch.setattr(_journal, "enter_wal", watched)
    with reading(path) as reader:
        async with anyio.create_task_group() as group:
            opened: list[_journal.Journal] = []

            async def open_it() -> None:
                opened.append(await _journal.Journal.open(path, base_url="http://127.0.0.1:1"))

            group.start_soon(open_it)
            assert await anyio.to_thread.run_sync(attempted.wait, 10.0)
            reader.execute("COMMIT")
    (journal,) = opened
    await journal.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
