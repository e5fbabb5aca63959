"""The service's request rules, derived from the statement in ``_contract._service``.

The client runs them before sending (no credit spent on a known-invalid request) and the
sandbox on what it receives. Each takes a JSON-shaped mapping and returns the body, or raises
:class:`InvalidRequestError` naming the field and the rule. Values the service leaves open (a
project's ``duration`` bound, other resolutions, the product image count) are type-checked only.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ._checks import fail
from ._exceptions import InvalidRequestError
from ._serial import NotFinite, finite_json
from ._service import PROJECT_REQUEST, TASK_REQUEST, VIDEOS_REQUEST, Body, Field, MaxItemsWhen


def _integer(value: Any) -> int | None:
    """The integer a value stands for: an ``int`` (not a ``bool``) or an integral ``float``.

    JSON has one number type: like most JSON services the sandbox reads ``4.0`` as 4, so
    ``duration=4.0`` is taken here too, and sent as ``4``.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def is_web_url(value: Any) -> bool:
    """Whether ``value`` is an ``http`` or ``https`` URL with a host."""
    try:
        parts = urlsplit(value) if isinstance(value, str) and value.strip() else None
        return (
            parts is not None and parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        )
    except ValueError:
        return False


def _url(field: str, value: Any) -> None:
    if not is_web_url(value):
        raise fail(field, "must be an http or https URL", value)
    if any(c.isspace() for c in value):
        raise fail(field, "must be a URL without spaces", value)


def _urls(spec: Field, value: Any) -> int:
    name = spec.name
    if not isinstance(value, (list, tuple)):  # a str is not one of them
        raise fail(name, "must be a list of URLs", value)
    if len(value) < spec.min_items:
        raise fail(name, f"must hold at least {spec.min_items} URL", value)
    if spec.max_items is not None and len(value) > spec.max_items:
        raise fail(name, f"must hold at most {spec.max_items} URLs (got {len(value)})")
    for index, item in enumerate(value):
        _url(f"{name}[{index}]", item)
    return len(value)


def _text(spec: Field, value: Any, _hint: bool) -> None:
    if not isinstance(value, str):
        raise fail(spec.name, "must be a non-empty string", value)
    if not value.strip():
        raise fail(spec.name, "must be non-empty after trimming", value)


def _string(spec: Field, value: Any, _hint: bool) -> None:
    if not isinstance(value, str):
        raise fail(spec.name, "must be a string", value)


def _enum(spec: Field, value: Any, unknown_hint: bool) -> None:
    values = spec.choices.values() if spec.choices is not None else ()
    if isinstance(value, str) and value in values:
        return
    rule = "must be one of " + ", ".join(repr(v) for v in values)
    if unknown_hint and isinstance(value, str):
        rule += (
            "; to send a value this version of the SDK does not know, pass"
            f" extra_body={{{spec.name!r}: {value!r}}}"
        )
    raise fail(spec.name, rule, value)


def _integer_field(spec: Field, value: Any, _hint: bool) -> None:
    number = _integer(value)
    if (
        number is None
        or (spec.minimum is not None and number < spec.minimum)
        or (spec.maximum is not None and number > spec.maximum)
    ):
        rule = (
            f"must be a positive integer number of {spec.unit}" if spec.unit else "must be positive"
        )
        if spec.maximum is not None:
            rule = f"must be an integer from {spec.minimum} to {spec.maximum} {spec.unit}".rstrip()
        raise fail(spec.name, rule, value)


def _resolution(spec: Field, value: Any, _hint: bool) -> None:
    number = _integer(value)
    if number is not None:
        if number <= 0:
            raise fail(spec.name, "must be a positive integer or a string", value)
    elif not isinstance(value, str) or not value.strip():
        raise fail(spec.name, "must be a positive integer or a non-empty string", value)


#: One check per field type of the statement (``Field.type``).
_CHECKS: dict[str, Callable[[Field, Any, bool], object]] = {
    "text": _text,
    "string": _string,
    "enum": _enum,
    "integer": _integer_field,
    "resolution": _resolution,
    "url": lambda spec, value, _hint: _url(spec.name, value),
    "urls": lambda spec, value, _hint: _urls(spec, value),
}


def _count(body: Mapping[str, Any], name: str) -> int:
    value = body.get(name)
    return len(value) if isinstance(value, (list, tuple)) else 0


def _check_rules(spec: Body, body: Mapping[str, Any]) -> None:
    for rule in spec.rules:
        when = body.get(rule.when)
        if when is None:
            when = spec.field(rule.when).default
        if when != rule.equals:
            continue
        if isinstance(rule, MaxItemsWhen):
            count = _count(body, rule.field)
            if count > rule.max_items:
                raise fail(
                    rule.field,
                    f"must hold at most {rule.max_items} {rule.noun} when {rule.when} is"
                    f" {rule.equals} (got {count})",
                )
        elif _count(body, rule.field) and not any(_count(body, o) for o in rule.others):
            raise fail(
                rule.field,
                f"needs at least one of {' or '.join(rule.others)} with it when {rule.when} is"
                f" {rule.equals} ({rule.reason})",
            )


def as_url_list(value: Iterable[str] | None) -> list[str] | None:
    """The URLs of any iterable as a list; anything else goes to the rules as it is.

    A string, a mapping or a value that is not iterable is a mistake the rules name
    (``InvalidRequestError``), rather than a ``TypeError`` or a list of a dict's keys.
    """
    if value is None or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        return value  # type: ignore[return-value]  # the validator names the mistake
    return list(value)


