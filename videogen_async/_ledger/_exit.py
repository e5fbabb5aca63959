"""The exit half of the ledger's async context managers (the ledger, its opener, a watch)."""

from __future__ import annotations

__all__ = ["ExitCloses"]


class ExitCloses:
    """An async context manager whose exit is :meth:`_exit`, told whether the block raised."""

    async def _exit(self, ok: bool) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    async def __aexit__(self, *exc_info: object) -> None:
        await self._exit(exc_info[0] is None)
