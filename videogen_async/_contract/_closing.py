"""``async with`` for objects closed by ``aclose()``, and for exits told if the block raised."""

from __future__ import annotations

from typing import TypeVar

_Self = TypeVar("_Self", bound="AsyncClosing")


class AsyncClosing:
    """A base whose ``async with`` block returns the object and calls :meth:`aclose` on exit."""

    async def aclose(self) -> None:
        """Release what the object holds. Idempotent."""
        raise NotImplementedError

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class ExitCloses:
    """An async context manager whose exit is :meth:`_exit`, told whether the block raised."""

    async def _exit(self, ok: bool) -> None:
        raise NotImplementedError  # pragma: no cover - every subclass defines it

    async def __aexit__(self, *exc_info: object) -> None:
        await self._exit(exc_info[0] is None)
