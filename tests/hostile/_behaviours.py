"""Misbehaviours of a hostile server or proxy, by class.

Each is a :data:`~tests.hostile._server.Behaviour`. ``BODIES`` are answers that must end as a
``VideoGenError`` (never a bare ``RecursionError``, ``ValueError``, ``OverflowError``...);
``ECHOES`` repeat the API key back in every form and place a server can.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, quote_plus

import attrs
from aiohttp import web

from ._server import Behaviour, HostileServer

#: The key every hostile test uses: ``/``, ``+`` and ``=`` change under percent-encoding.
KEY = "vg-hostile/SECRET+key=0123456789abcdef"


def u_escaped(text: str) -> str:
    """``text`` with every character as a JSON ``\\uXXXX`` escape."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def entities(text: str) -> str:
    """``text`` with every character as an HTML character reference."""
    return "".join(f"&#{ord(c)};" for c in text)


#: Every form of the key that must never reach a user's screen or log.
KEY_FORMS = (
    KEY,
    quote(KEY, safe=""),
    quote_plus(KEY),
    u_escaped(KEY),
    entities(KEY),
    "SECRET",
    KEY[:12],  # a key cut by an excerpt must not show its first characters either
    "56789abcdef",
)


@attrs.frozen
class Misbehaviour:
    """One answer: its HTTP status (for the "may have taken effect" rule) and how to send it."""

    name: str
    status: int
    behaviour: Behaviour
    #: Valid JSON whose odd fields a lenient parser may read (``{"task_id": 7}`` is id "7").
    may_succeed: bool = False

    def __str__(self) -> str:
        return self.name


def raw(
    name: str,
    status: int,
    body: bytes | str,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    may_succeed: bool = False,
) -> Misbehaviour:
    data = body.encode() if isinstance(body, str) else body

    async def answer(server: HostileServer, request: web.Request) -> web.StreamResponse:
        return web.Response(
            status=status, body=data, headers={"Content-Type": content_type, **(headers or {})}
        )

    return Misbehaviour(name, status, answer, may_succeed)


