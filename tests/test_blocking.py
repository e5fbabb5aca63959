"""``VideoGen``, the blocking client: the async client's answers, from any thread, one loop.

The sandbox runs on an event loop of its own in a background thread (the tests' threads are
not async); what it holds is read on that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import json
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

from tests.test_docs import ThreadedSandbox
from videogen_async import (
    AsyncVideoGen,
    BackoffPolicy,
    ConfigurationError,
    InvalidRequestError,
    NotFoundError,
    PollPolicy,
    Task,
    TaskStatus,
    VideoGen,
    VideoGenError,
    WaitTimeoutError,
    _blocking,
)
from videogen_async._blocking import BlockingCredits, BlockingProjects, BlockingTasks
from videogen_async._resources._credits import Credits
from videogen_async._resources._projects import Projects
from videogen_async._resources._tasks import Tasks
from videogen_async.testing import SandboxServer

_T = TypeVar("_T")
FAST = PollPolicy(min_interval=0.005, max_interval=0.03, dense_interval=0.005, sparse_cap=0.03)


class Sandbox(ThreadedSandbox):
    """A sandbox on a loop of its own, read on that loop."""

    def read(self, read: Callable[[SandboxServer], _T]) -> _T:
        assert self._loop is not None
        assert self.server is not None
        server = self.server

        async def on_loop() -> _T:
            return read(server)

        return asyncio.run_coroutine_threadsafe(on_loop(), self._loop).result(10)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    threaded = Sandbox(time_scale=0.002, seed=5)
    with threaded:
        yield threaded


def _options(sandbox: Sandbox) -> dict[str, Any]:
    server = sandbox.server
    assert server is not None
    return {"api_key": server.api_key, "base_url": server.base_url, "poll_policy": FAST}


def _unending_tasks(sandbox: Sandbox, count: int) -> list[str]:
    """Tasks that never finish: the sandbox's clock paused first (a task of the sandbox's fast
    clock created before it was paused could finish first, on a busy machine)."""

    def paused_then_created(server: SandboxServer) -> list[str]:
        server.clock.pause()
        return server.create_tasks(count)

    return sandbox.read(paused_then_created)


def _sockets_to(port: int) -> int:
    """This process's open TCP sockets whose remote port is ``port``."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table, encoding="ascii") as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                    count += 1
    return count


needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/net/tcp"), reason="counts sockets through Linux's /proc"
)


@needs_proc
def test_twenty_threads_share_one_client_on_one_loop(sandbox: Sandbox) -> None:
    threads = 20
    sent_from: set[int] = set()
    loops: set[asyncio.AbstractEventLoop] = set()

    def sent(_: object) -> None:
        sent_from.add(threading.get_ident())
        loops.add(asyncio.get_running_loop())

    client = VideoGen(**_options(sandbox), event_hooks={"request": [sent]})
    together = threading.Barrier(threads)
    before = set(threading.enumerate())

    def work(number: int) -> tuple[str, Task, Task, float]:
        together.wait(10)  # every thread calls at once
        created = client.tasks.create(f"thread {number}", duration=4 + number % 5)
        done = client.tasks.wait(created.task_id, timeout=60)
        again = client.tasks.get(created.task_id)
        return created.task_id, done, again, client.credits.get().api_total_credits

    with ThreadPoolExecutor(threads) as pool:
        answers = list(pool.map(work, range(threads)))
        callers = {t.ident for t in set(threading.enumerate()) - before}

    assert len({task_id for task_id, *_ in answers}) == threads
    for number, (task_id, done, again, total) in enumerate(answers):
        assert (done.task_id, done.status) == (task_id, TaskStatus.SUCCEEDED)
        assert again == done
        assert again.video_url is not None
        assert total == 10_000
        described = sandbox.read(lambda s, t=task_id: s.describe_task(t))  # type: ignore[misc]
        assert described["prompt"] == f"thread {number}"
    # Every request went out on the one loop, run by the calling threads: no thread of its own.
    assert loops == {client._loop._loop}
    assert sent_from <= callers
    assert len(callers) == threads
    port = urlsplit(client.base_url).port or 80
    assert _sockets_to(port) >= 1

    client.close()
    assert client._loop._loop.is_closed()
    assert _sockets_to(port) == 0
    assert client.is_closed
    with pytest.raises(RuntimeError, match="this VideoGen client is closed"):
        client.credits.get()
    client.close()  # idempotent


