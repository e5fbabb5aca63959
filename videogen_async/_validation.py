"""The service's request rules, in one place.

The same functions check a request on both sides of the wire: the client runs them on the
body it is about to send (so that no credit is spent on a request we know is invalid) and the
sandbox runs them on the body it receives. Each takes a JSON-shaped mapping and returns the
body to send, or raises :class:`InvalidRequestError` naming the field and the rule.

Values the service leaves open (a project's ``duration`` bounds, ``resolution`` beyond 720 and
1080, the maximum number of product images) are checked for their type only and passed on for
the service to judge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from ._enums import (
    AspectRatio,
    FunctionMode,
    Model,
    ProjectMode,
    Ratio,
    SpeechLanguage,
)
from ._exceptions import InvalidRequestError

__all__ = [
    "DURATION_MAX",
    "DURATION_MIN",
    "FIRST_LAST_FRAMES_MAX_IMAGES",
    "MAX_AUDIO_URLS",
    "MAX_IMAGE_URLS",
    "MAX_VIDEO_URLS",
    "OUT_NUMBER_MAX",
    "OUT_NUMBER_MIN",
    "check_id",
    "validate_project_request",
    "validate_task_request",
    "validate_videos_request",
]

DURATION_MIN = 4
DURATION_MAX = 15
MAX_IMAGE_URLS = 9
MAX_AUDIO_URLS = 3
MAX_VIDEO_URLS = 3
FIRST_LAST_FRAMES_MAX_IMAGES = 2
OUT_NUMBER_MIN = 1
OUT_NUMBER_MAX = 4

TASK_FIELDS = frozenset(
    {
        "model",
        "prompt",
        "function_mode",
        "ratio",
        "duration",
        "image_urls",
        "audio_urls",
        "video_urls",
    }
)
PROJECT_FIELDS = frozenset(
    {
        "reference_video_url",
        "product_image_urls",
        "avatar_image_url",
        "prompt",
        "aspect_ratio",
        "speech_language_option",
        "duration",
        "resolution",
        "out_number",
        "mode",
    }
)
VIDEOS_FIELDS = frozenset({"script", "out_number", "resolution", "aspect_ratio"})


def _fail(field: str, rule: str, value: Any = None, *, show: bool = True) -> InvalidRequestError:
    return InvalidRequestError(field, rule, value=value, has_value=show)


def _integer(value: Any) -> int | None:
    """The integer a value stands for: an ``int`` (not a ``bool``) or an integral ``float``.

    JSON has one number type: the sandbox, like most JSON services, reads ``4.0`` as 4, so
    ``duration=4.0`` is not refused here either; it is sent as ``4`` (see :func:`_drop_none`),
    which a stricter service takes too.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _is_int(value: Any) -> bool:
    return _integer(value) is not None


def _choice(body: Mapping[str, Any], field: str, allowed: Iterable[str]) -> None:
    if field not in body or body[field] is None:
        return
    value = body[field]
    values = tuple(allowed)
    if not isinstance(value, str) or value not in values:
        shown = ", ".join(repr(v) for v in values)
        raise _fail(field, f"must be one of {shown}", value)


