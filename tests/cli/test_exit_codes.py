"""The exit-code table of ``docs/cli.md`` against the real ``videogen`` program.

The table is parsed from the documentation; every row must have representative cases here,
each case names the words of the row that promise it, and each is run as a subprocess. A row
without a case, a case without a row, or a different exit code fails.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import KEY, ThreadedSandbox, subprocess_env, videogen

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_exit_codes() -> dict[int, str]:
    """``{code: meaning}`` from the table under "## Exit codes" in docs/cli.md."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(.+?)\s*\|\s*$", section, flags=re.MULTILINE)
    assert rows, "no exit-code table under '## Exit codes' in docs/cli.md"
    return {int(code): meaning for code, meaning in rows}


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run(argv: list[str], env: dict[str, str], *, stdin: str | None = None) -> int:
    proc = videogen(
        *argv, env=env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL
    )
    _, err = proc.communicate(stdin, timeout=120)
    assert "Traceback" not in err, err
    return proc.returncode


def interrupted_wait(sandbox: ThreadedSandbox, env: dict[str, str]) -> int:
    proc = videogen("--json", "create", "a slow fox", env=env)
    out, _ = proc.communicate(timeout=60)
    task_id = json.loads(out)["task_id"]
    polls = sandbox.routes("GET /v1/tasks")
    proc = videogen("wait", task_id, env=env)
    sandbox.wait_for_route("GET /v1/tasks", above=polls)  # the first poll
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    return proc.returncode


#: code -> (words of the row that promise it, how to get it)
Case = tuple[str, Callable[[ThreadedSandbox, dict[str, str], Path, int], int]]
CASES: dict[int, list[Case]] = {
    0: [
        ("success", lambda s, e, t, p: run(["credits"], e)),
        ("every task succeeded", lambda s, e, t, p: run(["create", "a fox", "--wait"], e)),
    ],
    1: [
        ("some tasks failed", lambda s, e, t, p: run(["create", "sandbox-fail", "--wait"], e)),
    ],
    2: [
        ("bad options", lambda s, e, t, p: run(["create", "a fox", "--duration", "x"], e)),
        ("missing API key", lambda s, e, t, p: run(["credits"], subprocess_env())),
        ("no valid line", lambda s, e, t, p: _batch_without_valid_lines(t, e)),
        ("a ledger that cannot be opened", lambda s, e, t, p: run(["ledger", "list", str(t / "none.db")], e)),  # noqa: E501
        ("port already in use", lambda s, e, t, p: run(["sandbox", "--port", str(p)], e)),
        ("--time-scale", lambda s, e, t, p: run(["sandbox", "--time-scale", "0"], e)),
        ("--max-credits", lambda s, e, t, p: run(["create", "a", "--max-credits", "1"], e)),
    ],
    3: [
        ("not found", lambda s, e, t, p: run(["status", "no-such-task"], e)),
        ("unreachable", lambda s, e, t, p: run(["--max-retries", "0", "credits"],
                                               {**e, "VIDEOGEN_BASE_URL": "http://127.0.0.1:9"})),
    ],
    4: [
        ("refused the API key", lambda s, e, t, p: run(["credits"], {**e, "VIDEOGEN_API_KEY": "vg-wrong-key-000000"})),  # noqa: E501
        ("`videogen doctor`", lambda s, e, t, p: run(["doctor"], {**e, "VIDEOGEN_API_KEY": "vg-wrong-key-000000"})),  # noqa: E501
    ],
    130: [("Ctrl-C", lambda s, e, t, p: interrupted_wait(s, e))],
}  # fmt: skip


def _batch_without_valid_lines(tmp: Path, env: dict[str, str]) -> int:
    source = tmp / "bad.jsonl"
    source.write_text('{"prompt": "a fox", "duration": 30}\nnot json\n')
    return run(["batch", str(source)], env)


def test_every_documented_exit_code_has_cases_and_every_case_is_documented() -> None:
    table = documented_exit_codes()
    assert sorted(table) == sorted(CASES)
    for code, cases in CASES.items():
        for words, _ in cases:
            assert words.lower() in table[code].lower(), (code, words, table[code])


@pytest.mark.parametrize(
    ("code", "index"),
    [(code, index) for code, cases in CASES.items() for index in range(len(cases))],
)
def test_the_real_program_exits_as_the_table_says(
    make_sandbox: Callable[..., Any], tmp_path: Path, busy_port: int, code: int, index: int
) -> None:
    words, case = CASES[code][index]
    # at 1.0 a task runs 20-40 s: still running when Ctrl-C comes
    sandbox = make_sandbox(time_scale=1.0 if code == 130 else 0.005)
    env = subprocess_env({"VIDEOGEN_BASE_URL": sandbox.base_url, "VIDEOGEN_API_KEY": KEY})
    assert case(sandbox, env, tmp_path, busy_port) == code, words
