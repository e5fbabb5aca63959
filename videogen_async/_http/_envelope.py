"""The service's envelope: decoding an answer and mapping every failure to the error tree.

Pure functions of the transport (aiohttp is imported only for its exception classes).
"""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Mapping
from typing import Any

import aiohttp
import attrs

from .._contract._exceptions import (
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    APITimeoutError,
    RateLimitError,
    ServerError,
    status_error_class,
)
from .._contract._meta import ResponseInfo
from .._contract._redact import scrub_exception
from .._version import __version__
from ._jsonbody import (
    clip,
    decode_json,
    excerpt,
    int_text,
    nested_too_deep,
    short_repr,
)
from ._retry import retry_after_of

#: What a connection failing, breaking or timing out raises (mapped by :func:`connection_error`).
NETWORK_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


@attrs.define(repr=False)
class Response:
    """A successful envelope; the request loop sets ``info`` (for results)."""

    status_code: int
    data: Any
    trace_id: str | None
    headers: Mapping[str, str]
    info: ResponseInfo | None = None

    def __repr__(self) -> str:
        # Bounded and redacted: the data and headers are what a server sent, key echoed and
        # all, and a traceback printed with its locals shows this.
        return (
            f"Response(status_code={self.status_code}, trace_id={self.trace_id!r},"
            f" data={short_repr(self.data)})"
        )


def user_agent() -> str:
    """The ``User-Agent`` sent with every request."""
    return (
        f"videogen-async/{__version__} python/{platform.python_version()}"
        f" aiohttp/{aiohttp.__version__}"
    )


def connection_error(
    exc: BaseException, method: str, path: str, *, may_have_taken_effect: bool
) -> APIConnectionError:
    """Map an aiohttp/OS failure to ``APIConnectionError`` / ``APITimeoutError``.

    A failure to *open* the connection proves the request never reached the service.
    """
    not_opened = isinstance(exc, aiohttp.ConnectionTimeoutError) or (
        isinstance(exc, aiohttp.ClientConnectorError)
        and not isinstance(exc, aiohttp.ClientSSLError)
    )
    may = may_have_taken_effect and not not_opened
    scrub_exception(exc)  # aiohttp quotes bad header lines and payloads as it received them
    # TimeoutError: the builtin, which asyncio.TimeoutError is only from Python 3.11 on.
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError)):
        return APITimeoutError(
            f"{method} {path}: timed out"
            f" {'connecting' if not_opened else 'waiting for the answer'}",
            method=method,
            path=path,
            request_may_have_taken_effect=may,
        )
    text = (
        f"{method} {path}: could not connect to the service: {exc}"
        if not_opened
        else f"{method} {path}: the connection broke: {type(exc).__name__}: {exc}"
    )
    return APIConnectionError(text, method=method, path=path, request_may_have_taken_effect=may)


def decode(
    status: int, raw: bytes, headers: Mapping[str, str], *, method: str, path: str
) -> Response:
    """Decode one answer into a :class:`Response` or raise the matching error."""
    body, is_json = decode_json(raw)
    # An envelope has a readable code: ``{"code": 1e999}`` or ``{"code": {}}`` is not one.
    code = body.get("code") if type(body) is dict else None
    if type(code) is not int:  # the service's own (a plain int) read as it is, at once
        code = _as_int(code)
    if code is None:
        quoted = excerpt(raw) if raw else "<empty body>"
        if is_json:
            kind = "a JSON body that is not the service's envelope"
        elif nested_too_deep(raw):
            kind = "a body nested too deeply to read"
        else:
            kind = "a non-JSON body"
        text = f"{method} {path}: HTTP {status} with {kind}: {quoted}"
        may = method != "GET"
        if status >= 400:
            raise make_status_error(
                status,
                None,
                text,
                headers=dict(headers),
                method=method,
                path=path,
                request_may_have_taken_effect=may and status >= 500,
            )
        raise APIResponseError(
            text, status_code=status, body_excerpt=quoted, request_may_have_taken_effect=may
        )
    trace = _trace_id(body.get("trace_id"))
    if 200 <= status < 300 and code == 200:
        return Response(status, body.get("data"), trace, headers)
    message = body.get("message")
    text = (
        clip(message)
        if isinstance(message, str) and message
        else f"HTTP {status}, code {int_text(code)}"
    )
    raise make_status_error(
        status,
        code,
        f"{method} {path}: {text}",
        trace_id=trace,
        body=body,
        headers=dict(headers),
        method=method,
        path=path,
    )


def _trace_id(value: Any) -> str | None:
    """The envelope's ``trace_id`` as a short text (a number is accepted; anything else not)."""
    if type(value) is int:  # a JSON number, not a bool
        value = int_text(value)
    return clip(value, 200) if isinstance(value, str) and value else None


def _as_int(value: Any) -> int | None:
    # A decoded JSON value that is not a plain int: a bool is none, a text or a float may be.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(value.strip())  # a text (anything else has no ``strip``)
    except (AttributeError, ValueError):
        return None


def make_status_error(
    status: int,
    code: int | None,
    message: str,
    *,
    method: str | None = None,
    request_may_have_taken_effect: bool | None = None,
    **details: Any,
) -> APIStatusError:
    """The error for a failed answer, of the class ``status_error_class`` picks.

    ``code`` is the envelope's (``None``: no envelope); ``request_may_have_taken_effect`` is,
    by default, ``True`` for a POST answered 5xx; ``details`` are the error's other attributes
    as ``APIStatusError`` takes them (``trace_id``, ``body``, ``headers``, ``path``).
    """
    cls = status_error_class(status, code)
    if request_may_have_taken_effect is None:
        request_may_have_taken_effect = method == "POST" and cls is ServerError
    error = cls(
        message,
        status_code=status,
        code=code,
        method=method,
        request_may_have_taken_effect=request_may_have_taken_effect,
        **details,
    )
    if isinstance(error, RateLimitError):
        error.retry_after = retry_after_of(error)  # from its headers
    return error
