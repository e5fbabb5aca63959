"""Processes of the ledger tests: started, told to go, read line by line, killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc

from tests._services import Lines

CREATOR = Path(__file__).with_name("_creator.py")


class Creator(Lines):
    """A ``_creator.py`` process (stdout and stderr as one stream of lines)."""

    @classmethod
    async def start(
        cls, url: str, base_url: str, api_key: str, cap: float | None, *keys: str
    ) -> Creator:
        """Start one; it opens the ledger and waits for :meth:`go`."""
        args = (url, base_url, api_key, "-" if cap is None else str(cap), *keys)
        return await cls.script(CREATOR, *args)

    @classmethod
    async def script(cls, script: Path, *args: str, ready: str = "ready") -> Creator:
        """Start ``python SCRIPT ARGS...``; return once it printed the line ``ready``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_API")}
        env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), str(Path.cwd())])
        command = [sys.executable, str(script), *args]
        process = await anyio.open_process(command, env=env, stderr=subprocess.STDOUT)
        child = cls(process)
        await child.expect(lambda line: line == ready)
        return child

    async def go(self) -> None:
        """Let it create its keys."""
        assert self.process.stdin is not None
        await self.process.stdin.send(b"go\n")

    async def finish(self) -> list[str]:
        """Wait for it to end; its lines."""
        with contextlib.suppress(AssertionError):  # it ended
            await self.expect(lambda line: False)
        await self.process.aclose()
        return self.lines

    async def kill(self) -> None:
        """SIGKILL it (it dies between two statements, its locks released by the system)."""
        self.process.send_signal(signal.SIGKILL)
        await self.process.aclose()
