"""OpenTelemetry, when ``opentelemetry-api`` is installed (``videogen-async[otel]``).

The one module importing it, once. Without it :data:`ENABLED` is ``False`` and no tracing code
runs; with no tracer provider configured, :func:`recording` is ``False`` and spans are skipped
too, so the extra costs nothing until tracing is set up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from .._version import __version__


class SpanLike(Protocol):
    """What the callers use of a span."""

    def set_attribute(self, key: str, value: Any) -> None:
        """Set one attribute."""


try:
    from opentelemetry import trace as _trace
except ImportError:  # the extra is not installed
    _trace = None  # type: ignore[assignment]

#: Whether ``opentelemetry-api`` is importable.
ENABLED = _trace is not None

_SCOPE = "videogen_async"
# While no provider is set, the API's global is peeked at (a read, no lock, no environment):
# unless the environment names a provider the API would load, or the API keeps it elsewhere.
_PEEK = "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ and hasattr(_trace, "_TRACER_PROVIDER")
_NO_OP: tuple[type, ...] = (
    () if _trace is None else (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
)


def recording() -> bool:
    """Whether spans would record (the extra is installed and a tracer provider is set).

    Asked per call (a provider set later is used from the next call on), without reading
    the environment while none is set, nor named there at start.
    """
    if _trace is None or (_PEEK and _trace._TRACER_PROVIDER is None):
        return False
    return not isinstance(_trace.get_tracer_provider(), _NO_OP)


@contextmanager
def span(name: str, attributes: Mapping[str, Any], *, client: bool = False) -> Iterator[SpanLike]:
    """A span made current for the block (only when :func:`recording`).

    An exception leaving it marks the span failed; ``client`` makes a ``CLIENT`` span (an
    outgoing HTTP request) rather than an ``INTERNAL`` one.
    """
    with _trace.get_tracer(_SCOPE, __version__).start_as_current_span(
        name,
        kind=_trace.SpanKind.CLIENT if client else _trace.SpanKind.INTERNAL,
        attributes=dict(attributes),
    ) as current:
        yield current


def set_error(current: SpanLike, error_type: str) -> None:
    """Mark a span failed with the OpenTelemetry ``error.type`` attribute and status."""
    current.set_attribute("error.type", error_type)
    if hasattr(current, "set_status"):  # a span exists: the extra is installed
        current.set_status(_trace.Status(_trace.StatusCode.ERROR))
