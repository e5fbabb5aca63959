"""What a result knows of the HTTP answer it was parsed from: ``ResponseInfo``.

Kept in a private slot outside the attrs fields (ignored by equality, hashing, ``repr`` and
``attrs.asdict``; the model stays immutable), read as ``result._request_id`` (the ``trace_id``,
as openai-python names it) and ``result._response``. A copy or a hand-built model reads ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from ._redact import redact_text, redact_value

#: The private slot of a result holding its :class:`ResponseInfo`.
RESPONSE_SLOT = "_response_info"


class ResponseInfo:
    """The HTTP answer a result was read from (read-only).

    What the service sent is redacted when read, and when pickled: a key a hostile upstream
    echoes back in a header or in the ``trace_id`` reads as ``<redacted>``.

    Attributes:
        status_code: The HTTP status.
        method: The request's method.
        url: The request's URL (it never carries the API key, which travels in a header).
        attempts: How many attempts the request took (1 when it was not retried).
        elapsed: Seconds from the first attempt to the decoded answer, retries included.
    """

    # A plain class, not attrs: what attrs.asdict or a pretty printer (rich's tracebacks)
    # walks would show the raw headers and trace id, where a key echoed back may be.
    __slots__ = ("_headers", "_trace_id", "attempts", "elapsed", "method", "status_code", "url")

    def __init__(
        self,
        status_code: int,
        headers: Mapping[str, str],
        trace_id: str | None,
        method: str,
        url: str,
        attempts: int = 1,
        elapsed: float = 0.0,
    ) -> None:
        self.status_code = status_code
        self.method = method
        self.url = url
        self._headers = headers
        self._trace_id = trace_id
        self.attempts = attempts
        self.elapsed = elapsed

    @property
    def trace_id(self) -> str | None:
        """The envelope's ``trace_id``: quote it when reporting a problem."""
        return None if self._trace_id is None else redact_text(self._trace_id)

    #: The same as ``trace_id`` (the name other SDKs use).
    request_id = trace_id

    @property
    def headers(self) -> Mapping[str, str]:
        """The response headers, as a read-only mapping (names compare case-insensitively)."""
        # multidict's case-insensitive view (aiohttp's own headers type, so always installed).
        return CIMultiDictProxy(CIMultiDict(redact_value(dict(self._headers.items()))))

    @property
    def retries_taken(self) -> int:
        """Attempts beyond the first."""
        return self.attempts - 1

    def __repr__(self) -> str:
        return (
            f"ResponseInfo(status_code={self.status_code}, trace_id={self.trace_id!r},"
            f" method={self.method!r}, url={self.url!r}, attempts={self.attempts},"
            f" elapsed={self.elapsed:.3f})"
        )

    def __reduce__(self) -> tuple[type[ResponseInfo], tuple[Any, ...]]:
        # What is pickled is what is shown: the redacted headers (a plain dict: the answer's
        # are a read-only view that does not pickle) and the redacted trace id.
        return ResponseInfo, (
            self.status_code,
            dict(self.headers),
            self.trace_id,
            self.method,
            self.url,
            self.attempts,
            self.elapsed,
        )


class HasResponse:
    """Base of the results: a private slot for the :class:`ResponseInfo` of their answer."""

    __slots__ = ("_response_info",)

    @property
    def _response(self) -> ResponseInfo | None:
        """The HTTP answer this result was read from (``None`` for a copy or a hand-built one)."""
        return getattr(self, "_response_info", None)

    @property
    def _request_id(self) -> str | None:
        """The service's ``trace_id`` of the answer (``None`` for a copy or a hand-built one)."""
        info = self._response
        return None if info is None else info.trace_id
