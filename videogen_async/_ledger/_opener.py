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
    _engine: Engine
    _max_credits: float | None
    _price_estimate: PriceEstimate | None
    _outage_timeout: float
    _ledger: _L | None = attrs.field(default=None, init=False)

    async def _open(self) -> _L:
        creator = await Creator.open(
            self._engine, self._outage_timeout, self._max_credits, self._price_estimate
        )
        return self._make(creator)

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