def test_both_clients_answer_alike(sandbox: Sandbox, tmp_path: Path) -> None:
    options = _options(sandbox)
    seed = VideoGen(**options)
    done_id = seed.tasks.create("finished").task_id
    seed.tasks.wait(done_id, timeout=60)
    seed.close()
    sandbox.read(lambda s: s.clock.pause())  # from here, nothing changes but what is asked
    running_id = sandbox.read(lambda s: s.create_tasks(1)[0])

    calls: list[tuple[str, Callable[[Any], Any]]] = [
        ("credits", lambda c: c.credits.get()),
        ("get", lambda c: c.tasks.get(done_id)),
        ("get running", lambda c: c.tasks.get(running_id, extra_query={"x": "1"})),
        ("create", lambda c: c.tasks.create("p", duration=6, ratio="9:16")),
        ("unknown id", lambda c: c.tasks.get("no-such-task")),
        ("bad input", lambda c: c.tasks.create(" ")),
        ("unknown model", lambda c: c.tasks.create("p", model="videomodel_2_1")),
        ("refused header", lambda c: c.credits.get(extra_headers={"authorization": "x"})),
        ("wait", lambda c: c.tasks.wait(done_id, timeout=5)),
        ("wait timeout", lambda c: c.tasks.wait(running_id, timeout=0.05)),
        ("failed wait", lambda c: c.tasks.wait("no-such-task", timeout=5)),
        ("raw", lambda c: c.with_raw_response.tasks.get(done_id)),
        ("view", lambda c: c.with_options(max_retries=0).tasks.get(done_id)),
        ("project 404", lambda c: c.projects.get("no-such-project")),
        ("download", lambda c: c.download(done_id, tmp_path / f"{type(c).__name__}.mp4")),
    ]

    def outcome(name: str, value: Any) -> Any:
        if isinstance(value, VideoGenError):
            return (type(value), getattr(value, "status_code", None), getattr(value, "code", None))
        if name == "credits":
            return value.api_total_credits
        if name == "create":
            return (value.status, value.credits_cost)
        if name == "raw":
            return (value.status_code, value.parse())
        if name == "download":
            return value.read_bytes()
        return value

    def run_blocking() -> dict[str, Any]:
        found = {}
        with VideoGen(**options) as client:
            for name, call in calls:
                try:
                    found[name] = outcome(name, call(client))
                except VideoGenError as exc:
                    found[name] = outcome(name, exc)
        return found

    async def run_async() -> dict[str, Any]:
        found = {}
        async with AsyncVideoGen(**options) as client:
            for name, call in calls:
                try:
                    found[name] = outcome(name, await call(client))
                except VideoGenError as exc:
                    found[name] = outcome(name, exc)
        return found

    blocking, asynchronous = run_blocking(), asyncio.run(run_async())
    assert blocking == asynchronous
    assert blocking["unknown id"][0] is NotFoundError
    assert blocking["bad input"][0] is InvalidRequestError
    assert blocking["wait timeout"][0] is WaitTimeoutError
    assert blocking["get"].status == TaskStatus.SUCCEEDED
    assert blocking["download"]


