"""A Temporal dev server for the session, started and stopped by the tests."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._services import TEMPORAL_HINT, TemporalServer, require, unavailable

# temporalio (and protobuf under it) imported once, while the tests are collected in one
# thread: a first import of it in the middle of a run, with other threads and finalizers
# importing, met a KeyError in Python 3.11's module locks (importlib._bootstrap).
with contextlib.suppress(ImportError):
    import videogen_async.temporal  # noqa: F401


def temporal_binary() -> str | None:
    """The ``temporal`` command: on PATH, or beside this interpreter (a venv's ``bin``)."""
    beside = Path(sys.executable).with_name("temporal")
    return shutil.which("temporal") or (str(beside) if beside.is_file() else None)


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a throwaway dev server (skipped, or failed under CI, without)."""
    require("temporalio", "pip install -e '.[test]' (temporalio) to run the Temporal tests")
    binary = temporal_binary()
    if binary is None:
        unavailable(TEMPORAL_HINT)
        return
    server = TemporalServer(binary)
    try:
        server.start()
        yield server.address
    finally:
        server.stop()
