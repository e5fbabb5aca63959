"""The blocking-call detector of the test suite (see ``_no_blocking_calls`` in conftest)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import coverage
from blockbuster import BlockBuster

ROOT = Path(__file__).resolve().parent.parent


def _source(name: str, path: Path) -> types.ModuleType:
    """A stand-in module for code that is not a package: blockbuster scans by path."""
    module = types.ModuleType(name)
    if path.is_dir():
        module.__path__ = [str(path)]
    else:
        module.__file__ = str(path)
    return module


# The code whose blocking calls fail a test: the package (client, sandbox, CLI), the
# examples, and the programs of the docs (tests/test_docs.py compiles each under its page's
# path). Test code itself is not scanned: a test may read a file it wrote.
SCANNED = [
    "videogen_async",
    _source("examples", ROOT / "examples"),
    _source("docs", ROOT / "docs"),
    _source("readme", ROOT / "README.md"),
]


@contextmanager
def no_blocking_calls() -> Iterator[BlockBuster]:
    """Patch the blocking functions of the standard library to raise in a running loop.

    Blockbuster raises ``BlockingError`` when a blocking function (file I/O, ``time.sleep``,
    blocking sockets, locks...) is called from a thread that runs an event loop, with a frame
    of the scanned code on the stack. Outside a running loop it does nothing.
    """
    detector = BlockBuster(SCANNED)
    coverage_lock = _coverage_data_lock()
    for name in ("threading.Lock.acquire", "threading.Lock.acquire_lock"):
        function = detector.functions[name]
        # The import system's per-module lock: the first import of a module waits while
        # another thread is importing it (the docs' programs run in parallel threads, each
        # with its own loop). Blockbuster already lets imports read their files.
        function.can_block_in("<frozen importlib._bootstrap>", {"_lock_unlock_module", "acquire"})
        # coverage.py's C tracer, measuring several threads (concurrency = thread), takes its
        # collector's data lock from C, with no frame of its own on the stack, when a thread
        # enters a measured file it has not entered yet: a dictionary lookup, held for less
        # than a microsecond. Under load another thread holds it now and then, and the lock
        # was reported at the entry of whatever function of the package came next (a span's
        # end, a coroutine's first step, one the garbage collector finalized). Set before
        # activation: blockbuster hands the predicate to its wrapper then.
        function.can_block_predicate = functools.partial(
            _or_the_lock, coverage_lock, function.can_block_predicate
        )
    # asyncpg reads its connection settings (~/.pgpass, ~/.postgresql/ certificates: a few
    # stats and small reads) once per new connection.
    for function in detector.functions.values():
        function.can_block_in("asyncpg/connect_utils.py", {"_parse_connect_dsn_and_args"})
    detector.activate()
    try:
        yield detector
    finally:
        detector.deactivate()


def _coverage_data_lock() -> object:
    """The data lock of the running coverage.py collector (a new object when none runs)."""
    collector = getattr(coverage.Coverage.current(), "_collector", None)
    return getattr(collector, "data_lock", None) or object()


def _or_the_lock(
    allowed: object, predicate: Callable[..., bool], lock: object, *args: Any, **kwargs: Any
) -> bool:
    return lock is allowed or predicate(lock, *args, **kwargs)
