"""The OpenAPI document: kept in docs/, served, and true to what the sandbox does."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from videogen_async._contract._exceptions import InvalidRequestError
from videogen_async._contract._schemas import ID_PATTERN
from videogen_async._contract._validation import (
    ID_UNSAFE,
    check_id,
    validate_project_request,
    validate_task_request,
    validate_videos_request,
)
from videogen_async.testing import SandboxServer, build_openapi, openapi_json, write_openapi

from ._jsonschema import check, errors
from .conftest import PRODUCT, SCRIPT_READY, TASK_SECONDS, Api
from .test_errors import PROJECT_CASES, TASK_CASES

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
DOC = build_openapi()


def test_docs_copy_equals_the_generated_document() -> None:
    assert DOC_PATH.read_text(encoding="utf-8") == openapi_json(), (
        "docs/openapi.json is stale: run"
        " `python -m videogen_async.testing --write-openapi docs/openapi.json`"
    )


def test_write_openapi(tmp_path: Path) -> None:
    target = write_openapi(tmp_path / "o.json")
    assert json.loads(target.read_text(encoding="utf-8")) == DOC


def test_document_covers_every_endpoint() -> None:
    assert DOC["openapi"] == "3.1.0"
    operations = {(path, method) for path, item in DOC["paths"].items() for method in item}
    assert operations == {
        ("/v1/video/videomodel-2", "post"),
        ("/v1/tasks", "get"),
        ("/v1/credits", "get"),
        ("/v1/video/viral-ads-clone", "post"),
        ("/v1/video/viral-ads-clone/{project_id}", "get"),
        ("/v1/video/viral-ads-clone/{project_id}/videos", "post"),
        ("/media/{file_name}", "get"),
    }
    assert DOC["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, item in DOC["paths"].items():
        for op in item.values():
            assert "200" in op["responses"]
            if path.startswith("/v1/"):
                assert "401" in op["responses"]
    json.dumps(DOC)  # JSON-ready
    assert not any(p.startswith("/_sandbox") for p in DOC["paths"])


async def test_served_document_names_the_server(api: Api, sandbox: SandboxServer) -> None:
    reply = await api.call("GET", "/openapi.json", auth=False)
    assert reply.status == 200
    assert reply.body["servers"] == [{"url": sandbox.base_url}]
    assert {k: v for k, v in reply.body.items() if k != "servers"} == DOC
    assert sandbox.openapi()["servers"] == [{"url": sandbox.base_url}]


def response_schema(path: str, method: str, status: int) -> Any:
    responses = DOC["paths"][path][method]["responses"]
    response = responses.get(str(status)) or responses[f"{str(status)[0]}XX"]
    if "$ref" in response:
        response = DOC["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    return response["content"]["application/json"]["schema"]


def request_schema(name: str) -> Any:
    return DOC["components"]["schemas"][name]


async def test_real_answers_fit_the_document(api: Api, sandbox: SandboxServer) -> None:
    """Walk both state machines and check every answer against its documented schema."""
    seen: list[tuple[str, str, int]] = []

    async def fits(method: str, template: str, path: str, **kwargs: Any) -> Any:
        reply = await api.call(method.upper(), path, **kwargs)
        check(reply.body, response_schema(template, method, reply.status), DOC)
        seen.append((template, method, reply.status))
        return reply

    tasks = "/v1/video/videomodel-2"
    status = "/v1/tasks"
    projects = "/v1/video/viral-ads-clone"
    project = "/v1/video/viral-ads-clone/{project_id}"
    videos = "/v1/video/viral-ads-clone/{project_id}/videos"
    created = (await fits("post", tasks, tasks, json={"prompt": "x"})).body["data"]
    failing = (await fits("post", tasks, tasks, json={"prompt": "sandbox-fail"})).body["data"]
    await fits("get", status, f"{status}?task_id={created['task_id']}")
    sandbox.clock.advance(TASK_SECONDS)
    await fits("get", status, f"{status}?task_id={created['task_id']}")
    await fits("get", status, f"{status}?task_id={failing['task_id']}")
    await fits("get", status, status)
    await fits("get", status, f"{status}?task_id=nope")
    await fits("get", "/v1/credits", "/v1/credits")
    await fits("get", "/v1/credits", "/v1/credits", auth=False)
    await fits("post", tasks, tasks, json={"prompt": ""})
    body = {"reference_video_url": "https://e.com/r.mp4", "product_image_urls": [PRODUCT]}
    auto = (await fits("post", projects, projects, json=body)).body["data"]["project_id"]
    manual = (await fits("post", projects, projects, json=body | {"mode": "manual"})).body
    manual_id = manual["data"]["project_id"]
    await fits("post", projects, projects, json=body | {"avatar_image_url": "https://x.invalid/"})
    await fits("get", project, f"{projects}/{auto}")
    await fits("post", videos, f"{projects}/{manual_id}/videos", json={})
    sandbox.clock.advance(SCRIPT_READY)
    await fits("get", project, f"{projects}/{auto}")
    await fits("get", project, f"{projects}/{manual_id}")
    await fits("post", videos, f"{projects}/{manual_id}/videos", json={"resolution": "1080p"})
    await fits("post", videos, f"{projects}/{manual_id}/videos", json={"out_number": 9})
    await fits("post", videos, f"{projects}/nope/videos", json={})
    sandbox.clock.advance(TASK_SECONDS)
    await fits("get", project, f"{projects}/{manual_id}")
    await fits("get", project, f"{projects}/nope")
    sandbox.set_credits(available=0)
    await fits("post", tasks, tasks, json={"prompt": "x"})
    sandbox.faults.set("*", rate_limit_rate=1.0, times=1)
    await fits("get", "/v1/credits", "/v1/credits")
    sandbox.faults.set("*", error_rate=1.0, times=1)
    await fits("get", "/v1/credits", "/v1/credits")
    statuses = {s for _, _, s in seen}
    assert {200, 400, 401, 404, 409, 429} <= statuses
    assert statuses & {500, 502, 503}


@pytest.mark.parametrize(("body", "field"), TASK_CASES)
def test_task_request_schema_rejects_what_the_rules_reject(
    body: dict[str, Any], field: str
) -> None:
    assert errors(body, request_schema("CreateTaskRequest"), DOC), field


@pytest.mark.parametrize(("body", "field"), PROJECT_CASES)
def test_project_request_schema_rejects_what_the_rules_reject(
    body: dict[str, Any], field: str
) -> None:
    assert errors(body, request_schema("CreateProjectRequest"), DOC), field


URLS = st.sampled_from(
    [
        "https://e.com/a.png",
        "http://cdn.example.org/x/y.mp4?sig=1#t",
        "HTTPS://E.COM/UP",
        "http://user@host:8080/p",
        "http://e.com/\x1c",
        "https://e.com/caf\u00e9?q=\u00fc",
        "ftp://e.com/a.png",
        "https://",
        "https:///path",
        "not a url",
        "https://e.com/a b.png",
        "",
        " ",
        5,
        None,
    ]
)


def url_lists(max_size: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.lists(URLS, max_size=max_size), st.sampled_from(["x", 3]))


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(_MISSING), strategy)


_MISSING = object()


def bodies(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({k: maybe(v) for k, v in fields.items()}).map(
        lambda d: {k: v for k, v in d.items() if v is not _MISSING}
    )


TEXT = st.sampled_from(
    ["a fox", "", "  ", "x\ny", "\x1f", "\x1c x", "\ufeff", "\u3000", "\x85", 7, None, True]
)
INTS = st.one_of(st.integers(-2, 20), st.sampled_from([None, True, "5", 5.5]))

TASK_BODIES = bodies(
    {
        "prompt": TEXT,
        "model": st.sampled_from(["videomodel_2_0", "videomodel_2_0_fast", "v3", None, 1]),
        "function_mode": st.sampled_from(["first_last_frames", "omni_reference", "x", None]),
        "ratio": st.sampled_from(["21:9", "16:9", "9:16", "2:1", None]),
        "duration": INTS,
        "image_urls": url_lists(11),
        "audio_urls": url_lists(4),
        "video_urls": url_lists(4),
        "functionMode": st.just("omni_reference"),
    }
)
PROJECT_BODIES = bodies(
    {
        "reference_video_url": URLS,
        "product_image_urls": url_lists(3),
        "avatar_image_url": URLS,
        "prompt": TEXT,
        "aspect_ratio": st.sampled_from(["9:16", "1:1", "16:9", "4:3", None]),
        "speech_language_option": st.sampled_from(["", "english", "hindi", "elvish", None]),
        "duration": INTS,
        "resolution": st.one_of(INTS, st.sampled_from(["1080", "4k", "", " ", "\x1d"])),
        "out_number": INTS,
        "mode": st.sampled_from(["auto", "manual", "semi", None]),
    }
)
VIDEOS_BODIES = bodies(
    {
        "script": TEXT,
        "out_number": INTS,
        "resolution": st.one_of(INTS, st.sampled_from(["1080", "", " "])),
        "aspect_ratio": st.sampled_from(["9:16", "1:1", "21:9", None]),
        "extra": st.just(1),
    }
)


def test_url_schema_is_a_subset_of_the_rule() -> None:
    """The schema leaves out IDN and bracketed-IPv6 hosts, which the rule accepts: every URL
    that fits the schema is accepted, and schema-generated requests never hit a rule's edge."""
    url = request_schema("Url")
    for accepted_by_both in ("https://e.com/a.png", "http://u:p@h:8080/x?y#z"):
        assert not errors(accepted_by_both, url, DOC)
        validate_task_request({"prompt": "x", "image_urls": [accepted_by_both]})
    for rule_only in ("http://[::1]:80/x", "https://b\u00fccher.example/a.png"):
        assert errors(rule_only, url, DOC)
        validate_task_request({"prompt": "x", "image_urls": [rule_only]})


