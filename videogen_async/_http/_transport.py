"""The HTTP transport: one request with its retries, pacing and timeouts.

With ``_session`` and ``_envelope``, the only client modules importing aiohttp. Retries are
``_retry.decide_retry``'s, each attempt holds a ``_pacing`` slot, ``Timeout`` bounds an attempt
and ``deadline`` the call; the environment's proxy is read once, when the client is made.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
import attrs
from multidict import CIMultiDict
from yarl import URL

from .._contract._exceptions import APIResponseError, APITimeoutError, RateLimitError, VideoGenError
from .._contract._meta import ResponseInfo
from .._contract._redact import drop_locals, register_secret
from .._contract._validation import json_text
from .._observe import _otel
from .._observe._hooks import EventHooks
from .._observe._spans import RequestObserver
from ._bound import Bound, Watch
from ._envelope import NETWORK_ERRORS, Response, connection_error, decode, user_agent
from ._jsonbody import EXCERPT_CHARS, excerpt
from ._options import NO_OPTIONS, CallOptions
from ._pacing import Pacing
from ._retry import BackoffPolicy, decide_retry, honoured_retry_after
from ._session import UNSET, SessionOwner, Timeout, _Unset, proxy_for

logger = logging.getLogger("videogen_async")

DEFAULT_MAX_BODY = 8 * 1024 * 1024


class _Secret(str):
    """A string whose ``repr`` is ``'<redacted>'``: the API key and its header are held as this.

    A traceback with its locals, a debugger or a ``repr`` of the headers shows no key.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "'<redacted>'"


class StreamResponse:
    """A streamed response (of a download), free of aiohttp types: status, headers, body."""

    def __init__(self, response: aiohttp.ClientResponse, path: str) -> None:
        self._response = response
        self._path = path
        self.status_code = response.status
        self.headers = dict(response.headers)

    async def iter_chunks(self, size: int = 256 * 1024) -> AsyncIterator[bytes]:
        """Yield the body in chunks of at most ``size`` bytes.

        Raises:
            APIConnectionError: The connection broke, or a read timed out
                (``APITimeoutError``), before the body was complete.
        """
        try:
            async for chunk in self._response.content.iter_chunked(size):
                yield chunk
        except NETWORK_ERRORS as exc:
            raise connection_error(exc, "GET", self._path, may_have_taken_effect=False) from exc

    async def read_excerpt(self) -> str:
        """The first characters of the body, for error messages."""
        try:
            # More than is shown, so that a key across the cut is redacted whole.
            raw = await self._response.content.read(EXCERPT_CHARS + 4096)
        except NETWORK_ERRORS:
            return ""
        return excerpt(raw)


