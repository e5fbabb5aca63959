"""Every ``videogen`` command through ``main([...])`` against a sandbox, plus real subprocesses."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from videogen_async._cli import _ui
from videogen_async._cli._ui import UI
from videogen_async.testing import sample_mp4

from .conftest import KEY, Run, ThreadedSandbox, subprocess_env, videogen

COMMANDS = ("credits", "create", "status", "wait", "download", "batch", "project", "sandbox",
            "demo", "completion")  # fmt: skip
REFERENCE = "https://cdn.example.com/ads/ref.mp4"
PRODUCT = "https://cdn.example.com/p/bottle.png"


# -- help and usage ------------------------------------------------------------------------------


def test_help_names_every_command_and_the_exit_codes(cli: Callable[..., Run]) -> None:
    run = cli("--help")
    assert run.code == 0
    for name in COMMANDS:
        assert f"\n    {name}" in run.out, name
    for code in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert f"\n  {code}" in run.out
    assert "VIDEOGEN_API_KEY" in run.out
    assert "examples:" in run.out


@pytest.mark.parametrize(
    "argv",
    [
        *([c] for c in COMMANDS),
        *(["project", a] for a in ("create", "get", "script", "videos", "wait", "download")),
    ],
)
def test_every_command_has_help_with_examples(cli: Callable[..., Run], argv: list[str]) -> None:
    run = cli(*argv, "--help")
    assert run.code == 0
    assert "usage: videogen" in run.out
    assert "examples:" in run.out


@pytest.mark.parametrize(
    "argv",
    [[], ["frobnicate"], ["create", "x", "--duration", "abc"], ["wait"],
     ["download", "t1"], ["project"], ["--max-retries", "-1", "credits"]],
)  # fmt: skip
def test_usage_errors_exit_2(cli: Callable[..., Run], argv: list[str]) -> None:
    run = cli(*argv)
    assert run.code == 2
    assert "usage:" in run.err


def test_missing_configuration_is_a_usage_error(
    cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VIDEOGEN_API_KEY", raising=False)
    monkeypatch.delenv("VIDEOGEN_BASE_URL", raising=False)
    run = cli("credits")
    assert run.code == 2
    assert len(run.err.strip().splitlines()) == 1
    assert run.err.startswith("videogen: error: ConfigurationError: no API key")
    assert "Traceback" not in run.err


# -- credits, create, status, wait, download ------------------------------------------------------


def test_credits_table_and_json(sandbox: ThreadedSandbox, cli: Callable[..., Run]) -> None:
    run = cli("credits")
    assert run.code == 0, run
    assert "available" in run.out
    assert "10000" in run.out
    data = cli("credits", "--json").json()
    assert data == {"api_available_credits": 10000, "api_total_credits": 10000}
    assert cli("--json", "credits").json() == data  # --json before the command works too


def test_flags_win_over_environment(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIDEOGEN_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("VIDEOGEN_API_KEY", "wrong-key")
    run = cli("--base-url", sandbox.base_url, "--api-key", KEY, "--timeout", "5",
              "--max-retries", "0", "--json", "credits")  # fmt: skip
    assert run.code == 0, run
    assert run.json()["api_available_credits"] == 10000


def test_create_wait_status_download_flow(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    created = cli("--json", "create", "a paper boat", "--model", "videomodel_2_0_fast",
                  "--ratio", "9:16", "--duration", "6",
                  "--image-url", "https://x.test/a.png")  # fmt: skip
    assert created.code == 0, created
    task_id = created.json()["task_id"]
    assert created.json()["credits_cost"] == 6  # 6 s at the fast model's rate

    waited = cli("wait", task_id, "--timeout", "30")
    assert waited.code == 0, waited
    assert "succeeded" in waited.out
    assert "waiting: 1/1" in waited.err  # plain progress lines when not a terminal

    status = cli("--json", "status", task_id)
    assert status.code == 0
    [task] = status.json()
    assert task["status"] == "succeeded"
    assert task["model"] == "videomodel_2_0_fast"

    out = tmp_path / "videos"
    downloaded = cli("download", task_id, "--to", str(out))
    assert downloaded.code == 0, downloaded
    assert (out / f"{task_id}.mp4").read_bytes() == sample_mp4()
    assert sorted(p.name for p in out.iterdir()) == [f"{task_id}.mp4"]


def test_create_with_wait_prints_the_result(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    run = cli("--json", "create", "a fox", "--wait", "--timeout", "30")
    assert run.code == 0, run
    assert run.json()["status"] == "succeeded"
    assert run.json()["result"]["video_url"].endswith(".mp4")


def test_failed_task_exits_1(sandbox: ThreadedSandbox, cli: Callable[..., Run]) -> None:
    run = cli("create", "sandbox-fail please", "--wait", "--timeout", "30")
    assert run.code == 1, run
    assert "failed" in run.out


def test_invalid_create_costs_nothing_and_exits_2(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    run = cli("create", "a fox", "--duration", "99")
    assert run.code == 2
    assert run.err.startswith("videogen: error: InvalidRequestError: duration")
    assert sandbox.routes("POST /v1/video/videomodel-2") == 0


def test_wait_timeout_exits_1_and_reports_pending(
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = make_sandbox(time_scale=1.0)  # a real-time 20-40 s task
    monkeypatch.setenv("VIDEOGEN_BASE_URL", slow.base_url)
    monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
    task_id = cli("--json", "create", "slow").json()["task_id"]
    run = cli("--json", "wait", task_id, "--timeout", "0.3")
    assert run.code == 1, run
    assert run.json() == [
        {
            "task_id": task_id,
            "status": None,
            "problem": "timed out",
            "error": "still running when the wait's --timeout ended",
        }
    ]


def test_unknown_task_is_an_api_error_exit_3(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    run = cli("status", "no-such-task")
    assert run.code == 3
    assert "(not found)" in run.out
    assert "the service has no task with this id" in run.out
    data = cli("--json", "wait", "no-such-task")
    assert data.code == 3
    [item] = data.json()
    assert item["status"] is None
    assert item["problem"] == "not found"
    assert "gather" not in data.err + data.out


def test_api_error_is_one_line_with_trace_id_traceback_only_with_debug(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    run = cli("project", "get", "no-such-project")
    assert run.code == 3
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith("videogen: error: NotFoundError: ")
    assert "trace_id=" in lines[0]
    debug = cli("project", "get", "no-such-project", "--debug")
    assert debug.code == 3
    assert "Traceback (most recent call last)" in debug.err
    assert KEY not in debug.err + debug.out


def test_connection_error_exits_3(cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
    monkeypatch.setenv("VIDEOGEN_BASE_URL", "http://127.0.0.1:9")  # discard port: refused
    run = cli("--max-retries", "0", "credits")
    assert run.code == 3
    assert "APIConnectionError" in run.err


def test_download_of_a_failed_task_exits_1(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    task_id = cli("--json", "create", "sandbox-fail", "--wait").json()["task_id"]
    run = cli("--json", "download", task_id, "--to", str(tmp_path))
    assert run.code == 1, run
    [result] = run.json()
    assert "DownloadError" in result["error"]
    assert list(tmp_path.iterdir()) == []


def test_the_api_key_is_never_printed(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    outputs = [
        cli("--debug", "credits"),
        cli("--debug", "create", "a fox", "--wait"),
        cli("--api-key", KEY, "--debug", "status", "nope"),
        cli("--api-key", KEY, "--debug", "project", "get", "nope"),
    ]
    for run in outputs:
        assert KEY not in run.out
        assert KEY not in run.err


# -- projects -------------------------------------------------------------------------------------


def test_manual_project_script_and_two_batches(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    created = cli("--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT,
                  "--mode", "manual", "--out-number", "2", "--speech-language", "english",
                  "--resolution", "720", "--aspect-ratio", "1:1")  # fmt: skip
    assert created.code == 0, created
    project_id = created.json()["project_id"]
    assert created.json()["credits_cost"] == 10

    script = cli("project", "script", project_id, "--timeout", "30")
    assert script.code == 0, script
    assert "0-3s" in script.out or "s:" in script.out

    first = cli("--json", "project", "videos", project_id, "--wait", "--timeout", "30")
    assert first.code == 0, first
    assert len(first.json()["task_ids"]) == 2
    assert all(t["status"] == "succeeded" for t in first.json()["tasks"])

    second = cli("--json", "project", "videos", project_id, "--script", "0-5s: the bottle.",
                 "--out-number", "1")  # fmt: skip
    assert second.code == 0, second
    assert len(second.json()["task_ids"]) == 1

    waited = cli("--json", "project", "wait", project_id, "--timeout", "30")
    assert waited.code == 0, waited
    project = waited.json()
    assert len(project["task_ids"]) == 3
    assert project["billing"]["script_credits_cost"] == 10

    shown = cli("project", "get", project_id, "--script")
    assert shown.code == 0
    assert project_id in shown.out
    assert "Video tasks" in shown.out
    assert "== Script ==" in shown.out


def test_auto_project_create_wait(sandbox: ThreadedSandbox, cli: Callable[..., Run]) -> None:
    run = cli("--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT,
              "--wait", "--timeout", "30")  # fmt: skip
    assert run.code == 0, run
    assert run.json()["status"] == "succeeded"
    assert len(run.json()["task_ids"]) == 1


def test_project_videos_from_a_script_file(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    project_id = cli("--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT,
                     "--mode", "manual").json()["project_id"]  # fmt: skip
    assert cli("project", "script", project_id).code == 0
    script = tmp_path / "script.txt"
    script.write_text("0-15s: one long shot of the bottle.", encoding="utf-8")
    run = cli("--json", "project", "videos", project_id, "--script-file", str(script))
    assert run.code == 0, run
    missing = cli("project", "videos", project_id, "--script-file", str(tmp_path / "nope.txt"))
    assert missing.code == 2


def test_media_that_cannot_be_stored_is_an_api_error(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    run = cli("project", "create", "https://cdn.invalid/a.mp4", "--product-image-url", PRODUCT)
    assert run.code == 3
    assert "MediaStorageError" in run.err


# -- output ---------------------------------------------------------------------------------------


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_rich_tables_on_a_terminal_plain_text_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    fancy_out = _TTY()
    UI(stdout=fancy_out, stderr=_TTY()).table(("a", "b"), [["1", None]])
    assert "┃" in fancy_out.getvalue() or "│" in fancy_out.getvalue()

    plain_out = io.StringIO()
    UI(stdout=plain_out, stderr=io.StringIO()).table(("a", "b"), [["1", None]])
    assert plain_out.getvalue() == "a  b\n-  -\n1  -\n"

    monkeypatch.setattr(_ui, "rich_available", lambda: False)  # as if rich were not installed
    no_rich = _TTY()
    ui = UI(stdout=no_rich, stderr=_TTY())
    assert not ui.rich
    ui.table(("a", "b"), [["1", "2"]])
    with ui.progress("working", 2) as bar:
        bar.advance()
        bar.advance()
    assert no_rich.getvalue() == "a  b\n-  -\n1  2\n"


def test_live_progress_bar_on_a_terminal() -> None:
    err = _TTY()
    ui = UI(stdout=_TTY(), stderr=err)
    with ui.progress("waiting", 3) as bar:
        for _ in range(3):
            bar.advance(detail="ok")
    assert "3/3" in err.getvalue()
    assert "\x1b[" in err.getvalue()  # drawn with terminal control codes


# -- demo and sandbox -----------------------------------------------------------------------------


def test_demo_in_process(cli: Callable[..., Run], tmp_path: Path) -> None:
    run = cli("demo", "--to", str(tmp_path), "--time-scale", "0.005")
    assert run.code == 0, run
    for heading in ("1. Your balance", "2. A batch of 8 direct tasks", "3. A viral ad clone",
                    "4. Downloading 10 videos", "5. Final balance"):  # fmt: skip
        assert heading in run.out
    files = sorted(tmp_path.iterdir())
    assert len(files) == 10
    assert all(f.read_bytes() == sample_mp4() for f in files)


def test_demo_json(cli: Callable[..., Run], tmp_path: Path) -> None:
    run = cli("--json", "demo", "--to", str(tmp_path), "--tasks", "3", "--time-scale", "0.005")
    assert run.code == 0, run
    data = run.json()
    assert data["project"]["billing"]["script_credits_cost"] == 10
    assert [t["status"] for t in data["tasks"]] == ["succeeded", "succeeded", "failed"]
    spent = (
        data["balance_before"]["api_available_credits"]
        - data["balance_after"]["api_available_credits"]
    )
    assert (
        spent
        == sum(t["credits_cost"] for t in data["tasks"])
        + data["project"]["billing"]["total_credits_cost"]
    )


def test_sandbox_command_serves_and_videogen_credits_reaches_it() -> None:
    server = videogen("sandbox", "--port", "0", "--credits", "1234", env=subprocess_env())
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert first.startswith("videogen sandbox serving at http://127.0.0.1:"), first
        env_lines = dict(server.stdout.readline().strip().split("=", 1) for _ in range(2))
        credits = subprocess.run(  # noqa: S603 - our own console script
            [*_videogen_script(), "--json", "credits"],
            env=subprocess_env(env_lines),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )  # fmt: skip
        assert credits.returncode == 0, credits.stderr
        assert '"api_available_credits": 1234' in credits.stdout
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=15)
    assert server.returncode == 0, err


def _videogen_script() -> list[str]:
    """The installed ``videogen`` console script (``python -m videogen_async`` without it)."""
    script = Path(sys.executable).with_name("videogen")
    return [str(script)] if script.exists() else [sys.executable, "-m", "videogen_async"]


def test_sandbox_command_in_process_stops_on_ctrl_c(
    cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from videogen_async._cli import _sandbox as sandbox_cli

    real_serve = sandbox_cli.serve

    async def serve(*, ready: Callable[[object], None], **options: object) -> None:
        def announce(server: object) -> None:
            ready(server)
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C once it serves

        await real_serve(ready=announce, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(sandbox_cli, "serve", serve)
    run = cli("sandbox", "--port", "0", "--seed", "1", "--log-level", "info")
    assert run.code == 0, run  # Ctrl-C is the normal way to stop a server
    assert "videogen sandbox serving at http://127.0.0.1:" in run.out
    assert "VIDEOGEN_API_KEY=sandbox-key" in run.out
    hidden = cli("sandbox", "--port", "0", "--api-key", "my-own-key")
    assert hidden.code == 0
    assert "my-own-key" not in hidden.out + hidden.err


def test_project_commands_in_human_form(sandbox: ThreadedSandbox, cli: Callable[..., Run]) -> None:
    assert sandbox.server is not None
    clock = sandbox.server.clock
    sandbox.call(clock.pause)  # the script is not ready until the clock moves again
    created = cli("project", "create", REFERENCE, "--product-image-url", PRODUCT,
                  "--mode", "manual", "--prompt", "cold for 24 hours")  # fmt: skip
    assert created.code == 0, created
    assert "Created project" in created.out
    project_id = created.out.split("\n")[3].split()[0]
    assert f"videogen project script {project_id}" in created.err
    not_yet = cli("project", "script", project_id, "--no-wait")
    assert not_yet.code == 1
    assert "is not ready" in not_yet.err
    sandbox.call(clock.resume)
    assert cli("project", "script", project_id).code == 0
    batch = cli("project", "videos", project_id, "--out-number", "2")
    assert batch.code == 0, batch
    assert "Created video tasks" in batch.out
    assert "videogen wait " in batch.err
    waited = cli("project", "videos", project_id, "--wait", "--aspect-ratio", "16:9")
    assert waited.code == 0, waited
    assert "succeeded" in waited.out
    done = cli("project", "wait", project_id)
    assert done.code == 0, done
    assert "script_ready" in done.out


def test_create_in_human_form_and_wait_with_a_failure(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    images = ["--image-url", "https://x.test/1.png", "--image-url", "https://x.test/2.png"]
    ok = cli("create", "a fox", "--function-mode", "first_last_frames", *images)
    assert ok.code == 0, ok
    assert "Created" in ok.out
    good_id = ok.out.split("\n")[3].split()[0]
    bad_id = cli("--json", "create", "sandbox-fail").json()["task_id"]
    run = cli("wait", good_id, bad_id, "--timeout", "30")
    assert run.code == 1, run
    assert "succeeded" in run.out
    assert "failed" in run.out
