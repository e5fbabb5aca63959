"""Switching a shared SQLite file to WAL mode while another connection reads it.

Leaving rollback mode needs the file to itself, and SQLite answers ``SQLITE_BUSY`` at once
(without its busy handler) while a reader holds it: the switch must wait the reader out. The
command line's import of a batch journal of the earlier format into a ledger writes through
the journal's own WAL instead, so a reader neither blocks it nor sees half a file.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from videogen_async import Ledger
from videogen_async._cli._batch_store import import_journal
from videogen_async._ledger._sqlite import enter_wal, is_busy

from .cli.test_batch_import import request_of, write_old_journal


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


async def test_a_journal_imported_while_a_reader_holds_it_stays_whole_for_the_reader(
    tmp_path: Path,
) -> None:
    path = tmp_path / "prompts.journal.sqlite"
    write_old_journal(path, "http://127.0.0.1:1", {1: ("created", "t-1"), 2: ("unknown", None)})
    keys = {no: (f"key-{no}", request_of(no)) for no in (1, 2)}
    with reading(path) as reader:
        before = reader.execute("SELECT line_no, state FROM lines ORDER BY line_no").fetchall()
        # The copy goes through the file's own journal: it does not wait for the reader,
        # and the reader keeps the whole journal it began with.
        assert await import_journal(path, base_url="http://127.0.0.1:1", keys=keys) == 2
        assert reader.execute("SELECT line_no, state FROM lines").fetchall() == before
    async with Ledger.open(path) as ledger:
        entry = await ledger.get("key-1")
        assert entry is not None
        assert (entry.state, entry.task_id) == ("pending", "t-1")
        unknown = await ledger.get("key-2")
        assert unknown is not None
        assert unknown.state == "unknown"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not names & {"meta", "lines"}
