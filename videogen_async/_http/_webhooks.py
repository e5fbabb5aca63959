"""Signed webhooks, by the Standard Webhooks specification: sending and verifying.

The scheme (HMAC-SHA256 of ``"{id}.{timestamp}.{body}"``, ``v1,<base64>``) is a few lines of
the standard library, written here rather than adding a core dependency; tests check it
against ``standardwebhooks`` both ways. A receiver is someone else's server: no redirect, every
attempt bounded, an excerpt of the answer read, nothing of the client used, and no link-local or
cloud metadata address (by URL host or resolution).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import ResolveResult

from .._contract._checks import positive, web_url
from .._contract._exceptions import (
    InvalidRequestError,
    WebhookDeliveryError,
    WebhookVerificationError,
)
from .._contract._redact import redact_text
from .._contract._validation import json_text
from ._envelope import NETWORK_ERRORS, user_agent
from ._options import check_headers
from ._session import proxy_for

SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix every such secret carries, not a secret
TOLERANCE = 300.0
"""Seconds a message's timestamp may differ from the receiver's clock (the specification's 5
minutes), against replays."""

_EXCERPT = 512
_SIGNED = ("webhook-id", "webhook-timestamp", "webhook-signature")
_RESERVED = dict.fromkeys((*_SIGNED, "content-type"), "the webhook sets it")
_METADATA_NAMES = {"metadata", "metadata.google.internal", "metadata.goog", "instance-data"}
_METADATA_IPS = {ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200")}
_RULE = "a link-local or cloud metadata address (allow_metadata_hosts=True to send there)"


def _is_metadata(host: str) -> bool:
    """Whether ``host`` is link-local (169.254.0.0/16, fe80::/10) or a cloud metadata service."""
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host.lower().rstrip(".") in _METADATA_NAMES
    ip = getattr(ip, "ipv4_mapped", None) or ip
    return bool(ip.is_link_local or ip in _METADATA_IPS)


class _Resolver(aiohttp.ThreadedResolver):  # refusing a name resolving to a metadata address
    async def resolve(self, host: str, *args: Any, **kwargs: Any) -> list[ResolveResult]:
        found = await super().resolve(host, *args, **kwargs)
        if refused := [each["host"] for each in found if _is_metadata(each["host"])]:
            raise aiohttp.ClientConnectionError(f"{host} resolves to {refused[0]}, {_RULE}")
        return found


# An entry is a ledger's ``LedgerEntry`` (a layer above): its ``key``, ``state``,
# ``finished_at`` (a datetime or None) and ``to_dict()`` are read.
_Entry = Any


def _secret_key(secret: object) -> bytes:
    """The key bytes of a Standard Webhooks secret: ``whsec_`` and base64 of 24 to 64 bytes."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise InvalidRequestError(
            "secret", "must be a Standard Webhooks secret: 'whsec_' then base64"
        )
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(
            "secret", "must be a Standard Webhooks secret: base64 after 'whsec_'"
        ) from None
    if not 24 <= len(key) <= 64:
        raise InvalidRequestError("secret", "must encode 24 to 64 random bytes")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of one message (``v1,<base64 HMAC-SHA256>``)."""
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def message_id(entry: _Entry) -> str:
    """The ``webhook-id`` of an entry's terminal state: the same on every retry and dispatcher.

    A receiver that saw the id already can answer 2xx and do nothing (deliveries are at least
    once).
    """
    finished = entry.finished_at.isoformat() if entry.finished_at else ""
    digest = hashlib.sha256(f"{entry.key}\0{entry.state}\0{finished}".encode()).digest()
    return "msg_" + base64.b32encode(digest[:15]).decode().lower()


def verify_webhook(
    body: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance: float = TOLERANCE,
    now: float | None = None,
) -> Any:
    """Check a delivery's signature (Standard Webhooks) and return its parsed JSON payload.

    Args:
        body: The raw request body, exactly as received.
        headers: The request headers (any case).
        secret: The destination's secret (``whsec_...``).
        tolerance: Seconds the ``webhook-timestamp`` may be away from now.
        now: The current time (``time.time()`` by default).

    Returns:
        The payload: ``{"type": ..., "timestamp": ..., "data": {...the entry...}}``.

    Raises:
        WebhookVerificationError: A header missing or malformed, a timestamp out of
            tolerance, no matching signature, or a body that is not JSON.
        InvalidRequestError: ``secret`` is not a Standard Webhooks secret.
    """
    key = _secret_key(secret)
    raw = body.encode() if isinstance(body, str) else bytes(body)
    msg_id, stamp, signatures = map(
        {name.lower(): value for name, value in headers.items()}.get, _SIGNED
    )
    if not (msg_id and stamp and signatures):
        raise WebhookVerificationError("webhook: a webhook-id, -timestamp or -signature is missing")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook: the webhook-timestamp is not a number") from None
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        raise WebhookVerificationError("webhook: the webhook-timestamp is outside the tolerance")
    expected = sign(key, msg_id, timestamp, raw).encode()
    if not any(
        hmac.compare_digest(expected, candidate.encode())
        for candidate in signatures.split()
        if candidate.isascii()
    ):
        raise WebhookVerificationError("webhook: no signature matches")
    try:
        return json.loads(raw)
    except ValueError:
        raise WebhookVerificationError("webhook: the body is not JSON") from None


class Webhook:
    """A ``deliver`` for :meth:`Ledger.dispatch` that POSTs each entry to ``url``, signed.

    Call it with an entry; it returns once the receiver answered 2xx and raises
    :class:`WebhookDeliveryError` otherwise (the dispatcher then retries later). Close it with
    :meth:`aclose` (a dispatch does when it ends).

    The body is ``{"type": "video.<state>", "timestamp": ISO 8601, "data": entry.to_dict()}``;
    headers by Standard Webhooks (:func:`verify_webhook`); ``webhook-id`` is the same for
    every retry of one entry's terminal state, so a receiver can drop duplicates.

    Args:
        url: The receiver, ``http(s)://``, without user info, never a link-local or cloud
            metadata address (by host or resolution).
        secret: ``whsec_`` and the base64 of 24 to 64 random bytes.
        timeout: Seconds one delivery may take, connection to answer.
        headers: Extra headers to send (e.g. the receiver's own token); never an API key.
        allow_metadata_hosts: Send to a link-local or cloud metadata address all the same.

    Raises:
        InvalidRequestError: A bad URL (not http(s), with user info, a metadata address),
            secret, timeout, or header (a reserved one, or one carrying an API key).
    """

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        allow_metadata_hosts: bool = False,
    ) -> None:
        self.url = web_url("url", url)
        parts = urlsplit(self.url)
        if not allow_metadata_hosts and _is_metadata(parts.hostname or ""):
            raise InvalidRequestError("url", f"must not be {_RULE}")
        self._resolver = None if allow_metadata_hosts else _Resolver
        self._key = _secret_key(secret)
        positive("timeout", timeout)
        self._headers = {
            "User-Agent": user_agent(),
            **{
                k: v
                for k, v in check_headers(headers or {}, "headers", refused=_RESERVED).items()
                if v is not None
            },
        }
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, 10.0))
        self._proxy = proxy_for(self.url)
        self._session: aiohttp.ClientSession | None = None
        self._where = f"{parts.scheme}://{parts.netloc}{parts.path}"

    def __repr__(self) -> str:
        return f"Webhook({self._where!r})"

    async def __call__(self, entry: _Entry) -> None:
        """POST one entry, signed; return when the receiver answered 2xx.

        Raises:
            WebhookDeliveryError: No 2xx answer (an error status, a redirect, a timeout or a
                connection failure); the dispatcher retries later.
        """
        body = json_text(
            {
                "type": f"video.{entry.state}",
                "timestamp": datetime.now(timezone.utc).isoformat(),
                "data": entry.to_dict(),
            },
            "",
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()
        msg_id = message_id(entry)
        stamp = int(time.time())
        headers = {
            **self._headers,
            "Content-Type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": sign(self._key, msg_id, stamp, body),
        }
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                trust_env=False,
                connector=aiohttp.TCPConnector(resolver=self._resolver and self._resolver()),
            )
        try:
            async with self._session.post(
                self.url,
                data=body,
                headers=headers,
                timeout=self._timeout,
                allow_redirects=False,
                proxy=self._proxy,
            ) as response:
                if 200 <= response.status < 300:
                    return
                excerpt = (await response.content.read(_EXCERPT)).decode("utf-8", "replace")
                status = response.status
        except NETWORK_ERRORS as exc:
            raise WebhookDeliveryError(
                f"webhook {self._where}: {type(exc).__name__}: {exc}"
            ) from None
        what = "a redirect, not followed" if 300 <= status < 400 else "not 2xx"
        raise WebhookDeliveryError(
            f"webhook {self._where}: HTTP {status} ({what}): {redact_text(excerpt)!r}",
            status_code=status,
        )

    async def aclose(self) -> None:
        """Close the connections to the receiver. Idempotent."""
        session = self._session
        self._session = None
        if session is not None:
            await session.close()


#: The public name of :class:`Webhook` (a ``deliver`` is made by calling it).
webhook = Webhook