def check_body(
    spec: Body, body: Mapping[str, Any], *, unknown_hint: bool = False
) -> dict[str, Any]:
    """Check a JSON request body against its statement (``spec``); return the body to send.

    ``None`` values count as omitted and are dropped; enum members are sent as plain strings,
    integral floats of integer fields as integers. With ``unknown_hint`` (the client is about
    to send it) the error for a value outside an enum's list names ``extra_body`` as the way
    to send a value the SDK does not know (the sandbox, answering as the service, does not).

    Raises:
        InvalidRequestError: A rule is broken; the error names the field and the rule.
    """
    if not isinstance(body, Mapping):
        raise fail("body", "must be a JSON object")
    unknown = sorted(str(k) for k in body if k not in spec.names)
    if unknown:
        raise fail(unknown[0], "is not a field of this request")
    for field in spec.fields:
        value = body.get(field.name)
        if value is not None:
            _CHECKS[field.type](field, value, unknown_hint)
        elif field.required:
            raise fail(
                field.name,
                f"is required (a list of at least {field.min_items} URL)"
                if field.type == "urls" and field.min_items
                else "is required",
            )
    _check_rules(spec, body)
    return {key: _to_send(spec, key, value) for key, value in body.items() if value is not None}


def _to_send(spec: Body, key: str, value: Any) -> Any:
    """A checked value as it is sent: a plain ``str`` (not an enum member), an integer."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, float) and spec.field(key).type in ("integer", "resolution"):
        return _integer(value)
    return value


ID_UNSAFE = (
    r"\u0000-\u0020\u007f-\u00a0\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    r"\u1680\u180e\u2000-\u200f\u2028-\u202f\u205f-\u2064\u2066-\u206f\u3000\ufeff"
    r"\ufff9-\ufffb"
)
"""The characters of the Basic Multilingual Plane an id may not contain (white space, control
and format characters as of Unicode 15.1, whatever the running Python's), as the inside of a
regex class valid in Python and ECMA-262: the OpenAPI document's id pattern reuses it."""
_UNSAFE = re.compile(f"[{ID_UNSAFE}\\ud800-\\udfff]")
_PLAIN_ID = re.compile(r"[A-Za-z0-9_~.-]+")
"""Ids of these characters only (all the service hands out) skip the per-character checks."""


def _has_unsafe(text: str) -> bool:
    """Whether ``text`` holds an id's unsafe character (beyond the BMP too) or a surrogate."""
    return _UNSAFE.search(text) is not None or any(
        c > "\uffff" and unicodedata.category(c) == "Cf" for c in text
    )


def _id_problem(value: str) -> str | None:
    """Why an id cannot travel as exactly one path segment, or ``None`` when it can."""
    if not value.strip():
        return "must be a non-empty string"
    if _has_unsafe(value):
        return "must not contain white space or control characters"
    decoded = value
    for _ in range(3):  # what a proxy that decodes (even twice) would see
        if decoded in (".", ".."):
            return "must not be '.' or '..' (a path segment a proxy would collapse)"
        if "/" in decoded or "\\" in decoded:
            return (
                "must not contain '/' or '\\' (also percent-encoded): it must be one path segment"
            )
        if "%" not in decoded:
            break
        decoded = unquote(decoded)
    if decoded in (".", ".."):
        return "must not be '.' or '..' (a path segment a proxy would collapse)"
    if _has_unsafe(decoded):
        return "must not contain white space or control characters (also percent-encoded)"
    return None


def check_id(field: str, value: Any, *, encode: bool = False) -> str:
    r"""Check a task or project id (named ``field``) before it goes into a path or a query.

    An id must reach the service as exactly one path segment, whatever a proxy on the way
    does with the path: ``.`` and ``..``, a ``/`` or ``\\`` (raw or percent-encoded), white
    space and control characters are refused before any request is sent. Returns the id as
    a plain string; with ``encode``, percent-encoded for a path segment or a query value (the
    ids the service hands out need nothing: the one match that checks them also tells so, and
    a request's id is neither matched nor encoded a second time).

    Raises:
        InvalidRequestError: The id is not a non-empty string that is one path segment.
    """
    if not isinstance(value, str):
        raise fail(field, "must be a non-empty string", value)
    if _PLAIN_ID.fullmatch(value) and value not in (".", ".."):
        return str(value)
    problem = _id_problem(value)
    if problem is not None:
        raise fail(field, problem, value)
    return quote(value, safe="") if encode else str(value)


#: :func:`check_body` for ``POST /v1/video/videomodel-2``, ``POST /v1/video/viral-ads-clone``
#: and ``POST /v1/video/viral-ads-clone/{project_id}/videos``.
validate_task_request = functools.partial(check_body, TASK_REQUEST)
validate_project_request = functools.partial(check_body, PROJECT_REQUEST)
validate_videos_request = functools.partial(check_body, VIDEOS_REQUEST)


def json_text(value: Any, path: str, **options: Any) -> str:
    """Every JSON the SDK sends or writes: NaN or Infinity is refused, named by its path."""
    try:
        return finite_json(value, path, **options)
    except NotFinite as exc:
        raise InvalidRequestError(
            exc.path, "must be a finite number (JSON has no NaN or Infinity)"
        ) from None
