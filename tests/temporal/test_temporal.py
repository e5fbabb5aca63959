"""Temporal workflows generating videos through the ledger, on a real Temporal dev server.

The worker and its companions (a watch and a dispatch of the ledger) are real processes
(``_app.py``); the sandbox runs in the test with a paused clock, so that no video finishes
until the test says so. What is proved:

* more workflows than the worker has activity slots all get their video created while no
  video has finished (and no attempt can time out): only possible if a waiting activity
  holds no slot;
* the worker SIGKILLed while every workflow waits, the companions SIGKILLed mid-delivery,
  each started again: every workflow completes, and the sandbox saw each task created (and
  charged) once;
* a retried attempt (the test fails the first through its task token, as a timeout or a lost
  worker would end it) creates nothing: it gets the completion of a video still rendering
  through its own token, or returns at once a video that has already finished;
* a failed video, or a create refused for good, fails the workflow's activity, not retried;
* delivering a finished entry again is harmless; a completion Temporal refuses otherwise is
  raised (so that the dispatch tries again).
"""

from __future__ import annotations

import base64
import contextlib
import gc
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from tests._services import require
from videogen_async import Ledger, LedgerEntry, Task
from videogen_async.testing import SandboxServer

pytestmark = pytest.mark.xdist_group("temporal")

ROOT = Path(__file__).resolve().parents[2]
HINT = "pip install -e '.[test]' (temporalio) to run the Temporal tests"
CREATE_ROUTE = "POST /v1/video/"


class Program:
    """A process of ``tests/temporal/_app.py`` (stdout read for ``ready``; stderr to a file)."""

    def __init__(self, process: anyio.abc.Process, log: Path) -> None:
        self.process = process
        self.log = log

    @classmethod
    async def start(cls, sandbox: SandboxServer, log: Path, *args: str) -> Program:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
        env |= {"VIDEOGEN_BASE_URL": sandbox.base_url, "VIDEOGEN_API_KEY": sandbox.api_key}
        command = [sys.executable, "-m", "tests.temporal._app", *args]
        with log.open("ab") as stderr:
            process = await anyio.open_process(command, cwd=ROOT, env=env, stderr=stderr)
        program = cls(process, log)
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(60):
            while b"ready\n" not in seen:
                try:
                    seen += await process.stdout.receive()
                except anyio.EndOfStream:
                    raise AssertionError(f"{args[0]} ended:\n{log.read_text()}") from None
        return program

    async def kill(self) -> None:
        self.process.kill()
        await self.process.wait()
        assert self.process.returncode == -signal.SIGKILL

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            with anyio.move_on_after(30):
                await self.process.wait()
            if self.process.returncode is None:
                await self.kill()
        await self.process.aclose()


@contextlib.asynccontextmanager
async def temporal_client(address: str) -> AsyncIterator[Any]:
    """A Temporal client, released at the end (none may be left at interpreter exit)."""
    client_module = require("temporalio.client", HINT)
    client = await client_module.Client.connect(address)
    try:
        yield client
    finally:
        del client
        gc.collect()


@contextlib.asynccontextmanager
async def programs() -> AsyncIterator[list[Program]]:
    started: list[Program] = []
    try:
        yield started
    finally:
        with anyio.CancelScope(shield=True):
            for program in started:
                await program.stop()


def creates(sandbox: SandboxServer) -> int:
    """Creates the sandbox served (the truth on paying twice)."""
    routes = sandbox.stats().by_route
    return sum(count for route, count in routes.items() if route.startswith(CREATE_ROUTE))


async def until(sandbox: SandboxServer, condition: Callable[[], bool], seconds: float) -> None:
    with anyio.fail_after(seconds):
        await sandbox.wait_until(condition)


async def new_ledger(path: Path) -> str:
    async with Ledger.open(path):  # created once, before the processes share it
        pass
    return str(path)


