"""pytest plugin: sandbox fixtures for your own test suite (see ``docs/testing.md``).

Installed with ``videogen-async`` (``pytest11``); defines the fixtures ``videogen_sandbox`` (a
started server), ``videogen_sandbox_options`` (its arguments: override in ``conftest.py``) and
``videogen_sandbox_factory`` (``await make(**options)``); they need pytest-asyncio (``auto`` or
``strict``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from ._server import SandboxServer

DEFAULT_FIXTURE_OPTIONS: dict[str, Any] = {"time_scale": 0.01, "seed": 0}
"""Options of the ``videogen_sandbox`` fixture unless ``videogen_sandbox_options`` is
overridden."""

SandboxFactory = Callable[..., Awaitable["SandboxServer"]]


@pytest.fixture
def videogen_sandbox_options() -> dict[str, Any]:
    """Keyword arguments of the ``videogen_sandbox`` server (override to customise)."""
    return dict(DEFAULT_FIXTURE_OPTIONS)


if importlib.util.find_spec("pytest_asyncio") is not None:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def videogen_sandbox_factory(
        videogen_sandbox_options: dict[str, Any],
    ) -> AsyncIterator[SandboxFactory]:
        """An async callable ``make(**options)`` that starts a sandbox server."""
        from ._server import SandboxServer

        servers = []

        async def make(**options: Any) -> SandboxServer:
            server = SandboxServer(**{**videogen_sandbox_options, **options})
            await server.start()
            servers.append(server)
            return server

        try:
            yield make
        finally:
            for server in reversed(servers):
                await server.aclose()

    @pytest_asyncio.fixture
    async def videogen_sandbox(videogen_sandbox_factory: SandboxFactory) -> SandboxServer:
        """A started sandbox server, closed after the test (by the factory's teardown)."""
        return await videogen_sandbox_factory()

else:  # pragma: no cover - exercised only without pytest-asyncio

    def _unavailable(name: str) -> Any:
        @pytest.fixture(name=name)
        def fixture() -> None:
            """Unavailable: needs pytest-asyncio."""
            pytest.fail(f"the {name} fixture needs pytest-asyncio (pip install pytest-asyncio)")

        return fixture

    videogen_sandbox = _unavailable("videogen_sandbox")
    videogen_sandbox_factory = _unavailable("videogen_sandbox_factory")
