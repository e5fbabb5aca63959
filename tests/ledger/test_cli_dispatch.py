"""``videogen ledger dispatch``: a dispatcher on the command line, its secret in the environment."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from videogen_async import Ledger
from videogen_async._cli import main

from ._hooks import SECRET, Receiver, finished


async def test_the_command_delivers_every_terminal_entry_signed(
    sqlite_url: str,
    receiver: Receiver,
) -> None:
    async with Ledger.open(sqlite_url) as ledger:
        keys = await finished(ledger, 5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
    env["APP_HOOK_SECRET"] = SECRET
    command = [sys.executable, "-m", "videogen_async", "--json", "ledger", "dispatch", sqlite_url]
    command += ["--webhook", receiver.url, "--secret-env", "APP_HOOK_SECRET"]
    command += ["--name", "app-hook", "--backlog", "--stop-when-idle"]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == {
        "destination": "app-hook",
        "pending": 0,
        "delivered": 5,
        "dead": 0,
    }
    assert receiver.keys() == keys
    assert SECRET not in done.stdout.decode() + done.stderr.decode()


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        (["--webhook", "https://app.example/h"], {}, "--secret-env HOOK: no such environment"),
        (["--webhook", "ftp://app.example/h"], {"HOOK": SECRET}, "--webhook: must be an http(s)"),
        (["--webhook", "https://app.example/h"], {"HOOK": "hunter2"}, "--secret-env: must be"),
        (
            ["--webhook", "https://app.example/h"],
            {"HOOK": "whsec_" + base64.b64encode(b"short").decode()},
            "--secret-env: must encode 24 to 64",
        ),
    ],
    ids=["no-secret", "not-http", "not-a-secret", "short-secret"],
)
def test_bad_input_is_refused_before_the_ledger_is_opened(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    monkeypatch.delenv("HOOK", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ledger = tmp_path / "videos.db"
    code = main(["ledger", "dispatch", str(ledger), *argv, "--secret-env", "HOOK"])
    err = capsys.readouterr().err
    assert code == 2
    assert said in err
    assert "hunter2" not in err
    assert not ledger.exists()  # nothing written


def test_the_command_is_listed_in_the_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "videogen_async", "ledger", "dispatch", "--help"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert "--secret-env NAME" in done.stdout
