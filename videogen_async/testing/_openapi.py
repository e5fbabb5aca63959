"""The OpenAPI 3.1 document of the service as the sandbox implements it.

Served at ``/openapi.json`` and kept as ``docs/openapi.json`` (``python -m
videogen_async.testing --write-openapi docs/openapi.json``; a test checks they are equal).
Generated from the service statement, as the request checks are, so what fits the schema is
accepted and the rest answered 400. ``/_sandbox/`` endpoints are left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._contract._schemas import ID_PATTERN, component_schemas, ref
from .._contract._service import ENDPOINTS, Endpoint
from .._contract._validation import json_text


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": ref("ErrorEnvelope")}},
    }


_COMMON_ERRORS = {
    "401": {"$ref": "#/components/responses/Unauthorized"},
    "429": {"$ref": "#/components/responses/RateLimited"},
    "5XX": {"$ref": "#/components/responses/ServerError"},
}


def _operation(endpoint: Endpoint, errors: dict[str, Any]) -> dict[str, Any]:
    parameters = [_id_parameter(name, "path") for name in endpoint.path_params]
    parameters += [_id_parameter(name, "query") for name in endpoint.query_params]
    op: dict[str, Any] = {
        "operationId": endpoint.operation_id,
        "summary": endpoint.summary,
        "tags": [endpoint.tag],
    }
    if parameters:
        op["parameters"] = parameters
    if endpoint.body is not None:
        op["requestBody"] = {
            "required": endpoint.body_required,
            "content": {"application/json": {"schema": ref(endpoint.body.name)}},
        }
    op["responses"] = {
        "200": {
            "description": endpoint.ok,
            "headers": {"X-Trace-Id": {"$ref": "#/components/headers/TraceId"}},
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "description": f"Envelope of {endpoint.response}.",
                        "required": ["code", "trace_id", "message", "data"],
                        "properties": {
                            "code": {"type": "integer", "const": 200},
                            "trace_id": {"type": "string", "minLength": 1},
                            "message": {"type": ["string", "null"]},
                            "data": ref(endpoint.response),
                        },
                    }
                }
            },
        },
        **errors,
        **_COMMON_ERRORS,
    }
    return op


def _id_parameter(name: str, where: str) -> dict[str, Any]:
    """An id parameter (the shared ``check_id`` rule: 400 unless it is one path segment)."""
    return {
        "name": name,
        "in": where,
        "required": True,
        "schema": {"type": "string", "pattern": ID_PATTERN},
    }


def build_openapi(server_url: str | None = None) -> dict[str, Any]:
    """Build the OpenAPI 3.1 document of the service as the sandbox implements it.

    Args:
        server_url: The base URL to list under ``servers``; none is listed when omitted
            (the form kept in ``docs/openapi.json``).

    Returns:
        The document as JSON-ready data.
    """
    responses = {
        "400": _error("Invalid request: bad JSON, a broken rule (the message names the field)."),
        "404": _error("No such task or project (code 404)."),
        "409": _error(
            "Conflict. code 300111 'Insufficient API credits' (nothing was created or charged);"
            " code 100099 'Failed to store media from URL' (project creation only, nothing"
            " charged); code 409 when the project's script is not generated yet or the project"
            " has failed (videos endpoint only)."
        ),
        "413": _error("The body is larger than the sandbox accepts (1 MiB)."),
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
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint, errors)
    paths["/media/{file_name}"] = {
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
                }
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
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Video generation service (videogen-async sandbox)",
            "version": "1.0.0",
            "description": "The video generation service as the videogen-async sandbox"
            " implements it. Every response body is the envelope {code, trace_id, message,"
            " data}. 429 and 5xx answers appear only when fault injection is configured.",
        },
        # Listed by a served document; the kept one (docs/openapi.json) names no server.
        **({} if server_url is None else {"servers": [{"url": server_url}]}),
        "security": [{"bearerAuth": []}],
        "tags": [{"name": tag} for tag in ("tasks", "projects", "credits", "media")],
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
                    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
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
                        "application/json": {"schema": ref("ErrorEnvelope")},
                        "text/html": {"schema": {"type": "string"}},
                    },
                },
            },
            "schemas": component_schemas(),
        },
    }
    return document


def openapi_json(server_url: str | None = None) -> str:
    """The document as the text kept in ``docs/openapi.json`` (indented, a final newline).

    Args:
        server_url: As for :func:`build_openapi`.
    """
    return json_text(build_openapi(server_url), "", indent=2, ensure_ascii=False) + "\n"


def write_openapi(path: str | Path) -> Path:
    """Write the document to ``path`` (``docs/openapi.json`` in the repository); return it."""
    target = Path(path)
    target.write_text(openapi_json(), encoding="utf-8")
    return target
