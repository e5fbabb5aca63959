"""What the ledger needs of a client: a narrow protocol, never ``AsyncVideoGen`` itself.

The ledger sits below the client: it sends creates through ``tasks.create`` and
``projects.create``/``create_videos``, and its watchers poll through the client's task source
(``gather_until_done`` accepts any :class:`LedgerClient`).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["LedgerClient"]


class LedgerClient(Protocol):
    """The client surface the ledger uses (``AsyncVideoGen`` has it)."""

    @property
    def tasks(self) -> Any:
        """The tasks namespace (``create``, ``get``)."""
        ...

    @property
    def projects(self) -> Any:
        """The projects namespace (``create``, ``create_videos``)."""
        ...

    def with_options(self, *, max_retries: int | None = ...) -> Any:
        """A view of the client with other options, sharing its pool and pacing."""
        ...
