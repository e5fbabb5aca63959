"""``LedgerOpener``: what ``Ledger.open`` returns, to ``async with`` or to ``await``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import anyio
import attrs

from .._contract._closing import AsyncClosing, ExitCloses
from ._creates import Creator, PriceEstimate
from ._protocol import Engine

_L = TypeVar("_L", bound=AsyncClosing)


@attrs.define(eq=False, repr=False)
class LedgerOpener(ExitCloses, Generic[_L]):
    """What :meth:`Ledger.open` returns: ``async with`` it, or ``await`` it."""

    _make: Callable[[Creator], _L]
    _args: tuple[Engine, float, float | None, PriceEstimate | None]
    """``Creator.open``'s: the engine, ``outage_timeout``, ``max_credits``, ``price_estimate``."""
    _ledger: _L | None = attrs.field(default=None, init=False)

    async def _open(self) -> _L:
        return self._make(await Creator.open(*self._args))

    def __await__(self) -> Any:
        return self._open().__await__()

    async def __aenter__(self) -> _L:
        self._ledger = await self._open()
        return self._ledger

    async def _exit(self, ok: bool) -> None:
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            with anyio.CancelScope(shield=True):
                await ledger.aclose()
