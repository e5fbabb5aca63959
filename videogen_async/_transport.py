"""The HTTP transport: the only module of the client that imports aiohttp.

It owns (or borrows) the ``aiohttp.ClientSession``, sends one request with its retries and
timeouts, decodes the service's envelope ``{code, trace_id, message, data}`` and maps every
failure to the error tree of ``_exceptions``. Nothing above it sees an aiohttp type.

Retries follow one rule: a request is retried only when retrying cannot charge credits twice.

* Reads (GET) are retried on connection errors, timeouts, garbled bodies, 408, 429 and 5xx.
* Creating calls (POST) are retried only when the connection could not be opened or the
  service answered 429; any other failure is raised at once and, when the request may have
  reached the service, says so (``request_may_have_taken_effect``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import random
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, NoReturn
from urllib.parse import quote, urlencode

import aiohttp
import attrs
from yarl import URL

from ._exceptions import (
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InsufficientCreditsError,
    MediaStorageError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    VideoGenError,
)
from ._jsonbody import MESSAGE_CHARS, clip, decode_json, nested_too_deep
from ._jsonbody import excerpt as _body_excerpt
from ._redact import register_secret, scrub_exception
from ._retry import RetryPolicy, parse_retry_after, retry_delay
from ._version import __version__

__all__ = ["Response", "SessionOwner", "StreamResponse", "Timeout", "Transport"]

logger = logging.getLogger("videogen_async")

#: HTTP statuses after which a read is retried.
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: Envelope codes of the service's business failures.
CODE_INSUFFICIENT_CREDITS = 300111
CODE_MEDIA_STORAGE = 100099

_EXCERPT = 200
DEFAULT_MAX_BODY = 8 * 1024 * 1024
#: How long ``aclose()`` waits for in-flight creates whose callers were cancelled.
DRAIN_TIMEOUT = 30.0

# aiohttp names its "could not open the connection" timeout differently across versions.
_ConnectTimeout: tuple[type[BaseException], ...] = tuple(
    cls for cls in (getattr(aiohttp, "ConnectionTimeoutError", None),) if isinstance(cls, type)
)


@attrs.frozen
class Timeout:
    """Per-request timeouts, in seconds (``None`` means no limit).

    These bound one HTTP request. They are separate from the deadlines of the wait helpers
    (``tasks.wait(timeout=...)``), which bound a whole poll.

    Attributes:
        connect: Opening a connection (TCP and TLS).
        read: Waiting for each read of the response.
        total: The whole request, one attempt.
    """

    connect: float | None = 10.0
    read: float | None = 60.0
    total: float | None = None

    @classmethod
    def of(cls, value: Timeout | float | None) -> Timeout:
        """Build a ``Timeout`` from a number of seconds (an overall limit) or keep one.

        Args:
            value: A ``Timeout``, a number of seconds, or ``None`` for no limit at all.

        Returns:
            The ``Timeout``.

        Raises:
            ValueError: The number is not positive.
        """
        if isinstance(value, Timeout):
            return value
        if value is None:
            return cls(connect=None, read=None, total=None)
        seconds = float(value)
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, got {value!r}")
        return cls(connect=min(seconds, 10.0), read=seconds, total=seconds)

    def to_aiohttp(self) -> aiohttp.ClientTimeout:
        """The equivalent ``aiohttp.ClientTimeout``."""
        return aiohttp.ClientTimeout(
            total=self.total, sock_connect=self.connect, sock_read=self.read
        )


@attrs.frozen
class Response:
    """A successful envelope.

    Attributes:
        status_code: The HTTP status.
        data: The envelope's ``data``.
        trace_id: The envelope's ``trace_id``.
        message: The envelope's ``message``.
        headers: The response headers.
        attempts: How many attempts the request took.
    """

    status_code: int
    data: Any
    trace_id: str | None
    message: str | None
    headers: Mapping[str, str]
    attempts: int = 1


class _Secret(str):
    """A string that never shows itself in a ``repr``.

    The API key and the ``Authorization`` header are held as this, so that a traceback that
    shows local variables (``pytest --showlocals``, rich's ``show_locals``, error trackers), a
    debugger or a ``repr`` of the headers shows ``'<redacted>'``; on the wire (``str()``,
    formatting, concatenation) it is the plain value.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "'<redacted>'"


class SessionOwner:
    """Holds the ``aiohttp.ClientSession`` shared by a client and its ``with_options`` views.

    The session is created lazily inside the running event loop on first use and closed by
    :meth:`aclose`, unless the caller passed their own, which is used and never closed.
    """

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession | None = None,
        connection_limit: int = 100,
    ) -> None:
        if connection_limit < 1:
            raise ValueError("connection_limit must be at least 1")
        self._session = session
        self._owned = session is None
        self._connection_limit = connection_limit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._in_flight: set[asyncio.Future[Any]] = set()

    def track(self, job: asyncio.Future[Any]) -> None:
        """Keep a creating request that must finish before the session closes."""
        self._in_flight.add(job)
        job.add_done_callback(self._in_flight.discard)

    @property
    def connection_limit(self) -> int:
        """The most connections the client's own pool opens at once."""
        return self._connection_limit

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called."""
        return self._closed

    def get(self) -> aiohttp.ClientSession:
        """Return the session, creating it in the running loop on first use.

        Raises:
            RuntimeError: The client was closed, or it is used from a second event loop.
        """
        if self._closed:
            raise RuntimeError("this AsyncVideoGen client is closed")
        loop = asyncio.get_running_loop()
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._connection_limit, limit_per_host=0, ttl_dns_cache=300
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                raise_for_status=False,
            )
            self._loop = loop
        elif self._owned and self._loop is not loop:
            raise RuntimeError(
                "this AsyncVideoGen client was first used in another event loop; "
                "create one client per event loop"
            )
        return self._session

    @property
    def open_connections(self) -> int:
        """Connections currently checked out of the pool (for tests and diagnostics)."""
        session = self._session
        if session is None or session.closed:
            return 0
        connector = session.connector
        if connector is None:  # pragma: no cover - a session always has one here
            return 0
        acquired = getattr(connector, "_acquired", ())
        return len(acquired)

    async def aclose(self) -> None:
        """Close the session if this owner created it. Idempotent."""
        if self._closed:
            return
        if self._in_flight:
            # Creates whose callers were cancelled finish first, so their ids are logged.
            await asyncio.wait(set(self._in_flight), timeout=DRAIN_TIMEOUT)
        self._closed = True
        session, self._session = self._session, None
        if self._owned and session is not None and not session.closed:
            await session.close()


class StreamResponse:
    """A streamed response body (downloads), free of aiohttp types.

    Attributes:
        status_code: The HTTP status.
        headers: The response headers.
    """

    def __init__(self, response: aiohttp.ClientResponse, *, method: str, path: str) -> None:
        self._response = response
        self._method = method
        self._path = path
        self.status_code = response.status
        self.headers: Mapping[str, str] = dict(response.headers)

    async def iter_chunks(self, size: int = 256 * 1024) -> AsyncIterator[bytes]:
        """Yield the body in chunks of at most ``size`` bytes.

        Args:
            size: The largest chunk.

        Yields:
            The next chunk.

        Raises:
            APIConnectionError: The connection broke before the body was complete.
            APITimeoutError: A read timed out.
        """
        try:
            async for chunk in self._response.content.iter_chunked(size):
                yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _connection_error(
                exc, self._method, self._path, may_have_taken_effect=False
            ) from exc

    async def read_excerpt(self) -> str:
        """The first characters of the body, for error messages."""
        try:
            # More than is shown, so that a key across the cut is redacted whole.
            raw = await self._response.content.read(_EXCERPT + 4096)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return ""
        return _excerpt(raw)


class Transport:
    """Sends requests to the service and decodes its envelopes.

    A transport is cheap: :meth:`copy` makes one with other timeouts or retries that shares
    the same :class:`SessionOwner` (and so the same connection pool).
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        owner: SessionOwner,
        timeout: Timeout,
        retry: RetryPolicy,
        default_headers: Mapping[str, str] | None = None,
        max_body_size: int = DEFAULT_MAX_BODY,
        rng: random.Random | None = None,
    ) -> None:
        self._api_key = _Secret(api_key)
        register_secret(api_key)
        self.base_url = base_url.rstrip("/")
        self._encoded_base = str(URL(self.base_url))
        self.owner = owner
        self.timeout = timeout
        self.retry = retry
        self.max_body_size = max_body_size
        self._rng = rng or random.Random()
        self._default_headers = dict(default_headers or {})
        self._headers = {
            "Accept": "application/json",
            "User-Agent": user_agent(),
            **self._default_headers,
            "Authorization": _Secret(f"Bearer {api_key}"),
        }
        self._aio_timeout = timeout.to_aiohttp()

    def __repr__(self) -> str:
        return f"Transport(base_url={self.base_url!r})"

    def copy(
        self, *, timeout: Timeout | None = None, retry: RetryPolicy | None = None
    ) -> Transport:
        """A transport sharing this one's session, with other timeouts or retries.

        Args:
            timeout: The new per-request timeouts (unchanged when ``None``).
            retry: The new retry policy (unchanged when ``None``).

        Returns:
            The new transport.
        """
        return Transport(
            api_key=self._api_key,
            base_url=self.base_url,
            owner=self.owner,
            timeout=timeout or self.timeout,
            retry=retry or self.retry,
            default_headers=self._default_headers,
            max_body_size=self.max_body_size,
            rng=self._rng,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Mapping[str, Any] | None = None,
    ) -> Response:
        """Send a request, retrying what is safe to retry, and return the envelope.

        Args:
            method: ``GET`` or ``POST``.
            path: The path under the base URL, e.g. ``/v1/tasks``.
            params: Query parameters.
            json_body: The JSON body of a POST.

        Returns:
            The decoded successful envelope.

        Raises:
            APIConnectionError: The service could not be reached or the connection broke.
            APITimeoutError: No answer within the timeout.
            APIStatusError: The service answered with a failure (a subclass per status).
            APIResponseError: The answer was not the documented envelope.
        """
        is_read = method == "GET"
        # The URL is built once, already encoded: aiohttp then skips re-parsing and re-quoting
        # it (a measurable share of a poll's CPU). Paths and ids are quoted by the resources.
        query = "?" + urlencode(params, quote_via=quote) if params else ""
        url = URL(self._encoded_base + path + query, encoded=True)
        body = None if json_body is None else json.dumps(json_body).encode()
        headers = self._headers
        if body is not None:
            headers = {**headers, "Content-Type": "application/json"}
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            try:
                response = await self._send_once(method, url, path, body, headers)
            except VideoGenError as exc:
                elapsed = time.monotonic() - started
                delay = self._should_retry(exc, is_read=is_read, attempt=attempt)
                if delay is None:
                    logger.debug(
                        "%s %s failed after %.1f ms (attempt %d): %s",
                        method, path, elapsed * 1000, attempt, _describe(exc),
                    )  # fmt: skip
                    raise
                logger.debug(
                    "%s %s failed after %.1f ms (attempt %d of %d): %s; retrying in %.2f s",
                    method, path, elapsed * 1000, attempt, self.retry.max_retries + 1,
                    _describe(exc), delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                continue
            elapsed = time.monotonic() - started
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "%s %s -> %d in %.1f ms (attempt %d, trace_id=%s)",
                    method, path, response.status_code, elapsed * 1000, attempt,
                    response.trace_id,
                )  # fmt: skip
            if attempt > 1:
                response = attrs.evolve(response, attempts=attempt)
            return response

    def _should_retry(self, exc: VideoGenError, *, is_read: bool, attempt: int) -> float | None:
        if attempt > self.retry.max_retries:
            return None
        retry_after: float | None = None
        if isinstance(exc, RateLimitError):
            retry_after = exc.retry_after
        elif is_read:
            if isinstance(exc, APIStatusError):
                status = (
                    exc.code
                    if exc.status_code is None or exc.status_code < 400
                    else exc.status_code
                )
                if status not in RETRYABLE_STATUSES:
                    return None
                retry_after = _header_retry_after(exc.headers)
            elif not isinstance(exc, (APIConnectionError, APIResponseError)):
                return None
        elif not (isinstance(exc, APIConnectionError) and not exc.request_may_have_taken_effect):
            # A create is retried only when it provably did not reach the service.
            return None
        return retry_delay(self.retry, attempt, retry_after=retry_after, rng=self._rng)

    async def _send_once(
        self,
        method: str,
        url: URL,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> Response:
        is_read = method == "GET"
        session = self.owner.get()
        try:
            async with session.request(
                method,
                url,
                data=body,
                headers=headers,
                timeout=self._aio_timeout,
                allow_redirects=False,
            ) as resp:
                status = resp.status
                raw = await self._read_bounded(resp, method, path)
                resp_headers = resp.headers
        except VideoGenError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _connection_error(exc, method, path, may_have_taken_effect=not is_read) from exc
        return _decode(status, raw, resp_headers, method=method, path=path)

    async def _read_bounded(self, resp: aiohttp.ClientResponse, method: str, path: str) -> bytes:
        length = resp.content_length
        limit = self.max_body_size
        if length is not None and length > limit:
            raise APIResponseError(
                f"{method} {path}: HTTP {resp.status} body of {length} bytes exceeds the"
                f" {limit}-byte limit",
                status_code=resp.status,
                request_may_have_taken_effect=method != "GET",
            )
        if length is not None and "Content-Encoding" not in resp.headers:
            # An identity body of a known size within the limit: one read (the hot path).
            return await resp.read()
        # Content-Length counts the bytes on the wire, which a Content-Encoding (gzip, deflate)
        # may inflate a thousandfold: such a body, or one of unknown size, is counted as it
        # arrives, decoded.
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > limit:
                raise APIResponseError(
                    f"{method} {path}: HTTP {resp.status} body exceeds the {limit}-byte limit",
                    status_code=resp.status,
                    request_may_have_taken_effect=method != "GET",
                )
            chunks.append(chunk)
        return b"".join(chunks)

    @asynccontextmanager
    async def stream(
        self, url: str, *, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[StreamResponse]:
        """Open a streamed GET of ``url`` *without* the API key (for downloads).

        The ``Authorization`` header is never sent here: the URL points at a media host, not
        at the service. Redirects are followed by aiohttp, which drops nothing we did not add.

        Args:
            url: The absolute URL.
            headers: Extra headers, e.g. ``Range``.

        Yields:
            The response; its body is read through ``iter_chunks``.

        Raises:
            APIConnectionError: The host could not be reached.
            APITimeoutError: No answer within the timeout.
        """
        session = self.owner.get()
        sent = {"User-Agent": self._headers["User-Agent"], **(headers or {})}
        sent.pop("Authorization", None)
        path = _url_path(url)
        try:
            async with session.get(url, headers=sent, timeout=self._aio_timeout) as resp:
                yield StreamResponse(resp, method="GET", path=path)
        except VideoGenError:
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise _connection_error(exc, "GET", path, may_have_taken_effect=False) from exc


# --------------------------------------------------------------------------------------------
# Decoding and error mapping: pure functions
# --------------------------------------------------------------------------------------------


def user_agent() -> str:
    """The ``User-Agent`` sent with every request."""
    return (
        f"videogen-async/{__version__} python/{platform.python_version()}"
        f" aiohttp/{aiohttp.__version__}"
    )


def _url_path(url: str) -> str:
    scheme_sep = url.find("://")
    rest = url[scheme_sep + 3 :] if scheme_sep >= 0 else url
    slash = rest.find("/")
    path = rest[slash:] if slash >= 0 else "/"
    return path.split("?", 1)[0]


def _excerpt(raw: bytes) -> str:
    return _body_excerpt(raw, _EXCERPT)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _header_retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        value = headers.get("retry-after")
    return parse_retry_after(value)


def _connection_error(
    exc: BaseException, method: str, path: str, *, may_have_taken_effect: bool
) -> APIConnectionError:
    """Map an aiohttp/OS failure to ``APIConnectionError`` / ``APITimeoutError``.

    A failure to *open* the connection proves the request never reached the service.
    """
    not_opened = isinstance(exc, _ConnectTimeout) or (
        isinstance(exc, aiohttp.ClientConnectorError)
        and not isinstance(exc, aiohttp.ClientSSLError)
    )
    may = may_have_taken_effect and not not_opened
    scrub_exception(exc)  # aiohttp quotes bad header lines and payloads as it received them
    # TimeoutError: the builtin, which asyncio.TimeoutError is only from Python 3.11 on.
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError)):
        what = "connecting" if not_opened else "waiting for the answer"
        return APITimeoutError(
            f"{method} {path}: timed out {what}",
            method=method,
            path=path,
            request_may_have_taken_effect=may,
        )
    if not_opened:
        text = f"{method} {path}: could not connect to the service: {exc}"
    else:
        text = f"{method} {path}: the connection broke: {type(exc).__name__}: {exc}"
    return APIConnectionError(text, method=method, path=path, request_may_have_taken_effect=may)


