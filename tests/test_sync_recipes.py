"""The recipes of ``docs/sync.md`` for code that is not async, with real threads.

``tests/test_docs.py`` runs every block of the page as it is; these tests take the recipes'
code from the page and check what the page claims of it: one loop per worker, one loop and
one client shared by a thread pool, notebook cells on one running loop, and the errors of the
mistakes it lists.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal

from tests.test_docs import ROOT, ThreadedSandbox, blocks_of
from videogen_async import AsyncVideoGen, PollPolicy, TaskStatus
from videogen_async.testing import SandboxServer

PAGE = ROOT / "docs" / "sync.md"
FAST = PollPolicy(
    min_interval=0.005,
    max_interval=0.03,
    dense_interval=0.005,
    sparse_cap=0.03,
)
TWO_LOOPS = "this AsyncVideoGen client was first used in another event loop"


def _block(containing: str) -> str:
    (code,) = [b.code for b in blocks_of(PAGE) if b.info == "python" and containing in b.code]
    return code


def _recipe(containing: str) -> dict[str, Any]:
    """The definitions of one block of the page (its ``__main__`` part not run)."""
    namespace: dict[str, Any] = {"__name__": "sync_recipe"}
    exec(compile(_block(containing), str(PAGE), "exec"), namespace)  # noqa: S102
    return namespace


@pytest.fixture(scope="module")
def service() -> Iterator[SandboxServer]:
    """A sandbox served by a loop of its own: the recipes' threads are not async."""
    with ThreadedSandbox(time_scale=0.005, seed=3) as server:
        yield server


def _options(server: SandboxServer) -> dict[str, Any]:
    return {"base_url": server.base_url, "api_key": server.api_key, "poll_policy": FAST}


def test_each_worker_process_has_its_own_loop_and_client(service: SandboxServer) -> None:
    recipe = _recipe("class VideoGenWorker")
    workers = 2
    started = threading.Barrier(workers)
    seen: dict[int, list[str | None]] = {}
    loops: dict[int, asyncio.AbstractEventLoop] = {}

    def worker_process(number: int) -> None:
        worker = recipe["VideoGenWorker"](**_options(service))
        started.wait(10)  # both "processes" are alive at once, each with its loop
        try:
            loops[number] = worker._loop
            seen[number] = [
                worker.run(recipe["make_video"](worker.client, f"worker {number}, task {n}"))
                for n in range(2)
            ]
            with pytest.raises(RuntimeError, match=TWO_LOOPS):
                asyncio.run(worker.client.credits.get())
        finally:
            worker.close()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(worker_process, range(workers)))

    assert loops[0] is not loops[1]
    assert all(loop.is_closed() for loop in loops.values())
    urls = [url for urls in seen.values() for url in urls]
    assert len(urls) == 4
    assert all(url is not None and url.endswith(".mp4") for url in urls)


def test_a_closed_worker_refuses_more_work(service: SandboxServer) -> None:
    recipe = _recipe("class VideoGenWorker")
    worker = recipe["VideoGenWorker"](**_options(service))
    assert worker.run(worker.client.credits.get()).api_available_credits > 0
    worker.close()
    assert worker._loop.is_closed()
    with pytest.raises(RuntimeError, match="client is closed"):
        asyncio.run(worker.client.credits.get())


def test_threads_share_one_loop_and_one_client_through_a_portal(
    service: SandboxServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VIDEOGEN_BASE_URL", service.base_url)
    monkeypatch.setenv("VIDEOGEN_API_KEY", service.api_key)
    recipe = _recipe("async def create_and_wait")  # runs the page's pool of three threads
    assert capsys.readouterr().out.count("succeeded") == 6
    threads = 4
    together = threading.Barrier(threads)
    loop_threads: set[int] = set()

    async def create_and_wait(client: AsyncVideoGen, prompt: str) -> Any:
        loop_threads.add(threading.get_ident())
        return await recipe["create_and_wait"](client, prompt)

    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(AsyncVideoGen(**_options(service))) as client,
    ):

        def make_video(prompt: str) -> Any:
            together.wait(10)  # every caller blocks in portal.call at the same time
            return portal.call(create_and_wait, client, prompt)

        with ThreadPoolExecutor(threads) as pool:
            callers = list(pool.map(lambda _: threading.get_ident(), range(threads)))
            tasks = list(pool.map(make_video, [f"take {n}" for n in range(threads)]))

    assert len(loop_threads) == 1
    assert loop_threads.isdisjoint(callers)
    assert [task.status for task in tasks] == [TaskStatus.SUCCEEDED] * threads
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(client.credits.get())


def test_portal_call_from_the_portals_own_loop_raises() -> None:
    with start_blocking_portal() as portal:

        async def nested() -> None:
            portal.call(asyncio.sleep, 0)

        with pytest.raises(RuntimeError):
            portal.call(nested)


def _cells(code: str) -> list[str]:
    """The notebook block split where a blank line is followed by an ``await`` statement."""
    cells, current = [], []
    for line in code.splitlines():
        if current and not line.strip():
            cells.append("\n".join(current))
            current = []
        elif line.strip():
            current.append(line)
    return [*cells, "\n".join(current)] if current else cells


def test_the_notebook_cells_share_the_kernels_running_loop(
    service: SandboxServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VIDEOGEN_BASE_URL", service.base_url)
    monkeypatch.setenv("VIDEOGEN_API_KEY", service.api_key)
    cells = _cells(_block("client = AsyncVideoGen()  # reads"))
    assert len(cells) >= 3
    namespace: dict[str, Any] = {"__name__": "__main__"}

    async def kernel() -> None:
        # As Jupyter does: each cell is compiled on its own and awaited on one running loop.
        for cell in cells:
            code = compile(cell, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)  # noqa: S307
            if code.co_flags & inspect.CO_COROUTINE:
                await result
        # The mistake the page warns of: asyncio.run in a cell.
        coroutine = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
            asyncio.run(coroutine)
        coroutine.close()

    asyncio.run(kernel())
    assert "succeeded" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(namespace["client"].credits.get())


def test_one_client_on_two_loops_fails_before_sending(service: SandboxServer) -> None:
    client = AsyncVideoGen(**_options(service))
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(client.credits.get())
        before = len(service.request_log)
        with pytest.raises(RuntimeError, match=TWO_LOOPS):
            asyncio.run(client.credits.get())
        assert len(service.request_log) == before
    finally:
        first.run_until_complete(client.aclose())
        first.close()


def test_the_page_is_in_the_site() -> None:
    assert "sync.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert Path(PAGE).is_file()
