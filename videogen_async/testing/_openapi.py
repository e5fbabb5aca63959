"""The OpenAPI 3.1 document of the service as the sandbox implements it.

It is generated here, served by every sandbox at ``/openapi.json`` and kept in the repository
as ``docs/openapi.json`` (``python -m videogen_async.testing --write-openapi docs/openapi.json``
regenerates it; a test checks that the two are equal).

Every request and response schema and every service path is generated from the statement of
the service (:mod:`videogen_async._service`), the same statement the request checks of
:mod:`videogen_async._validation` are derived from (JSON Schema 2020-12 can say all its
rules, including the cross-field ones), so a request that fits the schema is accepted and one
that does not is answered 400. Control endpoints under ``/_sandbox/`` are not part of the
service and are left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._service import (
    ENDPOINTS,
    SHAPES,
    Body,
    Endpoint,
    Field,
    MaxItemsWhen,
    NeedsOneOfWhen,
)

__all__ = ["build_openapi", "openapi_json", "write_openapi"]

_REF = "#/components/schemas/"

# What Python's ``str.isspace`` calls white space, which ``str.strip`` removes: the shared
# rules trim with it, so "non-blank" means "has one character outside this class".
_SPACE = r"\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_NON_BLANK = f"[^{_SPACE}]"
# One path segment, as ``check_id`` takes it: no white space, control character, ``/`` or
# ``\``, not a dot segment (raw or percent-encoded), no encoded ``/`` or ``\``.
_ID_PATTERN = (
    r"^(?!(\.|%2[eE]|%252[eE]){1,2}$)(?!.*%(25)?(2[fF]|5[cC]))"
    f"[^/\\\\{_SPACE}\\u0000-\\u001f\\u007f-\\u009f]+$"
)


def _ascii_class(excluded: str) -> str:
    """A regex class of printable ASCII but ``excluded``, valid in Python and ECMA-262."""
    codes = [c for c in range(0x21, 0x7F) if chr(c) not in excluded]
    spans: list[list[int]] = []
    for code in codes:
        if spans and spans[-1][1] == code - 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    parts = (f"\\x{a:02x}" if a == b else f"\\x{a:02x}-\\x{b:02x}" for a, b in spans)
    return "[" + "".join(parts) + "]"


# An http(s) URL as ``_validation._url`` accepts it: a host (after any ``user:pass@``, before
# any ``:port``) that is not empty, no white space anywhere. The part before the path is
# limited to printable ASCII without brackets (IDN and bracketed IPv6 hosts, which the rule
# also accepts, are left out), so every URL that fits the schema is accepted.
_URL_PATTERN = (
    f"^[Hh][Tt][Tt][Pp][Ss]?://({_ascii_class('/?#@[]')}*@)?{_ascii_class('/?#@[]:')}+"
    f"(:{_ascii_class('/?#@[]')}*)?([/?#][^{_SPACE}]*)?$"
)


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF + name}


def _describe(field: Field) -> str:
    parts = [field.doc] if field.doc else []
    if field.type == "integer" and field.maximum is not None:
        unit = f" {field.unit}" if field.unit else ""
        parts.append(f"{field.minimum} to {field.maximum}{unit}.")
    if field.default is not None:
        parts.append(
            f"Default {field.default!r}." if field.default == "" else f"Default {field.default}."
        )
    return " ".join(parts)


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    if "oneOf" in schema:
        return {**schema, "oneOf": [*schema["oneOf"], {"type": "null"}]}
    kind = schema["type"]
    nullable = {**schema, "type": [*(kind if isinstance(kind, list) else [kind]), "null"]}
    if "enum" in schema:
        nullable["enum"] = [*schema["enum"], None]
    return nullable


def _bounds(schema: dict[str, Any], field: Field) -> dict[str, Any]:
    if field.minimum is not None:
        schema["minimum"] = field.minimum
    if field.maximum is not None:
        schema["maximum"] = field.maximum
    return schema


def _items(schema: dict[str, Any], field: Field) -> dict[str, Any]:
    if field.min_items:
        schema["minItems"] = field.min_items
    if field.max_items is not None:
        schema["maxItems"] = field.max_items
    return schema


def _field_schema(field: Field, *, request: bool) -> dict[str, Any]:
    """The JSON Schema of one field of the statement."""
    kind = field.type
    schema: dict[str, Any]
    if kind == "enum":
        assert field.choices is not None  # noqa: S101  # the statement gives every enum's values
        schema = {"type": "string", "enum": list(field.choices.values())}
    elif kind == "text":
        schema = {"type": "string", "pattern": _NON_BLANK}
    elif kind == "string":
        schema = {"type": "string"}
    elif kind == "id":
        schema = {"type": "string", "minLength": 1}
    elif kind == "number":
        schema = _bounds({"type": "number"}, field)
    elif kind == "integer":
        schema = _bounds({"type": "integer"}, field)
    elif kind == "datetime":
        schema = {"type": "string", "format": "date-time"}
    elif kind == "resolution":
        schema = (
            {
                "oneOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "string", "pattern": _NON_BLANK},
                ]
            }
            if request
            else {"type": ["integer", "string"]}
        )
    elif kind == "url":
        schema = _ref("Url") if request else {"type": "string", "format": "uri"}
    elif kind == "urls":
        schema = _items({"type": "array", "items": _ref("Url")}, field)
    elif kind == "ids":
        schema = _items({"type": "array", "items": {"type": "string"}}, field)
    elif kind.startswith("["):
        schema = {"type": "array", "items": _ref(kind[1:-1])}
    else:
        schema = _ref(kind)
    description = _describe(field)
    if description:
        if "$ref" in schema:
            schema = {"allOf": [schema], "description": description}
        else:
            schema["description"] = description
    if (request and not field.required) or field.nullable:
        schema = (
            _with_null(schema) if "allOf" not in schema else {"anyOf": [schema, {"type": "null"}]}
        )
    return schema


def _when(body: Body, rule: MaxItemsWhen | NeedsOneOfWhen) -> dict[str, Any]:
    """The condition of a cross-field rule; an omitted field counts as its default."""
    if body.field(rule.when).default == rule.equals:
        return {"properties": {rule.when: {"enum": [rule.equals, None]}}}
    return {"required": [rule.when], "properties": {rule.when: {"const": rule.equals}}}


def _rule_schema(body: Body, rule: MaxItemsWhen | NeedsOneOfWhen) -> dict[str, Any]:
    if isinstance(rule, MaxItemsWhen):
        return {
            "if": _when(body, rule),
            "then": {
                "properties": {rule.field: {"type": ["array", "null"], "maxItems": rule.max_items}}
            },
        }
    alone = [
        _when(body, rule),
        {"required": [rule.field], "properties": {rule.field: {"type": "array", "minItems": 1}}},
        *({"properties": {o: {"type": ["array", "null"], "maxItems": 0}}} for o in rule.others),
    ]
    return {"not": {"allOf": alone}}


def _rule_text(rule: MaxItemsWhen | NeedsOneOfWhen) -> str:
    if isinstance(rule, MaxItemsWhen):
        when = f"{rule.when} is {rule.equals}"
        return f"At most {rule.max_items} {rule.noun} in {rule.field} when {when}."
    others = " or ".join(rule.others)
    return f"When {rule.when} is {rule.equals}, {rule.field} needs {others} ({rule.reason})."


def _body_schema(body: Body) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {f.name: _field_schema(f, request=True) for f in body.fields},
    }
    required = [f.name for f in body.fields if f.required]
    if required:
        schema["required"] = required
    if body.rules:
        schema["allOf"] = [_rule_schema(body, r) for r in body.rules]
    texts = [_rule_text(r) for r in body.rules]
    schema["description"] = " ".join([*texts, "A null value counts as omitted."])
    return schema


def _shape_schema(name: str) -> dict[str, Any]:
    shape = SHAPES[name]
    return {
        "type": "object",
        "required": [f.name for f in shape.fields if f.required],
        "properties": {f.name: _field_schema(f, request=False) for f in shape.fields},
    }


def _envelope(data: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "required": ["code", "trace_id", "message", "data"],
        "properties": {
            "code": {"type": "integer", "const": 200},
            "trace_id": {"type": "string", "minLength": 1},
            "message": {"type": ["string", "null"]},
            "data": data,
        },
    }


def _schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = {
        "Url": {
            "type": "string",
            "pattern": _URL_PATTERN,
            "description": "A public http or https URL (the sandbox also takes unencoded"
            " non-ASCII characters in the path, query and fragment).",
        },
        "ErrorEnvelope": {
            "type": "object",
            "description": "A failure: data is null and message describes it.",
            "required": ["code", "trace_id", "message", "data"],
            "properties": {
                "code": {
                    "type": "integer",
                    "description": "400, 401, 404, 409, 413, 429 or 5xx; 300111 (insufficient"
                    " credits) or 100099 (media not stored) with HTTP 409.",
                },
                "trace_id": {"type": "string", "minLength": 1},
                "message": {"type": "string", "minLength": 1},
                "data": {"type": "null"},
            },
        },
    }
    for endpoint in ENDPOINTS:
        if endpoint.body is not None:
            schemas[endpoint.body.name] = _body_schema(endpoint.body)
    for name in SHAPES:
        schemas[name] = _shape_schema(name)
    return schemas


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref("ErrorEnvelope")}},
    }


def _ok(schema: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {"X-Trace-Id": {"$ref": "#/components/headers/TraceId"}},
        "content": {
            "application/json": {"schema": _envelope(_ref(schema), f"Envelope of {schema}.")}
        },
    }


_COMMON_ERRORS = {
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "429": {"$ref": "#/components/responses/RateLimited"},
    "5XX": {"$ref": "#/components/responses/ServerError"},
}


def _operation(
    operation_id: str,
    summary: str,
    ok: dict[str, Any],
    errors: dict[str, Any],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: tuple[str, bool] | None = None,
    tag: str,
) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        schema, required = body
        op["requestBody"] = {
            "required": required,
            "content": {"application/json": {"schema": _ref(schema)}},
        }
    op["responses"] = {"200": ok, **errors, **_COMMON_ERRORS}
    return op


def _endpoint_operation(endpoint: Endpoint, errors: dict[str, Any]) -> dict[str, Any]:
    parameters = [_id_parameter(name, "path") for name in endpoint.path_params]
    parameters += [_id_parameter(name, "query") for name in endpoint.query_params]
    body = None
    if endpoint.body is not None:
        body = (endpoint.body.name, endpoint.body_required)
    return _operation(
        endpoint.operation_id,
        endpoint.summary,
        _ok(endpoint.response, endpoint.ok),
        errors,
        parameters=parameters,
        body=body,
        tag=endpoint.tag,
    )


def _id_parameter(name: str, where: str) -> dict[str, Any]:
    """An id parameter (the shared ``check_id`` rule: 400 unless it is one path segment)."""
    return {
        "name": name,
        "in": where,
        "required": True,
        "schema": {"type": "string", "pattern": _ID_PATTERN},
    }


def build_openapi(server_url: str | None = None) -> dict[str, Any]:
    """Build the OpenAPI 3.1 document of the service as the sandbox implements it.

    Args:
        server_url: The base URL to list under ``servers``; none is listed when omitted
            (the form kept in ``docs/openapi.json``).

    Returns:
        The document as JSON-ready data.
    """
    bad_request = _error("Invalid request: bad JSON, a broken rule (the message names the field).")
    not_found = _error("No such task or project (code 404).")
    conflict = _error(
        "Conflict. code 300111 'Insufficient API credits' (nothing was created or charged);"
        " code 100099 'Failed to store media from URL' (project creation only, nothing"
        " charged); code 409 when the project's script is not generated yet or the project"
        " has failed (videos endpoint only)."
    )
    too_large = _error("The body is larger than the sandbox accepts (1 MiB).")
    responses = {
        "400": bad_request,
        "404": not_found,
        "409": conflict,
        "413": too_large,
    }
    special_400 = {
        "getTask": _error("task_id is missing, blank, or not one path segment."),
        "getCredits": _error("The request failed."),
        "getProject": _error("project_id is blank or not one path segment."),
    }
    paths: dict[str, Any] = {}
    for endpoint in ENDPOINTS:
        errors = {code: responses[code] for code in endpoint.errors}
        if endpoint.operation_id in special_400:
            errors["400"] = special_400[endpoint.operation_id]
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _endpoint_operation(
            endpoint, errors
        )
    paths.update(
        {
            "/media/{file_name}": {
                "get": {
                    "operationId": "getMedia",
                    "summary": "Download a generated video (the sandbox's stand-in for the CDN)",
                    "description": "No authentication. Honours one HTTP byte range (a standard"
                    " `Range: bytes=...` request header: 206 with Content-Range, or 416 past the"
                    " end).",
                    "tags": ["media"],
                    "security": [],
                    "parameters": [
                        {
                            "name": "file_name",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1},
                            "description": "{task_id}.mp4 of a succeeded task.",
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The whole video.",
                            "content": {"video/mp4": {"schema": {"type": "string"}}},
                        },
                        "206": {
                            "description": "The requested byte range (Content-Range).",
                            "content": {"video/mp4": {"schema": {"type": "string"}}},
                        },
                        "404": _error("No succeeded task with that id."),
                        "416": {"description": "The range cannot be satisfied."},
                        "429": {"$ref": "#/components/responses/RateLimited"},
                        "5XX": {"$ref": "#/components/responses/ServerError"},
                    },
                }
            },
        }
    )
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Video generation service (videogen-async sandbox)",
            "version": "1.0.0",
            "description": "The video generation service as the videogen-async sandbox"
            " implements it. Every response body is the envelope {code, trace_id, message,"
            " data}. 429 and 5xx answers appear only when fault injection is configured.",
        },
    }
    if server_url is not None:
        document["servers"] = [{"url": server_url}]
    document.update(
        {
            "security": [{"bearerAuth": []}],
            "tags": [
                {"name": "tasks"},
                {"name": "projects"},
                {"name": "credits"},
                {"name": "media"},
            ],
            "paths": paths,
            "components": {
                "securitySchemes": {
                    "bearerAuth": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": "Authorization: Bearer <API_KEY>",
                    }
                },
                "headers": {
                    "TraceId": {
                        "description": "The trace_id of the envelope.",
                        "schema": {"type": "string"},
                    }
                },
                "responses": {
                    "Unauthorized": {
                        **_error("Missing or invalid API key (code 401)."),
                        "headers": {
                            "WWW-Authenticate": {"schema": {"type": "string"}},
                        },
                    },
                    "RateLimited": {
                        **_error("Too many requests (injected fault; code 429)."),
                        "headers": {
                            "Retry-After": {
                                "description": "Seconds to wait.",
                                "schema": {"type": "string"},
                            }
                        },
                    },
                    "ServerError": {
                        "description": "Server failure (injected fault): the error envelope,"
                        " or an HTML page from a proxy.",
                        "content": {
                            "application/json": {"schema": _ref("ErrorEnvelope")},
                            "text/html": {"schema": {"type": "string"}},
                        },
                    },
                },
                "schemas": _schemas(),
            },
        }
    )
    return document


def openapi_json(server_url: str | None = None) -> str:
    """Return the document as the text kept in ``docs/openapi.json``.

    Args:
        server_url: As for :func:`build_openapi`.

    Returns:
        Indented JSON with a final newline.
    """
    return json.dumps(build_openapi(server_url), indent=2, ensure_ascii=False) + "\n"


def write_openapi(path: str | Path) -> Path:
    """Write the document to a file.

    Args:
        path: Where to write it (``docs/openapi.json`` in the repository).

    Returns:
        The path written.
    """
    target = Path(path)
    target.write_text(openapi_json(), encoding="utf-8")
    return target