class Scene:
    """One test's world: a sandbox (paused clock), a Temporal client, a ledger file, a queue."""

    def __init__(
        self, address: str, sandbox: SandboxServer, temporal: Any, ledger: str, log: Path
    ) -> None:
        self.address, self.sandbox, self.temporal = address, sandbox, temporal
        self.ledger, self.log = ledger, log
        self.queue = f"videos-{uuid.uuid4().hex}"
        self.running: list[Program] = []

    async def worker(self, slots: int = 2) -> Program:
        """Start a worker process (``running[...]`` holds it)."""
        args = ("worker", self.address, self.queue, self.ledger, str(slots))
        return self._ran(await Program.start(self.sandbox, self.log, *args))

    async def companions(self) -> Program:
        """Start a companions process (a watch and a dispatch)."""
        args = ("companions", self.address, self.ledger)
        return self._ran(await Program.start(self.sandbox, self.log, *args))

    def _ran(self, program: Program) -> Program:
        self.running.append(program)
        return program

    async def start(self, workflow: str, *args: Any, suffix: str = "") -> Any:
        """Start a workflow on the scene's queue; its handle."""
        name = self.queue + suffix
        return await self.temporal.start_workflow(
            workflow, args=list(args), id=name, task_queue=self.queue
        )


@contextlib.asynccontextmanager
async def scene(address: str, tmp_path: Path, **sandbox_options: Any) -> AsyncIterator[Scene]:
    """A :class:`Scene`; its programs stopped (their Temporal clients released) at the end."""
    ledger = await new_ledger(tmp_path / "ledger.db")
    async with (
        SandboxServer(manual_clock=True, **sandbox_options) as sandbox,
        temporal_client(address) as temporal,
        programs() as running,
    ):
        world = Scene(address, sandbox, temporal, ledger, tmp_path / "programs.log")
        world.running = running
        yield world


async def test_more_workflows_than_slots_wait_without_one_and_survive_kills(
    temporal_address: str, tmp_path: Path
) -> None:
    workflows, slots = 50, 5
    async with (
        scene(temporal_address, tmp_path, seed=22, credits=100_000) as world,
        Ledger.open(world.ledger) as watched,
        watched.changes(states=["pending"]) as recorded,
    ):
        sandbox, running = world.sandbox, world.running
        await world.worker(slots)
        companions = await world.companions()
        prompts = [f"video {i}" for i in range(workflows)]
        handles = [
            await world.start("GenerateVideo", prompt, suffix=f"-{i}")
            for i, prompt in enumerate(prompts)
        ]

        # Every video is created and recorded while none has finished (the clock is paused,
        # and no attempt times out): a waiting activity held no slot.
        keys: set[str] = set()
        with anyio.fail_after(120):
            async for entry in recorded:
                keys.add(entry.key)
                if len(keys) == workflows:
                    break
        assert len(sandbox.task_ids) == workflows

        # The worker dies while every workflow waits; another starts.
        await running[0].kill()
        await world.worker(slots)
        first, rest = sandbox.task_ids[:25], sandbox.task_ids[25:]
        for task_id in first:
            sandbox.schedule_task(task_id, finish_in=0)
        owner = {sandbox.describe_task(t)["prompt"]: i for i, t in enumerate(sandbox.task_ids)}
        early = [handles[i] for i, p in enumerate(prompts) if owner[p] < 25]

        # The companions die mid-delivery and others start: every activity is completed.
        with anyio.fail_after(60):
            for handle in early[:10]:
                await handle.result()
        await companions.kill()
        await world.companions()
        for task_id in rest:
            sandbox.schedule_task(task_id, finish_in=0)
        with anyio.fail_after(120):
            results = [await handle.result() for handle in handles]

        assert sorted(r["task_id"] for r in results) == sorted(sandbox.task_ids)
        assert all(r["status"] == "succeeded" and r["result"]["video_url"] for r in results)
        assert len(sandbox.task_ids) == workflows
        assert creates(sandbox) == workflows
        charged = [sandbox.describe_task(t)["charged"] for t in sandbox.task_ids]
        assert sandbox.credits()["api_available_credits"] == 100_000 - sum(charged)
        entries = [e async for e in watched.entries()]
        assert len(entries) == workflows
        assert all(e.key.startswith("temporal/") and e.state == "succeeded" for e in entries)

        # Delivering again (a dispatch's at-least-once) is harmless: the activities are closed.
        completer = require("videogen_async.temporal", HINT).ActivityCompleter(world.temporal)
        for entry in entries:
            await completer(entry)


async def only_entry(ledger: Ledger) -> LedgerEntry:
    entries = [entry async for entry in ledger.entries()]
    assert len(entries) == 1
    return entries[0]


