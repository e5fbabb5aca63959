"""What the ledger needs of a client (a narrow protocol: the ledger sits below the client)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol


# The calls are read as callables (any keyword arguments), so that a namespace whose calls
# spell out their keyword arguments, as the client's do, has this shape.
class _Tasks(Protocol):
    @property
    def create(self) -> Callable[..., Awaitable[Any]]: ...

    @property
    def get(self) -> Callable[..., Awaitable[Any]]: ...


class _Projects(Protocol):
    @property
    def create(self) -> Callable[..., Awaitable[Any]]: ...

    @property
    def create_videos(self) -> Callable[..., Awaitable[Any]]: ...

    @property
    def get(self) -> Callable[..., Awaitable[Any]]: ...


class LedgerClient(Protocol):
    """The client surface the ledger uses (``AsyncVideoGen`` has it)."""

    @property
    def tasks(self) -> _Tasks:
        """The tasks namespace."""
        ...

    @property
    def projects(self) -> _Projects:
        """The projects namespace."""
        ...
