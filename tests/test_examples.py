"""The examples in ``examples/``, run against the sandbox with small sizes.

Each example is imported from its file (as a user would run it) and driven through its own
entry points. The sandbox runs on a paused clock where a test needs to know a task's state,
or very fast where it only needs the tasks to finish.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from videogen_async import Ledger
from videogen_async.testing import FaultRule, SandboxServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FAST = 0.001  # sandbox time scale: a 20-40 s generation takes 20-40 ms


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` from its file."""
    spec = importlib.util.spec_from_file_location(
        f"videogen_example_{name}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def parse_args(example: ModuleType, argv: list[str]) -> Any:
    """An example's ``parse_args`` (argparse reads locale files: not in the event loop)."""
    return await anyio.to_thread.run_sync(example.parse_args, argv)


web_app = load("web_app")
batch_job = load("batch_job")
bot = load("bot")


@pytest.fixture
def no_service_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No service configured: the examples start their own sandbox."""
    monkeypatch.delenv("VIDEOGEN_BASE_URL", raising=False)
    monkeypatch.delenv("VIDEOGEN_API_KEY", raising=False)


@pytest.fixture
async def service_env(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SandboxServer]:
    """A sandbox named by the environment, as the real service would be."""
    async with SandboxServer(time_scale=FAST, seed=5) as server:
        monkeypatch.setenv("VIDEOGEN_BASE_URL", server.base_url)
        monkeypatch.setenv("VIDEOGEN_API_KEY", server.api_key)
        yield server


# --------------------------------------------------------------------------------------------
# web_app.py
# --------------------------------------------------------------------------------------------


def app_client(**sandbox: Any) -> TestClient[web.Request, web.Application]:
    options = {"manual_clock": True, "seed": 1, **sandbox}
    return TestClient(TestServer(web_app.make_app(sandbox=options)))


async def test_web_app_creates_and_serves_status_with_one_client() -> None:
    async with app_client() as http:
        app = http.app
        assert app is not None
        client = app[web_app.CLIENT]
        sandbox = app[web_app.SANDBOX]

        created = await http.post("/videos", json={"prompt": "a paper boat", "duration": 6})
        assert created.status == 201
        body = await created.json()
        task_id, video_id = body["task_id"], body["video_id"]
        assert body["status"] == "running"
        assert created.headers["Location"] == body["url"] == f"/videos/{video_id}"

        second = await http.post("/videos", json={"prompt": "a red fox"})
        assert second.status == 201

        status = await http.get(f"/videos/{video_id}")
        assert status.status == 200
        assert (await status.json())["done"] is False

        sandbox.clock.advance(60)
        finished = await (await http.get(f"/videos/{video_id}")).json()
        assert finished["status"] == "succeeded"
        assert finished["video_url"].endswith(".mp4")
        assert finished["done"] is True

        # Every request went through the one client the app created at startup.
        assert app[web_app.CLIENT] is client
        assert not client.is_closed
        assert sandbox.describe_task(task_id)["schedule"]["outcome"] == "succeeded"
        assert len(sandbox.task_ids) == 2
    assert client.is_closed  # closed by the app's cleanup


async def test_web_app_wait_returns_when_done_or_at_the_deadline() -> None:
    async with app_client() as http:
        assert http.app is not None
        sandbox = http.app[web_app.SANDBOX]
        created = await (await http.post("/videos", json={"prompt": "a kite"})).json()
        task_id = created["video_id"]

        # Still running at the deadline: the last state seen is answered.
        pending = await http.get(f"/videos/{task_id}", params={"wait": "0.05"})
        assert pending.status == 200
        assert (await pending.json())["status"] == "running"

        sandbox.clock.advance(60)
        done = await http.get(f"/videos/{task_id}", params={"wait": "5"})
        assert (await done.json())["status"] == "succeeded"

        bad = await http.get(f"/videos/{task_id}", params={"wait": "soon"})
        assert bad.status == 400


async def test_web_app_answers_one_id_by_one_name_and_credits_as_one_type() -> None:
    # The curl step asks for <video_id>: the POST answers it, and the GET of it serves.
    steps = [line for line in (EXAMPLES / "web_app.py").read_text().splitlines() if "curl" in line]
    assert "/videos/<video_id>?wait=30" in steps[-1]
    docs = (EXAMPLES.parent / "docs" / "web-apps.md").read_text()
    assert "curl -s 'localhost:8080/videos/<video_id>?wait=30'" in docs
    async with app_client() as http:
        assert http.app is not None
        created = await (await http.post("/videos", json={"prompt": "a kite"})).json()
        assert "id" not in created
        http.app[web_app.SANDBOX].clock.advance(60)
        served = await http.get(f"/videos/{created['video_id']}", params={"wait": "5"})
        assert served.status == 200
        answer = await served.json()
        assert answer["video_id"] == created["video_id"]
        assert answer["task_id"] == created["task_id"]
        assert answer["credits_cost"] == created["credits_cost"] > 0
        assert type(answer["credits_cost"]) is type(created["credits_cost"]) is float


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"prompt": "a cat", "duration": 30}, 400, "duration"),
        ({"prompt": "a cat", "ratio": "2:1"}, 400, "ratio"),
        ({"prompt": "a cat", "colour": "red"}, 400, "unknown fields: colour"),
        ({"duration": 5}, 400, "prompt"),
        (["a cat"], 400, "prompt"),
    ],
)
async def test_web_app_refuses_bad_requests(body: Any, status: int, needle: str) -> None:
    async with app_client() as http:
        response = await http.post("/videos", json=body)
        assert response.status == status
        assert needle in (await response.json())["error"]
        assert http.app is not None
        assert http.app[web_app.SANDBOX].task_ids == ()


async def test_web_app_maps_service_errors() -> None:
    async with app_client(credits=0) as http:
        not_json = await http.post("/videos", data=b"{oops")
        assert not_json.status == 400
        broke = await http.post("/videos", json={"prompt": "a cat"})
        assert broke.status == 402
        missing = await http.get("/videos/no-such-task")
        assert missing.status == 404
        assert await missing.json() == {"error": "no such video"}


async def test_web_app_reports_a_create_that_may_have_taken_effect() -> None:
    async with app_client() as http:
        assert http.app is not None
        sandbox = http.app[web_app.SANDBOX]
        sandbox.faults.add(FaultRule("POST /v1/video/videomodel-2", drop_after_rate=1.0, times=1))
        response = await http.post("/videos", json={"prompt": "a cat"})
        assert response.status == 502
        assert (await response.json())["may_have_been_created"] is True
        assert len(sandbox.task_ids) == 1  # it was created, and the app said it might be


def test_web_app_main_uses_a_local_sandbox_without_configuration(
    no_service_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: dict[str, Any] = {}

    def fake_run_app(app: web.Application, **kwargs: Any) -> None:
        served.update(app=app, **kwargs)

    monkeypatch.setattr(web, "run_app", fake_run_app)
    web_app.main(["--port", "0", "--time-scale", "0.5"])
    assert served["port"] == 0

    async def check() -> None:
        async with TestClient(TestServer(served["app"])) as http:
            assert http.app is not None
            sandbox = http.app[web_app.SANDBOX]
            assert sandbox.clock.time_scale == 0.5
            assert (await http.post("/videos", json={"prompt": "a cat"})).status == 201

    asyncio.run(check())


async def test_web_app_restarted_serves_the_result_of_a_task_created_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "web.db"
    async with SandboxServer(time_scale=1.0, manual_clock=True, seed=6) as server:
        monkeypatch.setenv("VIDEOGEN_BASE_URL", server.base_url)
        monkeypatch.setenv("VIDEOGEN_API_KEY", server.api_key)
        async with TestClient(TestServer(web_app.make_app(ledger=where))) as http:
            body = {"prompt": "a paper boat", "request_id": "r-1"}
            created = await (await http.post("/videos", json=body)).json()
            again = await (await http.post("/videos", json=body)).json()  # a client's retry
            assert again["task_id"] == created["task_id"]
        # stopped before the task finished; it finishes while no worker runs
        server.clock.advance(600)
        async with TestClient(TestServer(web_app.make_app(ledger=where))) as http:
            served = await http.get("/videos/r-1", params={"wait": "30"})
            answer = await served.json()
        assert answer["status"] == "succeeded"
        assert answer["recorded"] is True  # the restarted worker's watcher recorded it
        assert answer["task_id"] == created["task_id"]
        assert server.task_ids == (created["task_id"],)  # created once
    async with Ledger.open(where) as ledger:
        entry = await ledger.get("web/r-1")
    assert entry is not None
    assert entry.state == "succeeded"


@asynccontextmanager
async def _web_worker(env: dict[str, str], *options: str) -> AsyncIterator[str]:
    """``examples/web_app.py`` as a process of its own; its base URL once it serves."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, str(EXAMPLES / "web_app.py"), "--port", str(port), *options]
    process = await anyio.open_process(command, env=env, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        said = b""
        with anyio.fail_after(30):
            while b"Running on" not in said:
                said += await process.stdout.receive()
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)  # a clean stop: its ledger and client closed
        with anyio.fail_after(30):
            await process.aclose()


@pytest.mark.skipif(sys.platform == "win32", reason="the workers are stopped with SIGINT")
async def test_web_app_workers_hear_of_a_result_recorded_by_another(tmp_path: Path) -> None:
    # Two workers on one ledger file: the second only serves (it runs no watcher), so its
    # ?wait can only end early by hearing, through the ledger, of what the first recorded.
    async with SandboxServer(time_scale=0.2, task_duration=10.0, seed=7) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
        env |= {"VIDEOGEN_BASE_URL": server.base_url, "VIDEOGEN_API_KEY": server.api_key}
        env |= {"VIDEOGEN_LEDGER": str(tmp_path / "web.db"), "PYTHONUNBUFFERED": "1"}
        async with (
            _web_worker(env) as first,
            _web_worker(env, "--no-watch") as second,
            aiohttp.ClientSession() as http,
        ):
            body = {"prompt": "a paper boat", "request_id": "r-1"}
            async with http.post(f"{first}/videos", json=body) as created:
                assert created.status == 201
                task_id = (await created.json())["task_id"]
            async with http.get(f"{second}/videos/r-1", params={"wait": "20"}) as served:
                answer = await served.json()
        assert server.task_ids == (task_id,)
    assert answer["status"] == "succeeded"
    assert answer["recorded"] is True  # from the ledger: its wait did not run out
    assert answer["task_id"] == task_id


async def test_web_app_uses_the_service_from_the_environment(
    service_env: SandboxServer, tmp_path: Path
) -> None:
    async with TestClient(TestServer(web_app.make_app(ledger=tmp_path / "w.db"))) as http:
        assert http.app is not None
        assert web_app.SANDBOX not in http.app
        response = await http.post("/videos", json={"prompt": "a cat"})
        assert response.status == 201
        assert service_env.task_ids == ((await response.json())["task_id"],)


# --------------------------------------------------------------------------------------------
# batch_job.py
# --------------------------------------------------------------------------------------------


async def test_batch_job_runs_the_sample_csv_and_writes_a_report(
    no_service_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.json"
    argv = [str(EXAMPLES / "prompts.csv"), "--report", str(report_path), "--time-scale", str(FAST)]
    status = await batch_job.main(await parse_args(batch_job, argv))
    assert status == 0  # a newcomer's first run of the sample succeeds
    report = json.loads(report_path.read_text())
    assert report["counts"] == {"succeeded": 6}
    for row in report["rows"]:
        assert row["video_url"].endswith(".mp4")
    out = capsys.readouterr()
    assert "6 prompts: 6 succeeded" in out.out
    assert "6/6 done" in out.err


async def test_batch_job_reports_the_bad_rows_of_the_sample_with_errors(
    no_service_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.json"
    argv = [
        str(EXAMPLES / "prompts_with_errors.csv"),
        *("--report", str(report_path), "--time-scale", str(FAST)),
    ]
    status = await batch_job.main(await parse_args(batch_job, argv))
    assert status == 1  # two rows are invalid on purpose
    report = json.loads(report_path.read_text())
    assert report["counts"] == {"succeeded": 2, "rejected": 2}
    rejected = {row["line"]: row for row in report["rows"] if row["status"] == "rejected"}
    assert sorted(rejected) == [3, 5]
    assert "duration" in rejected[3]["error"]
    assert "ratio" in rejected[5]["error"]
    assert all("task_id" not in row for row in rejected.values())
    assert "4 prompts: 2 rejected, 2 succeeded" in capsys.readouterr().out


def test_batch_job_script_exits_0_on_its_sample(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
    done = subprocess.run(  # noqa: S603 - our own example, fixed arguments
        [sys.executable, str(EXAMPLES / "batch_job.py"), str(EXAMPLES / "prompts.csv"),
         "--report", str(tmp_path / "r.json"), "--time-scale", "0.002"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "6 succeeded" in done.stdout


async def test_batch_job_reads_jsonl_and_uses_the_configured_service(
    service_env: SandboxServer, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    lines = [{"prompt": f"clip {n}", "duration": 4 + n} for n in range(4)]
    prompts.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    report_path = tmp_path / "out.json"
    status = await batch_job.main(
        await parse_args(batch_job, [str(prompts), "--report", str(report_path)])
    )
    assert status == 0
    report = json.loads(report_path.read_text())
    assert report["counts"] == {"succeeded": 4}
    assert {row["task_id"] for row in report["rows"]} == set(service_env.task_ids)


async def test_batch_job_bounds_concurrency_and_stops_creating_without_credits() -> None:
    rows = [{"line": n, "prompt": f"clip {n}", "duration": 5} for n in range(10)]
    # 5 s of videomodel_2_0 costs 10 credits in the sandbox: 35 credits pay for 3 tasks.
    slow_creates = FaultRule("POST /v1/video/videomodel-2", latency=0.02)
    sandbox = SandboxServer(time_scale=FAST, credits=35, faults=slow_creates)
    async with sandbox as server, server.client() as client:
        report = await batch_job.run_batch(client, rows, concurrency=2)
        assert server.stats().peak_in_flight_by_route["POST /v1/video/videomodel-2"] <= 2
    assert report["counts"] == {"succeeded": 3, "skipped": 7}


async def test_batch_job_reports_tasks_unfinished_at_the_deadline() -> None:
    rows = [{"line": 1, "prompt": "a slow one"}, {"line": 2, "prompt": "another"}]
    async with SandboxServer(manual_clock=True) as server, server.client() as client:
        report = await batch_job.run_batch(client, rows, deadline=0.05)
    assert report["counts"] == {"unknown": 2}
    for row in report["rows"]:
        assert row["task_id"]
        assert "WaitTimeoutError" in row["error"]
        assert "0.05 s" in row["error"]


def test_batch_job_refuses_a_row_without_prompt(tmp_path: Path) -> None:
    prompts = tmp_path / "p.csv"
    prompts.write_text("prompt,duration\na cat,5\n,6\n")
    with pytest.raises(ValueError, match=r"p\.csv:3: a row needs a non-empty prompt"):
        batch_job.read_rows(prompts)


# --------------------------------------------------------------------------------------------
# bot.py
# --------------------------------------------------------------------------------------------


async def test_bot_serves_many_users_at_once(
    no_service_env: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VIDEOGEN_LEDGER", raising=False)
    args = await parse_args(bot, ["--users", "6", "--videos", "2", "--time-scale", str(FAST)])
    status = await bot.main(args)
    assert status == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "12 of 12 videos ready"
    for n in range(1, 7):
        assert sum(line.startswith(f"user{n:03d}: your video is ready") for line in out) == 2


async def test_bot_routes_each_outcome_to_its_own_user(tmp_path: Path) -> None:
    async with (
        SandboxServer(time_scale=FAST, seed=2) as server,
        server.client() as client,
        Ledger.open(tmp_path / "bot.db") as ledger,
    ):
        video_bot = bot.VideoBot(client, ledger)
        async with _running(video_bot):
            replies = {
                "alice": await bot.simulated_user(video_bot, "alice", ["a sandbox-fail clip"]),
                "bob": await bot.simulated_user(video_bot, "bob", ["a kite", "a boat"]),
            }
            video_bot.inbox.put_nowait(bot.Message("carol", "hello"))
            help_reply = await video_bot.outbox("carol").get()
        ids = set(server.task_ids)
    assert next(r.text for r in replies["alice"]).startswith("on it")
    assert replies["alice"][-1].text.startswith("your video failed")
    bob_finals = [r for r in replies["bob"] if r.final]
    assert len(bob_finals) == 2
    assert all(r.video_url and r.task_id in r.video_url for r in bob_finals)
    final_ids = {r.task_id for r in bob_finals} | {replies["alice"][-1].task_id}
    assert final_ids == ids
    assert help_reply.final
    assert "/video" in help_reply.text


async def test_bot_apologises_when_a_create_fails(tmp_path: Path) -> None:
    async with (
        SandboxServer(time_scale=FAST, credits=0) as server,
        server.client() as client,
        Ledger.open(tmp_path / "bot.db") as ledger,
    ):
        video_bot = bot.VideoBot(client, ledger)
        async with _running(video_bot):
            replies = await bot.simulated_user(video_bot, "dave", ["a cat"])
    assert replies[-1].final
    assert "sorry" in replies[-1].text
    assert "credits" in replies[-1].text.lower()


async def test_a_restarted_bot_tells_the_owners_of_tasks_created_before(tmp_path: Path) -> None:
    where = tmp_path / "bot.db"
    async with (
        SandboxServer(time_scale=1.0, manual_clock=True, seed=4) as server,
        server.client() as client,
    ):
        async with Ledger.open(where) as ledger:  # the first life of the bot
            first = bot.VideoBot(client, ledger)
            async with _running(first):
                first.inbox.put_nowait(bot.Message("erin", "/video a lighthouse", "m-1"))
                started = await first.outbox("erin").get()
        assert started.text.startswith("on it")
        assert started.task_id is not None
        assert not first.outbox("erin").qsize()  # stopped before the task finished
        server.clock.advance(600)  # the task finishes while no bot runs
        async with Ledger.open(where) as ledger:  # the bot restarted
            second = bot.VideoBot(client, ledger)
            async with _running(second):
                told = await second.outbox("erin").get()
                second.inbox.put_nowait(bot.Message("erin", "/video a lighthouse", "m-1"))
                again = await second.outbox("erin").get()  # the same request, delivered twice
        assert told.final
        assert told.task_id == started.task_id
        assert told.video_url is not None
        assert again.task_id == started.task_id
        assert server.task_ids == (started.task_id,)  # created once


@asynccontextmanager
async def _running(video_bot: Any) -> AsyncIterator[None]:
    """Run a bot in the background for the duration of an ``async with`` block."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(video_bot.run)
        yield
        tg.cancel_scope.cancel()
