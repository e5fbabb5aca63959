"""Disks that refuse writes: a small tmpfs that fills up (root), and a file size limit.

A tmpfs needs root to mount; elsewhere ``small_fs`` skips with the reason. A file size limit
(``RLIMIT_FSIZE``) works without root but holds for every file of a process: the code under
test runs in a child process of its own (:data:`LIMITED`), with SIGXFSZ ignored so that the
write fails with EFBIG (as a full disk fails with ENOSPC) instead of killing the process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Prepended to a child's script: ``limit(n)`` caps every file the process writes at n bytes.
LIMITED = """
import resource, signal
def limit(size):
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
"""


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs, unmounted after the test."""
    where = tmp_path / "fs"
    where.mkdir()
    mounted = subprocess.run(  # noqa: S603
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(where)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): run as root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)  # noqa: S603, S607


def fill(path: Path) -> None:
    """Write to ``path`` until the file system is full."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(descriptor, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def files_in(directory: Path) -> list[str]:
    """The names of the files under ``directory`` (recursively), sorted."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def without_coverage() -> dict[str, str]:
    """This process's environment without what starts coverage in a child (its data file is
    written at exit: a child under a file size limit would fail there, a traceback on stderr)."""
    return {name: value for name, value in os.environ.items() if not name.startswith("COVERAGE_")}


def run_limited(script: str, *args: str, size: int, env: dict[str, str] | None = None) -> Any:
    """Run ``script`` in a child whose files may not grow past ``size`` bytes (``limit``).

    Returns the ``subprocess.CompletedProcess`` (text, stdout and stderr captured).
    """
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", f"{LIMITED}\nlimit({size})\n{script}", *args],
        capture_output=True,
        text=True,
        check=False,
        # Not measured by coverage: its data file could not grow past the limit either.
        env={**without_coverage(), **(env or {})},
    )
