"""The connection pool a client and its views share, its timeouts and its proxy."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import math
import time
import traceback
import urllib.request
import warnings
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import attrs

from .._contract._checks import number, whole
from ._pacing import Pacing

logger = logging.getLogger("videogen_async")

#: How long ``aclose()`` waits for an in-flight create whose caller was cancelled, when the
#: client's timeouts set no bound on the call at all (``timeout=None`` and no deadline).
DRAIN_TIMEOUT = 30.0


@attrs.frozen
class Timeout:
    """Per-attempt timeouts of one HTTP request, in seconds (``None`` means no limit).

    ``total`` bounds the whole attempt, so a server that trickles its answer cannot hold a
    call; each retry gets a fresh one (the client's ``deadline`` bounds a call with all its
    retries; a wait's ``timeout`` bounds the whole wait).

    Attributes:
        connect: Opening a connection (TCP and TLS).
        read: The longest silence of the answer: for its first bytes, then between two reads
            (measured to within a quarter of it).
        total: The whole attempt, connect to last byte (120 s by default).
    """

    connect: float | None = 10.0
    read: float | None = 60.0
    total: float | None = 120.0

    @classmethod
    def of(cls, value: Timeout | float | None) -> Timeout:
        """A ``Timeout`` from a number of seconds (the whole attempt) or ``None`` (no limit).

        Raises:
            InvalidRequestError: The number is not positive.
        """
        if isinstance(value, Timeout):
            return value
        if value is None:
            return cls(None, None, None)
        seconds = number("timeout", value, above=True, finite=False)
        return cls(min(seconds, 10.0), seconds, seconds)  # connect, read, total

    def to_aiohttp(self) -> aiohttp.ClientTimeout:
        """An attempt's ``aiohttp.ClientTimeout``: ``connect`` (the transport keeps the rest)."""
        return aiohttp.ClientTimeout(sock_connect=self.connect)

    def streaming(self) -> aiohttp.ClientTimeout:
        """A download's ``aiohttp.ClientTimeout``: ``connect``, ``read`` and no total."""
        return aiohttp.ClientTimeout(sock_connect=self.connect, sock_read=self.read)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine: ``localhost``, a ``*.localhost`` name or a loopback IP.

    An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) is judged by its IPv4 address, as
    Python 3.13 does and earlier versions did not.
    """
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return bool((getattr(address, "ipv4_mapped", None) or address).is_loopback)


def proxy_for(url: str, *, trust_env: bool = True) -> str | None:
    """The proxy the environment sets for ``url`` as requests and httpx read it, or ``None``.

    ``HTTPS_PROXY`` for an ``https`` URL, ``HTTP_PROXY`` for ``http``, else ``ALL_PROXY``
    (any case); none when ``NO_PROXY`` names the host (or is ``*``), for this machine
    (:func:`is_loopback`) or without ``trust_env``. Only ``http(s)://`` proxies are used
    (aiohttp has no SOCKS support); another scheme is ignored and logged.
    """
    if not trust_env:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or not host:
        return None
    # As Go's ProxyFromEnvironment: a local sandbox is never proxied.
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if is_loopback(host) or bypass(host, proxies):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy
    if not proxy.lower().startswith(("http://", "https://")):
        logger.warning("ignored the proxy of the environment (only http(s) proxies are supported)")
        return None
    return proxy


class _Unset:
    """The type of "not given" for options where ``None`` is a value."""

    def __repr__(self) -> str:
        return "<not given>"


UNSET: Any = _Unset()


class SessionOwner:
    """Holds the ``aiohttp.ClientSession`` shared by a client and its ``with_options`` views.

    Created lazily in the running loop and closed by :meth:`aclose`; a caller's own is borrowed.
    """

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession | None = None,
        connection_limit: int = 100,
        created_at: traceback.StackSummary | None = None,
    ) -> None:
        whole("connection_limit", connection_limit)
        self._session = session
        self._owned = session is None
        self._connection_limit = connection_limit
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Whether :meth:`aclose` was called.
        self.closed = False
        self._in_flight: dict[asyncio.Future[Any], float] = {}
        self.pacing = Pacing()
        self._created_at = created_at

    def track(self, job: asyncio.Future[Any], bound: float | None = None) -> None:
        """Keep a creating request that must finish before the session closes.

        ``aclose()`` waits for it at most ``bound`` seconds (the call's bound by the client's
        timeout settings; ``None``: they set none).
        """
        self._in_flight[job] = math.inf if bound is None else time.monotonic() + bound
        job.add_done_callback(self._untrack)

    def _untrack(self, job: asyncio.Future[Any]) -> None:
        self._in_flight.pop(job, None)

    def get(self) -> aiohttp.ClientSession:
        """Return the session, creating it in the running loop on first use.

        Raises:
            RuntimeError: The client was closed, or it is used from a second event loop.
        """
        if self.closed:
            raise RuntimeError("this AsyncVideoGen client is closed")
        loop = asyncio.get_running_loop()
        if self._session is None:
            # trust_env stays False: the proxy of the environment is read by the transport
            # once (``proxy_for``), not per request, and no ~/.netrc credentials are sent.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connection_limit, ttl_dns_cache=300),
                timeout=aiohttp.ClientTimeout(),  # no total: the transport bounds each attempt
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
        return len(getattr(session.connector, "_acquired", ()))

    async def aclose(self) -> None:
        """Close the session if this owner created it. Idempotent.

        Creates whose callers were cancelled are waited for first (each within its bound, see
        :meth:`track`; ``DRAIN_TIMEOUT`` when there is none), so that the id of what they
        created is logged; one still running then is cancelled and logged as possibly done.
        """
        if self.closed:
            return
        if self._in_flight:
            end = max(self._in_flight.values())
            wait = DRAIN_TIMEOUT if end == math.inf else max(0.0, end - time.monotonic())
            _, pending = await asyncio.wait(set(self._in_flight), timeout=wait)
            for job in pending:
                job.cancel()
            if pending:
                await asyncio.wait(pending)
        self.closed = True
        session, self._session = self._session, None
        if self._owned and session is not None and not session.closed:
            await session.close()

    def __del__(self) -> None:
        session = getattr(self, "_session", None)
        if session is None or not getattr(self, "_owned", False) or session.closed:
            return
        # Close the pool's sockets here, so that aiohttp adds no warnings of its own, and
        # say once, clearly, which client was not closed and where it was made.
        closing = getattr(session.connector, "_close", None)
        if callable(closing):
            with contextlib.suppress(Exception):  # best effort, even at interpreter exit
                closing()
        # Most recent call first; no source lines (reading files here would block).
        where = (
            "; it was created at "
            + " <- ".join(
                f"{frame.filename}:{frame.lineno} in {frame.name}" for frame in self._created_at
            )
            if self._created_at
            else ""
        )
        warnings.warn(
            "an AsyncVideoGen client was not closed: call `await client.aclose()` or use"
            " `async with AsyncVideoGen() as client`" + where,
            ResourceWarning,
            stacklevel=2,
            source=self,
        )
