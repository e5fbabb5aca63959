"""``videogen mcp`` (see ``docs/agents.md``): the one package that imports ``mcp``, an extra.

Without it, :func:`serve` raises ``ConfigurationError`` naming the extra.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .._contract._exceptions import ConfigurationError

EXTRA_MISSING = "videogen mcp needs the mcp extra: pip install 'videogen-async[mcp]'"

try:
    from ._server import serve as serve
except ImportError as _exc:  # the extra is not installed
    # Whichever of the extra's packages failed first (mcp, or uvicorn that it brings): the
    # extra is missing when mcp itself is; with mcp there, the error is a real one.
    if importlib.util.find_spec("mcp") is not None:
        raise
    _missing = _exc

    async def serve(*args: Any, **kwargs: Any) -> None:  # type: ignore[misc]
        """Stands in for the server without the extra."""
        raise ConfigurationError(EXTRA_MISSING) from _missing
