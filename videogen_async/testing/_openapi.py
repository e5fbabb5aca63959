"""The OpenAPI 3.1 document of the service as the sandbox implements it.

Served at ``/openapi.json`` and kept as ``docs/openapi.json`` (``python -m
videogen_async.testing --write-openapi docs/openapi.json``; a test checks they are equal).
Generated from the service statement, as the request checks are, so what fits the schema is
accepted and the rest answered 400. ``/_sandbox/`` endpoints are left out.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from .._contract._schemas import ID_PATTERN, component_schemas, ref
from .._contract._service import ENDPOINTS, Endpoint
from .._contract._validation import json_text
from .._files import write_whole

_PARTS = Path(__file__).with_name("_openapi.json").read_text(encoding="utf-8")
"""The document's fixed text (its descriptions, the error answers, the media stand-in, the
envelope of a 200): data beside this module, read once at import (a served document is then
built without touching the disk on the event loop); what the statement says is filled in."""


def _operation(endpoint: Endpoint, parts: dict[str, Any]) -> dict[str, Any]:
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
    ok = copy.deepcopy(parts["ok"])
    envelope = ok["content"]["application/json"]["schema"]
    ok["description"] = endpoint.ok
    envelope["description"] = f"Envelope of {endpoint.response}."
    envelope["properties"]["data"] = ref(endpoint.response)
    # An operation's own text for an error (its 400) before the shared one.
    errors = parts["errors"]
    op["responses"] = {
        "200": ok,
        **{c: errors.get(f"{endpoint.operation_id} {c}", errors[c]) for c in endpoint.errors},
        **parts["common_errors"],
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
    parts = json.loads(_PARTS)  # a fresh copy: the document is filled in place
    document: dict[str, Any] = parts["document"]
    paths: dict[str, Any] = {}
    for endpoint in ENDPOINTS:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint, parts)
    document["paths"] = {**paths, **document["paths"]}  # the media stand-in last
    document["components"]["schemas"] = component_schemas()
    # Listed by a served document; the kept one (docs/openapi.json) names no server.
    if server_url is None:
        del document["servers"]
    else:
        document["servers"] = [{"url": server_url}]
    return document


def openapi_json(server_url: str | None = None) -> str:
    """The document as the text kept in ``docs/openapi.json`` (indented, a final newline).

    Args:
        server_url: As for :func:`build_openapi`.
    """
    return json_text(build_openapi(server_url), "", indent=2, ensure_ascii=False) + "\n"


def write_openapi(path: str | Path) -> Path:
    """Write the document to ``path`` (``docs/openapi.json`` in the repository); return it.

    Raises:
        OSError: The disk refused it; ``path`` is left as it was (``write_whole``).
    """
    target = Path(path)
    write_whole(target, openapi_json())  # a full disk leaves no half document
    return target