def test_id_pattern_refuses_every_character_check_id_refuses() -> None:
    """On every character of the Basic Multilingual Plane but surrogates (which an ECMA-262
    class cannot tell from astral pairs), the document's id pattern and ``check_id`` agree."""
    pattern = re.compile(ID_PATTERN)
    disagree = []
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        candidate = f"a{chr(code)}b"
        try:
            check_id("task_id", candidate)
            refused = False
        except InvalidRequestError:
            refused = True
        if refused == bool(pattern.fullmatch(candidate)):
            disagree.append(hex(code))
    assert not disagree
    assert not pattern.fullmatch("a\u00adb")  # the soft hyphen a fuzzing run once found


def test_id_unsafe_is_every_space_control_and_format_character() -> None:
    """The rule's table is the white space, control and format characters of this Python's
    Unicode database; on an older one, the table's extra characters are not assigned yet."""
    table = re.compile(f"[{ID_UNSAFE}]")
    for code in range(0x10000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        should = char.isspace() or unicodedata.category(char) in ("Cc", "Cf")
        listed = table.match(char) is not None
        assert should <= listed, hex(code)
        assert listed <= should or unicodedata.category(char) == "Cn", hex(code)
    for astral in ("\U000e0001", "\U0001d173"):  # tag and musical notation format marks
        with pytest.raises(InvalidRequestError, match="white space or control"):
            check_id("task_id", f"a{astral}")


def accepted(rule: Any, body: dict[str, Any]) -> bool:
    try:
        rule(body)
    except InvalidRequestError:
        return False
    return True


@pytest.mark.parametrize(
    ("rule", "schema", "strategy"),
    [
        (validate_task_request, "CreateTaskRequest", TASK_BODIES),
        (validate_project_request, "CreateProjectRequest", PROJECT_BODIES),
        (validate_videos_request, "CreateVideosRequest", VIDEOS_BODIES),
    ],
    ids=["task", "project", "videos"],
)
def test_request_schemas_agree_with_the_shared_rules(
    rule: Any, schema: str, strategy: st.SearchStrategy[dict[str, Any]]
) -> None:
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def agree(body: dict[str, Any]) -> None:
        problems = errors(body, request_schema(schema), DOC)
        assert accepted(rule, body) == (not problems), (body, problems)

    agree()
