"""Per-call options: ``extra_headers``, ``extra_query``, ``extra_body`` and ``timeout``.

Calls take them (:class:`RequestOptions`), waits the first two (:class:`PollOptions`), checked
by :func:`call_options` before sending. Credential headers are refused (``Authorization``:
another key where the user meant this one; ``Proxy-Authorization``: belongs in the proxy URL; a
value holding an API key); ``Cookie`` is allowed, as the service authenticates by key alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict
from urllib.parse import quote

import attrs

from .._contract._checks import fail
from .._contract._exceptions import InvalidRequestError
from .._contract._redact import holds_api_key
from .._contract._validation import json_text
from ._session import Timeout

Headers = Mapping[str, str | None]
Query = Mapping[str, str | int | float | None]


class PollOptions(TypedDict, total=False):
    """The options a wait sends with every poll (its own ``timeout`` bounds the whole wait).

    Attributes:
        extra_headers: Headers sent as given, names compared case-insensitively; a value of
            ``None`` removes a header the client would send.
        extra_query: Query parameters sent as given, winning over the call's own; ``None``
            removes one.
    """

    extra_headers: Headers | None
    extra_query: Query | None


class RequestOptions(PollOptions, total=False):
    """The per-call options of every call that sends a request (and :class:`PollOptions`).

    Attributes:
        extra_body: JSON fields merged into the body, winning over the call's own and sent
            unchecked: the way to send a value or a field this version does not know
            (``extra_body={"model": "videomodel_2_1"}``).
        timeout: This call's per-attempt timeouts: seconds or a :class:`Timeout` (``None``:
            the client's).
    """

    extra_body: Mapping[str, Any] | None
    timeout: Timeout | float | None


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REFUSED = {
    "authorization": "the client sends the API key in Authorization itself: pass api_key= (or"
    " use another client for another key)",
    "proxy-authorization": "a proxy's credentials go in its URL"
    " (HTTPS_PROXY=http://user:password@host:port)",
}


@attrs.frozen
class CallOptions:
    """The checked per-call options of one call (see :func:`call_options`)."""

    extra_headers: Mapping[str, str | None] = attrs.field(factory=dict)
    extra_query: Mapping[str, str | None] = attrs.field(factory=dict)  # percent-encoded
    extra_body: Mapping[str, Any] | None = None
    timeout: Timeout | None = None

    def with_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` with this call's ``extra_headers`` (names compare case-insensitively)."""
        extra = self.extra_headers
        replaced = {name.lower() for name in extra}
        merged = {k: v for k, v in headers.items() if k.lower() not in replaced}
        merged.update((k, v) for k, v in extra.items() if v is not None)
        return merged


NO_OPTIONS = CallOptions()
_POLL_OPTIONS = PollOptions.__optional_keys__
_REQUEST_OPTIONS = RequestOptions.__optional_keys__
CALL_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")


def call_options(options: Mapping[str, Any], *, polls: bool = False) -> CallOptions:
    """Check a call's ``**options`` (with ``polls``, a wait's); one object when none is given.

    A function rather than a class method: every request calls it, and a class method's call
    costs about twice a function's.

    Raises:
        TypeError: A keyword argument the call does not take.
        InvalidRequestError: An option breaks a rule; nothing was sent.
    """
    if not options:
        return NO_OPTIONS
    known = _POLL_OPTIONS if polls else _REQUEST_OPTIONS
    for name in options:
        if name not in known:
            raise TypeError(
                f"unexpected keyword argument {name!r} (the call's options are"
                f" {', '.join(sorted(known))})"
            )
    # Every option None (a gather passes its own, unset) is no option: NO_OPTIONS itself, so
    # that a poll takes the path without options (no partial per poll).
    if all(value is None for value in options.values()):
        return NO_OPTIONS
    headers, query, body, timeout = map(options.get, CALL_OPTIONS)
    return CallOptions(
        check_headers(headers or {}, "extra_headers"),
        _query(query or {}),
        None if body is None else _body(body),
        None if timeout is None else Timeout.of(timeout),
    )


def _mapping(field: str, value: object) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise fail(field, f"must be a mapping, got {type(value).__name__}")
    return value


def check_headers(
    headers: Headers, field: str, api_key: str = "", refused: Mapping[str, str] = _REFUSED
) -> dict[str, str | None]:
    """Checked headers (``field``: a call's, a client's of ``api_key``, a webhook's).

    Raises:
        InvalidRequestError: A bad name or value, one ``refused``, or an API key in a value.
    """
    checked = {}
    for name, value in _mapping(field, headers).items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise fail(field, f"{name!r} is not a valid header name")
        reason = refused.get(name.lower())
        if reason is not None:
            raise fail(field, f"must not set {name!r}: {reason}")
        if value is not None and (not isinstance(value, str) or any(c in value for c in "\r\n\0")):
            raise fail(
                field, f"the value of {name!r} must be a string without line breaks, or None"
            )
        if value is not None and holds_api_key(value, api_key):
            raise fail(field, f"{name!r} must not carry the API key (sent to the service only)")
        checked[name] = value
    return checked


def _query(query: Query) -> dict[str, str | None]:
    checked = {}
    for name, value in _mapping("extra_query", query).items():
        if not isinstance(name, str) or not name:
            raise fail("extra_query", f"{name!r} is not a parameter name (a non-empty string)")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (str, int, float))
        ):
            raise fail("extra_query", f"the value of {name!r} must be a string, a number or None")
        # Held percent-encoded, as the transport joins a query from encoded parts.
        checked[quote(name, safe="")] = None if value is None else quote(str(value), safe="")
    return checked


def _body(body: Mapping[str, Any]) -> dict[str, Any]:
    fields = dict(_mapping("extra_body", body))
    if not all(isinstance(name, str) for name in fields):
        raise fail("extra_body", "field names must be strings")
    try:
        json_text(fields, "extra_body")
    except InvalidRequestError:
        raise
    except (TypeError, ValueError) as exc:
        raise fail("extra_body", f"must be JSON-serializable ({exc})") from None
    return fields
