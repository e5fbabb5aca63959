"""``videogen batch`` run again while four creates of another run are in doubt.

The sandbox holds the first four creates in its handler until the test lets them go, so a
batch with ``--max-concurrency 4`` has four creates at the service and nothing else: its
ledger entries stay ``creating``. Its process is then SIGKILLed (the creator is dead) or kept
alive (a live creator). A second run must create the other lines (the four in doubt take no
create slot), say that four are in doubt, end at once on Ctrl-C, write the manifest, and
report the four as the ledger settles them.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from yarl import URL

from .conftest import (
    CREATE_PATH,
    CREATE_ROUTE,
    KEY,
    HeldCreates,
    ThreadedSandbox,
    read_manifest,
    subprocess_env,
    videogen,
    wait_until,
)
from .test_batch import write_input

LINES = 20
IN_FLIGHT = 4


def ledger_states(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return sorted(r[0] for r in conn.execute("SELECT state FROM videogen_ledger_entries"))


def batch(box: ThreadedSandbox, path: Path, journal: Path, manifest: str) -> subprocess.Popen[str]:
    return videogen(
        "batch", str(path), "--journal", str(journal), "--max-concurrency", str(IN_FLIGHT),
        "--manifest", str(path.with_name(manifest)), env=subprocess_env(box.env()),
    )  # fmt: skip


@contextlib.contextmanager
def stopped(proc: subprocess.Popen[str]) -> Iterator[list[str]]:
    """Collect the process's stderr while the block runs; make sure it ends."""
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        yield err
    finally:
        if proc.returncode is None:
            proc.kill()
        proc.wait()
        reader.join(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def held(
    make_sandbox: Callable[..., ThreadedSandbox], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[ThreadedSandbox, HeldCreates, Path, Path, subprocess.Popen[str]]]:
    """A first run with its four creates held at the service (nothing finishes until told)."""
    hold = HeldCreates(monkeypatch, range(IN_FLIGHT))
    box = make_sandbox(time_scale=1.0, manual_clock=True)
    path = write_input(tmp_path, LINES)
    journal = tmp_path / "run.sqlite"
    first = batch(box, path, journal, "first.jsonl")
    with stopped(first):
        # Read whole, not only in flight: a create killed with its body unsent holds nothing.
        box.run(hold.all_held.wait())
        assert ledger_states(journal) == ["creating"] * IN_FLIGHT
        yield box, hold, path, journal, first
        box.call(hold.released.set)


def test_a_create_is_held_once_its_body_is_read_not_once_it_is_in_flight(
    make_sandbox: Callable[..., ThreadedSandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``held`` waits for before the kill: in flight was not enough.

    aiohttp before 3.11 writes a request's headers before its body; a run killed between the
    two never sent the body, and the hold went to the rerun's first create (waited for ever).
    """
    hold = HeldCreates(monkeypatch, range(1))
    box = make_sandbox()
    body = json.dumps({"prompt": "a held create", "duration": 4}).encode()
    head = (
        f"POST {CREATE_PATH} HTTP/1.1\r\nHost: sandbox\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    url = URL(box.base_url)
    with (
        socket.create_connection((url.host or "", url.port or 0), timeout=30) as sock,
        sock.makefile("rb") as answer,
    ):
        sock.sendall(head.encode())
        box.run(box.srv.wait_until(lambda: box.srv.stats().in_flight == 1))
        assert not box.call(hold.all_held.is_set)  # in flight, its body not read
        sock.sendall(body)
        box.run(hold.all_held.wait())
        box.call(hold.released.set)
        assert answer.readline().startswith(b"HTTP/1.1 200 ")
    assert box.routes(CREATE_ROUTE) == 1


def interrupted_rerun(box: ThreadedSandbox, path: Path, journal: Path) -> str:
    """Run the batch again; SIGINT it once the other lines are created and waited for."""
    rerun = batch(box, path, journal, "prompts.results.jsonl")
    with stopped(rerun) as err:
        # The other lines are created while the four in doubt hold no create slot.
        wait_until(lambda: ledger_states(journal).count("pending") == LINES - IN_FLIGHT)
        box.wait_for_route("GET /v1/tasks", above=0)  # and it waits
        rerun.send_signal(signal.SIGINT)
        rerun.wait(timeout=30)  # a hang guard: Ctrl-C must end it at once
    text = "".join(err)
    assert rerun.returncode == 130, text
    assert f"{IN_FLIGHT} line(s) in doubt" in text
    assert f"creating: {LINES - IN_FLIGHT}/{LINES - IN_FLIGHT}" in text
    assert f"waiting: 0/{LINES} (0 finished, {IN_FLIGHT} in doubt)" in text
    assert "to resume, run:" in text
    manifest = read_manifest(path.with_name("prompts.results.jsonl"))
    statuses = [r["status"] for r in manifest]
    assert statuses == ["unknown"] * IN_FLIGHT + ["pending"] * (LINES - IN_FLIGHT)
    assert all(r["error"] for r in manifest[:IN_FLIGHT])
    assert len({r["task_id"] for r in manifest[IN_FLIGHT:]}) == LINES - IN_FLIGHT
    assert box.routes(CREATE_ROUTE) == LINES - IN_FLIGHT  # the four in doubt were not sent
    return text


def test_sigkill_mid_create_then_ctrl_c_ends_the_rerun_and_writes_the_manifest(
    held: tuple[ThreadedSandbox, HeldCreates, Path, Path, subprocess.Popen[str]],
) -> None:
    box, _, path, journal, first = held
    first.kill()
    first.wait()
    interrupted_rerun(box, path, journal)


def test_ctrl_c_ends_a_wait_on_a_live_creator_and_its_lines_stay_in_doubt(
    held: tuple[ThreadedSandbox, HeldCreates, Path, Path, subprocess.Popen[str]],
) -> None:
    box, hold, path, journal, first = held
    interrupted_rerun(box, path, journal)
    manifest = read_manifest(path.with_name("prompts.results.jsonl"))
    assert all(r["error"].startswith("in doubt") for r in manifest[:IN_FLIGHT])
    # The live creator gets its answers, records them and finishes the batch with the others.
    box.call(hold.released.set)
    wait_until(lambda: ledger_states(journal).count("pending") == LINES)
    box.call(lambda: box.srv.clock.advance(120))
    first.wait(timeout=60)  # a hang guard
    assert first.returncode == 0
    assert {r["status"] for r in read_manifest(path.with_name("first.jsonl"))} == {"succeeded"}
    assert box.routes(CREATE_ROUTE) == LINES  # every line created once, by one of the two


def rerun_to_the_end(box: ThreadedSandbox, path: Path, journal: Path) -> None:
    """Run the batch again, let its tasks finish, and check how it ends by itself."""
    rerun = batch(box, path, journal, "prompts.results.jsonl")
    with stopped(rerun) as err:
        wait_until(lambda: ledger_states(journal).count("pending") == LINES - IN_FLIGHT)
        box.call(lambda: box.srv.clock.advance(120))  # every created task finishes
        rerun.wait(timeout=120)  # a hang guard: the dead creator's create lease is 600 s
    assert rerun.returncode == 1, "".join(err)  # the four the dead run sent stay unknown
    manifest = read_manifest(path.with_name("prompts.results.jsonl"))
    assert [r["status"] for r in manifest] == ["unknown"] * IN_FLIGHT + ["succeeded"] * (
        LINES - IN_FLIGHT
    )
    assert box.routes(CREATE_ROUTE) == LINES  # the four held ones, released; none sent twice


def test_lines_in_doubt_the_ledger_settles_are_reported_unknown_and_the_rerun_ends(
    held: tuple[ThreadedSandbox, HeldCreates, Path, Path, subprocess.Popen[str]],
) -> None:
    box, hold, path, journal, first = held
    first.kill()
    first.wait()
    box.call(hold.released.set)  # the service creates them; nobody will learn their ids
    # The dead creator's leases have run out (closing: a connection's own "with" only commits).
    with contextlib.closing(sqlite3.connect(journal)) as conn, conn:
        conn.execute("UPDATE videogen_ledger_entries SET lease_until = 0 WHERE state = 'creating'")
    rerun_to_the_end(box, path, journal)


def test_a_rerun_after_a_kill_mid_create_finishes_by_itself(
    held: tuple[ThreadedSandbox, HeldCreates, Path, Path, subprocess.Popen[str]],
) -> None:
    box, hold, path, journal, first = held
    first.kill()
    first.wait()
    box.call(hold.released.set)
    rerun_to_the_end(box, path, journal)