def token_of(entry: LedgerEntry) -> str:
    token: str = entry.metadata["temporal"]["task_token"]
    return token


async def end_attempt(temporal: Any, entry: LedgerEntry) -> None:
    """End the attempt whose token the entry holds with a retryable failure (as a timeout or
    a lost worker would): Temporal starts the next attempt."""
    exceptions = require("temporalio.exceptions", HINT)
    handle = temporal.get_async_activity_handle(task_token=base64.b64decode(token_of(entry)))
    await handle.fail(exceptions.ApplicationError("this attempt is over"))


async def test_a_retried_attempt_gets_the_completion_of_a_video_still_rendering(
    temporal_address: str, tmp_path: Path
) -> None:
    async with (
        scene(temporal_address, tmp_path, seed=3) as world,
        Ledger.open(world.ledger) as ledger,
    ):
        sandbox = world.sandbox
        await world.worker()
        handle = await world.start("GenerateVideo", "a long video")
        await until(sandbox, lambda: len(sandbox.task_ids) == 1, 60)
        first = await only_entry(ledger)
        async with ledger.changes(keys=[first.key]) as changes:
            await end_attempt(world.temporal, first)
            with anyio.fail_after(60):
                async for change in changes:
                    if token_of(change) != token_of(first):
                        break  # the second attempt's token is on the entry

        sandbox.schedule_task(sandbox.task_ids[0], finish_in=0)
        await world.companions()
        with anyio.fail_after(60):
            result = await handle.result()

        assert result["task_id"] == sandbox.task_ids[0]
        assert await _activity_attempts(handle) == [2]
        assert creates(sandbox) == 1


async def test_a_retried_attempt_whose_video_finished_returns_it_at_once(
    temporal_address: str, tmp_path: Path
) -> None:
    async with (
        scene(temporal_address, tmp_path, seed=3) as world,
        Ledger.open(world.ledger) as ledger,
        world.sandbox.client() as client,
    ):
        sandbox = world.sandbox
        # A worker and no companions: nothing completes an attempt but the attempt itself.
        await world.worker()
        handle = await world.start("GenerateVideo", "a lone video")
        await until(sandbox, lambda: len(sandbox.task_ids) == 1, 60)
        sandbox.schedule_task(sandbox.task_ids[0], finish_in=0)
        async with ledger.watch(client, stop_when_idle=True) as finished:
            recorded = [entry async for entry in finished]
        assert [e.state for e in recorded] == ["succeeded"]

        await end_attempt(world.temporal, recorded[0])
        with anyio.fail_after(60):
            result = await handle.result()

        assert result["task_id"] == sandbox.task_ids[0]
        assert await _activity_attempts(handle) == [2]
        assert creates(sandbox) == 1
        entry = await ledger.get(recorded[0].key)
        assert entry is not None
        assert token_of(entry) != token_of(recorded[0])


async def test_a_project_s_videos_wait_for_its_script_then_for_each_video_without_a_slot(
    temporal_address: str, tmp_path: Path
) -> None:
    async with scene(temporal_address, tmp_path, seed=5, credits=10_000) as world:
        sandbox = world.sandbox
        # One slot: the batch's three videos can only all be awaited if none holds it.
        await world.worker(slots=1)
        await world.companions()
        products = ["https://cdn.example.com/p1.png"]
        handle = await world.start("GenerateAd", "https://cdn.example.com/ref.mp4", products, 3)

        def refused_batches() -> int:
            return sum(
                1 for r in sandbox.request_log if r.route.endswith("/videos") and r.status == 409
            )

        # The script is not written (the clock is paused): the batch is refused and retried.
        await until(sandbox, lambda: refused_batches() >= 1, 60)
        sandbox.schedule_project(sandbox.project_ids[0], script_ready_in=0)
        await until(sandbox, lambda: len(sandbox.task_ids) == 3, 60)
        for task_id in sandbox.task_ids:
            sandbox.schedule_task(task_id, finish_in=0)
        with anyio.fail_after(60):
            result = await handle.result()

        assert result["project_id"] == sandbox.project_ids[0]
        assert sorted(t["task_id"] for t in result["tasks"]) == sorted(sandbox.task_ids)
        assert all(t["status"] == "succeeded" for t in result["tasks"])
        assert len(sandbox.project_ids) == 1
        accepted = [r for r in sandbox.request_log if r.method == "POST" and r.status == 200]
        assert len(accepted) == 2  # the project, then its one batch


