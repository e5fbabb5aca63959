from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from blockbuster import BlockBuster

from tests import _aioresponses_compat
from tests._blocking import no_blocking_calls
from tests._disk import small_fs  # noqa: F401 - the fixture of a small file system
from tests._services import REDIS_HINT, RedisServer, unavailable

_aioresponses_compat.install()

#: Modules whose tests run whole programs: the command line and the sandbox as real processes,
#: several worker processes sharing a ledger, the docs' and examples' programs, a browser.
#: Every test in them is marked ``slow``; they are part of the default suite, and a run that
#: only checks compatibility (CI's run on the oldest dependencies) may leave them out with
#: ``-m "not slow"``, since the library code they drive is covered in-process as well.
PROGRAM_MODULES = frozenset(
    {
        "tests/cli/test_batch.py",
        "tests/cli/test_batch_ledger.py",
        "tests/cli/test_commands.py",
        "tests/cli/test_exit_codes.py",
        "tests/cli/test_usability.py",
        "tests/ledger/test_processes.py",
        "tests/sandbox/test_cli.py",
        "tests/sandbox/test_plugin.py",
        "tests/test_console.py",
        "tests/test_docs.py",
        "tests/test_examples.py",
    }
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_blocking(reason): the test blocks the event loop on purpose, so the"
        " blocking-call detector is off for it",
    )
    # pytest-xdist's own marker (nox runs the suite with --dist loadgroup), declared here for
    # runs without xdist under --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one worker")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core. Most tests wait on a sandbox's simulated videos or
    on other processes rather than compute, so a core has room for a second worker (the
    suite's wall time falls by about a quarter on two cores)."""
    return 2 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    missing = sorted(name for name in PROGRAM_MODULES if not (root / name).is_file())
    if missing:
        raise pytest.UsageError(f"PROGRAM_MODULES names files that do not exist: {missing}")
    for item in items:
        if item.path.relative_to(root).as_posix() in PROGRAM_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _no_blocking_calls(request: pytest.FixtureRequest) -> Iterator[BlockBuster | None]:
    """Fail a test in which the library, an example or a docs program blocks its event loop.

    On for every test: outside a running loop the detector does nothing, so it guards the
    async tests, the sandbox's loop and any ``asyncio.run`` that a sync test drives (the
    CLI). See ``tests/_blocking.py`` for what is scanned.
    """
    if request.node.get_closest_marker("allow_blocking") is not None:
        yield None
        return
    with no_blocking_calls() as detector:
        yield detector


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A throwaway Redis for the session (skipped, or failed under CI, without redis-server)."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable(REDIS_HINT)
        return
    server = RedisServer(binary)
    try:
        server.start()
        yield server.url
    finally:
        server.stop()
