from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ._server import HostileServer, serve


@pytest.fixture
async def hostile() -> AsyncIterator[HostileServer]:
    """A loopback server that misbehaves as the test tells it to."""
    async for server in serve():
        yield server