def _decode(
    status: int,
    raw: bytes,
    headers: Mapping[str, str],
    *,
    method: str,
    path: str,
) -> Response:
    """Decode one answer into a :class:`Response` or raise the matching error."""
    body, is_json = decode_json(raw)
    # An envelope has a readable code: ``{"code": 1e999}`` or ``{"code": {}}`` is not one.
    code = _as_int(body.get("code")) if isinstance(body, dict) else None
    envelope = body if code is not None else None
    if envelope is None:
        _raise_not_envelope(status, raw, headers, method=method, path=path, is_json=is_json)
    trace = _trace_id(envelope.get("trace_id"))
    message = envelope.get("message")
    if 200 <= status < 300 and code == 200:
        return Response(
            status_code=status,
            data=envelope.get("data"),
            trace_id=trace,
            message=message if isinstance(message, str) else None,
            headers=headers,
        )
    text = (
        clip(message, MESSAGE_CHARS)
        if isinstance(message, str) and message
        else f"HTTP {status}, code {_code_text(code)}"
    )
    raise make_status_error(
        status,
        code,
        f"{method} {path}: {text}",
        trace_id=trace,
        body=envelope,
        headers=dict(headers),
        method=method,
        path=path,
    )


def _trace_id(value: Any) -> str | None:
    """The envelope's ``trace_id`` as a short text (a number is accepted; anything else not)."""
    if isinstance(value, str):
        return clip(value, 200) if value else None
    if isinstance(value, int) and not isinstance(value, bool):
        return clip(_code_text(value), 200)
    return None


