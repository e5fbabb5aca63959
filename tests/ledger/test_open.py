"""Bad input when opening a ledger: each a clear LedgerError, nothing written, nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from videogen_async import InvalidRequestError, Ledger, LedgerError, VideoGenError
from videogen_async._ledger._claims import pause_for
from videogen_async._ledger._sqlite import SQLiteEngine


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must be a file path"),
        ("mysql://u:p@host/db", "unknown scheme 'mysql'"),
        ("sqlite://", "needs a file path"),
        ("sqlite:///:memory:", "needs a file path"),
        (":memory:", "cannot be shared"),
        ("postgresql://u:secret@host:notaport/db", "port is not a number"),
        ("postgresql:///db", "no host"),
    ],
)
def test_malformed_url(url: str, message: str) -> None:
    with pytest.raises(LedgerError, match=message) as caught:
        Ledger.open(url)
    assert "secret" not in str(caught.value)
    assert isinstance(caught.value, VideoGenError)


def test_bad_max_credits() -> None:
    with pytest.raises(InvalidRequestError, match="max_credits"):
        Ledger.open("x.db", max_credits=-1)


async def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="does not exist"):
        await Ledger.open(str(tmp_path / "no" / "such" / "ledger.db"))
    assert not (tmp_path / "no").exists()


async def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 100)
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="not a ledger"):
        await Ledger.open(str(path))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


async def test_a_database_that_is_not_a_ledger(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(LedgerError, match="not a ledger"):
        await Ledger.open(f"sqlite:///{path}")
    assert path.read_bytes() == before


async def _bump_version(url: str) -> None:
    async with Ledger.open(url) as ledger:
        await ledger.store.write(pause_for, 0)  # the schema exists
    if "://" in url and not url.startswith("sqlite"):
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "UPDATE videogen_ledger_meta SET value = '99' WHERE name = 'schema_version'"
            )
        finally:
            await conn.close()
    else:
        with sqlite3.connect(url) as conn:
            conn.execute(
                "UPDATE videogen_ledger_meta SET value = '99' WHERE name = 'schema_version'"
            )
        conn.close()


@pytest.mark.allow_blocking("a direct sqlite3 edit of the schema version")
async def test_a_newer_schema_is_refused(ledger_url: str) -> None:
    await _bump_version(ledger_url)
    with pytest.raises(LedgerError, match="schema version 99, newer"):
        await Ledger.open(ledger_url)


async def test_unreachable_database() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nobody listens there
    pytest.importorskip("asyncpg")
    url = f"postgresql://u:hunter2@127.0.0.1:{port}/db"
    with pytest.raises(LedgerError, match="cannot connect") as caught:
        await Ledger.open(url)
    assert "hunter2" not in str(caught.value)


async def test_schema_is_created_once_by_concurrent_openers(ledger_url: str) -> None:

    ledgers = await asyncio.gather(*(Ledger.open(ledger_url) for _ in range(5)))
    for ledger in ledgers:
        summary = {"states": {}, "spent": 0.0, "reserved": 0.0, "destinations": {}}
        assert await ledger.summary() == summary
        await ledger.aclose()


async def test_new_sqlite_files_opened_together_all_open(tmp_path: Path) -> None:
    # Turning a new file to WAL mode needs it to itself, and SQLite refuses at once, without
    # waiting, while another opener reads it: on two cores about one round in twenty met that.
    for round_ in range(60):
        path = str(tmp_path / f"ledger-{round_}.db")
        ledgers = await asyncio.gather(*(Ledger.open(path) for _ in range(5)))
        for ledger in ledgers:
            await ledger.aclose()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def test_a_file_held_past_the_busy_timeout_is_named_as_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SQLiteEngine, "busy_timeout", 0.05)
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE other (a)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(LedgerError, match="another connection held the file") as caught:
            await Ledger.open(str(path))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "not a SQLite database" not in str(caught.value)


async def test_an_open_cancelled_while_connecting_closes_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The connection is made in the ledger's thread; a caller cancelled meanwhile (a timeout
    # around Ledger.open) must not leave it to the garbage collector.
    connecting, release = threading.Event(), threading.Event()
    made: list[sqlite3.Connection] = []
    original = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connecting.set()
        release.wait(10)
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr("videogen_async._ledger._sqlite.sqlite3.connect", connect)
    opening = asyncio.ensure_future(Ledger.open(str(tmp_path / "l.db")))
    await asyncio.to_thread(connecting.wait, 10)
    opening.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await opening
    [conn] = made
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")
