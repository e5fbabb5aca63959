"""JSON Schemas of the service's bodies and shapes, generated from its statement.

Each field type of ``_contract._service`` has one schema here. They describe the service, so
they live in the contract: the sandbox's OpenAPI document (``testing._openapi``) assembles
them, and the MCP server gives them to its tools as input schemas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._service import ENDPOINTS, SHAPES, Body, Field, MaxItemsWhen, NeedsOneOfWhen
from ._validation import ID_UNSAFE

_REF = "#/components/schemas/"

# What Python's ``str.isspace`` calls white space, which ``str.strip`` removes: the shared
# rules trim with it, so "non-blank" means "has one character outside this class".
_SPACE = r"\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NON_BLANK = f"[^{_SPACE}]"
# One path segment, as ``check_id`` takes it: no white space, control or format character,
# ``/`` or ``\``, not a dot segment (raw or percent-encoded), no encoded ``/`` or ``\``.
ID_PATTERN = (
    r"^(?!(\.|%2[eE]|%252[eE]){1,2}$)(?!.*%(25)?(2[fF]|5[cC]))"
    f"[^/\\\\{ID_UNSAFE}]+$"
)


# An http(s) URL as ``_validation._url`` accepts it: a host (after any ``user:pass@``, before
# any ``:port``) that is not empty, no white space anywhere. The part before the path is
# limited to printable ASCII without brackets (IDN and bracketed IPv6 hosts, which the rule
# also accepts, are left out), so every URL that fits the schema is accepted.
# Its classes are printable ASCII (\x21-\x7e) but ``/?#@[]`` (user, port) and also ``:``
# (host), written out as ranges that Python and ECMA-262 both read.
_URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://([\x21-\x22\x24-\x2e\x30-\x3e\x41-\x5a\x5c\x5e-\x7e]*@)?"
    r"[\x21-\x22\x24-\x2e\x30-\x39\x3b-\x3e\x41-\x5a\x5c\x5e-\x7e]+"
    r"(:[\x21-\x22\x24-\x2e\x30-\x3e\x41-\x5a\x5c\x5e-\x7e]*)?"
    f"([/?#][^{_SPACE}]*)?$"
)


def ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF + name}


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema or "allOf" in schema:
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


def _enum(field: Field, request: bool) -> dict[str, Any]:
    assert field.choices is not None  # noqa: S101  # the statement gives every enum's values
    return {"type": "string", "enum": list(field.choices.values())}


def _resolution(field: Field, request: bool) -> dict[str, Any]:
    if not request:
        return {"type": ["integer", "string"]}
    return {"oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": NON_BLANK}]}


# The schema of each field type of the statement (``request``: of a request body, which says
# more than an answer's, where the service's own values are shown as they come).
_TYPES: dict[str, Callable[[Field, bool], dict[str, Any]]] = {
    "text": lambda field, request: {"type": "string", "pattern": NON_BLANK},
    "string": lambda field, request: {"type": "string"},
    "id": lambda field, request: {"type": "string", "minLength": 1},
    "datetime": lambda field, request: {"type": "string", "format": "date-time"},
    "enum": _enum,
    "number": lambda field, request: _bounds({"type": "number"}, field),
    "integer": lambda field, request: _bounds({"type": "integer"}, field),
    "resolution": _resolution,
    "url": lambda field, request: ref("Url") if request else {"type": "string", "format": "uri"},
    "urls": lambda field, request: _items({"type": "array", "items": ref("Url")}, field),
    "ids": lambda field, request: _items({"type": "array", "items": {"type": "string"}}, field),
}


def _field_schema(field: Field, *, request: bool) -> dict[str, Any]:
    """The JSON Schema of one field of the statement, described, and nullable where it may be.

    A ``$ref`` cannot carry siblings in every reader, so a described reference is wrapped in
    ``allOf``; a request's optional field takes ``null`` (it counts as omitted).
    """
    # The schema of its type: a field type, ``[Shape]`` (a list) or ``Shape``.
    kind = field.type
    if kind in _TYPES:
        schema = _TYPES[kind](field, request)
    else:
        schema = {"type": "array", "items": ref(kind[1:-1])} if kind[0] == "[" else ref(kind)
    # Its description: its text, its range, its default.
    parts = [field.doc]
    if field.type == "integer" and field.maximum is not None:
        parts.append(f"{field.minimum} to {field.maximum} {field.unit}".rstrip() + ".")
    if field.default is not None:
        parts.append(
            f"Default {field.default!r}." if field.default == "" else f"Default {field.default}."
        )
    description = " ".join(filter(None, parts))
    if description:
        if "$ref" in schema:
            schema = {"allOf": [schema], "description": description}
        else:
            schema["description"] = description
    if (request and not field.required) or field.nullable:
        schema = _with_null(schema)
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
    return {
        "not": {
            "allOf": [
                _when(body, rule),
                {
                    "required": [rule.field],
                    "properties": {rule.field: {"type": "array", "minItems": 1}},
                },
                *(
                    {"properties": {o: {"type": ["array", "null"], "maxItems": 0}}}
                    for o in rule.others
                ),
            ]
        }
    }


def _rule_text(rule: MaxItemsWhen | NeedsOneOfWhen) -> str:
    if isinstance(rule, MaxItemsWhen):
        return (
            f"At most {rule.max_items} {rule.noun} in {rule.field} when {rule.when} is"
            f" {rule.equals}."
        )
    return (
        f"When {rule.when} is {rule.equals}, {rule.field} needs {' or '.join(rule.others)}"
        f" ({rule.reason})."
    )


def _body_schema(body: Body) -> dict[str, Any]:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {f.name: _field_schema(f, request=True) for f in body.fields},
    }
    required = [f.name for f in body.fields if f.required]
    if required:
        schema["required"] = required
    if body.rules:
        schema["allOf"] = [_rule_schema(body, r) for r in body.rules]
    schema["description"] = " ".join(
        [*(_rule_text(r) for r in body.rules), "A null value counts as omitted."]
    )
    return schema


def component_schemas() -> dict[str, Any]:
    schemas = {
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
    for name, shape in SHAPES.items():
        schemas[name] = {
            "type": "object",
            "required": [f.name for f in shape.fields if f.required],
            "properties": {f.name: _field_schema(f, request=False) for f in shape.fields},
        }
    return schemas
