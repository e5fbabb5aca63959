"""The sandbox in a child process (``python -m videogen_async.testing``), from any program.

For a benchmark of the client's CPU, a test of a command-line tool, or a program that must not
share its event loop with the emulator: started on a free port, its announced URL and key read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from ._config import DEFAULT_API_KEY


class SandboxProcess:
    """``python -m videogen_async.testing --port 0 ARGS...`` in a child process.

    ::

        with SandboxProcess("--seed", "1", "--time-scale", "0.01") as sandbox:
            client = AsyncVideoGen(api_key=sandbox.api_key, base_url=sandbox.base_url)

    The child inherits no ``VIDEOGEN_*`` variable. Starting blocks until it announces its URL
    (from async code: ``await anyio.to_thread.run_sync(sandbox.start)``).

    Args:
        *args: Further options of ``python -m videogen_async.testing``.
        api_key: The key the sandbox accepts (its default key when ``None``).
        startup_timeout: Seconds to wait for the child to announce itself.

    Attributes:
        base_url: The child's base URL, once started.
        api_key: The key it accepts.
        process: The child process, once started.
    """

    def __init__(
        self, *args: str, api_key: str | None = None, startup_timeout: float = 30.0
    ) -> None:
        self._args = list(args)
        if api_key is not None:
            self._args += ["--api-key", api_key]
        self.api_key = api_key or DEFAULT_API_KEY
        self.startup_timeout, self.base_url = startup_timeout, ""
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> SandboxProcess:
        """Start the child and wait for its announcement; return this object (``base_url`` set).

        Raises:
            RuntimeError: The child ended, or said nothing in time, before announcing its URL.
        """
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "videogen_async.testing", "--port", "0", *self._args],
            stdout=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")},
        )
        stdout = self.process.stdout
        if stdout is None:  # pragma: no cover - stdout=PIPE always gives one
            raise RuntimeError("the sandbox process has no stdout")
        # A child that hangs without printing must not hang the caller: a timer kills it,
        # which ends the read below.
        timer = threading.Timer(self.startup_timeout, self.process.kill)
        timer.start()
        try:
            for line in stdout:
                key, _, value = line.strip().partition("=")
                if key == "VIDEOGEN_BASE_URL":
                    self.base_url = value
                    return self
        finally:
            timer.cancel()
        self.close()
        raise RuntimeError("the sandbox process ended before it announced its URL")

    def close(self) -> None:
        """Stop the child and wait for it. Idempotent."""
        process, self.process = self.process, None
        if process is None:
            return
        with process:  # on leaving: its stdout closed, and waited for
            process.terminate()  # nothing when it has ended
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
