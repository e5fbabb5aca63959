"""``videogen batch``: the manifest, the ledger it keeps its lines in, and the crash tests.

The crash tests interrupt a batch of 30 lines after some creations, three ways: the sandbox
drops the connection after a create took effect; an exception is raised inside the batch
right after a create took effect and before its id is recorded; a real SIGINT is sent to a
``videogen batch`` subprocess. Each time the batch is then run again with the same journal,
and the sandbox's own records (its set of created tasks and its request log) must show every
line created exactly once, while the manifest holds a result for every line.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videogen_async._ledger import _creates
from videogen_async.testing import sample_mp4

from .conftest import (
    CREATE_ROUTE,
    KEY,
    HeldCreates,
    Run,
    ThreadedSandbox,
    read_manifest,
    subprocess_env,
    videogen,
    wait_until,
)

MEDIA_ROUTE = "GET /media/{file_name}"


def write_input(folder: Path, count: int, *extra: str) -> Path:
    path = folder / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"line {i} of the batch", "duration": 4 + i % 3})
             for i in range(1, count + 1)]  # fmt: skip
    path.write_text("\n".join([*lines, *extra]) + "\n", encoding="utf-8")
    return path


#: The ledger's states in the words of the earlier journal.
AS_JOURNAL = {"creating": "attempted", "pending": "created", "succeeded": "done"}


def journal_states(path: Path) -> dict[int, tuple[str, str | None]]:
    """Line number -> (state, task id), read from the batch's ledger file."""
    if not path.exists():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                "SELECT key, state, task_id FROM videogen_ledger_entries"
            ).fetchall()
    except sqlite3.OperationalError:  # the batch is creating the file right now
        return {}
    return {int(row[0].split(":")[2]): (AS_JOURNAL.get(row[1], row[1]), row[2]) for row in rows}


def check_exactly_once(sandbox: ThreadedSandbox, manifest: list[dict[str, Any]], lines: int):
    """Every line created once: as many creates and tasks as lines, ids one per line."""
    assert len(manifest) == lines
    assert [r["line"] for r in manifest] == list(range(1, lines + 1))
    server_ids = set(sandbox.task_ids())
    assert sandbox.routes(CREATE_ROUTE) == lines
    assert len(server_ids) == lines
    ids = [r["task_id"] for r in manifest if r["task_id"]]
    assert len(ids) == len(set(ids))
    assert set(ids) <= server_ids
    return server_ids - set(ids)


# -- the everyday path ----------------------------------------------------------------------------


