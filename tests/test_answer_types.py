"""An answer the SDK cannot read is an error, never a substitute.

The property: turn any one field (nested ones included) of any of the six answers of the
service into any JSON value of another type (a string, a number, a boolean, ``null``, a list,
an object, or ``1e400``, which JSON decoders read as infinity) and the answer parses to the
exact value sent, or raises ``APIResponseError`` naming the field and carrying the fields that
could be read. Never a different value, never a bare ``KeyError`` or ``TypeError``.
"""

from __future__ import annotations

import copy
import enum
import json
import math
import re
import types
import typing
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any, Union

import attrs
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

import videogen_async as vg
from videogen_async._contract._dates import parse_datetime
from videogen_async._http._envelope import decode
from videogen_async._resources._resource import Resource

from .hostile._server import Behaviour, HostileServer, serve

WHEN = "2026-11-21T10:00:00Z"
RESULT = {"video_url": "https://cdn.example.com/v.mp4", "error_message": None, "finished_at": WHEN}
TASK = {
    "task_id": "t-1",
    "status": "succeeded",
    "model": "videomodel_2_0",
    "created_at": WHEN,
    "updated_at": WHEN,
    "credits_cost": 50,
    "result": RESULT,
}
#: A valid answer of each kind, every field present (a project lists a task with a result).
ANSWERS: dict[type[Any], dict[str, Any]] = {
    vg.CreditBalance: {"api_available_credits": 90.5, "api_total_credits": 100},
    vg.CreatedTask: {"task_id": "t-1", "status": "running", "created_at": WHEN, "credits_cost": 50},
    vg.Task: TASK,
    vg.CreatedProject: {
        "project_id": "p-1",
        "status": "draft",
        "current_step": "preparing_media",
        "mode": "auto",
        "credits_cost": 10,
        "created_at": WHEN,
    },
    vg.Project: {
        "project_id": "p-1",
        "status": "running",
        "current_step": "generating_video",
        "mode": "auto",
        "error_message": None,
        "view_script": "0-5s: a fox",
        "billing": {"script_credits_cost": 10, "video_credits_cost": 50, "total_credits_cost": 60},
        "task_ids": ["t-1"],
        "tasks": [TASK],
        "created_at": WHEN,
        "updated_at": WHEN,
    },
    vg.VideoBatch: {
        "project_id": "p-1",
        "project_status": "running",
        "current_step": "generating_video",
        "task_ids": ["t-1", "t-2"],
    },
}
CREATES = (vg.CreatedTask, vg.CreatedProject, vg.VideoBatch)
ID_OF = {vg.CreatedTask: "task_id", vg.CreatedProject: "project_id", vg.VideoBatch: "project_id"}
INFINITE = "<1e400>"  # written as the number 1e400 in the body


def fields_of(cls: type[Any], prefix: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every field path of a model, nested models and the first listed task included."""
    found: list[tuple[tuple[Any, ...], Any]] = []
    for field in attrs.fields(cls):
        path = (*prefix, field.name)
        found.append((path, field.type))
        inner = [a for a in (field.type, *typing.get_args(field.type)) if attrs.has(a)]
        if typing.get_origin(field.type) is tuple:  # the first listed
            path, inner = (*path, 0), inner[:1]
            found += [(path, inner[0])] if inner else []
        found += fields_of(inner[0], path) if inner else []
    return found


def get_in(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step] if isinstance(data, (dict, list, tuple)) else getattr(data, step)
    return data


CASES = [(cls, path, kind) for cls in ANSWERS for path, kind in fields_of(cls)]


def expected(kind: Any, value: Any) -> Any:
    """The exact reading of ``value`` as a field of type ``kind``, or ``Refused``."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (Union, types.UnionType) and type(None) in args:
        if value is None:
            return None
        kind = Union[tuple(a for a in args if a is not type(None))]  # noqa: UP007
        args = typing.get_args(kind)
    if value is None or value == INFINITE:
        return Refused
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if not isinstance(value, list):
            return Refused
        read = [expected(item, v) for v in value]
        return Refused if any(r is Refused for r in read) else tuple(read)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return Refused
        try:
            return float(value) if math.isfinite(float(value)) else Refused
        except OverflowError:  # an integer beyond the float range
            return Refused
    if isinstance(kind, type) and issubclass(kind, enum.Enum):  # open: any text is a member
        return kind(value) if isinstance(value, str) else Refused
    if kind is str:
        return value if isinstance(value, str) else Refused
    if kind is datetime:
        if not isinstance(value, str):
            return Refused
        try:
            return parse_datetime(value)
        except ValueError:
            return Refused
    if attrs.has(kind):  # an object of fields this model does not know: every default
        ok = isinstance(value, dict) and not set(value) & attrs.fields_dict(kind).keys()
        return kind() if ok else Refused
    raise AssertionError(kind)


class Refused:
    """The field cannot be read: the answer must be an error naming it."""


scalars = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
wrong_values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "yesterday", "2016-12-31T23:59:60Z", "lots", "5", "running"]),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(scalars, max_size=3),
    st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.sampled_from(["x_new", "y_new"]), scalars, max_size=2),
    st.just(INFINITE),
)


