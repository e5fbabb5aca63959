"""``async with`` for the objects that are closed by ``aclose()``: :class:`AsyncClosing`."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["AsyncClosing"]

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
