"""The OpenAPI 3.1 document of the service as the sandbox implements it.

It is generated here, served by every sandbox at ``/openapi.json`` and kept in the repository
as ``docs/openapi.json`` (``python -m videogen_async.testing --write-openapi docs/openapi.json``
regenerates it; a test checks that the two are equal).

The request schemas state the same rules as :mod:`videogen_async._validation` (JSON Schema
2020-12 can say them all, including the two cross-field rules of a direct task), so a request
that fits the schema is accepted and one that does not is answered 400. Control endpoints
under ``/_sandbox/`` are not part of the service and are left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._enums import (
    AspectRatio,
    FunctionMode,
    Model,
    ProjectMode,
    ProjectStatus,
    ProjectStep,
    Ratio,
    SpeechLanguage,
    TaskStatus,
)
from .._validation import (
    DURATION_MAX,
    DURATION_MIN,
    FIRST_LAST_FRAMES_MAX_IMAGES,
    MAX_AUDIO_URLS,
    MAX_IMAGE_URLS,
    MAX_VIDEO_URLS,
    OUT_NUMBER_MAX,
    OUT_NUMBER_MIN,
)

__all__ = ["build_openapi", "openapi_json", "write_openapi"]

_REF = "#/components/schemas/"

# What Python's ``str.isspace`` calls white space, which ``str.strip`` removes: the shared
# rules trim with it, so "non-blank" means "has one character outside this class".
_SPACE = r"\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_NON_BLANK = f"[^{_SPACE}]"


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


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    kind = schema["type"]
    nullable = {**schema, "type": [*(kind if isinstance(kind, list) else [kind]), "null"]}
    if "enum" in schema:
        nullable["enum"] = [*schema["enum"], None]
    return nullable


def _enum(values: tuple[str, ...], description: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": description}


def _date_time(description: str) -> dict[str, Any]:
    return {"type": "string", "format": "date-time", "description": description}


def _credits(description: str) -> dict[str, Any]:
    return {"type": "number", "minimum": 0, "description": description}


def _url_list(max_items: int | None, description: str, min_items: int = 0) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": _ref("Url"), "description": description}
    if min_items:
        schema["minItems"] = min_items
    if max_items is not None:
        schema["maxItems"] = max_items
    return schema


def _out_number() -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": OUT_NUMBER_MIN,
        "maximum": OUT_NUMBER_MAX,
        "description": f"Number of videos, {OUT_NUMBER_MIN} to {OUT_NUMBER_MAX}.",
    }


def _resolution(description: str) -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "pattern": _NON_BLANK},
        ],
        "description": description,
    }


def _nullable_any(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [*schema["oneOf"], {"type": "null"}], "description": schema["description"]}


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
    task_status = _enum(TaskStatus.values(), "queued, running, succeeded, failed or error.")
    task_properties = {
        "task_id": {"type": "string", "minLength": 1},
        "status": task_status,
        "model": {"type": "string", "description": "The model value used to create the task."},
        "created_at": _date_time("When the task was created."),
        "updated_at": _date_time("When the task last changed."),
        "credits_cost": _credits("Credits charged; 0 once a task failed and was refunded."),
        "result": _nullable(_ref("TaskResult")),
    }
    task_required = list(task_properties)
    audio_only = {
        "allOf": [
            {"properties": {"function_mode": {"enum": [FunctionMode.OMNI_REFERENCE.value, None]}}},
            {
                "required": ["audio_urls"],
                "properties": {"audio_urls": {"type": "array", "minItems": 1}},
            },
            {"properties": {"image_urls": {"type": ["array", "null"], "maxItems": 0}}},
            {"properties": {"video_urls": {"type": ["array", "null"], "maxItems": 0}}},
        ]
    }
    return {
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
        "CreateTaskRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["prompt"],
            "properties": {
                "model": _nullable(_enum(Model.values(), "Default videomodel_2_0.")),
                "prompt": {"type": "string", "pattern": _NON_BLANK, "description": "Text prompt."},
                "function_mode": _nullable(_enum(FunctionMode.values(), "Default omni_reference.")),
                "ratio": _nullable(_enum(Ratio.values(), "Default 16:9.")),
                "duration": _nullable(
                    {
                        "type": "integer",
                        "minimum": DURATION_MIN,
                        "maximum": DURATION_MAX,
                        "description": f"Seconds, {DURATION_MIN} to {DURATION_MAX}; default 5.",
                    }
                ),
                "image_urls": _nullable(_url_list(MAX_IMAGE_URLS, "Reference images.")),
                "audio_urls": _nullable(_url_list(MAX_AUDIO_URLS, "Reference audio.")),
                "video_urls": _nullable(_url_list(MAX_VIDEO_URLS, "Reference videos.")),
            },
            "allOf": [
                {
                    "if": {
                        "required": ["function_mode"],
                        "properties": {
                            "function_mode": {"const": FunctionMode.FIRST_LAST_FRAMES.value}
                        },
                    },
                    "then": {
                        "properties": {
                            "image_urls": {
                                "type": ["array", "null"],
                                "maxItems": FIRST_LAST_FRAMES_MAX_IMAGES,
                            }
                        }
                    },
                },
                {"not": audio_only},
            ],
            "description": "At most 2 images with first_last_frames; with omni_reference,"
            " audio needs at least one image or video. A null value counts as omitted.",
        },
        "CreatedTask": {
            "type": "object",
            "required": ["task_id", "status", "created_at", "credits_cost"],
            "properties": {
                "task_id": {"type": "string", "minLength": 1},
                "status": task_status,
                "created_at": _date_time("When the task was created."),
                "credits_cost": _credits("Credits charged for the task."),
            },
        },
        "TaskResult": {
            "type": "object",
            "required": ["video_url", "error_message", "finished_at"],
            "properties": {
                "video_url": {
                    "type": ["string", "null"],
                    "format": "uri",
                    "description": "The generated video, once the task has succeeded.",
                },
                "error_message": {"type": ["string", "null"]},
                "finished_at": _date_time("When the task finished."),
                "status": {
                    **task_status,
                    "description": "Shown by one example of the service; not to be relied on.",
                },
            },
        },
        "Task": {
            "type": "object",
            "required": task_required,
            "properties": task_properties,
        },
        "ProjectTask": {
            "type": "object",
            "required": [*task_required, "batch"],
            "properties": {
                **task_properties,
                "batch": {"type": "integer", "minimum": 1, "description": "1 for the first batch."},
                "aspect_ratio": _enum(AspectRatio.values(), "Aspect ratio of the batch."),
                "resolution": {"type": ["integer", "string"], "description": "Of the batch."},
            },
        },
        "CreditBalance": {
            "type": "object",
            "required": ["api_available_credits", "api_total_credits"],
            "properties": {
                "api_available_credits": {"type": "number"},
                "api_total_credits": {"type": "number"},
            },
        },
        "CreateProjectRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["reference_video_url", "product_image_urls"],
            "properties": {
                "reference_video_url": _ref("Url"),
                "product_image_urls": _url_list(None, "Product images.", min_items=1),
                "avatar_image_url": _nullable(_ref("Url")),
                "prompt": {"type": ["string", "null"]},
                "aspect_ratio": _nullable(_enum(AspectRatio.values(), "Default 9:16.")),
                "speech_language_option": _nullable(
                    _enum(
                        SpeechLanguage.values(),
                        "Empty string follows the reference video's spoken language.",
                    )
                ),
                "duration": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "description": "Target seconds; default 15.",
                },
                "resolution": _nullable_any(_resolution("Default 720.")),
                "out_number": _nullable(_out_number()),
                "mode": _nullable(_enum(ProjectMode.values(), "Default auto.")),
            },
        },
        "CreatedProject": {
            "type": "object",
            "required": [
                "project_id",
                "status",
                "current_step",
                "mode",
                "credits_cost",
                "created_at",
            ],
            "properties": {
                "project_id": {"type": "string", "minLength": 1},
                "status": _enum(ProjectStatus.values(), "draft at creation."),
                "current_step": _enum(ProjectStep.values(), "preparing_media at creation."),
                "mode": _enum(ProjectMode.values(), "auto or manual."),
                "credits_cost": _credits("Charged for script generation (10)."),
                "created_at": {"type": ["string", "null"], "format": "date-time"},
            },
        },
        "Billing": {
            "type": "object",
            "required": ["script_credits_cost", "video_credits_cost", "total_credits_cost"],
            "properties": {
                "script_credits_cost": _credits("Charged for script generation."),
                "video_credits_cost": _credits("Charged for the non-failed video tasks."),
                "total_credits_cost": _credits("Script plus video."),
            },
        },
        "Project": {
            "type": "object",
            "required": [
                "project_id",
                "status",
                "current_step",
                "mode",
                "error_message",
                "view_script",
                "billing",
                "task_ids",
                "tasks",
                "created_at",
                "updated_at",
            ],
            "properties": {
                "project_id": {"type": "string", "minLength": 1},
                "status": _enum(ProjectStatus.values(), "Project status."),
                "current_step": _enum(ProjectStep.values(), "Project step."),
                "mode": _enum(ProjectMode.values(), "auto or manual."),
                "error_message": {"type": ["string", "null"]},
                "view_script": {
                    "type": ["string", "null"],
                    "description": "The script, one line per time range; null until generated.",
                },
                "billing": _ref("Billing"),
                "task_ids": {"type": "array", "items": {"type": "string"}},
                "tasks": {"type": "array", "items": _ref("ProjectTask")},
                "created_at": _date_time("When the project was created."),
                "updated_at": _date_time("When the project last changed."),
            },
        },
        "CreateVideosRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "script": {
                    "type": ["string", "null"],
                    "pattern": _NON_BLANK,
                    "description": "Script of this batch only; never overwrites the project's.",
                },
                "out_number": _nullable(_out_number()),
                "resolution": _nullable_any(_resolution("Default: the project's.")),
                "aspect_ratio": _nullable(
                    _enum(AspectRatio.values(), "Default: the project's aspect ratio.")
                ),
            },
        },
        "VideoBatch": {
            "type": "object",
            "required": ["project_id", "project_status", "current_step", "task_ids"],
            "properties": {
                "project_id": {"type": "string", "minLength": 1},
                "project_status": _enum(ProjectStatus.values(), "running after the call."),
                "current_step": _enum(ProjectStep.values(), "generating_video after the call."),
                "task_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
    }


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


def _path_id(name: str) -> dict[str, Any]:
    """A path parameter that must not be blank (the shared ``check_id`` rule: 400 if it is)."""
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": _NON_BLANK},
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
    paths: dict[str, Any] = {
        "/v1/video/videomodel-2": {
            "post": _operation(
                "createVideoTask",
                "Create a direct video generation task",
                _ok("CreatedTask", "The task was created and charged."),
                {"400": bad_request, "409": conflict, "413": too_large},
                body=("CreateTaskRequest", True),
                tag="tasks",
            )
        },
        "/v1/tasks": {
            "get": _operation(
                "getTask",
                "Query the status and result of a video task",
                _ok("Task", "The task; result is null while it is in progress."),
                {"400": _error("task_id is missing or blank."), "404": not_found},
                parameters=[
                    {
                        "name": "task_id",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string", "pattern": _NON_BLANK},
                    }
                ],
                tag="tasks",
            )
        },
        "/v1/credits": {
            "get": _operation(
                "getCredits",
                "Query the API credit balance",
                _ok("CreditBalance", "The balance."),
                {"400": _error("The request failed.")},
                tag="credits",
            )
        },
        "/v1/video/viral-ads-clone": {
            "post": _operation(
                "createProject",
                "Create a viral ad clone project",
                _ok("CreatedProject", "The project was created and 10 credits charged."),
                {"400": bad_request, "409": conflict, "413": too_large},
                body=("CreateProjectRequest", True),
                tag="projects",
            )
        },
        "/v1/video/viral-ads-clone/{project_id}": {
            "get": _operation(
                "getProject",
                "Get a project with its script, tasks and billing",
                _ok("Project", "The project."),
                {"400": _error("project_id is blank."), "404": not_found},
                parameters=[_path_id("project_id")],
                tag="projects",
            )
        },
        "/v1/video/viral-ads-clone/{project_id}/videos": {
            "post": _operation(
                "createProjectVideos",
                "Create a new batch of video tasks from the project's script",
                _ok("VideoBatch", "The batch was created and charged."),
                {"400": bad_request, "404": not_found, "409": conflict, "413": too_large},
                parameters=[_path_id("project_id")],
                body=("CreateVideosRequest", False),
                tag="projects",
            )
        },
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
