"""The request rules: each case names the field and the rule, and nothing is sent."""

from __future__ import annotations

from typing import Any

import pytest
from aioresponses import aioresponses

from videogen_async import AsyncVideoGen, InvalidRequestError
from videogen_async._contract._validation import (
    validate_project_request,
    validate_task_request,
    validate_videos_request,
)

from .helpers import BASE, KEY

U = "https://cdn.example.com/a.png"

TASK_BAD: list[tuple[dict[str, Any], str, str]] = [
    ({}, "prompt", "is required"),
    ({"prompt": "   "}, "prompt", "non-empty"),
    ({"prompt": 5}, "prompt", "non-empty string"),
    ({"prompt": "p", "model": "videomodel_3"}, "model", "must be one of"),
    ({"prompt": "p", "function_mode": "keyframes"}, "function_mode", "must be one of"),
    ({"prompt": "p", "ratio": "2:1"}, "ratio", "must be one of"),
    ({"prompt": "p", "duration": 3}, "duration", "from 4 to 15"),
    ({"prompt": "p", "duration": 16}, "duration", "from 4 to 15"),
    ({"prompt": "p", "duration": 5.5}, "duration", "integer"),
    ({"prompt": "p", "duration": True}, "duration", "integer"),
    ({"prompt": "p", "image_urls": [U] * 10}, "image_urls", "at most 9"),
    ({"prompt": "p", "audio_urls": [U] * 4, "image_urls": [U]}, "audio_urls", "at most 3"),
    ({"prompt": "p", "video_urls": [U] * 4}, "video_urls", "at most 3"),
    (
        {"prompt": "p", "function_mode": "first_last_frames", "image_urls": [U] * 3},
        "image_urls",
        "at most 2 images when function_mode is first_last_frames",
    ),
    ({"prompt": "p", "audio_urls": [U]}, "audio_urls", "audio-only"),
    (
        {"prompt": "p", "function_mode": "omni_reference", "audio_urls": [U]},
        "audio_urls",
        "audio-only",
    ),
    ({"prompt": "p", "image_urls": ["ftp://x/a.png"]}, "image_urls[0]", "http or https"),
    ({"prompt": "p", "image_urls": ["not a url"]}, "image_urls[0]", "http or https"),
    ({"prompt": "p", "image_urls": U}, "image_urls", "list of URLs"),
    ({"prompt": "p", "functionMode": "omni_reference"}, "functionMode", "not a field"),
]

TASK_GOOD: list[dict[str, Any]] = [
    {"prompt": "p"},
    {"prompt": "p", "duration": 4},
    {"prompt": "p", "duration": 15},
    {"prompt": "p", "image_urls": [U] * 9, "audio_urls": [U] * 3, "video_urls": [U] * 3},
    {"prompt": "p", "function_mode": "first_last_frames", "image_urls": [U, U]},
    {"prompt": "p", "function_mode": "first_last_frames", "audio_urls": [U]},
    {"prompt": "p", "audio_urls": [U], "video_urls": [U]},
    {"prompt": "p", "model": "videomodel_2_0_fast", "ratio": "21:9"},
]

PROJECT_OK = {"reference_video_url": U, "product_image_urls": [U]}

PROJECT_BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"product_image_urls": [U]}, "reference_video_url", "is required"),
    ({"reference_video_url": "x", "product_image_urls": [U]}, "reference_video_url", "http"),
    ({"reference_video_url": U}, "product_image_urls", "is required"),
    ({"reference_video_url": U, "product_image_urls": []}, "product_image_urls", "at least 1"),
    ({**PROJECT_OK, "avatar_image_url": "mailto:a@b"}, "avatar_image_url", "http"),
    ({**PROJECT_OK, "aspect_ratio": "4:3"}, "aspect_ratio", "must be one of"),
    ({**PROJECT_OK, "speech_language_option": "klingon"}, "speech_language_option", "one of"),
    ({**PROJECT_OK, "speech_language_option": "English"}, "speech_language_option", "one of"),
    ({**PROJECT_OK, "out_number": 0}, "out_number", "from 1 to 4"),
    ({**PROJECT_OK, "out_number": 5}, "out_number", "from 1 to 4"),
    ({**PROJECT_OK, "mode": "semi"}, "mode", "must be one of"),
    ({**PROJECT_OK, "duration": "15"}, "duration", "integer"),
    ({**PROJECT_OK, "resolution": 1.5}, "resolution", "integer or"),
    ({**PROJECT_OK, "prompt": 3}, "prompt", "string"),
]