def parse(cls: type[Any], data: dict[str, Any], method: str) -> Any:
    raw = json.dumps({"code": 200, "trace_id": "tr-1", "data": data}).encode()
    raw = raw.replace(json.dumps(INFINITE).encode(), b"1e400")
    response = decode(200, raw, {}, method=method, path="/v1/x")
    return Resource.__new__(Resource)._parse(response, cls, created=method == "POST")


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(CASES), wrong_values)
def test_a_field_of_any_other_type_is_read_exactly_or_is_an_error_naming_it(
    case: tuple[type[Any], tuple[Any, ...], Any], value: Any
) -> None:
    cls, path, kind = case
    data = copy.deepcopy(ANSWERS[cls])
    parent = get_in(data, path[:-1]) if len(path) > 1 else data
    parent[path[-1]] = value
    method = "POST" if cls in CREATES else "GET"
    want = expected(kind, value)
    if want is not Refused:  # any error fails the test
        got = get_in(parse(cls, data, method), path)
        assert got == want
        assert type(got) is type(want) or isinstance(got, str)  # an enum member is its text
        return
    with pytest.raises(vg.APIResponseError) as caught:
        parse(cls, data, method)
    exc = caught.value
    named = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path)
    # The field, or an element of a list sent in its place.
    assert re.search(re.escape(cls.__name__ + named) + r"(\[\d+\])?: ", exc.message), exc.message
    assert exc.request_may_have_taken_effect is (method == "POST")
    assert exc.trace_id == "tr-1"
    assert "data=" in exc.message  # an excerpt of the answer
    id_field = ID_OF.get(cls, "task_id" if cls is vg.Task else "project_id")
    if path != (id_field,) and id_field in ANSWERS[cls]:  # what could be read is kept
        assert exc.readable[id_field] == ANSWERS[cls][id_field]
        assert getattr(exc, id_field) == ANSWERS[cls][id_field]
    if cls is vg.VideoBatch and path[0] != "task_ids":
        assert exc.readable["task_ids"] == ("t-1", "t-2")


@pytest.mark.parametrize("cls", list(ANSWERS), ids=lambda c: c.__name__)
def test_the_valid_answers_parse_with_unknown_fields_and_values(cls: type[Any]) -> None:
    data = {**copy.deepcopy(ANSWERS[cls]), "x_added_later": [1, {"a": None}]}
    for name in ("status", "current_step", "project_status"):
        if name in data:
            data[name] = "a_state_added_later"
    parsed = parse(cls, data, "GET")
    for name in ("status", "current_step", "project_status"):
        if name in data:
            assert getattr(parsed, name) == "a_state_added_later"


def test_every_field_of_the_six_answers_is_tried() -> None:
    paths = {(cls.__name__, ".".join(map(str, path))) for cls, path, _ in CASES}
    assert {("Task", "result.finished_at"), ("Project", "tasks.0.result.video_url")} <= paths
    assert {("Project", "tasks.0"), ("Project", "billing.total_credits_cost")} <= paths
    assert len(paths) == 51


