"""The SDK's argument checks: one rule, one function, one error.

Every public call checks its arguments here before anything is sent or written, so that two
calls taking the same kind of value (a number of seconds, a count, a key) refuse the same
values with the same words. A broken rule raises :class:`InvalidRequestError` naming the
field and the rule; it is also a ``ValueError``, the error Python's own calls raise for a bad
argument, so a wrong type raises it too (one kind of mistake, one error). The client's
constructor and ``with_options`` re-raise it as ``ConfigurationError`` (the client's
configuration is its own kind of mistake): see docs/errors.md.

A ``bool`` is never taken for a number: ``True`` passed as a count is a slip, not a 1.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard, TypeVar
from urllib.parse import urlsplit

from ._exceptions import InvalidRequestError

#: What no database stores in a text column: NUL (PostgreSQL refuses it) and a lone
#: surrogate (not encodable as UTF-8, so neither SQLite nor PostgreSQL can keep it).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


_T = TypeVar("_T")
_UNSHOWN: Any = object()


def fail(field: str, rule: str, value: Any = _UNSHOWN) -> InvalidRequestError:
    """The error for ``field`` breaking ``rule``, quoting ``value`` when given (shortened)."""
    return InvalidRequestError(field, rule, value=value, has_value=value is not _UNSHOWN)


def is_number(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is an ``int`` or a ``float`` (a ``bool`` is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(
    field: str,
    value: Any,
    *,
    low: float = 0.0,
    above: bool = False,
    high: float = math.inf,
    finite: bool = True,
) -> float:
    """A number from ``low`` (excluded when ``above``) to ``high``; NaN never passes.

    ``finite=False`` lets ``inf`` through (a policy's "no limit"); a call's amount or time
    stays finite, so that no timer or sum is ever infinite by accident.
    """
    if not (
        is_number(value)
        and (value > low if above else value >= low)
        and value <= high
        and (not finite or math.isfinite(value))
    ):
        raise fail(
            field,
            f"must be a number {'>' if above else '>='} {low:g}"
            f"{'' if high == math.inf else f' and <= {high:g}'}",
            value,
        )
    return float(value)


def positive(field: str, value: Any) -> float:
    """A finite number > 0: a duration or an amount that must be something."""
    return number(field, value, above=True)


def seconds_or_none(field: str, value: Any) -> float | None:
    """A bound in seconds: ``None`` (no bound) or a number >= 0 (``inf`` too; NaN refused)."""
    if value is None:
        return None
    if not is_number(value) or not value >= 0:
        raise fail(field, "must be seconds >= 0 or None", value)
    return float(value)


def whole(field: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An ``int`` from ``minimum`` to ``maximum`` (a float, even integral, is refused)."""
    if not (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= minimum
        and (maximum is None or value <= maximum)
    ):
        raise fail(
            field,
            f"must be a whole number >= {minimum}{'' if maximum is None else f' and <= {maximum}'}",
            value,
        )
    return int(value)


def name(field: str, value: Any, *, max_length: int = 500) -> str:
    """A non-empty string of at most ``max_length`` characters that a database can store.

    For what the SDK writes and finds again by equality (a ledger key, a destination's name):
    white space alone names nothing, and NUL or a lone surrogate would be refused (or
    mangled) by the database after the call had started.
    """
    if not isinstance(value, str) or not value.strip():
        raise fail(field, "must be a non-empty string", value)
    if len(value) > max_length:
        raise fail(field, f"must be at most {max_length} characters")
    if _UNSTORABLE.search(value):
        raise fail(
            field,
            "must not contain NUL or lone surrogate characters (no database stores them)",
            value,
        )
    return value


def check_key(key: Any) -> str:
    """A ledger key: a :func:`name` of at most 500 characters (``InvalidRequestError``: key)."""
    return name("key", key)


def web_url(field: str, value: Any, *, instead: str = "no credentials in a URL") -> str:
    """An ``http(s)`` URL with a host, on one line, without user info; returned stripped.

    The URL is never quoted in the error: it may hold a secret (a signed query, a password).
    User info is refused because a URL is logged and shown in errors, where a password would
    leak; credentials go in headers (or the client's ``api_key``). ``instead``: what to do
    instead, for the error (a client says where its key goes).
    """
    text = value.strip() if isinstance(value, str) else ""
    try:
        parts = urlsplit(text)
        _ = parts.port  # a port that is not a number from 0 to 65535 raises ValueError
    except ValueError:
        raise fail(field, "must be an http(s) URL with a host") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise fail(field, "must be an http(s) URL with a host")
    if any(c.isspace() or not c.isprintable() for c in text):
        raise fail(field, "must not contain white space or control characters")
    if parts.username is not None or "@" in parts.netloc:
        raise fail(field, f"must not hold user info (user:password@): {instead}")
    return text


def instance(field: str, value: object, kind: type[_T] | tuple[type[_T], ...], rule: str) -> _T:
    """``value`` when it is a ``kind``; else the error saying ``rule``."""
    if not isinstance(value, kind):
        raise fail(field, rule, value)
    return value


def validator(check: Any, *, optional: bool = False, **options: Any) -> Any:
    """A check as an ``attrs`` validator (``None`` passes when ``optional``).

    So that the policies (``BackoffPolicy``, ``PollPolicy``) refuse a bad value with the same
    rule and error as a call's argument; the field is the attribute's name.
    """

    def validate(_instance: object, attribute: Any, value: Any) -> None:
        if value is not None or not optional:
            check(attribute.name, value, **options)

    return validate