VIDEOS_BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"script": "  \n "}, "script", "non-empty after trimming"),
    ({"out_number": 9}, "out_number", "from 1 to 4"),
    ({"aspect_ratio": "21:9"}, "aspect_ratio", "must be one of"),
    ({"resolution": ""}, "resolution", "non-empty"),
]


@pytest.mark.parametrize(("body", "field", "rule"), TASK_BAD)
def test_task_rules(body: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        validate_task_request(body)
    assert info.value.field == field
    assert rule in str(info.value)
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize("body", TASK_GOOD)
def test_task_accepts(body: dict[str, Any]) -> None:
    assert validate_task_request(body) == body


@pytest.mark.parametrize(("body", "field", "rule"), PROJECT_BAD)
def test_project_rules(body: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        validate_project_request(body)
    assert info.value.field == field
    assert rule in str(info.value)


def test_project_passes_open_values_through() -> None:
    body = {**PROJECT_OK, "resolution": "4k", "duration": 600, "speech_language_option": ""}
    assert validate_project_request(body) == body
    assert validate_project_request({**PROJECT_OK, "product_image_urls": [U] * 50})


@pytest.mark.parametrize(("body", "field", "rule"), VIDEOS_BAD)
def test_videos_rules(body: dict[str, Any], field: str, rule: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        validate_videos_request(body)
    assert info.value.field == field
    assert rule in str(info.value)


def test_invalid_request_is_value_error() -> None:
    assert issubclass(InvalidRequestError, ValueError)


@pytest.mark.parametrize(("body", "field", "rule"), TASK_BAD[:17])
async def test_client_sends_nothing_for_invalid_task(
    body: dict[str, Any], field: str, rule: str
) -> None:
    kwargs = {k: v for k, v in body.items() if k != "prompt"}
    with aioresponses() as mock:
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(InvalidRequestError) as info:
                await client.tasks.create(body.get("prompt"), **kwargs)  # type: ignore[arg-type]
        assert info.value.field == field
        assert mock.requests == {}


@pytest.mark.parametrize(("body", "field", "rule"), PROJECT_BAD)
async def test_client_sends_nothing_for_invalid_project(
    body: dict[str, Any], field: str, rule: str
) -> None:
    body = dict(body)
    ref = body.pop("reference_video_url", None)
    images = body.pop("product_image_urls", None)
    with aioresponses() as mock:
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(InvalidRequestError) as info:
                await client.projects.create(ref, images, **body)  # type: ignore[arg-type]
        assert info.value.field == field
        assert mock.requests == {}


@pytest.mark.parametrize(("body", "field", "rule"), VIDEOS_BAD)
async def test_client_sends_nothing_for_invalid_videos(
    body: dict[str, Any], field: str, rule: str
) -> None:
    with aioresponses() as mock:
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(InvalidRequestError):
                await client.projects.create_videos("p-1", **body)
        assert mock.requests == {}


@pytest.mark.parametrize("bad_id", ["", "   ", None, 5])
async def test_empty_ids_rejected_before_sending(bad_id: Any) -> None:
    with aioresponses() as mock:
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(InvalidRequestError, match="task_id"):
                await client.tasks.get(bad_id)
            with pytest.raises(InvalidRequestError, match="project_id"):
                await client.projects.get(bad_id)
            with pytest.raises(InvalidRequestError, match="project_id"):
                await client.projects.create_videos(bad_id)
        assert mock.requests == {}
