"""Compatibility hook: aioresponses 0.7.9 under aiohttp >= 3.14.

aiohttp 3.14 made ``stream_writer`` a required keyword of ``ClientResponse.__init__``;
aioresponses 0.7.9 builds its fake responses without it (aioresponses issue #289, fixed
upstream but unreleased). ``install()`` swaps in a ``ClientResponse`` subclass that supplies a
finished writer, only when the running aiohttp needs it. Drop this module once an
aioresponses release builds responses for aiohttp 3.14 itself.
"""

from __future__ import annotations

import inspect
from typing import Any

import aiohttp
import aioresponses.core


class _FinishedWriter:
    """A stand-in for the request writer of a response whose request is already sent."""

    output_size = 0


def _needs_patch() -> bool:
    params = inspect.signature(aiohttp.ClientResponse.__init__).parameters
    return "stream_writer" in params


class CompatClientResponse(aiohttp.ClientResponse):
    """``ClientResponse`` that accepts aioresponses' keyword set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("stream_writer", _FinishedWriter())
        super().__init__(*args, **kwargs)


def install() -> bool:
    """Patch aioresponses if this aiohttp needs it; return whether it did."""
    if not _needs_patch():
        return False
    aioresponses.core.ClientResponse = CompatClientResponse  # type: ignore[attr-defined]
    return True
