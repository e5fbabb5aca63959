"""What a new user meets first: a refused key, the help, a mistyped command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Run, ThreadedSandbox

WRONG = "vg-wrong-key-0123456789"


@pytest.mark.parametrize("argv", [("doctor",), ("credits",), ("status", "t_1")])
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
