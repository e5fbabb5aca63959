"""``videogen mcp``: the service for AI agents over the Model Context Protocol.

The one package that imports ``mcp`` (the ``videogen-async[mcp]`` extra): :mod:`._tools` holds
the tools, :mod:`._server` the server and its transports. Without the extra, :func:`serve`
raises ``ConfigurationError`` naming it. See ``docs/agents.md``.
"""

from __future__ import annotations

from typing import Any

from .._contract._exceptions import ConfigurationError

EXTRA_MISSING = "videogen mcp needs the mcp extra: pip install 'videogen-async[mcp]'"

try:
    from ._server import serve
except ImportError as _exc:  # the extra is not installed
    if (_exc.name or "").split(".")[0] != "mcp":
        raise
    _missing = _exc

    async def serve(*args: Any, **kwargs: Any) -> None:  # type: ignore[misc]
        """Stands in for the server without the extra."""
        raise ConfigurationError(EXTRA_MISSING) from _missing


__all__ = ["EXTRA_MISSING", "serve"]
