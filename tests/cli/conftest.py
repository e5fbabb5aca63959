"""Fixtures of the command-line tests: a sandbox served from a background thread.

``main([...])`` runs its own event loop (``asyncio.run``), so these tests are synchronous and
the sandbox lives in a thread with a loop of its own; it survives anything the command line
does (including a SIGINT sent to a ``videogen`` subprocess).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from aiohttp import web

from videogen_async._cli import main
from videogen_async.testing import SandboxServer
from videogen_async.testing import _routes as routes

_T = TypeVar("_T")

KEY = "vg-cli-test-SECRET-key-4242"
CREATE_PATH = "/v1/video/videomodel-2"
CREATE_ROUTE = f"POST {CREATE_PATH}"
FAST = {"time_scale": 0.005, "seed": 3}  # a 20-40 s generation takes 0.1-0.2 s


class ThreadedSandbox:
    """A ``SandboxServer`` running in its own thread and event loop."""

    def __init__(self, **options: Any) -> None:
        self.options = {"api_key": KEY, **options}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: SandboxServer | None = None

    def __enter__(self) -> ThreadedSandbox:
        self.thread.start()

        async def start() -> SandboxServer:
            return await SandboxServer(**self.options).start()

        self.server = self.run(start())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.run(self.server.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run a coroutine on the sandbox's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def call(self, func: Callable[[], _T]) -> _T:
        """Run a plain function on the sandbox's loop (its state is not thread-safe)."""

        async def wrapper() -> _T:
            return func()

        return self.run(wrapper())

    async def acall(self, func: Callable[[], _T]) -> _T:
        """Like :meth:`call`, awaited from another event loop without blocking it."""

        async def wrapper() -> _T:
            return func()

        future = asyncio.run_coroutine_threadsafe(wrapper(), self.loop)
        return await asyncio.wrap_future(future)

    @property
    def srv(self) -> SandboxServer:
        assert self.server is not None
        return self.server

    @property
    def base_url(self) -> str:
        return self.srv.base_url

    def task_ids(self) -> tuple[str, ...]:
        return self.call(lambda: self.srv.task_ids)

    def routes(self, route: str) -> int:
        """Requests the sandbox received on a route (``METHOD /pattern``)."""
        return self.call(lambda: self._served(route))

    def _served(self, route: str) -> int:
        return sum(1 for r in self.srv.request_log if r.route == route)

    def wait_for_route(self, route: str, *, above: int, timeout: float = 120.0) -> None:
        """Block until the sandbox has answered more than ``above`` requests on ``route``:
        checked on its loop as each request arrives or ends."""

        async def served() -> None:
            with anyio.fail_after(timeout):
                await self.srv.wait_until(lambda: self._served(route) > above)

        try:
            asyncio.run_coroutine_threadsafe(served(), self.loop).result(timeout=timeout + 10)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for request {above + 1} of {route}") from None

    def env(self) -> dict[str, str]:
        return {"VIDEOGEN_BASE_URL": self.base_url, "VIDEOGEN_API_KEY": KEY}


class HeldCreates:
    """The sandbox's create handler holding the creates numbered in ``held`` until released.

    Creates are numbered from 0 in the order the service reads them; a held one is whole at
    the service (its body read) and answered once ``released`` is set, as is every later one.
    ``all_held`` is set once the last held one is read: a create in flight may be headers
    alone (aiohttp before 3.11 writes them first), and its sender killed then never sends
    the body, so that the next create read, another run's, would be held in its place.
    The sandbox must run in this process (a ``ThreadedSandbox``).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, held: range) -> None:
        self.seen = 0
        # Bound to the sandbox's loop on their first wait.
        self.released = asyncio.Event()
        self.all_held = asyncio.Event()
        real = routes.read_json_body

        async def read(request: web.Request) -> Any:
            body = await real(request)
            if request.path == CREATE_PATH:
                self.seen += 1
                if self.seen - 1 in held:
                    if self.seen == held.stop:
                        self.all_held.set()
                    await self.released.wait()
            return body

        monkeypatch.setattr(routes, "read_json_body", read)


@pytest.fixture
def make_sandbox() -> Iterator[Callable[..., ThreadedSandbox]]:
    started: list[ThreadedSandbox] = []

    def make(**options: Any) -> ThreadedSandbox:
        sandbox = ThreadedSandbox(**{**FAST, **options}).__enter__()
        started.append(sandbox)
        return sandbox

    yield make
    for sandbox in reversed(started):
        sandbox.__exit__(None, None, None)


@pytest.fixture
def sandbox(
    make_sandbox: Callable[..., ThreadedSandbox], monkeypatch: pytest.MonkeyPatch
) -> ThreadedSandbox:
    """A fast sandbox, with the environment pointing the command line at it."""
    box = make_sandbox()
    for name, value in box.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("VIDEOGEN_LOG", raising=False)
    return box


class Run:
    """The outcome of one ``main([...])``."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def json(self) -> Any:
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"Run(code={self.code}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """Run ``videogen`` in-process and capture what it printed."""

    def run(*argv: str) -> Run:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    return env


def videogen(*argv: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Start ``python -m videogen_async ARGS`` as a real subprocess."""
    return subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
        [sys.executable, "-m", "videogen_async", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def wait_until(predicate: Callable[[], bool], *, timeout: float = 120.0, what: str = "") -> None:
    """Poll ``predicate`` until true (never a bare sleep); ``timeout`` only guards a hang.

    The waits are for subprocesses that start an interpreter under coverage: on a busy
    machine that alone can take tens of seconds.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.01)


def read_manifest(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