def test_every_async_call_has_its_blocking_form() -> None:
    def calls(cls: type) -> set[str]:
        return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}

    pairs = [(Tasks, BlockingTasks), (Projects, BlockingProjects), (Credits, BlockingCredits)]
    for async_cls, blocking_cls in pairs:
        assert calls(async_cls) == {n for n in vars(blocking_cls) if not n.startswith("__")}
    public = {n for n in dir(AsyncVideoGen) if not n.startswith("_")}
    assert public - {"aclose"} <= {n for n in dir(VideoGen) if not n.startswith("_")}
    blocking = VideoGen(api_key="k", base_url="http://127.0.0.1:9")
    try:
        assert inspect.signature(blocking.tasks.create) == inspect.signature(
            blocking._target.tasks.create
        )
    finally:
        blocking.close()


def test_it_takes_the_arguments_of_the_async_client_but_a_session() -> None:
    own = inspect.signature(AsyncVideoGen).parameters
    assert list(inspect.signature(VideoGen).parameters) == [n for n in own if n != "session"]
    with pytest.raises(ConfigurationError, match="VideoGen takes no session"):
        VideoGen(api_key="k" * 12, base_url="http://127.0.0.1:9", session=object())  # type: ignore[arg-type]
    options = {"timeout": 7.0, "max_retries": 1, "deadline": 30.0, "backoff": BackoffPolicy()}
    with VideoGen(api_key="k" * 12, base_url="http://127.0.0.1:9/", **options) as client:
        same = AsyncVideoGen(api_key="k" * 12, base_url="http://127.0.0.1:9/", **options)
        for name in ("base_url", "timeout", "max_retries", "deadline", "poll_policy", "backoff"):
            assert getattr(client, name) == getattr(same, name)
            assert getattr(VideoGen, name).__doc__ == getattr(AsyncVideoGen, name).__doc__
        assert client.finish_times is client._target.finish_times


def test_gather_is_a_plain_iterator_that_leaves_nothing_running(sandbox: Sandbox) -> None:
    async def others() -> set[str]:
        current = asyncio.current_task()
        return {t.get_coro().__qualname__ for t in asyncio.all_tasks() if t is not current}

    with VideoGen(**_options(sandbox)) as client:
        idle = client._loop.run(others)
        ids = [client.tasks.create(f"t{n}", duration=4).task_id for n in range(4)]
        for task_id in ids:
            client.tasks.wait(task_id, timeout=60)
        sandbox.read(lambda s: s.clock.pause())
        slow = sandbox.read(lambda s: s.create_tasks(2))  # never finish: the clock is paused
        seen = []
        with client.tasks.gather_until_done([*ids, *slow], timeout=60) as results:
            seen.append(next(results))
            assert results.progress.pending >= 2
            assert client._loop.run(others) != idle  # the gather polls on the loop
        assert client._loop.run(others) == idle  # the block's exit stopped everything
        assert next(results, None) is None

        plain = client.tasks.gather_until_done(slow, timeout=60)
        plain.add(ids[:1])
        assert next(plain).task_id == ids[0]
        plain.close()
        assert client._loop.run(others) == idle

        statuses = [t.status for t in client.tasks.watch(ids[0])]
        assert statuses == [TaskStatus.SUCCEEDED]
        watching = client.tasks.watch(slow[0], timeout=60)
        assert next(watching).status == TaskStatus.RUNNING
        watching.close()
        assert client._loop.run(others) == idle
    assert seen[0].task_id in ids