async def test_a_failed_video_fails_the_activity_without_retrying(
    temporal_address: str, tmp_path: Path
) -> None:
    exceptions = require("temporalio.exceptions", HINT)
    client_module = require("temporalio.client", HINT)
    async with scene(temporal_address, tmp_path, seed=4) as world:
        sandbox = world.sandbox
        await world.worker()
        await world.companions()
        handle = await world.start("GenerateVideo", "a doomed video")
        await until(sandbox, lambda: len(sandbox.task_ids) == 1, 60)
        sandbox.schedule_task(
            sandbox.task_ids[0], finish_in=0, outcome="failed", error_message="no luck"
        )
        with anyio.fail_after(60), pytest.raises(client_module.WorkflowFailureError) as info:
            await handle.result()

        activity_error = info.value.cause
        assert isinstance(activity_error, exceptions.ActivityError)
        failure = activity_error.cause
        assert isinstance(failure, exceptions.ApplicationError)
        assert failure.type == "TaskFailedError"
        assert failure.non_retryable
        assert "no luck" in failure.message
        assert Task.from_dict(failure.details[0]).task_id == sandbox.task_ids[0]
        assert await _activity_attempts(handle) == [1]
        assert creates(sandbox) == 1


async def test_a_create_refused_for_good_fails_at_once_and_sends_nothing(
    temporal_address: str, tmp_path: Path
) -> None:
    exceptions = require("temporalio.exceptions", HINT)
    client_module = require("temporalio.client", HINT)
    async with scene(temporal_address, tmp_path, seed=4) as world:
        await world.worker()
        handle = await world.start("GenerateVideo", "a video", {"duration": 999})
        with anyio.fail_after(60), pytest.raises(client_module.WorkflowFailureError) as info:
            await handle.result()

        failure = info.value.cause.cause
        assert isinstance(failure, exceptions.ApplicationError)
        assert failure.type == "InvalidRequestError"
        assert failure.non_retryable
        assert "duration" in failure.message
        assert await _activity_attempts(handle) == [1]
        assert world.sandbox.stats().requests == 0
        async with Ledger.open(world.ledger) as opened:
            assert [e async for e in opened.entries()] == []


async def test_a_completion_temporal_refuses_is_raised_for_the_dispatch_to_retry(
    temporal_address: str,
) -> None:
    temporal_api = require("videogen_async.temporal", HINT)
    service = require("temporalio.service", HINT)
    entry = LedgerEntry(
        key="temporal/x/y/1",
        state="succeeded",
        task_id="t1",
        task=Task(task_id="t1", status="succeeded"),
        metadata={"temporal": {"task_token": base64.b64encode(b"not a token").decode()}},
    )
    async with temporal_client(temporal_address) as temporal:
        completer = temporal_api.ActivityCompleter(temporal)
        with pytest.raises(service.RPCError) as info:
            await completer(entry)
        assert info.value.status != service.RPCStatusCode.NOT_FOUND
        # An entry no activity waits on is nothing to deliver.
        await completer(LedgerEntry(key="k", state="succeeded", metadata={"tenant": "acme"}))


def test_the_public_names_are_sorted_and_live_in_private_modules() -> None:
    temporal_api = require("videogen_async.temporal", HINT)
    # In ruff's order (RUF022): constants, then classes, then functions, each sorted.
    kinds = {name: (not name.isupper(), not name[0].isupper()) for name in temporal_api.__all__}
    assert temporal_api.__all__ == sorted(temporal_api.__all__, key=lambda n: (kinds[n], n))
    for name in temporal_api.__all__:
        value = getattr(temporal_api, name)
        if not isinstance(value, str):  # the activities' names are strings
            assert value.__module__.startswith("videogen_async.temporal._"), name


def test_without_temporalio_the_import_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['temporalio'] = None\n"
        "try:\n    import videogen_async.temporal\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert 'pip install "videogen-async[temporal]"' in out.stdout


async def _activity_attempts(handle: Any) -> list[int]:
    """The attempt number of each activity start in the workflow's history."""
    history = await handle.fetch_history()
    return [
        event.activity_task_started_event_attributes.attempt
        for event in history.events
        if event.HasField("activity_task_started_event_attributes")
    ]