def truncated(name: str, status: int, body: bytes, declared: int) -> Misbehaviour:
    """Declare ``declared`` bytes, send ``body``, close the connection."""

    async def answer(server: HostileServer, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        response.content_length = declared
        await response.prepare(request)
        await response.write(body)
        assert request.transport is not None
        request.transport.close()
        return response

    return Misbehaviour(name, status, answer)


def _deep(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def _absurd_fields(value: Any) -> dict[str, Any]:
    """A ``data`` object whose every documented field holds ``value``."""
    names = [
        "task_id",
        "project_id",
        "status",
        "model",
        "created_at",
        "updated_at",
        "credits_cost",
        "result",
        "api_available_credits",
        "task_ids",
        "tasks",
        "billing",
        "view_script",
        "current_step",
        "mode",
        "error_message",
        "out_number",
    ]
    return dict.fromkeys(names, value)


def _unreadable(value: Any) -> dict[str, Any]:
    """Well-formed ids and states, and ``value`` in every date and number field."""
    return {
        "task_id": "t-1",
        "project_id": "p-1",
        "status": "running",
        **dict.fromkeys(
            ["created_at", "updated_at", "credits_cost", "api_available_credits", "out_number"],
            value,
        ),
    }


def _json(value: Any) -> str:
    return json.dumps(value)


# --------------------------------------------------------------------------------------------
# Bodies that must end as a VideoGenError
# --------------------------------------------------------------------------------------------

_DEEP_OBJECT = '{"a":' * 20_000 + "0" + "}" * 20_000
_HUGE_INT = "9" * 100_000

BODIES = (
    # nesting
    raw("deep-array", 200, _deep(50_000)),
    raw("deep-object", 200, _DEEP_OBJECT),
    raw("deep-array-500", 500, _deep(50_000)),
    raw("deep-data", 200, '{"code": 200, "data": {"task_id": ' + _deep(5_000) + "}}"),
    raw("deep-data-under-the-limit", 200, '{"code": 200, "data": ' + _deep(600) + "}"),
    raw("deep-data-in-objects", 200, '{"code": 200, "data": ' + _DEEP_OBJECT + "}"),
    raw("deep-trace-id", 500, '{"code": 500, "trace_id": ' + _deep(5_000) + "}"),
    raw("deep-message", 500, '{"code": 500, "message": ' + _deep(800, "{", "}") + "}"),
    # numbers
    raw("int-beyond-str-limit", 200, '{"code": 200, "data": {"credits_cost": ' + _HUGE_INT + "}}"),
    raw("code-beyond-str-limit", 500, '{"code": ' + _HUGE_INT + "}"),
    raw(
        "int-beyond-float",
        200,
        _json({"code": 200, "data": _absurd_fields(10**400)}),
        may_succeed=True,
    ),
    raw(
        "overflow-in-a-valid-task",
        200,
        _json(
            {"code": 200, "data": {"task_id": "t-1", "status": "running", "created_at": 10**400}}
        ),
        may_succeed=True,
    ),
    raw(
        "cost-beyond-float",
        200,
        _json(
            {"code": 200, "data": {"task_id": "t-1", "status": "running", "credits_cost": 10**400}}
        ),
        may_succeed=True,
    ),
    raw("float-overflow", 200, '{"code": 200, "data": {"credits_cost": 1e999999}}'),
    raw("code-infinite", 200, '{"code": 1e999999, "message": "x"}'),
    raw("nan", 200, '{"code": 200, "data": {"task_id": "t-1", "credits_cost": NaN}}'),
    raw("infinity-code", 200, '{"code": Infinity}'),
    raw(
        "timestamp-out-of-range",
        200,
        _json({"code": 200, "data": _absurd_fields(1e300)}),
        may_succeed=True,
    ),
    # encodings
    raw("invalid-utf8", 200, b'{"code": 200, "data": {"task_id": "\xff\xfe\xc3"}}'),
    raw("utf16-bom-failure", 500, _json({"code": 500, "message": "x"}).encode("utf-16")),
    raw("utf32-garbage", 200, b"\x00\x00\xfe\xff" + b"\x00\x00\x00{" * 3),
    raw("nul-bytes", 200, b"\x00" * 64),
    # shapes
    raw("duplicate-keys", 200, '{"code": 200, "data": {"task_id": "t-1"}, "data": "oops"}'),
    raw("top-level-list", 200, "[1, 2, 3]"),
    raw("top-level-string", 200, '"ok"'),
    raw("top-level-number", 200, "200"),
    raw("top-level-null", 200, "null"),
    raw("code-is-an-object", 200, '{"code": {"value": 200}, "data": {}}'),
    raw("data-is-a-string", 200, '{"code": 200, "data": "task t-1 created"}'),
    raw("data-is-a-list", 200, '{"code": 200, "data": [{"task_id": "t-1"}]}'),
    raw("data-is-a-number", 200, '{"code": 200, "data": 7}'),
    raw(
        "fields-are-objects",
        200,
        _json({"code": 200, "data": _absurd_fields({"x": [1]})}),
        may_succeed=True,
    ),
    raw(
        "fields-are-lists",
        200,
        _json({"code": 200, "data": _absurd_fields([[], {}])}),
        may_succeed=True,
    ),
    raw(
        "fields-are-booleans",
        200,
        _json({"code": 200, "data": _absurd_fields(True)}),
        may_succeed=True,
    ),
    raw("huge-message", 500, _json({"code": 500, "message": "x" * 3_000_000})),
    raw(
        "huge-string-field",
        200,
        _json({"code": 200, "data": _absurd_fields(["y" * 500_000])}),
        may_succeed=True,
    ),
    # truncation and lies
    raw("truncated-json", 200, '{"code": 200, "data": {"task_'),
    truncated("connection-closed-mid-body", 200, b'{"code": 200, "da', 10_000),
    raw("empty-200", 200, b""),
    raw("html-says-json", 200, "<html><body>Service Unavailable</body></html>"),
    raw("json-says-html", 500, _json({"code": 500}), content_type="text/html"),
    raw(
        "redirect-to-another-host",
        302,
        "<a href='http://127.0.0.1:1/elsewhere'>moved</a>",
        content_type="text/html",
        headers={"Location": "http://127.0.0.1:1/elsewhere"},
    ),
    raw("html-502", 502, "<html><h1>502 Bad Gateway</h1></html>", content_type="text/html"),
)

# --------------------------------------------------------------------------------------------
# Echoes of the key
# --------------------------------------------------------------------------------------------


def _echo_headers(status: int, *, envelope: bool) -> Misbehaviour:
    """Repeat the request's headers (``Authorization`` included) in the error message."""

    async def answer(server: HostileServer, request: web.Request) -> web.StreamResponse:
        seen = "; ".join(f"{k}: {v}" for k, v in request.headers.items())
        if envelope:
            body = _json({"code": status, "message": f"rejected request with {seen}"})
        else:
            body = f"<html><pre>{seen}</pre></html>"
        return web.Response(status=status, text=body, content_type="application/json")

    kind = "envelope" if envelope else "page"
    return Misbehaviour(f"echo-request-headers-{kind}-{status}", status, answer)


_PAD = "p" * 190  # puts the key across the 200-character cut of an excerpt

ECHOES = (
    _echo_headers(401, envelope=True),
    _echo_headers(500, envelope=True),
    _echo_headers(502, envelope=False),
    _echo_headers(200, envelope=False),
    raw("bare-key-200-failure", 200, _json({"code": 400, "message": f"bad key {KEY}"})),
    raw("url-encoded", 403, _json({"code": 403, "message": f"key={quote(KEY, safe='')}"})),
    raw("form-encoded", 403, _json({"code": 403, "message": f"key={quote_plus(KEY)}"})),
    raw("json-escaped-envelope", 401, '{"code": 401, "message": "bad ' + u_escaped(KEY) + '"}'),
    raw("json-escaped-page", 500, "<p>bad " + u_escaped(KEY) + "</p>", content_type="text/html"),
    raw("html-entities", 500, "<p>key " + entities(KEY) + "</p>", content_type="text/html"),
    raw("split-over-lines", 500, f"<p>Bearer {KEY[:20]}\r\n    {KEY[20:]}</p>"),
    raw("split-in-message", 500, _json({"code": 500, "message": f"{KEY[:15]}\n{KEY[15:]}"})),
    raw("across-the-excerpt-cut", 502, f"<p>{_PAD} {KEY}</p>", content_type="text/html"),
    raw("across-the-excerpt-cut-early", 502, f"<p>{_PAD[:170]} {KEY}</p>"),
    raw("across-the-message-cut", 500, _json({"code": 500, "message": "m" * 990 + KEY})),
    raw("in-trace-id", 500, _json({"code": 500, "message": "x", "trace_id": f"Bearer {KEY}"})),
    raw("in-data", 500, _json({"code": 500, "data": {"headers": {"Authorization": KEY}}})),
    raw("in-a-key-of-data", 409, _json({"code": 409, "data": {KEY: 1}})),
    raw(
        "in-response-headers",
        500,
        _json({"code": 500, "message": "x"}),
        headers={"X-Echo-Authorization": f"Bearer {KEY}", "WWW-Authenticate": f"Bearer {KEY}"},
    ),
    raw(
        "in-rate-limit",
        429,
        _json({"code": 429, "message": f"slow down {KEY}"}),
        headers={"Retry-After": KEY},
    ),
    raw(
        "in-an-unparseable-field",
        200,
        _json({"code": 200, "data": _unreadable(KEY)}),
        may_succeed=True,
    ),
    raw("in-a-huge-body", 500, "<p>" + "z" * 100_000 + KEY + "</p>"),
)
