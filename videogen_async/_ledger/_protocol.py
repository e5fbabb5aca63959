"""What the ledger needs of a client: a narrow protocol, never ``AsyncVideoGen`` itself.

The ledger sits below the client: it sends creates through ``tasks.create`` and
``projects.create``/``create_videos``, and its watchers poll through the client's task source
(``gather_until_done`` accepts any :class:`LedgerClient`).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["LedgerClient"]


class _Tasks(Protocol):
    async def create(self, prompt: str, /, **fields: Any) -> Any: ...

    async def get(self, task_id: str, /) -> Any: ...


class _Projects(Protocol):
    async def create(
        self, reference_video_url: str, product_image_urls: list[str], /, **fields: Any
    ) -> Any: ...

    async def create_videos(self, project_id: str, /, **fields: Any) -> Any: ...


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

    def with_options(self, *, max_retries: int | None = ...) -> Any:
        """A view of the client with other options, sharing its pool and pacing."""
        ...
