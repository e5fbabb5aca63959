"""``python -m videogen_async.testing``: a real subprocess, and the reusable functions."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from videogen_async.testing import SandboxServer, build_openapi, main, serve
from videogen_async.testing._cli import DEFAULT_PORT

from .._disk import files_in, run_limited


def start(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
    return subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "videogen_async.testing", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_announcement(process: subprocess.Popen[str]) -> dict[str, str]:
    assert process.stdout is not None
    found: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while "VIDEOGEN_BASE_URL" not in found or not any("API_KEY" in k for k in found):
        assert time.monotonic() < deadline, "the sandbox did not announce itself in time"
        line = process.stdout.readline()
        assert line, f"the sandbox exited early: {process.stderr.read() if process.stderr else ''}"
        if "=" in line:
            key, _, value = line.strip().partition("=")
            found[key] = value
        elif line.startswith("# VIDEOGEN_API_KEY"):
            found["# VIDEOGEN_API_KEY"] = line
    return found


async def test_serves_as_a_subprocess_until_terminated() -> None:
    process = start("--port", "0", "--seed", "1", "--time-scale", "0.01", "--credits", "77")
    try:
        env = await asyncio.to_thread(read_announcement, process)
        base_url = env["VIDEOGEN_BASE_URL"]
        assert base_url.startswith("http://127.0.0.1:")
        assert env["VIDEOGEN_API_KEY"] == "sandbox-key"
        headers = {"Authorization": f"Bearer {env['VIDEOGEN_API_KEY']}"}
        async with (
            aiohttp.ClientSession(headers=headers) as session,
            session.get(f"{base_url}/v1/credits") as response,
        ):
            body = await response.json()
        assert body["data"] == {"api_available_credits": 77, "api_total_credits": 77}
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 30)
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.close()
        stderr = process.stderr.read()
        process.stderr.close()
    assert code == 0, stderr


async def test_a_given_key_is_not_echoed() -> None:
    process = start("--port", "0", "--api-key", "my-secret-key")
    try:
        env = await asyncio.to_thread(read_announcement, process)
        assert "VIDEOGEN_API_KEY" not in env
        assert "my-secret-key" not in json.dumps(env)
    finally:
        process.send_signal(signal.SIGINT)
        assert await asyncio.to_thread(process.wait, 30) == 0
        for stream in (process.stdout, process.stderr):
            assert stream is not None
            stream.close()


def test_write_openapi(tmp_path: Path) -> None:
    target = tmp_path / "openapi.json"
    assert main(["--write-openapi", str(target)]) == 0
    assert json.loads(target.read_text(encoding="utf-8")) == build_openapi()


_WRITE_OPENAPI = """
import sys
from videogen_async.testing import main
sys.exit(main(["--write-openapi", sys.argv[1]]))
"""


@pytest.mark.skipif(os.name != "posix", reason="RLIMIT_FSIZE is POSIX's")
def test_write_openapi_on_a_disk_that_refuses_it_keeps_the_old_file(tmp_path: Path) -> None:
    # The kernel refuses the document past 4 KiB (a file size limit, as a full disk would):
    # one line naming the file and the cause, exit 1, the old document whole, nothing else.
    target = tmp_path / "openapi.json"
    target.write_text('{"old": true}', encoding="utf-8")
    done = run_limited(_WRITE_OPENAPI, str(target), size=4096)
    assert done.returncode == 1
    assert done.stderr.startswith(f"videogen sandbox: writing {target} failed:"), done.stderr
    assert "File too large" in done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(target.read_text(encoding="utf-8")) == {"old": True}
    assert files_in(tmp_path) == ["openapi.json"]


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--failure-rate", "2"])
    assert info.value.code == 2
    assert "from 0 to 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--task-duration", "soon"])


def test_port_in_use_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert main(["--port", str(port)]) == 1
    assert "cannot start" in capsys.readouterr().err


async def test_serve_in_process() -> None:
    stop = asyncio.Event()
    seen: list[SandboxServer] = []

    def ready(server: SandboxServer) -> None:
        seen.append(server)
        stop.set()

    await asyncio.wait_for(
        serve(ready=ready, stop=stop, port=0, task_duration=(1, 2), seed="s"), 10
    )
    assert len(seen) == 1
    assert not seen[0].started
    assert DEFAULT_PORT == 8765


def test_sandbox_process_serves_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.request

    from videogen_async.testing import SandboxProcess

    # The caller's configuration of the real service does not reach the child.
    monkeypatch.setenv("VIDEOGEN_API_KEY", "a-real-key")
    with SandboxProcess("--seed", "3", "--credits", "77", api_key="child-key") as sandbox:
        assert sandbox.api_key == "child-key"
        assert sandbox.base_url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(  # noqa: S310 - an http URL on loopback
            f"{sandbox.base_url}/v1/credits", headers={"Authorization": "Bearer child-key"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - loopback
            body = json.load(answer)
        assert body["data"]["api_available_credits"] == 77
        process = sandbox.process
        assert process is not None
    assert process.poll() is not None  # stopped on exit
    sandbox.close()  # idempotent


def test_sandbox_process_that_cannot_start_says_so() -> None:
    from videogen_async.testing import SandboxProcess

    with pytest.raises(RuntimeError, match="before it announced its URL"):
        SandboxProcess("--time-scale", "not-a-number").start()
