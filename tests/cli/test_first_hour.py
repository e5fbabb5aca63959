"""What a new user meets first: a refused key, the help, a mistyped command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from videogen_async._cli._parser import build_parser
from videogen_async.testing import _simulation as sim
from videogen_async.testing._routes import ServiceRoutes

from .conftest import Run, ThreadedSandbox

WRONG = "vg-wrong-key-0123456789"
REFERENCE = "https://cdn.example.com/ads/ref.mp4"
PRODUCT = "https://cdn.example.com/p/bottle.png"


@pytest.mark.parametrize(
    "argv", [("doctor",), ("credits",), ("status", "t_1"), ("project", "wait", "p_1")]
)
def test_a_refused_key_says_so_where_it_came_from_and_exits_4(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
) -> None:
    monkeypatch.setenv("VIDEOGEN_API_KEY", WRONG)
    run = cli(*argv)
    assert run.code == 4, run
    assert "refused the API key (401)" in run.err
    assert "given by the VIDEOGEN_API_KEY environment variable" in run.err
    assert "export VIDEOGEN_API_KEY=" in run.err
    assert "NOT handled" not in run.err + run.out
    assert WRONG not in run.err + run.out
    flag = cli("--api-key", WRONG, *argv)
    assert flag.code == 4, flag
    assert "given by --api-key" in flag.err


def test_a_refused_key_stops_a_batch_with_code_4(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("VIDEOGEN_API_KEY", WRONG)
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n')
    run = cli("batch", str(path))
    assert run.code == 4, run
    assert "refused the API key (401)" in run.err


def refuse_the_key_to_reads(sandbox: ThreadedSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is revoked between a create and the reads that follow it: every GET is a 401."""
    routes = sandbox.srv._routes
    accept = ServiceRoutes.authorize.__get__(routes)

    def authorize(request: Any) -> None:
        if request.method == "GET":
            raise sim.SandboxError(401, 401, "Invalid API key")
        accept(request)

    monkeypatch.setattr(routes, "authorize", authorize)


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_key_refused_after_create_still_prints_the_paid_task_id(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    json_mode: bool,
) -> None:
    refuse_the_key_to_reads(sandbox, monkeypatch)
    run = cli(*(["--json"] if json_mode else []), "create", "a fox", "--wait")
    assert run.code == 4, run
    assert "refused the API key (401)" in run.err
    [task_id] = sandbox.task_ids()
    assert task_id in run.out
    if json_mode:
        assert run.json()["task_id"] == task_id


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_key_refused_after_project_videos_still_prints_the_batch_task_ids(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    json_mode: bool,
) -> None:
    created = cli(
        "--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT, "--mode", "manual"
    )
    project = created.json()["project_id"]
    assert cli("project", "script", project).code == 0
    before = set(sandbox.task_ids())
    refuse_the_key_to_reads(sandbox, monkeypatch)
    json_flag = ["--json"] if json_mode else []
    run = cli(*json_flag, "project", "videos", project, "--out-number", "2", "--wait", "--yes")
    assert run.code == 4, run
    assert "refused the API key (401)" in run.err
    batch = set(sandbox.task_ids()) - before
    assert len(batch) == 2
    assert all(task_id in run.out for task_id in batch), run
    if json_mode:
        assert set(run.json()["task_ids"]) == batch


def test_a_key_refused_while_a_created_project_is_followed_prints_its_id(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_the_key_to_reads(sandbox, monkeypatch)
    argv = ("--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT, "--wait")
    run = cli(*argv)
    assert run.code == 4, run
    assert "refused the API key (401)" in run.err
    [project_id] = sandbox.call(lambda: sandbox.srv.project_ids)
    assert run.json()["project_id"] == project_id


def _every_command(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _every_command(sub, (*path, name))


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [(["creat", "x"], "videogen create"), (["ledger", "summery", "x"], "videogen ledger summary")],
)
def test_a_mistyped_command_is_told_the_closest_one(
    cli: Callable[..., Run], argv: list[str], suggestion: str
) -> None:
    run = cli(*argv)
    assert run.code == 2
    assert f"did you mean: {suggestion}" in run.err


def test_connection_options_are_accepted_after_the_command(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VIDEOGEN_BASE_URL")
    run = cli("--json", "credits", "--base-url", sandbox.base_url, "--max-retries", "1")
    assert run.code == 0, run
    assert run.json()["api_available_credits"] > 0
    late = cli("credits", "--base-url", sandbox.base_url, "--timeout", "5")
    assert late.code == 2
    assert "--timeout of the requests goes before the command" in late.err


def test_every_command_has_a_description_and_examples() -> None:
    commands = dict(_every_command(build_parser()))
    assert ("ledger", "list") in commands
    for path, parser in commands.items():
        assert parser.description, path
        assert "examples:" in (parser.epilog or ""), path
        assert "\n\nexamples:" in "\n\n" + parser.format_help().split("\n\n", 1)[1], path


def test_mcp_help_keeps_its_sentences_apart(cli: Callable[..., Run]) -> None:
    run = cli("mcp", "--help")
    assert "only. examples" not in run.out
    assert "\n\nexamples:\n" in run.out


def test_ledger_list_takes_every_kind_the_ledger_has(
    cli: Callable[..., Run], tmp_path: Path
) -> None:
    run = cli("ledger", "list", str(tmp_path / "none.db"), "--kind", "videos")
    assert "invalid choice" not in run.err
    assert "no such file" in run.err


def test_the_command_line_runs_without_the_mcp_extra(tmp_path: Path) -> None:
    # The README's main command installs the cli extra only: no mcp, no uvicorn.
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules.update(mcp=None, uvicorn=None)\n")  # absent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    configured = {**env, "VIDEOGEN_API_KEY": "k", "VIDEOGEN_BASE_URL": "http://127.0.0.1:9"}
    run = subprocess.run(
        [sys.executable, "-m", "videogen_async", "mcp"],
        capture_output=True,
        text=True,
        env=configured,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in run.stderr, run.stderr
    assert "pip install 'videogen-async[mcp]'" in run.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "videogen_async", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
