"""Real services the tests start themselves: on loopback, at a free port, in a temp dir.

Each is started by a session fixture of ``tests/conftest.py`` and stopped by it. Without the
service's program (or its Python client) the tests that need it are skipped with a message
saying how to enable them; under ``CI`` they fail instead, so that CI never passes without.
"""

from __future__ import annotations

import collections
import importlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from types import ModuleType
from typing import IO

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
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._drainer is not None:
            self._drainer.join()  # the log ends with the process
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.root, ignore_errors=True)
