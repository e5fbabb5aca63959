"""The command line as a newcomer meets it: advice, skipped files, lost services, spending."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from videogen_async import BackoffPolicy
from videogen_async._cli._common import Context
from videogen_async._cli._parser import build_parser
from videogen_async._cli._spending import task_estimate
from videogen_async._contract._service import REFERENCE_PRICES
from videogen_async.testing import Pricing, SandboxServer

from .conftest import KEY, Run, ThreadedSandbox, read_manifest, subprocess_env, videogen

REFERENCE = "https://cdn.example.com/ads/ref.mp4"
PRODUCT = "https://cdn.example.com/p/bottle.png"
PROJECT_CREATE = "POST /v1/video/viral-ads-clone"
TASK_CREATE = "POST /v1/video/videomodel-2"
#: Python argument names of the library that a command-line user cannot type.
PYTHON_NAMES = re.compile(r"\b(api_key|base_url|allow_insecure_http|max_retries)\b|=True|=\.\.\.")


# -- every error is advice a command-line user can follow -----------------------------------------


@pytest.mark.parametrize(
    ("env", "argv", "advice"),
    [
        ({}, [], "--api-key"),
        ({"VIDEOGEN_API_KEY": KEY}, [], "--base-url"),
        ({"VIDEOGEN_API_KEY": KEY}, ["--base-url", "http://example.com"], "--allow-insecure-http"),
        ({"VIDEOGEN_API_KEY": KEY}, ["--base-url", "https://u:p@example.com"], "--api-key"),
        ({"VIDEOGEN_API_KEY": KEY}, ["--base-url", "ftp://example.com"], "--base-url"),
        ({"VIDEOGEN_API_KEY": KEY}, ["--base-url", "https://example.com/?a=1"], "--base-url"),
        ({"VIDEOGEN_API_KEY": KEY}, ["--base-url", "https://[zz]/"], "--base-url"),
        ({"VIDEOGEN_API_KEY": " spaced "}, ["--base-url", "https://example.com"], "API key"),
    ],
)
def test_configuration_errors_name_flags_and_variables_not_python_arguments(
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    argv: list[str],
    advice: str,
) -> None:
    for name in ("VIDEOGEN_API_KEY", "VIDEOGEN_BASE_URL", "VIDEOGEN_ALLOW_INSECURE_HTTP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run = cli(*argv, "credits")
    assert run.code == 2, run
    assert run.err.startswith("videogen: error: ConfigurationError: "), run
    assert advice in run.err
    assert not PYTHON_NAMES.search(run.err), run.err


@pytest.mark.parametrize("how", ["flag", "env"])
def test_allow_insecure_http_is_a_flag_and_a_variable(
    cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
    argv = ["--max-retries", "0", "--base-url", "http://host.invalid"]
    if how == "flag":
        argv.insert(0, "--allow-insecure-http")
    else:
        monkeypatch.setenv("VIDEOGEN_ALLOW_INSECURE_HTTP", "1")
    run = cli(*argv, "credits")
    assert run.code == 3, run  # the configuration was accepted; the host does not exist
    assert "APIConnectionError" in run.err


# -- download --no-overwrite ----------------------------------------------------------------------


def test_download_no_overwrite_reports_kept_files_as_skipped(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    task_id = cli("--json", "create", "a fox", "--wait").json()["task_id"]
    first = cli("download", task_id, "--to", str(tmp_path))
    assert first.code == 0, first
    again = cli("download", task_id, "--to", str(tmp_path), "--no-overwrite")
    assert again.code == 0, again
    assert "skipped (file exists)" in again.out
    assert "failed" not in again.out.replace("0 failed", "")
    data = cli("--json", "download", task_id, "--to", str(tmp_path), "--no-overwrite")
    assert data.code == 0
    [item] = data.json()
    assert item["outcome"] == "skipped"
    assert item["error"] is None
    assert item["path"] == str(tmp_path / f"{task_id}.mp4")


def test_a_bad_id_among_downloads_is_one_failed_item_not_a_usage_error(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    task_id = cli("--json", "create", "a fox", "--wait").json()["task_id"]
    run = cli("--json", "download", task_id, "../credits", "--to", str(tmp_path))
    assert run.code == 1, run  # a file was saved: not "nothing was sent" (2)
    saved, bad = run.json()
    assert saved["outcome"] == "saved"
    assert (tmp_path / f"{task_id}.mp4").exists()
    assert bad["outcome"] == "failed"
    assert "InvalidRequestError" in bad["error"]
    alone = cli("download", "../credits", "--to", str(tmp_path))
    assert alone.code == 2, alone  # every source refused: nothing was sent


# -- losing the service ---------------------------------------------------------------------------


@pytest.fixture
def lost_service(
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., tuple[Run, ThreadedSandbox]]:
    """Run a command in a thread, and take the service away after its first poll."""
    box = make_sandbox(time_scale=1.0)  # a real-time 20-40 s task: still running when lost
    monkeypatch.setenv("VIDEOGEN_BASE_URL", box.base_url)
    monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
    # give up after two quick failures in a row (the default rides out about a minute)
    options = Context.client_options
    quick = BackoffPolicy(max_consecutive_failures=2, initial_delay=0.01, max_delay=0.02)
    monkeypatch.setattr(Context, "client_options", lambda self: {**options(self), "backoff": quick})

    def run(*argv: str) -> tuple[Run, ThreadedSandbox]:
        polls = box.routes("GET /v1/tasks")
        result: list[Run] = []
        worker = threading.Thread(target=lambda: result.append(cli(*argv)))
        worker.start()
        try:
            box.wait_for_route("GET /v1/tasks", above=polls)  # the first poll
        finally:
            box.run(box.srv.aclose())  # the service goes away in the middle of the wait
            box.server = None
            worker.join(timeout=60)
        [outcome] = result
        return outcome, box

    return run


def test_losing_the_service_mid_wait_is_unreachable_not_a_task_state(
    lost_service: Callable[..., tuple[Run, ThreadedSandbox]],
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
) -> None:
    task_id = cli("--json", "create", "a slow fox").json()["task_id"]
    run, _ = lost_service("--json", "--max-retries", "0", "wait", task_id)
    assert run.code == 3, run
    [item] = run.json()
    assert item["status"] is None  # not "error": that is a task state
    assert item["problem"] == "unreachable"
    assert "lost the connection to the service" in item["error"]
    assert "gather_until_done" not in run.err + run.out
    assert f"videogen wait {task_id}" in run.err


def test_create_wait_that_loses_the_service_says_the_task_exists(
    lost_service: Callable[..., tuple[Run, ThreadedSandbox]],
) -> None:
    run, _ = lost_service("--max-retries", "0", "create", "a slow fox", "--wait")
    assert run.code == 3, run
    [task_id] = re.findall(r"created (\S+) ", run.err)
    assert f"task {task_id} was created, then lost the connection to the service" in run.err
    assert f"it may still be running: videogen wait {task_id}" in run.err
    assert task_id in run.out  # the created (charged) id is printed on stdout too
    assert "Traceback" not in run.err


# -- the spending guard ---------------------------------------------------------------------------


def test_project_far_beyond_the_usual_is_refused_without_confirmation(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    base = ["project", "create", REFERENCE, "--product-image-url", PRODUCT]
    run = cli(*base, "--duration", "500")
    assert run.code == 2, run
    assert "estimated at about 1010 credits" in run.err
    assert "--yes" in run.err
    assert "--max-credits" in run.err
    over = cli(*base, "--duration", "500", "--max-credits", "300")
    assert over.code == 2
    assert "more than --max-credits 300" in over.err
    unknown = cli(*base, "--resolution", "4k", "--max-credits", "1000")
    assert unknown.code == 2
    assert "cannot be estimated" in unknown.err
    assert sandbox.routes(PROJECT_CREATE) == 0  # nothing was sent
    assert cli(*base, "--duration", "500", "--max-credits", "1100").code == 0
    assert cli(*base, "--resolution", "4k", "--yes").code == 0
    assert cli(*base, "--duration", "30", "--resolution", "1080").code == 0  # usual: 100 credits
    assert sandbox.routes(PROJECT_CREATE) == 3


def test_max_credits_on_create_and_project_videos(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    run = cli("create", "a fox", "--duration", "10", "--max-credits", "15")
    assert run.code == 2
    assert "this task is estimated at about 20 credits" in run.err
    assert sandbox.routes(TASK_CREATE) == 0
    assert cli("create", "a fox", "--duration", "10", "--max-credits", "20").code == 0
    project = cli(
        "--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT,
        "--mode", "manual", "--duration", "40",
    ).json()["project_id"]  # fmt: skip
    assert cli("project", "script", project).code == 0
    # no video yet: the reference rate, for the default 15 s at 1080 (45 credits each)
    refused = cli("project", "videos", project, "--out-number", "2", "--resolution", "1080",
                  "--max-credits", "60")  # fmt: skip
    assert refused.code == 2
    assert "about 90 credits" in refused.err
    assert cli("project", "videos", project, "--wait", "--max-credits", "30").code == 0
    # now the service's real price of this project's videos (40 s: 80 credits) is known
    learned = cli("project", "videos", project, "--max-credits", "60")
    assert learned.code == 2
    assert "about 80 credits" in learned.err


def test_batch_stops_creating_at_max_credits(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    source = tmp_path / "p.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"clip {n}"}) + "\n" for n in range(4)))
    run = cli("batch", str(source), "--max-credits", "25", "--max-concurrency", "1")
    assert run.code == 1, run
    assert "past --max-credits 25" in run.err
    statuses = [r["status"] for r in read_manifest(tmp_path / "p.results.jsonl")]
    assert statuses == ["succeeded", "succeeded", "not_created", "not_created"]
    assert sandbox.routes(TASK_CREATE) == 2


def test_a_big_batch_asks_for_a_confirmation(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    source = tmp_path / "big.jsonl"
    line = json.dumps({"prompt": "a fox", "duration": 15})
    source.write_text((line + "\n") * 70)  # 70 x 30 = 2100 credits
    run = cli("batch", str(source))
    assert run.code == 2
    assert "about 2100 credits" in run.err
    assert sandbox.routes(TASK_CREATE) == 0


# -- new commands ---------------------------------------------------------------------------------


def test_create_wait_download_in_one_step(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    run = cli("--json", "create", "a fox", "--download", str(tmp_path / "videos"))
    assert run.code == 0, run
    data = run.json()
    assert data["status"] == "succeeded"
    assert Path(data["path"]).is_file()
    assert Path(data["path"]).parent == tmp_path / "videos"
    human = cli("create", "a fox", "--wait", "--download", str(tmp_path / "videos"))
    assert human.code == 0
    assert "saved" in human.out
    assert len(list((tmp_path / "videos").glob("*.mp4"))) == 2


def test_create_a_failed_task_with_download_exits_1(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    run = cli("create", "sandbox-fail", "--download", str(tmp_path))
    assert run.code == 1
    assert not list(tmp_path.iterdir())


def test_project_download_and_wait_download(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    project = cli(
        "--json", "project", "create", REFERENCE, "--product-image-url", PRODUCT,
        "--out-number", "2",
    ).json()["project_id"]  # fmt: skip
    waited = cli("project", "wait", project, "--download", str(tmp_path / "a"))
    assert waited.code == 0, waited
    assert len(list((tmp_path / "a").glob("*.mp4"))) == 2
    run = cli("--json", "project", "download", project, str(tmp_path / "b"))
    assert run.code == 0, run
    assert [item["outcome"] for item in run.json()] == ["saved", "saved"]
    kept = cli("project", "download", project, str(tmp_path / "b"), "--no-overwrite")
    assert kept.code == 0
    assert kept.out.count("skipped (file exists)") == 2


def test_prompt_from_stdin(sandbox: ThreadedSandbox, tmp_path: Path) -> None:
    env = subprocess_env(sandbox.env())
    for argv in (["create", "-", "--wait"], ["create", "--wait"]):
        # the sandbox fails a task whose prompt carries its marker: proof the prompt was read
        proc = videogen("--json", *argv, env=env, stdin=subprocess.PIPE)
        out, err = proc.communicate("sandbox-fail, read from stdin\n", timeout=60)
        assert proc.returncode == 1, err
        assert "sandbox failure marker" in json.loads(out)["result"]["error_message"]
    proc = videogen("create", "-", env=env, stdin=subprocess.PIPE)
    _, err = proc.communicate("   \n", timeout=60)
    assert proc.returncode == 2
    assert "empty" in err
    proc = videogen("create", env=env, stdin=subprocess.DEVNULL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "a prompt is needed" in err
    assert sandbox.routes(TASK_CREATE) == 2


# -- shell completion -----------------------------------------------------------------------------


def _with_videogen_on_path() -> dict[str, str]:
    # The scripts run `videogen` at each TAB: the one installed beside this Python.
    bindir = os.path.dirname(sys.executable)
    return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_offers_commands_actions_and_choices(cli: Callable[..., Run]) -> None:
    run = cli("completion", "bash")
    assert run.code == 0
    bash = shutil.which("bash")
    assert bash is not None
    checked = subprocess.run(  # noqa: S603 - the shell under test
        [bash, "-n"], input=run.out, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert commands is not None
    # what bash itself offers after "videogen ", "videogen project " and "--model "
    show = '; _videogen; printf "%s\\n" "${COMPREPLY[@]}"\n'
    script = run.out + (
        f'COMP_WORDS=(videogen ""); COMP_CWORD=1{show}echo ---\n'
        f'COMP_WORDS=(videogen project ""); COMP_CWORD=2{show}echo ---\n'
        f'COMP_WORDS=(videogen create x --model ""); COMP_CWORD=4{show}echo ---\n'
        f"COMP_WORDS=(videogen ba); COMP_CWORD=1{show}"
    )
    done = subprocess.run(  # noqa: S603 - the script generated above
        [bash, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env=_with_videogen_on_path(),
    )
    top, project, models, started = (set(part.split()) for part in done.stdout.split("---"))
    assert set(commands) <= top
    assert "--api-key" in top
    assert {"create", "get", "script", "videos", "wait", "download"} <= project
    assert models == {"videomodel_2_0", "videomodel_2_0_fast"}
    assert started == {"batch"}


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion(cli: Callable[..., Run], shell: str) -> None:
    run = cli("completion", shell)
    assert run.code == 0
    assert "VIDEOGEN_COMPLETE" in run.out
    if shutil.which(shell):
        checked = subprocess.run(  # noqa: S603 - the shell under test
            [shell, "-n"] if shell == "zsh" else [shell, "--no-execute"],
            input=run.out,
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["create", "x", "--audio-url", "https://cdn.example.com/a.mp3"], "--audio-url"),
        (["create", "x", "--image-url", "ftp://x"], "--image-url"),
        (["project", "create", REFERENCE, "--product-image-url", "x"], "--product-image-url"),
        (
            [
                "project",
                "create",
                REFERENCE,
                "--product-image-url",
                PRODUCT,
                "--avatar-image-url",
                "nope",
            ],
            "--avatar-image-url",
        ),
        (
            ["project", "create", REFERENCE, "--product-image-url", PRODUCT, "--out-number", "9"],
            "--out-number",
        ),
        (["project", "videos", "", "--yes"], "PROJECT_ID"),
    ],
)
def test_refused_requests_name_the_option_not_the_python_field(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], argv: list[str], flag: str
) -> None:
    run = cli(*argv)
    assert run.code == 2, run
    assert run.err.startswith("videogen: error: InvalidRequestError: "), run.err
    assert flag in run.err
    assert not re.search(r"\b[a-z]+_[a-z_]+\b", run.err.replace("omni_reference", "")), run.err
    assert sandbox.routes(PROJECT_CREATE) + sandbox.routes(TASK_CREATE) == 0


@pytest.mark.parametrize(("answer", "code"), [("y", 0), ("n", 2)])
def test_a_terminal_is_asked_before_spending_beyond_the_usual(
    sandbox: ThreadedSandbox, answer: str, code: int
) -> None:
    pty = pytest.importorskip("pty")
    main_fd, child_fd = pty.openpty()
    try:
        argv = ["project", "create", REFERENCE, "--product-image-url", PRODUCT, "--duration", "500"]
        proc = subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
            [sys.executable, "-m", "videogen_async", *argv],
            env=subprocess_env(sandbox.env()),
            stdin=child_fd,
            stdout=subprocess.PIPE,
            stderr=child_fd,
        )
        seen = b""
        while b"go ahead? [y/N]" not in seen:
            readable, _, _ = select.select([main_fd], [], [], 60)
            assert readable, seen
            chunk = os.read(main_fd, 4096)
            assert chunk, seen
            seen += chunk
        assert b"about 1010 credits" in seen
        os.write(main_fd, answer.encode() + b"\n")
        proc.communicate(timeout=60)
    finally:
        os.close(child_fd)
        os.close(main_fd)
    assert proc.returncode == code
    assert sandbox.routes(PROJECT_CREATE) == (1 if answer == "y" else 0)


def test_a_charge_above_max_credits_is_reported(
    make_sandbox: Callable[..., ThreadedSandbox],
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dear = make_sandbox(pricing=Pricing(per_second={"videomodel_2_0": 5.0}))
    for name, value in dear.env().items():
        monkeypatch.setenv(name, value)
    run = cli("create", "a fox", "--max-credits", "12")  # estimated 10; charged 25
    assert run.code == 0, run
    assert "the service charged 25 credits" in run.err
    assert "more than --max-credits 12" in run.err


async def test_the_estimate_is_what_the_sandbox_charges() -> None:
    """One price table: the command line's estimates and the sandbox's charges agree."""
    async with SandboxServer(manual_clock=True, seed=1) as server, server.client() as client:
        for model in (None, "videomodel_2_0", "videomodel_2_0_fast"):
            for duration in (None, 4, 15):
                created = await client.tasks.create("a fox", model=model, duration=duration)
                request = {"model": model, "duration": duration}
                assert created.credits_cost == task_estimate(request), request
        project = await client.projects.create(REFERENCE, [PRODUCT], mode="manual", duration=8)
        server.clock.advance(3600)
        for resolution in (None, 720, 1080, "1440p"):
            batch = await client.projects.create_videos(project.project_id, resolution=resolution)
            server.clock.advance(3600)
            task = server.describe_task(batch.task_ids[0])
            # an auto project of one such video: its script and the video
            cost = REFERENCE_PRICES.project_cost({"duration": 8, "resolution": resolution})
            assert cost == REFERENCE_PRICES.script_credits + task["charged"], resolution
