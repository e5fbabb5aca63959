from __future__ import annotations

from collections.abc import Iterator

import pytest
from blockbuster import BlockBuster

from tests import _aioresponses_compat
from tests._blocking import no_blocking_calls

_aioresponses_compat.install()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_blocking(reason): the test blocks the event loop on purpose, so the"
        " blocking-call detector is off for it",
    )
    # pytest-xdist's own marker (nox runs the suite with --dist loadgroup), declared here for
    # runs without xdist under --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one worker")


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
