"""``AsyncVideoGen``: the client."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import sys
import traceback
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

import aiohttp
import attrs

from ._contract._checks import instance, positive, web_url
from ._contract._closing import AsyncClosing
from ._contract._exceptions import ConfigurationError
from ._contract._models import GetTask
from ._download._calls import DownloadCalls
from ._http._options import check_headers
from ._http._retry import DEFAULT_BACKOFF, BackoffPolicy
from ._http._session import UNSET, SessionOwner, Timeout, is_loopback
from ._http._transport import DEFAULT_MAX_BODY, Transport
from ._observe._hooks import EventHook, EventHooks
from ._observe._logging import configure_from_env
from ._resources._credits import Credits
from ._resources._projects import Projects
from ._resources._tasks import Tasks
from ._waiting._policy import DEFAULT_POLICY, PollPolicy
from ._waiting._polling import TaskSource
from ._waiting._schedule import FinishTimeMemory, InMemoryFinishTimes

DEFAULT_TIMEOUT = Timeout(connect=10.0, read=60.0, total=120.0)
DEFAULT_CONNECTION_LIMIT = 100


def _valid_host(written: str, host: str) -> bool:
    """Whether a bracketed host is an IP address, and the host can go on the wire (as IDNA)."""
    try:
        if written.startswith("["):
            ipaddress.ip_address(written[1:-1])
        host.encode("idna")  # a non-ASCII name, as aiohttp sends it
    except ValueError:  # UnicodeError included
        return False
    return True


# The authority of a base URL: a bracketed IPv6 address or a name without the characters that
# parsers read differently (so the host checked here is the host aiohttp connects to), and an
# optional port.
_AUTHORITY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\[\]@:/\\?#%\s]+)(?::[0-9]{0,5})?")


def _check_base_url(base_url: str, *, allow_insecure_http: bool) -> str:
    try:
        text = web_url("base_url", base_url, instead="pass api_key instead")
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    parts = urlsplit(text)
    host = parts.hostname or ""
    authority = _AUTHORITY.fullmatch(parts.netloc)
    if authority is None or not _valid_host(authority["host"], host):
        raise ConfigurationError(f"base_url has an invalid host or port: {text!r}")
    if parts.query or parts.fragment:
        raise ConfigurationError(f"base_url must not have a query or fragment: {text!r}")
    if parts.scheme == "http" and not allow_insecure_http and not is_loopback(host):
        raise ConfigurationError(
            f"base_url {text!r} uses plain http to a host that is not loopback: the API key"
            " would cross the network unencrypted. Use https, or pass"
            " allow_insecure_http=True if you really mean it."
        )
    if parts.path.rstrip("/").endswith("/v1"):  # as other SDKs write it
        logging.getLogger("videogen_async").debug("base_url %r: its /v1 is left out", text)
        return text.rstrip("/")[:-3]
    return text.rstrip("/")


def _checked(backoff: object, max_retries: int | None, deadline: float | None) -> BackoffPolicy:
    """The backoff policy of a client, checked, with ``max_retries`` (when given) in it.

    Checks ``deadline`` too (positive seconds or ``None``). Raises ``InvalidRequestError``,
    which the client's calls re-raise as ``ConfigurationError``.
    """
    policy = instance("backoff", backoff, BackoffPolicy, "must be a BackoffPolicy")
    if deadline is not None:
        positive("deadline", deadline)
    return policy if max_retries is None else attrs.evolve(policy, max_retries=max_retries)


class RawResponseClient:
    """``client.with_raw_response``: ``.tasks`` as ``client.tasks.with_raw_response``..."""

    def __init__(self, tasks: Tasks, projects: Projects, credits: Credits) -> None:
        self.tasks = tasks.with_raw_response
        self.projects = projects.with_raw_response
        self.credits = credits.with_raw_response


class AsyncVideoGen(DownloadCalls, AsyncClosing):
    """The asyncio client of the video generation service.

    Serves any number of concurrent tasks of one event loop; close it (``async with``)::

        async with AsyncVideoGen() as client:
            balance = await client.credits.get()

    Args:
        api_key: The API key; defaults to the ``VIDEOGEN_API_KEY`` environment variable.
        base_url: The service's base URL; defaults to ``VIDEOGEN_BASE_URL``. A trailing
            ``/v1`` is left out (each request's path starts with it).
        timeout: Per-attempt timeouts: a :class:`Timeout` or seconds for a whole attempt
            (``None``: none). Default: 10 s connect, 60 s per read, 120 s in all.
        max_retries: Retries of a request after a transient failure (0 turns them off;
            ``None``: the backoff policy's, 2 by default). Creating calls are retried only
            when the request provably did not take effect.
        deadline: Seconds for a whole call, all its attempts and the waits between them
            included (``None``: only ``timeout`` bounds each attempt).
        session: An ``aiohttp.ClientSession`` of your own; it is used as it is and never
            closed by the client.
        connection_limit: The size of the client's own connection pool.
        poll_policy: When the wait helpers and ``gather_until_done`` poll, by default.
        backoff: How the client slows down under failure (:class:`BackoffPolicy`).
        default_headers: Extra headers sent with every request, checked as ``extra_headers`` are.
        allow_insecure_http: Allow a plain ``http://`` base URL to a host that is not
            loopback.
        max_body_size: The largest response body read, in bytes.
        trust_env: Use the environment's proxy (``HTTPS_PROXY``, ``HTTP_PROXY``,
            ``ALL_PROXY``, minus ``NO_PROXY``), also for your ``session``; ``False``: direct.
        event_hooks: Lists of plain or async callables per event name: ``"request"``,
            ``"response"``, ``"retry"``, ``"poll"``; a hook that raises is logged. See
            ``docs/observability.md``.

    Raises:
        ConfigurationError: The key or base URL is missing or invalid.
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: Timeout | float | None = DEFAULT_TIMEOUT,
        max_retries: int | None = None,
        session: aiohttp.ClientSession | None = None,
        connection_limit: int = DEFAULT_CONNECTION_LIMIT,
        poll_policy: PollPolicy | None = None,
        backoff: BackoffPolicy | None = None,
        default_headers: dict[str, str] | None = None,
        allow_insecure_http: bool = False,
        max_body_size: int = DEFAULT_MAX_BODY,
        deadline: float | None = None,
        trust_env: bool = True,
        event_hooks: Mapping[str, Sequence[EventHook]] | None = None,
    ) -> None:
        configure_from_env()
        key = api_key if api_key is not None else os.environ.get("VIDEOGEN_API_KEY")
        if key is None or not key.strip():
            raise ConfigurationError(
                "no API key: pass api_key=... or set the VIDEOGEN_API_KEY environment variable"
            )
        if key != key.strip() or any(c in key for c in "\r\n\0"):
            raise ConfigurationError("the API key must not contain spaces or line breaks")
        url = base_url if base_url is not None else os.environ.get("VIDEOGEN_BASE_URL")
        if url is None or not url.strip():
            raise ConfigurationError(
                "no base URL: pass base_url=... or set the VIDEOGEN_BASE_URL environment"
                " variable (for a local sandbox: `videogen sandbox`)"
            )
        headers = dict(default_headers or {})
        base = _check_base_url(url, allow_insecure_http=allow_insecure_http)
        try:  # an InvalidRequestError (a ValueError) here is the client's configuration
            policy = _checked(backoff or DEFAULT_BACKOFF, max_retries, deadline)
            check_headers(headers, "default_headers", key)  # a ValueError, as Timeout.of raises
            timeouts = Timeout.of(timeout)
            owner = SessionOwner(
                session=session,
                connection_limit=connection_limit,
                # Where the client was made, named if it is dropped without aclose().
                created_at=traceback.StackSummary.extract(
                    traceback.walk_stack(sys._getframe(1)), limit=8, lookup_lines=False
                ),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self._compose(
            Transport(
                api_key=key,
                base_url=base,
                owner=owner,
                timeout=timeouts,
                backoff=policy,
                default_headers=headers,
                max_body_size=max_body_size,
                deadline=deadline,
                trust_env=trust_env,
                hooks=EventHooks(event_hooks),
            ),
            poll_policy,
            owns_session=True,
        )

    def _compose(
        self,
        transport: Transport,
        poll_policy: PollPolicy | None,
        *,
        owns_session: bool,
        finish_times: FinishTimeMemory | None = None,
    ) -> None:
        self._transport = transport
        self._owns_session = owns_session
        self._poll_policy = poll_policy
        policy = poll_policy or DEFAULT_POLICY
        self._finish_times = finish_times if finish_times is not None else InMemoryFinishTimes()
        self.tasks = Tasks(transport, policy, self._finish_times)
        self.projects = Projects(transport, policy, self.tasks._fetch_once)
        self.credits = Credits(transport, policy)
        #: The same calls, each returning a :class:`RawResponse` (status, headers,
        #: ``trace_id``) whose ``parse()`` gives the result.
        self.with_raw_response = RawResponseClient(self.tasks, self.projects, self.credits)

    def _task_source(self) -> TaskSource:
        """The narrow interface the waiting engines poll this client through."""
        return self.tasks._source()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, timeout={self.timeout!r},"
            f" max_retries={self.max_retries})"
        )

    @property
    def base_url(self) -> str:
        """The service's base URL."""
        return self._transport.base_url

    @property
    def timeout(self) -> Timeout:
        """The per-attempt timeouts."""
        return self._transport.timeout

    @property
    def deadline(self) -> float | None:
        """Seconds for a whole call with all its retries (``None``: no such bound)."""
        return self._transport.deadline

    @property
    def max_retries(self) -> int:
        """Retries of a request after a transient failure."""
        return self._transport.backoff.max_retries

    @property
    def backoff(self) -> BackoffPolicy:
        """How the client slows down under failure."""
        return self._transport.backoff

    @property
    def poll_policy(self) -> PollPolicy:
        """The default poll policy of the wait helpers and ``gather_until_done``."""
        return self._poll_policy or DEFAULT_POLICY

    @property
    def finish_times(self) -> FinishTimeMemory:
        """What ``gather_until_done`` learned of each class of tasks' finish times.

        Kept in memory for the client's next gathers, and shared with its views.
        """
        return self._finish_times

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`aclose` was called (on this client or the one it was made from)."""
        return self._transport.owner.closed

    def with_options(
        self,
        *,
        timeout: Timeout | float | None = UNSET,
        max_retries: int | None = None,
        poll_policy: PollPolicy | None = None,
        backoff: BackoffPolicy | None = None,
        deadline: float | None = UNSET,
    ) -> AsyncVideoGen:
        """A view of this client with other options, sharing its connection pool and pacing.

        E.g. ``client.with_options(max_retries=0).tasks.get(task_id)``. The view closes with
        its client (its own :meth:`aclose` does nothing).

        Args:
            timeout: New per-attempt timeouts (a :class:`Timeout` or seconds).
            max_retries: New number of retries.
            poll_policy: New default poll policy.
            backoff: New backoff policy (``max_retries``, when given, overrides its own).
            deadline: New deadline of a whole call with its retries (``None``: none).

        Returns:
            The view.

        Raises:
            ConfigurationError: An option is invalid.
        """
        try:
            policy = _checked(
                backoff or self._transport.backoff,
                max_retries,
                None if deadline is UNSET else deadline,
            )
            new_timeout = None if timeout is UNSET else Timeout.of(timeout)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        transport = self._transport.copy(timeout=new_timeout, backoff=policy, deadline=deadline)
        view = type(self).__new__(type(self))
        view._compose(
            transport,
            poll_policy or self._poll_policy,
            owns_session=False,
            finish_times=self._finish_times,
        )
        return view

    def _download_through(self) -> tuple[Transport, GetTask]:
        return self._transport, self.tasks.get

    async def aclose(self) -> None:
        """Close the client's connection pool (not a session you passed in). Idempotent."""
        if self._owns_session:
            await self._transport.owner.aclose()