def test_a_forked_child_is_refused_with_the_cause_and_the_fix(sandbox: Sandbox) -> None:
    client = VideoGen(**_options(sandbox))
    client.credits.get()
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        report: dict[str, Any] = {}
        try:
            client.credits.get()
        except BaseException as exc:
            report = {"type": type(exc).__name__, "message": str(exc)}
        try:
            client.close()
            report["closed"] = True
        finally:
            os.write(write, json.dumps(report).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert report["type"] == "RuntimeError"
    assert f"created in process {os.getpid()} and is used in process {pid}" in report["message"]
    assert "Create the client in the child" in report["message"]
    assert report["closed"] is True
    assert client.credits.get().api_total_credits == 10_000  # the parent's client still works
    client.close()


def test_a_call_from_the_loops_own_thread_is_refused(sandbox: Sandbox) -> None:
    with VideoGen(**_options(sandbox)) as client:
        task_id = client.tasks.create("p").task_id
        with pytest.raises(RuntimeError, match="this thread runs that client's event"):
            client.tasks.wait(task_id, timeout=60, on_update=lambda _: client.credits.get())
        assert client.tasks.wait(task_id, timeout=60).is_terminal


def test_a_call_running_when_the_client_closes_ends_and_the_client_can_be_dropped(
    sandbox: Sandbox,
) -> None:
    client = VideoGen(**_options(sandbox))
    (task_id,) = _unending_tasks(sandbox, 1)
    polled = threading.Event()
    result: list[BaseException] = []

    def waiting() -> None:
        try:
            client.tasks.wait(task_id, on_update=lambda _: polled.set())
        except BaseException as exc:
            result.append(exc)

    waiter = threading.Thread(target=waiting)
    waiter.start()
    assert polled.wait(10)
    client.close()
    waiter.join(10)
    assert isinstance(result[0], RuntimeError)
    assert "closed while the call ran" in str(result[0])

    dropped = VideoGen(**_options(sandbox))
    dropped.credits.get()
    loop, target = dropped._loop._loop, dropped._target
    view = dropped.with_options(max_retries=0)
    del dropped
    gc.collect()
    assert view.credits.get().api_total_credits == 10_000  # a view keeps the loop alive
    view.close()  # a view's close does nothing
    assert view.credits.get().api_total_credits == 10_000
    del view
    gc.collect()
    assert loop.is_closed()  # the last handle gone: the client and its loop closed
    assert target.is_closed


@pytest.mark.parametrize("hand_off", ["dropped", "refused"])
def test_a_call_whose_loop_ends_before_running_it_is_refused_not_held(
    sandbox: Sandbox, hand_off: str
) -> None:
    # Another thread drives the loop; a close() ends it between a call's check and its
    # hand-off's turn: the hand-off is lost with the loop, or refused by the closed loop. The
    # caller gets the client's error, never waits for ever; the call's coroutine is closed
    # unrun.
    client = VideoGen(**_options(sandbox))
    (task_id,) = _unending_tasks(sandbox, 1)
    loop, polled = client._loop, threading.Event()
    real = loop._loop.call_soon_threadsafe

    def ending(callback: Callable[..., Any], *args: Any) -> None:
        del loop._loop.call_soon_threadsafe  # the real one, from here on
        client.close()  # the driver's call is cancelled; the loop closes
        if hand_off == "refused":
            real(callback, *args)  # raises: the loop is closed

    outcome: list[BaseException] = []

    def calling(call: Callable[[], object]) -> None:
        try:
            call()
        except RuntimeError as exc:
            outcome.append(exc)

    driver = threading.Thread(
        target=calling,
        args=(lambda: client.tasks.wait(task_id, on_update=lambda _: polled.set()),),
    )
    driver.start()
    assert polled.wait(10)  # the driver runs the loop
    loop._loop.call_soon_threadsafe = ending  # type: ignore[method-assign]
    caller = threading.Thread(target=calling, args=(client.credits.get,))
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        caller.start()
        caller.join(60)  # a hang guard: the loop's end releases the caller
        driver.join(60)
        gc.collect()
    assert not caller.is_alive()
    assert not driver.is_alive()
    closed = "this VideoGen client was closed while the call ran"
    assert [str(exc) for exc in outcome] == [closed, closed]
    assert not [w for w in warned if "never awaited" in str(w.message)]


def test_a_call_is_handed_over_without_a_future_of_its_own(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call's task releases the calling thread's plain lock: no other future per call.

    ``asyncio.run_coroutine_threadsafe`` chains a ``concurrent.futures.Future`` to the task:
    one more done callback on the loop, and a condition whose ``result()`` wakes twice.
    """
    made: list[str] = []
    init = concurrent.futures.Future.__init__

    def recording(future: concurrent.futures.Future[Any]) -> None:
        made.append(threading.current_thread().name)
        init(future)

    with VideoGen(**_options(sandbox)) as client:
        client.credits.get()  # the connection: its address resolved, in a thread of its own
        monkeypatch.setattr(concurrent.futures.Future, "__init__", recording)
        for _ in range(20):
            assert client.credits.get().api_total_credits == 10_000
        monkeypatch.undo()
    assert made == []


def test_a_coroutine_call_runs_unwrapped_and_a_plain_call_is_wrapped(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coroutine method's own coroutine is awaited by the call's task; a plain one wrapped.

    The coroutine is made in the calling thread (which runs none of it): the loop steps no
    wrapping coroutine but the task's own per call. A plain callable (``with_options``) still
    runs on the loop, through the one wrapper, ``awaited``.
    """
    wrapped: list[str] = []
    inner: list[str] = []
    call = _blocking.awaited

    async def recording(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        wrapped.append(func.__name__)
        return await call(func, *args, **kwargs)

    def seen(_: object) -> None:  # an event hook: on the loop, inside the call's task
        frame = sys._getframe(1)
        while not frame.f_code.co_filename.endswith("_credits.py"):
            assert frame.f_back is not None
            frame = frame.f_back
        assert frame.f_back is not None  # the frame that awaits Credits.get
        inner.append(f"{frame.f_code.co_name} in {frame.f_back.f_code.co_name}")

    monkeypatch.setattr(_blocking, "awaited", recording)
    with VideoGen(**_options(sandbox), event_hooks={"request": [seen]}) as client:
        assert client.credits.get().api_total_credits == 10_000
        view = client.with_options(timeout=5.0)
        assert view.credits.get().api_total_credits == 10_000
    assert inner == ["get in _run", "get in _run"]
    assert wrapped == ["with_options"]


def test_ctrl_c_in_the_calling_thread_stops_the_call_on_the_loop(sandbox: Sandbox) -> None:
    """A ``KeyboardInterrupt`` while a call waits is raised there, and the call ends."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")
    client = VideoGen(**_options(sandbox))
    (task_id,) = _unending_tasks(sandbox, 1)  # the wait cannot end by itself
    main, sent = threading.main_thread().ident, threading.Event()
    assert main is not None
    # The call in flight, read while it waits: once cancelled it may end and leave the set
    # before the test looks again.
    calls: list[tuple[asyncio.Task[Any], Any]] = []  # its task, and its outcome's holder

    def interrupt(_: Task) -> None:  # on the loop, run by the calling thread
        if not sent.is_set():
            sent.set()
            calls.extend(client._loop._calls.items())
            signal.pthread_kill(main, signal.SIGINT)

    async def interrupted_call_ends() -> bool:
        ((call, ended),) = calls
        await asyncio.wait([call], timeout=30)
        return call.done() and isinstance(ended.outcome, asyncio.CancelledError)

    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.tasks.wait(task_id, on_update=interrupt)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert client._loop.run(interrupted_call_ends)
    client.close()


@pytest.mark.allow_blocking  # the blocking calls made in async code are what is tested
def test_a_thread_running_an_event_loop_of_its_own_calls_through_a_thread_started_for_it(
    sandbox: Sandbox,
) -> None:
    """A notebook cell, or ``async def`` code calling blocking code: its loop cannot run ours."""
    ran_in: set[int] = set()

    async def blocking_code_in_async_code() -> tuple[float, asyncio.AbstractEventLoop]:
        client = VideoGen(**_options(sandbox), event_hooks={"request": [lambda _: ran_in.add(
            threading.get_ident())]})  # fmt: skip
        total = client.credits.get().api_total_credits
        loop = client._loop._loop
        dropped = VideoGen(**_options(sandbox))
        dropped.credits.get()
        closed_by_finalizer = dropped._loop._loop
        del dropped
        gc.collect()  # dropped here: its finalizer closes it, in a thread of its own
        for thread in threading.enumerate():
            if thread.name == "videogen-async":
                thread.join(10)
        assert closed_by_finalizer.is_closed()
        client.close()
        return total, loop

    total, loop = asyncio.run(blocking_code_in_async_code())
    assert total == 10_000
    assert loop.is_closed()
    assert ran_in
    assert threading.get_ident() not in ran_in


def test_a_close_from_a_callback_ends_the_call_and_the_driver_closes_the_loop(
    sandbox: Sandbox,
) -> None:
    client = VideoGen(**_options(sandbox))
    (task_id,) = _unending_tasks(sandbox, 1)  # the wait cannot end by itself
    with pytest.raises(RuntimeError, match="closed while the call ran"):
        client.tasks.wait(task_id, on_update=lambda _: client.close())
    assert client.is_closed
    assert client._loop._loop.is_closed()  # closed by the thread that ran it, once let go


def test_a_close_while_calls_of_several_threads_run_ends_every_one(sandbox: Sandbox) -> None:
    """One thread runs the loop for all; the closing runs the others' calls to their end."""
    client = VideoGen(**_options(sandbox))
    ids = _unending_tasks(sandbox, 4)
    polled: set[str] = set()
    all_polled = threading.Event()
    outcomes: list[BaseException] = []

    def seen(task: Task) -> None:  # on the loop: one thread at a time
        polled.add(task.task_id)
        if len(polled) == len(ids):
            all_polled.set()

    def waiting(task_id: str) -> None:
        try:
            client.tasks.wait(task_id, on_update=seen)
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=waiting, args=(task_id,)) for task_id in ids]
    for thread in threads:
        thread.start()
    assert all_polled.wait(30)  # every call runs on the loop
    client.close()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert [str(exc) for exc in outcomes] == [
        "this VideoGen client was closed while the call ran"
    ] * 4
    assert client._loop._loop.is_closed()


def _interrupt() -> None:
    raise KeyboardInterrupt


def test_ctrl_c_outside_the_calls_task_stops_it_at_the_next_turn_of_the_loop(
    sandbox: Sandbox,
) -> None:
    """A ``KeyboardInterrupt`` out of the loop's own code: raised here, the call cancelled."""
    client = VideoGen(**_options(sandbox))
    (task_id,) = _unending_tasks(sandbox, 1)

    def interrupt(_: Task) -> None:  # a callback of the loop's own, outside the call's task
        asyncio.get_running_loop().call_soon(_interrupt)

    with pytest.raises(KeyboardInterrupt):
        client.tasks.wait(task_id, on_update=interrupt)
    (call,) = client._loop._calls  # left running, its cancel handed to the loop
    assert not call.done()
    assert client.credits.get().api_total_credits == 10_000  # this call runs the loop
    assert call.done()
    assert not client._loop._calls
    client.close()


def test_ctrl_c_during_a_create_keeps_its_answer(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C while the calling thread runs the create's own code cancels it, as asyncio.run
    does: the create in flight runs to its answer, and its id is logged."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")
    main = threading.main_thread().ident
    assert main is not None

    def interrupt(_: object) -> None:  # inside the create's request, once the service answered
        signal.pthread_kill(main, signal.SIGINT)

    client = VideoGen(**_options(sandbox), event_hooks={"response": [interrupt]})
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with caplog.at_level(logging.WARNING, logger="videogen_async"):
            with pytest.raises(KeyboardInterrupt):
                client.tasks.create("interrupted")
            client.close()  # runs the create in flight to its answer
    finally:
        signal.signal(signal.SIGINT, handler)
    logged = [r.getMessage() for r in caplog.records if "the service created" in r.getMessage()]
    assert len(logged) == 1
    assert sandbox.read(lambda s: s.stats().tasks_created) == 1
