"""``videogen batch --journal URL`` on the ledger, and ``videogen ledger list|summary``.

Several ``videogen batch`` processes on one PostgreSQL URL share the lines of a batch: the
sandbox's own records (tasks created, create requests) prove each line was created once.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from videogen_async import AmbiguousCreateError, AsyncVideoGen, Ledger, VideoGenError
from videogen_async._cli._ui import UI

from ..ledger.conftest import postgres_cluster, postgres_url  # noqa: F401 - the fixtures
from .conftest import (
    CREATE_ROUTE,
    KEY,
    Run,
    ThreadedSandbox,
    read_manifest,
    subprocess_env,
    videogen,
)


def write_lines(folder: Path, count: int) -> Path:
    path = folder / "shared.jsonl"
    lines = [json.dumps({"prompt": f"shared line {i}", "duration": 4}) for i in range(count)]
    lines.append(json.dumps({"prompt": "a line with its own key", "key": "mine-1"}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_rerun_sends_nothing_and_the_ledger_command_lists_the_lines(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = write_lines(tmp_path, 4)
    ledger = tmp_path / "batch.db"
    first = cli("batch", str(path), "--journal", f"sqlite:///{ledger}")
    assert first.code == 0, first
    assert sandbox.routes(CREATE_ROUTE) == 5
    again = cli("batch", str(path), "--journal", str(ledger))
    assert again.code == 0, again
    assert sandbox.routes(CREATE_ROUTE) == 5  # a rerun sends nothing new
    manifest = read_manifest(tmp_path / "shared.results.jsonl")
    assert {r["status"] for r in manifest} == {"succeeded"}
    assert len({r["task_id"] for r in manifest}) == 5

    listed = cli("--json", "ledger", "list", str(ledger))
    assert listed.code == 0, listed
    entries = json.loads(listed.out)
    assert {e["task_id"] for e in entries} == {r["task_id"] for r in manifest}
    assert "mine-1" in {e["key"] for e in entries}  # the line's own key
    assert {e["state"] for e in entries} == {"succeeded"}
    none = cli("--json", "ledger", "list", str(ledger), "--state", "unknown")
    assert json.loads(none.out) == []
    summary = cli("--json", "ledger", "summary", str(ledger))
    assert summary.code == 0, summary
    data = json.loads(summary.out)
    assert data["states"]["succeeded"] == 5
    assert data["entries"] == 5
    assert data["spent"] == sum(float(r["credits"]) for r in manifest)
    human = cli("ledger", "summary", str(ledger))
    assert "succeeded" in human.out
    assert "credits spent" in human.out


def test_the_ledger_command_writes_nothing_where_there_is_no_ledger(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    missing = tmp_path / "missing.db"
    run = cli("ledger", "list", str(missing))
    assert run.code == 2
    assert "no such file" in run.err
    assert not missing.exists()
    bad = cli("ledger", "summary", "mysql://somewhere/db")
    assert bad.code == 2
    assert "mysql" in bad.err


HOSTILE = "\x1b]0;owned\x07\x1b[2J\u202e"  # a title, a bell, a cleared screen, a bidi override


class _Dropped:
    """A client whose create may have taken effect: the error text is the service's."""

    tasks = projects = property(lambda self: self)

    def with_options(self, **_: object) -> _Dropped:
        return self

    async def create(self, *_: object, **__: object) -> None:
        raise VideoGenError(f"dropped {HOSTILE}", request_may_have_taken_effect=True)

    get = create_videos = create


def test_the_ledger_command_escapes_control_characters(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    ledger_path = tmp_path / "hostile.db"

    async def fill() -> None:
        async with (
            Ledger.open(ledger_path) as ledger,
            AsyncVideoGen(api_key=KEY, base_url=sandbox.base_url) as client,
        ):
            await ledger.create_task(client, "a fox", key=f"key {HOSTILE}")
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_task(_Dropped(), "a cat", key=f"other {HOSTILE}")

    anyio.run(fill)
    human = cli("ledger", "list", str(ledger_path))
    assert human.code == 0, human
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in human.out + human.err
    assert "key \\x1b]0;owned\\x07\\x1b[2J\\u202e" in human.out
    assert "dropped \\x1b]0;owned" in human.out  # the stored error, escaped too
    listed = cli("--json", "ledger", "list", str(ledger_path))
    assert {e["key"] for e in listed.json()} == {f"key {HOSTILE}", f"other {HOSTILE}"}
    assert "\x1b" not in listed.out  # JSON escapes it its own way

    # A terminal: rich draws the table with its own codes, never the stored ones.
    class TTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = TTY()
    UI(stdout=out, stderr=TTY()).table(("task id",), [[f"t-1{HOSTILE}"]])
    assert "\x1b]0;owned" not in out.getvalue()
    assert "\u202e" not in out.getvalue()
    assert "t-1\\x1b]0;owned\\x07" in out.getvalue()


def test_unknown_lines_are_reported_and_resent_only_when_asked(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = write_lines(tmp_path, 2)
    ledger = tmp_path / "batch.db"
    # the create takes effect, then the connection drops: the outcome is unknown
    sandbox.call(lambda: sandbox.srv.faults.set(CREATE_ROUTE, drop_after_rate=1.0, times=1))
    first = cli("batch", str(path), "--journal", str(ledger), "--max-concurrency", "1")
    assert first.code == 1, first
    statuses = [r["status"] for r in read_manifest(tmp_path / "shared.results.jsonl")]
    assert statuses == ["unknown", "succeeded", "succeeded"]
    unknown = cli("--json", "ledger", "list", str(ledger), "--state", "unknown")
    assert len(json.loads(unknown.out)) == 1
    sent = sandbox.routes(CREATE_ROUTE)
    again = cli("batch", str(path), "--journal", str(ledger))
    assert again.code == 1, again
    assert "unknown outcome" in again.err
    assert sandbox.routes(CREATE_ROUTE) == sent  # not sent again
    resent = cli("batch", str(path), "--journal", str(ledger), "--retry-unknown")
    assert resent.code == 0, resent
    assert sandbox.routes(CREATE_ROUTE) == sent + 1  # Ledger.resend, once


def test_two_processes_on_one_postgresql_ledger_create_each_line_once(
    sandbox: ThreadedSandbox, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = str(request.getfixturevalue("postgres_url"))  # a fresh database of the cluster
    path = write_lines(tmp_path, 24)
    env = subprocess_env(sandbox.env())
    procs = [
        videogen(
            "batch",
            str(path),
            "--journal",
            url,
            "--max-concurrency",
            "3",
            "--manifest",
            str(tmp_path / f"results-{n}.jsonl"),
            env=env,
        )
        for n in range(2)
    ]
    outcomes = []
    for proc in procs:
        try:
            outcomes.append(proc.communicate(timeout=120))
        finally:
            if proc.returncode is None:
                proc.kill()
                proc.communicate()
    for proc, (_, err) in zip(procs, outcomes, strict=True):
        assert proc.returncode == 0, err
    assert sandbox.routes(CREATE_ROUTE) == 25  # each line created once, by one process
    assert len(sandbox.task_ids()) == 25
    manifests = [read_manifest(tmp_path / f"results-{n}.jsonl") for n in range(2)]
    for manifest in manifests:  # each process reports every line
        assert len(manifest) == 25
        assert {r["status"] for r in manifest} == {"succeeded"}
        assert {r["task_id"] for r in manifest} == set(sandbox.task_ids())