def _url(field: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise _fail(field, "must be an http or https URL", value)
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        raise _fail(field, "must be an http or https URL", value) from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise _fail(field, "must be an http or https URL", value)
    if any(c.isspace() for c in value):
        raise _fail(field, "must be a URL without spaces", value)


def _url_list(
    body: Mapping[str, Any], field: str, *, max_items: int | None, min_items: int = 0
) -> list[str]:
    value = body.get(field)
    if value is None:
        if min_items:
            raise _fail(field, f"is required (a list of at least {min_items} URL)", show=False)
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise _fail(field, "must be a list of URLs", value)
    if len(value) < min_items:
        raise _fail(field, f"must hold at least {min_items} URL", value)
    if max_items is not None and len(value) > max_items:
        raise _fail(field, f"must hold at most {max_items} URLs (got {len(value)})", show=False)
    for index, item in enumerate(value):
        _url(f"{field}[{index}]", item)
    return list(value)


def _out_number(body: Mapping[str, Any]) -> None:
    value = body.get("out_number")
    if value is None:
        return
    if not _is_int(value) or not OUT_NUMBER_MIN <= value <= OUT_NUMBER_MAX:
        raise _fail(
            "out_number", f"must be an integer from {OUT_NUMBER_MIN} to {OUT_NUMBER_MAX}", value
        )


def _resolution(body: Mapping[str, Any]) -> None:
    value = body.get("resolution")
    if value is None:
        return
    if _is_int(value):
        if value <= 0:
            raise _fail("resolution", "must be a positive integer or a string", value)
        return
    if not isinstance(value, str) or not value.strip():
        raise _fail("resolution", "must be a positive integer or a non-empty string", value)


def _optional_text(body: Mapping[str, Any], field: str) -> None:
    value = body.get(field)
    if value is not None and not isinstance(value, str):
        raise _fail(field, "must be a string", value)


def _unknown_fields(body: Mapping[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(str(k) for k in body if k not in known)
    if unknown:
        raise _fail(unknown[0], "is not a field of this request", show=False)


_INTEGER_FIELDS = frozenset({"duration", "out_number", "resolution"})


def _drop_none(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body to send, once the rules have accepted it.

    Omitted (``None``) fields are dropped, enum members become plain strings and integral
    floats of integer fields become integers.
    """
    sent: dict[str, Any] = {}
    for key, value in body.items():
        if value is None:
            continue
        if isinstance(value, str):
            sent[key] = str(value)
        elif key in _INTEGER_FIELDS and isinstance(value, float):
            sent[key] = _integer(value)
        else:
            sent[key] = value
    return sent


def _id_problem(value: str) -> str | None:
    """Why an id cannot travel as exactly one path segment, or ``None`` when it can."""
    if not value.strip():
        return "must be a non-empty string"
    if any(c.isspace() or not c.isprintable() for c in value):
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
    if any(c.isspace() or not c.isprintable() for c in decoded):
        return "must not contain white space or control characters (also percent-encoded)"
    return None


def check_id(field: str, value: Any) -> str:
    """Check a task or project id before it goes into a path or a query.

    An id must reach the service as exactly one path segment, whatever a proxy on the way
    does with the path: ``.`` and ``..``, a ``/`` or ``\\`` (raw or percent-encoded), white
    space and control characters are refused before any request is sent.

    Args:
        field: ``task_id`` or ``project_id``.
        value: The id.

    Returns:
        The id as a plain string.

    Raises:
        InvalidRequestError: The id is not a non-empty string that is one path segment.
    """
    if not isinstance(value, str):
        raise _fail(field, "must be a non-empty string", value)
    problem = _id_problem(value)
    if problem is not None:
        raise _fail(field, problem, value)
    return str(value)


def validate_task_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """Check the body of ``POST /v1/video/videomodel-2``.

    Args:
        body: The JSON body; ``None`` values count as omitted.

    Returns:
        The body to send, without the omitted fields.

    Raises:
        InvalidRequestError: A rule is broken; the error names the field and the rule.
    """
    if not isinstance(body, Mapping):
        raise _fail("body", "must be a JSON object", show=False)
    _unknown_fields(body, TASK_FIELDS)
    prompt = body.get("prompt")
    if prompt is None:
        raise _fail("prompt", "is required", show=False)
    if not isinstance(prompt, str) or not prompt.strip():
        raise _fail("prompt", "must be a non-empty string", prompt)
    _choice(body, "model", Model.values())
    _choice(body, "function_mode", FunctionMode.values())
    _choice(body, "ratio", Ratio.values())
    duration = body.get("duration")
    if duration is not None and (
        not _is_int(duration) or not DURATION_MIN <= duration <= DURATION_MAX
    ):
        raise _fail(
            "duration",
            f"must be an integer from {DURATION_MIN} to {DURATION_MAX} seconds",
            duration,
        )
    images = _url_list(body, "image_urls", max_items=MAX_IMAGE_URLS)
    audios = _url_list(body, "audio_urls", max_items=MAX_AUDIO_URLS)
    videos = _url_list(body, "video_urls", max_items=MAX_VIDEO_URLS)
    mode = body.get("function_mode") or FunctionMode.OMNI_REFERENCE.value
    if mode == FunctionMode.FIRST_LAST_FRAMES and len(images) > FIRST_LAST_FRAMES_MAX_IMAGES:
        raise _fail(
            "image_urls",
            f"must hold at most {FIRST_LAST_FRAMES_MAX_IMAGES} images when function_mode is"
            f" first_last_frames (got {len(images)})",
            show=False,
        )
    if mode == FunctionMode.OMNI_REFERENCE and audios and not images and not videos:
        raise _fail(
            "audio_urls",
            "needs at least one image or video with it when function_mode is omni_reference"
            " (audio-only input is rejected)",
            show=False,
        )
    return _drop_none(body)


def validate_project_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """Check the body of ``POST /v1/video/viral-ads-clone``.

    Args:
        body: The JSON body; ``None`` values count as omitted.

    Returns:
        The body to send, without the omitted fields.

    Raises:
        InvalidRequestError: A rule is broken; the error names the field and the rule.
    """
    if not isinstance(body, Mapping):
        raise _fail("body", "must be a JSON object", show=False)
    _unknown_fields(body, PROJECT_FIELDS)
    if body.get("reference_video_url") is None:
        raise _fail("reference_video_url", "is required", show=False)
    _url("reference_video_url", body["reference_video_url"])
    _url_list(body, "product_image_urls", max_items=None, min_items=1)
    if body.get("avatar_image_url") is not None:
        _url("avatar_image_url", body["avatar_image_url"])
    _optional_text(body, "prompt")
    _choice(body, "aspect_ratio", AspectRatio.values())
    _choice(body, "speech_language_option", SpeechLanguage.values())
    duration = body.get("duration")
    if duration is not None and (not _is_int(duration) or duration <= 0):
        raise _fail("duration", "must be a positive integer number of seconds", duration)
    _resolution(body)
    _out_number(body)
    _choice(body, "mode", ProjectMode.values())
    return _drop_none(body)


def validate_videos_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """Check the body of ``POST /v1/video/viral-ads-clone/{project_id}/videos``.

    Args:
        body: The JSON body; ``None`` values count as omitted.

    Returns:
        The body to send, without the omitted fields.

    Raises:
        InvalidRequestError: A rule is broken; the error names the field and the rule.
    """
    if not isinstance(body, Mapping):
        raise _fail("body", "must be a JSON object", show=False)
    _unknown_fields(body, VIDEOS_FIELDS)
    script = body.get("script")
    if script is not None and (not isinstance(script, str) or not script.strip()):
        raise _fail("script", "must be non-empty after trimming", script)
    _out_number(body)
    _resolution(body)
    _choice(body, "aspect_ratio", AspectRatio.values())
    return _drop_none(body)