def test_batch_manifest_invalid_lines_downloads_and_idempotent_rerun(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = write_input(
        tmp_path,
        5,
        "",
        "# a comment",
        "{not json",
        json.dumps({"prompt": "x", "functionMode": "omni_reference"}),
        json.dumps({"prompt": "y", "duration": 30}),
    )
    videos = tmp_path / "videos"
    run = cli("--json", "batch", str(path), "--download", str(videos))
    assert run.code == 1, run  # three lines were bad
    summary = run.json()
    assert summary["counts"] == {"succeeded": 5, "invalid": 3}
    assert summary["resume"] is None
    assert "line 8: skipped, not valid JSON" in run.err
    assert "line 9: skipped, functionMode: is not a field" in run.err
    assert "line 10: skipped, duration: must be an integer from 4 to 15" in run.err
    assert sandbox.routes(CREATE_ROUTE) == 5  # bad lines cost nothing

    manifest = read_manifest(tmp_path / "prompts.results.jsonl")
    assert [r["line"] for r in manifest] == [1, 2, 3, 4, 5, 8, 9, 10]
    good = manifest[:5]
    assert all(r["status"] == "succeeded" and r["video_url"] for r in good)
    assert [r["input"]["prompt"] for r in good] == [f"line {i} of the batch" for i in range(1, 6)]
    assert [r["credits"] for r in good] == [10, 12, 8, 10, 12]  # 2 credits per second
    assert manifest[5] == {
        "line": 8, "input": "{not json", "task_id": None, "status": "invalid",
        "video_url": None, "error": manifest[5]["error"], "credits": None, "path": None,
    }  # fmt: skip
    for record in good:
        assert Path(record["path"]).read_bytes() == sample_mp4()
    assert len(list(videos.iterdir())) == 5

    media_before = sandbox.routes(MEDIA_ROUTE)
    again = cli("batch", str(path), "--download", str(videos))
    assert again.code == 1
    assert "resuming: 5 line(s) already created" in again.err
    assert sandbox.routes(CREATE_ROUTE) == 5  # nothing created twice
    assert sandbox.routes(MEDIA_ROUTE) == media_before  # complete files are not fetched again
    assert read_manifest(tmp_path / "prompts.results.jsonl") == manifest


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_shipped_csv_runs_and_resumes(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = tmp_path / "prompts.csv"
    shutil.copy(EXAMPLES / "prompts.csv", path)
    run = cli("--json", "batch", str(path))
    assert run.code == 0, run
    assert run.json()["counts"] == {"succeeded": 6}
    assert sandbox.routes(CREATE_ROUTE) == 6
    manifest = read_manifest(tmp_path / "prompts.csv.results.jsonl")
    assert [r["line"] for r in manifest] == [2, 3, 4, 5, 6, 7]
    # Numbers as the field's type has them, empty cells left out (the service's defaults).
    assert manifest[0]["input"] == {
        "prompt": "a paper boat drifting on a misty lake at dawn",
        "model": "videomodel_2_0_fast", "ratio": "16:9", "duration": 5,
    }  # fmt: skip
    assert manifest[4]["input"] == {"prompt": "a lighthouse in a storm with waves crashing"}
    assert [r["credits"] for r in manifest] == [5, 12, 16, 4, 10, 20]  # fast: 1 a second
    again = cli("batch", str(path))
    assert again.code == 0
    assert "resuming: 6 line(s) already created" in again.err
    assert sandbox.routes(CREATE_ROUTE) == 6


def test_the_shipped_csv_with_errors_reports_each_line(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = tmp_path / "prompts.txt"  # not by its extension: by --format
    shutil.copy(EXAMPLES / "prompts_with_errors.csv", path)
    assert "--format csv" in cli("batch", str(path)).err  # read as JSON Lines: a hint
    run = cli("--json", "batch", str(path), "--format", "csv")
    assert run.code == 1, run
    assert run.json()["counts"] == {"succeeded": 2, "invalid": 2}
    assert "line 3: skipped, duration: must be an integer from 4 to 15 seconds (got 30)" in run.err
    assert "line 5: skipped, ratio: must be one of" in run.err
    assert sandbox.routes(CREATE_ROUTE) == 2  # bad lines cost nothing


def test_csv_cells_urls_keys_and_rows_wider_than_the_header(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = tmp_path / "more.csv"
    path.write_text(
        "\ufeffprompt,duration,image_urls,key\n"
        '"a fox, in the snow",6,https://example.com/a.png https://example.com/b.png,fox-1\n'
        "a boat,five,,\n"
        "a cat,5,,,surplus\n"
        "a dog, +4 ,,dog-1\n",
        encoding="utf-8",
    )
    run = cli("--json", "batch", str(path))
    assert run.code == 1, run
    manifest = read_manifest(tmp_path / "more.csv.results.jsonl")
    assert [(r["line"], r["status"]) for r in manifest] == [
        (2, "succeeded"), (3, "invalid"), (4, "invalid"), (5, "succeeded"),
    ]  # fmt: skip
    assert manifest[0]["input"]["image_urls"] == [
        "https://example.com/a.png", "https://example.com/b.png",
    ]  # fmt: skip
    assert manifest[0]["input"]["key"] == "fox-1"
    assert "duration: must be an integer" in manifest[1]["error"]
    assert manifest[2]["error"] == "5 cells, the header names 4"
    assert manifest[3]["input"]["duration"] == 4


def test_the_sdks_names_point_to_the_command(cli: Callable[..., Run]) -> None:
    for argv, command in [
        (["tasks", "create", "a boat"], "videogen create"),
        (["tasks.get", "t-1"], "videogen status"),
        (["--json", "projects", "create-videos", "p-1"], "videogen project videos"),
        (["credits", "get"], "videogen credits"),
    ]:
        run = cli(*argv)
        assert run.code == 2
        assert f"did you mean `{command}`?" in run.err
    assert "did you mean" not in cli("create", "--bogus").err


def test_all_lines_succeeded_exits_0_with_human_summary(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = write_input(tmp_path, 3)
    run = cli("batch", str(path), "--manifest", str(tmp_path / "out" / "m.jsonl"))
    assert run.code == 0, run
    assert "succeeded  3" in run.out
    assert "creating: 3/3" in run.err
    assert "waiting: 3/3" in run.err
    assert len(read_manifest(tmp_path / "out" / "m.jsonl")) == 3


def test_changed_line_or_other_service_is_another_line(
    sandbox: ThreadedSandbox,
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
    tmp_path: Path,
) -> None:
    path = write_input(tmp_path, 2)
    assert cli("batch", str(path)).code == 0
    assert cli("batch", str(path)).code == 0
    assert sandbox.routes(CREATE_ROUTE) == 2  # a rerun sends nothing
    other = make_sandbox()  # a sandbox of the same seed: its task ids are the same as these
    moved = cli("--base-url", other.base_url, "batch", str(path), "--journal",
                str(tmp_path / "other.db"))  # fmt: skip
    assert moved.code == 0, moved
    assert other.routes(CREATE_ROUTE) == 2
    path.write_text(path.read_text().replace("line 2", "line two"))
    changed = cli("batch", str(path))
    assert changed.code == 0, changed
    assert sandbox.routes(CREATE_ROUTE) == 3  # only the changed line is created again
    again = cli("batch", str(path))
    assert again.code == 0, again
    assert sandbox.routes(CREATE_ROUTE) == 3


def test_insufficient_credits_stops_creating_then_a_rerun_finishes(
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = make_sandbox(credits=25)
    for name, value in box.env().items():
        monkeypatch.setenv(name, value)
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(6)))
    run = cli("batch", str(path), "--max-concurrency", "1")
    assert run.code == 3, run  # an API error stopped the batch
    assert "InsufficientCreditsError" in run.err
    assert "creating no more tasks" in run.err
    assert "to resume, run:" in run.err
    assert box.routes(CREATE_ROUTE) == 3  # two created, the third refused, no more tried
    manifest = read_manifest(tmp_path / "p.results.jsonl")
    statuses = [r["status"] for r in manifest]
    assert statuses == ["succeeded", "succeeded", "refused", *["not_created"] * 3]

    box.call(lambda: box.srv.add_credits(100))
    rerun = cli("batch", str(path), "--max-concurrency", "1")
    assert rerun.code == 0, rerun
    assert len(box.task_ids()) == 6
    assert box.routes(CREATE_ROUTE) == 7  # the refused create was safe to send again


def test_timeout_leaves_tasks_pending_and_a_rerun_resumes_waiting(
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = make_sandbox(time_scale=1.0, manual_clock=True)  # the clock moves only when told
    for name, value in box.env().items():
        monkeypatch.setenv(name, value)
    path = write_input(tmp_path, 4)
    run = cli("batch", str(path), "--timeout", "0.2")
    assert run.code == 1, run
    assert "to resume, run:" in run.err
    assert [r["status"] for r in read_manifest(tmp_path / "prompts.results.jsonl")] == [
        "pending"
    ] * 4
    box.call(lambda: box.srv.clock.advance(120))
    rerun = cli("batch", str(path))
    assert rerun.code == 0, rerun
    assert box.routes(CREATE_ROUTE) == 4
    assert [r["status"] for r in read_manifest(tmp_path / "prompts.results.jsonl")] == [
        "succeeded"
    ] * 4


# -- the crash tests ------------------------------------------------------------------------------


def test_crash_a_dropped_connection_after_the_create_took_effect(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from videogen_async._resources._tasks import Tasks

    real_create = Tasks.create
    calls = 0

    async def create(self: Tasks, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 10:  # from now on, the next create takes effect and its answer is lost
            await sandbox.acall(
                lambda: sandbox.srv.faults.set(CREATE_ROUTE, drop_after_rate=1.0, times=1)
            )
        return await real_create(self, *args, **kwargs)

    monkeypatch.setattr(Tasks, "create", create)
    path = write_input(tmp_path, 30)
    first = cli("batch", str(path), "--max-concurrency", "3")
    assert first.code == 1, first
    assert "create may have taken effect" in first.err
    manifest = read_manifest(tmp_path / "prompts.results.jsonl")
    orphans = check_exactly_once(sandbox, manifest, 30)
    assert len(orphans) == 1  # the dropped create made a task nobody knows the id of
    [unknown] = [r for r in manifest if r["status"] == "unknown"]
    assert unknown["task_id"] is None
    assert sum(r["status"] == "succeeded" for r in manifest) == 29

    monkeypatch.setattr(Tasks, "create", real_create)
    second = cli("batch", str(path))
    assert second.code == 1
    assert f"line {unknown['line']}: unknown outcome of an earlier create; not sent again" in (
        second.err
    )
    assert check_exactly_once(sandbox, read_manifest(tmp_path / "prompts.results.jsonl"), 30)
    assert sandbox.routes(CREATE_ROUTE) == 30

    third = cli("batch", str(path), "--retry-unknown")  # the user accepts a possible duplicate
    assert third.code == 0, third
    assert sandbox.routes(CREATE_ROUTE) == 31
    final = read_manifest(tmp_path / "prompts.results.jsonl")
    assert all(r["status"] == "succeeded" for r in final)


def test_crash_an_exception_between_the_create_and_its_journal_entry(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Recording the 10th create's answer fails, again and again: the ledger keeps the answer
    # in its spool, and the rerun writes it back: no line is lost, none is created twice.
    monkeypatch.setenv("VIDEOGEN_LEDGER_SPOOL", str(tmp_path / "spool"))
    real = _creates.settle_created
    calls: list[str] = []

    def crashing(key: str, *args: Any) -> Any:
        calls.append(key)
        if len(calls) >= 10 and key == calls[9]:
            raise RuntimeError("simulated crash after the create took effect")
        return real(key, *args)

    monkeypatch.setattr(_creates, "settle_created", crashing)
    path = write_input(tmp_path, 30)
    journal = tmp_path / "prompts.journal.sqlite"
    first = cli("batch", str(path), "--max-concurrency", "3")
    assert first.code != 0, first
    assert "simulated crash" in first.err
    states = journal_states(journal)
    attempted = [no for no, (state, _) in states.items() if state == "attempted"]
    created = [no for no, (state, _) in states.items() if state == "created"]
    assert len(attempted) == 1
    assert 9 <= len(created) <= 29
    assert len(sandbox.task_ids()) == len(created) + 1  # the crashed line's task exists
    assert "to resume, run:" in first.err

    monkeypatch.setattr(_creates, "settle_created", real)
    second = cli("batch", str(path), "--max-concurrency", "3")
    assert second.code == 0, second
    manifest = read_manifest(tmp_path / "prompts.results.jsonl")
    assert check_exactly_once(sandbox, manifest, 30) == set()
    assert all(r["status"] == "succeeded" for r in manifest)


def test_crash_sigint_to_a_batch_subprocess_then_resume(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The creates past the fourth wait at the service until the batch said it stops: one or
    # two are in flight then (whatever the machine's speed), to be answered and recorded.
    hold = HeldCreates(monkeypatch, range(4, 30))
    path = write_input(tmp_path, 30)
    journal = tmp_path / "run.sqlite"
    proc = videogen(
        "batch", str(path), "--journal", str(journal), "--max-concurrency", "2",
        env=subprocess_env(sandbox.env()),
    )  # fmt: skip
    try:
        answered = lambda: sandbox.srv.stats().by_route.get(CREATE_ROUTE, 0)  # noqa: E731
        sandbox.run(sandbox.srv.wait_until(lambda: answered() >= 4))  # each answer wakes it
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        said: list[str] = []
        for line in iter(proc.stderr.readline, ""):  # until it says it stops (or it ends)
            said.append(line)
            if "interrupted: stopping cleanly" in line:
                break
        sandbox.call(hold.released.set)
        _, rest = proc.communicate(timeout=30)
        err = "".join(said) + rest
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted: stopping cleanly" in err
    states = journal_states(journal)
    created = {task_id for state, task_id in states.values() if state == "created"}
    assert 4 <= len(created) < 30
    assert not [no for no, (state, _) in states.items() if state == "attempted"]  # clean stop
    assert set(sandbox.task_ids()) == created  # every create in flight was recorded
    assert sandbox.routes(CREATE_ROUTE) == len(created)
    partial = read_manifest(tmp_path / "prompts.results.jsonl")
    assert len(partial) == 30  # written even when interrupted
    assert {r["task_id"] for r in partial if r["task_id"]} == created

    resume = err.split("to resume, run:\n", 1)[1].splitlines()[0].strip()
    argv = shlex.split(resume)
    assert argv[:2] == ["videogen", "batch"]
    assert KEY not in resume
    rerun = cli(*argv[1:])  # the very command it printed
    assert rerun.code == 0, rerun
    manifest = read_manifest(tmp_path / "prompts.results.jsonl")
    assert check_exactly_once(sandbox, manifest, 30) == set()
    assert all(r["status"] == "succeeded" for r in manifest)


def test_sigint_while_waiting_stops_cleanly_and_a_rerun_waits_again(
    make_sandbox: Callable[..., ThreadedSandbox], cli: Callable[..., Run], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    box = make_sandbox(time_scale=1.0, manual_clock=True)  # nothing finishes until told
    path = write_input(tmp_path, 5)
    journal = tmp_path / "prompts.journal.sqlite"
    proc = videogen("batch", str(path), env=subprocess_env(box.env()))
    try:
        wait_until(
            lambda: sum(s == "created" for s, _ in journal_states(journal).values()) == 5,
            what="all five lines created",
        )
        box.wait_for_route("GET /v1/tasks", above=4)  # the first polls
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "to resume, run:" in err
    assert [r["status"] for r in read_manifest(tmp_path / "prompts.results.jsonl")] == [
        "pending"
    ] * 5

    for name, value in box.env().items():
        monkeypatch.setenv(name, value)
    box.call(lambda: box.srv.clock.advance(120))
    rerun = cli("batch", str(path))
    assert rerun.code == 0, rerun
    assert box.routes(CREATE_ROUTE) == 5