# -- Through real HTTP: a service whose answers have a field of the wrong type -----------------


def answering(data: dict[str, Any] | None = None, **by_id: dict[str, Any]) -> Behaviour:
    """Answer every request with ``data``, or a poll of an id with ``by_id[id]``."""

    async def behaviour(server: HostileServer, request: web.Request) -> web.StreamResponse:
        body = by_id.get(request.query.get("task_id", ""), data)
        text = json.dumps({"code": 200, "trace_id": "tr-1", "data": body})
        return web.Response(
            text=text.replace('"<1e400>"', "1e400"), content_type="application/json"
        )

    return behaviour


@pytest.fixture
async def hostile() -> AsyncIterator[HostileServer]:
    async for server in serve():
        yield server


async def test_a_create_read_in_part_is_an_error_carrying_its_task_id(
    hostile: HostileServer,
) -> None:
    hostile.api = answering({"task_id": "t-1", "status": "running", "credits_cost": "lots"})
    async with vg.AsyncVideoGen(api_key="test-key", base_url=hostile.base_url) as client:
        with pytest.raises(vg.APIResponseError) as caught:
            await client.tasks.create("a fox")
    error = caught.value
    assert (error.task_id, error.request_may_have_taken_effect) == ("t-1", True)
    assert error.readable == {"task_id": "t-1", "status": vg.TaskStatus.RUNNING}
    assert "CreatedTask.credits_cost: expected a number, got str 'lots'" in error.message
    assert "'credits_cost': 'lots'" in error.body_excerpt
    assert [m for m, _ in hostile.seen] == ["POST"]  # never sent again


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("credits_cost", "lots"),
        ("credits_cost", INFINITE),
        ("credits_cost", None),
        ("result", "x"),
        ("model", [1]),
        ("updated_at", {}),
        ("created_at", "yesterday"),
        ("created_at", 1700000000),
        ("status", None),
    ],
)
async def test_a_task_read_with_a_field_of_the_wrong_type_is_an_error_naming_it(
    hostile: HostileServer, field: str, value: Any
) -> None:
    hostile.api = answering({**TASK, field: value})
    async with vg.AsyncVideoGen(api_key="test-key", base_url=hostile.base_url) as client:
        with pytest.raises(vg.APIResponseError) as caught:
            await client.tasks.get("t-1")
    assert f"Task.{field}: " in caught.value.message
    assert caught.value.task_id == "t-1"
    assert not caught.value.request_may_have_taken_effect


async def test_a_leap_second_is_a_time(hostile: HostileServer) -> None:
    hostile.api = answering({**TASK, "updated_at": "2016-12-31T23:59:60Z"})
    async with vg.AsyncVideoGen(api_key="test-key", base_url=hostile.base_url) as client:
        task = await client.tasks.get("t-1")
    assert task.updated_at == datetime(2016, 12, 31, 23, 59, 59, 999999, timezone.utc)


async def test_a_poll_read_in_part_is_that_ids_task_poll_error(hostile: HostileServer) -> None:
    bad = {**TASK, "task_id": "t-bad", "credits_cost": INFINITE}
    hostile.api = answering(TASK, **{"t-bad": bad})
    backoff = vg.BackoffPolicy(initial_delay=0.001, max_delay=0.002, max_consecutive_failures=2)
    async with vg.AsyncVideoGen(
        api_key="test-key", base_url=hostile.base_url, backoff=backoff
    ) as client:
        results = vg.gather_until_done(client, ["t-1", "t-bad"], return_exceptions=True)
        async with results:
            got = {getattr(item, "task_id", None): item async for item in results}
    assert isinstance(got["t-1"], vg.Task)
    error = got["t-bad"]
    assert isinstance(error, vg.TaskPollError)
    assert isinstance(error.__cause__, vg.APIResponseError)
    assert "Task.credits_cost: expected a finite number, got float inf" in str(error.__cause__)
