"""The exit half of the ledger's async context managers (the ledger, its opener, a watch)."""

from __future__ import annotations

from types import TracebackType

__all__ = ["ExitCloses"]


class ExitCloses:
    """An async context manager whose exit is :meth:`_exit`, told whether the block raised."""

    async def _exit(self, ok: bool) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._exit(exc_type is None)