def _code_text(code: int | None) -> str:
    try:
        return str(code)
    except ValueError:  # an integer beyond the int-to-str digit limit
        return "<a very large integer>"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _raise_not_envelope(
    status: int,
    raw: bytes,
    headers: Mapping[str, str],
    *,
    method: str,
    path: str,
    is_json: bool,
) -> NoReturn:
    excerpt = _excerpt(raw) if raw else "<empty body>"
    if is_json:
        kind = "a JSON body that is not the service's envelope"
    elif nested_too_deep(raw):
        kind = "a body nested too deeply to read"
    else:
        kind = "a non-JSON body"
    text = f"{method} {path}: HTTP {status} with {kind}: {excerpt}"
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
        text, status_code=status, body_excerpt=excerpt, request_may_have_taken_effect=may
    )


def make_status_error(
    status: int,
    code: int | None,
    message: str,
    *,
    trace_id: str | None = None,
    body: Any = None,
    headers: dict[str, str] | None = None,
    method: str | None = None,
    path: str | None = None,
    request_may_have_taken_effect: bool | None = None,
) -> APIStatusError:
    """Build the error for a failed answer from its HTTP status and envelope code.

    The business codes (300111, 100099) win; then an HTTP error status; then, under HTTP 200,
    an HTTP-like envelope code (``{"code": 404}`` is a not-found even when the status is 200).

    Args:
        status: The HTTP status.
        code: The envelope code, or ``None`` when there was no envelope.
        message: The error text.
        trace_id: The envelope's ``trace_id``.
        body: The decoded body.
        headers: The response headers.
        method: The request method.
        path: The request path.
        request_may_have_taken_effect: Whether the request may have acted; by default,
            ``True`` for a POST answered 5xx.

    Returns:
        The error, of the most specific class.
    """
    effective = status if status >= 400 or code is None else code
    cls: type[APIStatusError]
    if code == CODE_INSUFFICIENT_CREDITS:
        cls = InsufficientCreditsError
    elif code == CODE_MEDIA_STORAGE:
        cls = MediaStorageError
    elif effective == 400:
        cls = BadRequestError
    elif effective == 401:
        cls = AuthenticationError
    elif effective == 403:
        cls = PermissionDeniedError
    elif effective == 404:
        cls = NotFoundError
    elif effective == 409:
        cls = ConflictError
    elif effective == 429:
        cls = RateLimitError
    elif 500 <= effective <= 599:
        cls = ServerError
    else:
        cls = APIStatusError
    if request_may_have_taken_effect is None:
        request_may_have_taken_effect = method == "POST" and cls is ServerError
    error = cls(
        message,
        status_code=status,
        code=code,
        trace_id=trace_id,
        body=body,
        headers=headers,
        method=method,
        path=path,
        request_may_have_taken_effect=request_may_have_taken_effect,
    )
    if isinstance(error, RateLimitError):
        error.retry_after = _header_retry_after(error.headers)
    return error