class Transport:
    """Sends requests to the service and decodes its envelopes.

    A transport is cheap: :meth:`copy` makes one with other timeouts or retries that shares
    the same :class:`SessionOwner` (and so the same connection pool and the same pacing).
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str,
        owner: SessionOwner,
        timeout: Timeout,
        backoff: BackoffPolicy,
        default_headers: Mapping[str, str] | None = None,
        max_body_size: int = DEFAULT_MAX_BODY,
        rng: random.Random | None = None,
        deadline: float | None = None,
        trust_env: bool = True,
        proxy: str | _Unset | None = UNSET,
        hooks: EventHooks | None = None,
    ) -> None:
        self._api_key = _Secret(api_key)
        register_secret(api_key)
        self.base_url = base_url.rstrip("/")
        base = URL(self.base_url)
        self._encoded_base = str(base)
        # The parts each request's URL is built from, already encoded (see `request`).
        self._base_parts = (base.scheme, base.raw_authority, base.raw_path.rstrip("/"))
        self.owner = owner
        #: The pacing state shared by the client and its views.
        self.pacing = owner.pacing
        self.timeout = timeout
        self.backoff = backoff
        self.deadline = deadline
        self.trust_env = trust_env
        self.max_body_size = max_body_size
        self._rng = rng or random.Random()
        # Built once: aiohttp takes a CIMultiDict as it is (a dict, it converts per request).
        self._headers = CIMultiDict(
            {"Accept": "application/json", "User-Agent": user_agent(), **(default_headers or {})}
        )
        self._headers["Authorization"] = _Secret(f"Bearer {api_key}")
        self._json_headers = self._headers.copy()
        self._json_headers["Content-Type"] = "application/json"
        self._aio_timeout = timeout.to_aiohttp()
        self._watch = Watch()  # shared by the views: one loop timer for every attempt
        self.hooks = hooks or EventHooks()
        # Hooks and spans: no observer (and no cost) when there is neither.
        self._observer = (
            RequestObserver(self.hooks, base.host or "", base.port)
            if self.hooks or _otel.ENABLED
            else None
        )
        # The proxy is read from the environment once, when the client is made (as httpx
        # does), not per request.
        self._proxy = (
            proxy_for(self.base_url, trust_env=trust_env) if isinstance(proxy, _Unset) else proxy
        )

    def copy(
        self,
        *,
        timeout: Timeout | None = None,
        backoff: BackoffPolicy | None = None,
        deadline: float | _Unset | None = UNSET,
    ) -> Transport:
        """A transport sharing this one's session and pacing, with the settings given."""
        view = copy.copy(self)
        view.timeout = timeout = timeout or self.timeout
        view.backoff = backoff or self.backoff
        view.deadline = self.deadline if isinstance(deadline, _Unset) else deadline
        view._aio_timeout = timeout.to_aiohttp()
        return view

    def call_bound(self, timeout: Timeout | None = None) -> float | None:
        """Seconds within which one call (with its own ``timeout``) ends (``None``: no bound)."""
        if self.deadline is not None:
            return self.deadline
        total = (timeout or self.timeout).total
        if total is None:
            return None
        # A create is retried only when it was not sent (or after a 429): the first attempt's
        # bound, plus a little for the answer to be logged.
        return total + 1.0

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Mapping[str, Any] | None = None,
        retries: int | None = None,
        options: CallOptions = NO_OPTIONS,
    ) -> Response:
        """Send a request under the base URL, retrying what is safe to retry; its envelope.

        ``params`` are percent-encoded already (names and values): a query ``name=value``
        each. ``retries`` overrides the policy's ``max_retries`` (a waiting loop passes 0: it
        owns the backoff); ``options`` are the call's extras and timeouts. Failures raise the
        error tree (``APIConnectionError``, ``APITimeoutError``, ``APIStatusError``,
        ``APIResponseError``).
        """
        if options.extra_query:
            params = {
                name: value
                for name, value in {**(params or {}), **options.extra_query}.items()
                if value is not None
            }
        if options.extra_body is not None:
            json_body = {**(json_body or {}), **options.extra_body}
        # The URL is built once from encoded parts: aiohttp then skips re-parsing and
        # re-quoting it, and yarl parses nothing (each poll's id makes a new URL, and parsing
        # one is a measurable share of a poll's CPU). Paths, ids and ``extra_query`` arrive
        # percent-encoded (an id by the check that reads it, ``check_id(encode=True)``): the
        # query is joined in C, name=value pairs and all.
        query = "&".join(map("=".join, (params or {}).items()))
        scheme, authority, prefix = self._base_parts
        url = URL.build(
            scheme=scheme, authority=authority, path=prefix + path, query_string=query, encoded=True
        )
        body = None if json_body is None else json_text(json_body, "").encode()
        headers = self._headers if body is None else self._json_headers
        if options.extra_headers:
            headers = options.with_headers(headers)
        timeouts = options.timeout or self.timeout
        pacing = self.pacing
        observer = self._observer
        first = started = time.monotonic()
        deadline = math.inf if self.deadline is None else first + self.deadline
        attempt = 0
        sent = -math.inf
        while True:
            attempt += 1
            try:
                slot = pacing.try_acquire()
                sent = (
                    slot if slot is not None else await self._paced(pacing, method, path, deadline)
                )
                try:
                    if observer is None or not observer.active():
                        response = await self._send_once(
                            method, url, path, body, headers, timeouts, deadline
                        )
                    else:
                        response = await observer.send(
                            functools.partial(
                                self._send_once,
                                method,
                                url,
                                path,
                                body,
                                headers,
                                timeouts,
                                deadline,
                            ),
                            method=method,
                            path=path,
                            url=str(url),
                            attempt=attempt,
                        )
                finally:
                    pacing.release()
            except VideoGenError as exc:
                delay = self._retry_delay(
                    exc, method, path, attempt, started, deadline, retries, sent
                )
                if delay is None:
                    raise
                if observer is not None:
                    await observer.retry(method, path, attempt, delay, exc)
                await asyncio.sleep(delay)
                started = time.monotonic()
                continue
            pacing.succeeded()
            # What a result tells of the answer: the attempts it took, the time, the URL.
            now = time.monotonic()
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "%s %s -> %d in %.1f ms (attempt %d, trace_id=%s)",
                    method,
                    path,
                    response.status_code,
                    (now - started) * 1000,
                    attempt,
                    response.trace_id,
                )
            response.info = ResponseInfo(
                response.status_code,
                response.headers,
                response.trace_id,
                method,
                self._encoded_base + path + ("?" + query if query else ""),
                attempt,
                now - first,
            )
            return response

    def _retry_delay(
        self,
        exc: VideoGenError,
        method: str,
        path: str,
        attempt: int,
        started: float,
        deadline: float,
        retries: int | None,
        sent: float,
    ) -> float | None:
        """The pause before the next attempt after ``exc``, or ``None``: not retried.

        A 429 is recorded in the client's pacing first (``sent``: when its slot was taken).
        """
        now = time.monotonic()
        policy = _with_retries(self.backoff, retries)
        if isinstance(exc, RateLimitError):
            self.pacing.rate_limited(honoured_retry_after(exc, policy), sent, policy)
        decision = decide_retry(
            exc,
            method=method,
            failures=attempt,
            policy=policy,
            remaining=deadline - now,
            rng=self._rng,
        )
        retry = decision.delay
        logger.debug(
            "%s %s failed after %.1f ms (attempt %d of %d): %s: %s; %s",
            method,
            path,
            (now - started) * 1000,
            attempt,
            policy.max_retries + 1,
            type(exc).__name__,
            exc,
            f"not retried: {decision.detail}" if retry is None else f"retrying in {retry:.2f} s",
        )
        if retry is None:
            if decision.reason == "too long":
                exc.message = f"{exc.message}; not retried: {decision.detail}"
                exc.args = (exc.message,)
            drop_locals(exc)  # the answer the frames below held, key echoed and all
        return retry

    async def _paced(self, pacing: Pacing, method: str, path: str, deadline: float) -> float:
        """Take a slot of the client's pacing, within the call's deadline.

        A pause that ends past the deadline fails the call at once, saying so.
        """
        if deadline == math.inf:
            return await pacing.acquire()
        left = deadline - time.monotonic()
        paused = pacing.paused_until - time.monotonic()  # the pacing's clock
        if paused < left:
            with anyio.move_on_after(max(0.0, left)):
                return await pacing.acquire()
            why = "passed while the client was paused by a 429"
        else:
            why = f"ends in {max(left, 0.0):.3g} s, before the client's 429 pause ({paused:.3g} s)"
        raise self._past_deadline(method, path, why)

    def _past_deadline(self, method: str, path: str, why: str) -> APITimeoutError:
        return APITimeoutError(
            f"{method} {path}: the call's deadline of {self.deadline:g} s {why}",
            method=method,
            path=path,
            request_may_have_taken_effect=False,
        )

    async def _send_once(
        self,
        method: str,
        url: URL,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeouts: Timeout,
        deadline: float,
    ) -> Response:
        session = self.owner.get()
        total = timeouts.total
        if deadline != math.inf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._past_deadline(method, path, "passed")
            total = left if total is None else min(total, left)
        bound = Bound(self._watch, total, timeouts.read)
        may = method != "GET"  # have taken effect, after a failure once sent
        try:
            async with session.request(
                method,
                url,
                data=body,
                headers=headers,
                timeout=self._aio_timeout if timeouts is self.timeout else timeouts.to_aiohttp(),
                allow_redirects=False,
                proxy=self._proxy,
            ) as resp:
                bound.response = resp
                length = resp.content_length
                limit = self.max_body_size
                if length is not None and length > limit:
                    raise _too_large(resp.status, method, path, f"body of {length} bytes", limit)
                if length is not None and "Content-Encoding" not in resp.headers:
                    raw = await resp.read()  # an identity body of a known size: one read
                else:
                    # A body of unknown size, or compressed, counted as it arrives: a
                    # Content-Length counts the bytes on the wire, which a Content-Encoding
                    # (gzip, deflate) may inflate a thousandfold, so such a body is counted
                    # decoded and refused past the limit.
                    counted = bytearray()
                    async for chunk in resp.content.iter_chunked(64 * 1024):
                        counted += chunk
                        if len(counted) > limit:
                            raise _too_large(resp.status, method, path, "body", limit)
                    raw = bytes(counted)
        except asyncio.CancelledError:
            if not bound.expired():
                raise
            raise connection_error(
                asyncio.TimeoutError(), method, path, may_have_taken_effect=may
            ) from None
        except NETWORK_ERRORS as exc:
            raise connection_error(exc, method, path, may_have_taken_effect=may) from exc
        finally:
            self._watch.discard(bound)
        return decode(resp.status, raw, resp.headers, method=method, path=path)

    @asynccontextmanager
    async def stream(
        self, url: str, *, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[StreamResponse]:
        """Open a streamed GET of ``url`` (a media host's) *without* the API key, for downloads.

        Redirects are followed by aiohttp, which sends on nothing we did not add.

        Raises:
            APIConnectionError: The host could not be reached, or did not answer in time
                (``APITimeoutError``).
        """
        session = self.owner.get()
        sent = {"User-Agent": self._headers["User-Agent"], **(headers or {})}
        sent.pop("Authorization", None)
        path = urlsplit(url).path or "/"  # for messages: a media URL's query may be signed
        proxy = proxy_for(url, trust_env=self.trust_env)
        try:
            async with session.get(
                url, headers=sent, timeout=self.timeout.streaming(), proxy=proxy
            ) as resp:
                yield StreamResponse(resp, path)
        except VideoGenError:  # ours already (an APITimeoutError is a TimeoutError): as it is
            raise
        except NETWORK_ERRORS as exc:
            raise connection_error(exc, "GET", path, may_have_taken_effect=False) from exc


def _too_large(status: int, method: str, path: str, what: str, limit: int) -> APIResponseError:
    return APIResponseError(
        f"{method} {path}: HTTP {status} {what} exceeds the {limit}-byte limit",
        status_code=status,
        request_may_have_taken_effect=method != "GET",
    )


@functools.lru_cache(maxsize=64)
def _with_retries(policy: BackoffPolicy, retries: int | None) -> BackoffPolicy:
    """``policy`` with ``max_retries=retries`` (``None``: as it is), built once per pair.

    A gather's polls pass ``retries=0`` with every failure: not a new policy each time.
    """
    if retries in (None, policy.max_retries):
        return policy
    return attrs.evolve(policy, max_retries=retries)
