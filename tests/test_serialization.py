"""Errors and results that travel: pickle for every error, to_dict/to_json/from_dict for results.

* Every class of the exception tree (found by walking ``VideoGenError.__subclasses__()``, so a
  new class is covered as soon as it exists) pickles and unpickles to an error of the same
  class with the same message, args and attributes, its cause when it is one of ours, and
  never the API key; also through a ``multiprocessing`` pool, raised in a child process.
* Every model, ``LedgerEntry`` and ``GatherProgress`` round-trips exactly through
  ``to_dict`` / ``to_json`` / ``from_dict`` (property tests): dates with their offset, enum
  values this SDK does not know kept as strings, nested models.
* A ``RawResponse`` and a result's ``_response`` pickle without the key a hostile service
  echoed in its headers and its body.
"""

from __future__ import annotations

import enum
import inspect
import json
import multiprocessing
import pickle
import types
import typing
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
import rich.pretty
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

import videogen_async as vg
from videogen_async._contract import _models
from videogen_async._contract._redact import REDACTED, register_secret
from videogen_async._contract._serial import Serializable
from videogen_async._ledger._entry import LedgerEntry
from videogen_async._waiting._progress import GatherProgress

from .hostile._behaviours import KEY
from .hostile._scan import assert_no_key
from .hostile._server import HostileServer, serve

register_secret(KEY)  # as a client of this key would (also in a pool's child importing this)

WHEN = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=timezone(timedelta(hours=5, minutes=30)))
TASK = vg.Task(
    "t-1",
    vg.TaskStatus.FAILED,
    vg.Model.VIDEOMODEL_2_0,
    WHEN,
    WHEN,
    0.0,
    vg.TaskResult(None, "moderation", WHEN),
)
PROJECT = vg.Project("p-1", "failed", "failed", "auto", "no media", billing=vg.Billing(10, 0, 10))

#: A value for each argument an error's ``__init__`` takes, by its name. A new class with an
#: argument of a new name makes the walk fail until a sample is added here.
SAMPLES: dict[str, Any] = {
    "message": f"refused: Authorization: Bearer {KEY}",
    "field": "duration",
    "rule": "must be from 4 to 15 seconds",
    "value": 99,
    "has_value": True,
    "status_code": 429,
    "code": 300111,
    "trace_id": "trace-1",
    "method": "POST",
    "path": "/v1/video/videomodel-2",
    "request_may_have_taken_effect": True,
    "body": {"code": 429, "message": f"echo {KEY}", "data": None},
    "headers": {"Retry-After": "3", "X-Echo": f"Bearer {KEY}"},
    "body_excerpt": f"<html>{KEY}</html>",
    "task": TASK,
    "project": PROJECT,
    "last": TASK,
    "pending": ("t-2", "t-3"),
    "timeout": 30.0,
    "task_id": "t-9",
    "cause": vg.NotFoundError("GET /v1/tasks: no task", status_code=404, code=404, trace_id="tr"),
    "url": "https://cdn.example.com/v.mp4?signature=1",
    "bytes_received": 10,
    "expected_size": 20,
    "key": "batch-line-1",
    "entry": LedgerEntry("batch-line-1", "unknown", request={"prompt": "a fox"}, created_at=WHEN),
    "detail": "APIConnectionError: the connection broke",
    "estimate": 12.0,
    "spent": 8.0,
    "reserved": 4.0,
    "created": "t-11",
    "credits_cost": 10.0,
    "max_credits": 20.0,
    "retry_after": 2.5,
    "readable": {"task_id": "t-9", "status": vg.TaskStatus.RUNNING},
}


def error_classes() -> list[type[vg.VideoGenError]]:
    """The whole tree, by walking ``__subclasses__`` (the package's classes only)."""
    found: dict[type[vg.VideoGenError], None] = {}
    stack: list[type[vg.VideoGenError]] = [vg.VideoGenError]
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith("videogen_async") and cls not in found:
            found[cls] = None
            stack.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


def build(cls: type[vg.VideoGenError]) -> vg.VideoGenError:
    """An error of ``cls`` with every argument its ``__init__`` takes, and its context set."""
    kwargs: dict[str, Any] = {}
    for name, param in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        names = [name]
        if param.kind is param.VAR_KEYWORD:  # passed on to VideoGenError
            names = list(inspect.signature(vg.VideoGenError.__init__).parameters)[2:]
        for each in names:
            assert each in SAMPLES, f"no sample for {cls.__name__}({each}=...): add one"
            kwargs.setdefault(each, SAMPLES[each])
    error = cls(**kwargs)
    for name, value in SAMPLES.items():  # context set after construction (retry_after)
        if hasattr(error, name) and getattr(error, name) is None:
            setattr(error, name, value)
    error.__notes__ = [f"seen with {KEY}"]  # set after construction: redacted when pickled
    return error


def assert_same(back: BaseException, error: BaseException, *, cause: bool = True) -> None:
    assert type(back) is type(error)
    assert back.args == error.args
    assert str(back) == str(error)
    expected = dict(vars(error), __notes__=[f"seen with {REDACTED}"])
    assert vars(back) == expected
    if cause and isinstance(error.__cause__, vg.VideoGenError):
        assert back.__cause__ is not None
        assert_same_fields(back.__cause__, error.__cause__)


def assert_same_fields(back: BaseException, error: BaseException) -> None:
    assert type(back) is type(error)
    assert vars(back) == vars(error)


CLASSES = error_classes()


def test_the_walk_finds_the_whole_tree() -> None:
    public = {
        obj
        for name in vg.__all__
        if isinstance(obj := getattr(vg, name), type) and issubclass(obj, vg.VideoGenError)
    }
    assert public <= set(CLASSES)
    assert len(CLASSES) >= 24


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_pickles_with_its_class_fields_and_cause_and_never_the_key(
    cls: type[vg.VideoGenError],
) -> None:
    error = build(cls)
    for protocol in (2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL):
        data = pickle.dumps(error, protocol=protocol)
        assert_no_key([(f"pickle of {cls.__name__}", data.decode("latin-1"))])
        back = pickle.loads(data)  # noqa: S301 - our own bytes
        assert_same(back, error)
        assert back.status_code == error.status_code
        assert back.trace_id == error.trace_id


def test_a_cause_of_ours_travels_and_a_foreign_one_is_left_behind() -> None:
    poll = vg.TaskPollError("t-1", SAMPLES["cause"])
    back = pickle.loads(pickle.dumps(poll))  # noqa: S301 - our own bytes
    assert isinstance(back.__cause__, vg.NotFoundError)
    assert back.__cause__.trace_id == "tr"
    assert back.status_code == 404
    broke = vg.APIConnectionError("GET /v1/credits: the connection broke")
    broke.__cause__ = OSError(f"reset by {KEY}")
    back = pickle.loads(pickle.dumps(broke))  # noqa: S301 - our own bytes
    assert back.__cause__ is None
    assert str(back) == str(broke)


def raise_sample(name: str) -> None:
    """Run in a pool's child process: raise the sample error of the class named ``name``."""
    raise build(next(c for c in error_classes() if c.__name__ == name))


@pytest.mark.slow
def test_a_process_pool_raises_each_error_class_in_the_child_and_the_parent_gets_it() -> None:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        for cls in CLASSES:
            with pytest.raises(cls) as info:
                pool.apply(raise_sample, (cls.__name__,))
            # The pool puts the child's traceback in __cause__ (multiprocessing's own rule).
            assert_same(info.value, build(cls), cause=False)


# --------------------------------------------------------------------------------------------
# to_dict / to_json / from_dict
# --------------------------------------------------------------------------------------------

#: Every attrs class of the models module (a new model is covered as soon as it exists).
MODELS = [cls for cls in vars(_models).values() if isinstance(cls, type) and attrs.has(cls)]
offsets = st.integers(-14 * 60, 14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
aware = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2200, 1, 1), timezones=offsets
)
new_words = st.from_regex(r"[a-z][a-z_0-9]{0,15}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for a field's type: the models' types, read from their annotations."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(for_type(a) for a in args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):  # open: a value not known yet too
        return st.sampled_from(list(tp)) | new_words.map(tp)
    if origin is tuple:
        return st.lists(for_type(args[0]), max_size=3).map(tuple)
    if origin is not None and str(origin).endswith("Mapping'>"):
        return st.dictionaries(st.text(max_size=8), json_values, max_size=3)
    if attrs.has(tp):
        return strategy(tp)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        type(None): st.none(),
        str: st.text(max_size=20),
        int: st.integers(-(10**12), 10**12),
        float: st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 10**6),
        bool: st.booleans(),
        datetime: aware,
    }
    return simple[tp]


def strategy(cls: type[Any]) -> st.SearchStrategy[Any]:
    attrs.resolve_types(cls)
    fields = {f.name: for_type(f.type) for f in attrs.fields(cls)}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


TRAVELLERS = [*MODELS, LedgerEntry, GatherProgress]


def test_every_model_and_the_ledger_entry_and_progress_have_the_methods() -> None:
    assert len(MODELS) == 9
    for cls in TRAVELLERS:
        assert issubclass(cls, Serializable), cls


@pytest.mark.parametrize("cls", TRAVELLERS, ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_to_dict_to_json_from_dict_round_trip_exactly(cls: type[Any], data: st.DataObject) -> None:
    value = data.draw(strategy(cls))
    plain = value.to_dict()
    text = value.to_json()
    assert json.loads(text) == json.loads(json.dumps(plain))
    for back in (cls.from_dict(plain), cls.from_dict(json.loads(text))):
        assert back == value
        for field in attrs.fields(cls):  # the same offsets, not only the same instants
            mine, theirs = getattr(back, field.name), getattr(value, field.name)
            if isinstance(mine, datetime):
                assert mine.utcoffset() == theirs.utcoffset()


def test_to_dict_is_plain_json_data_with_iso_dates_and_enum_strings() -> None:
    plain = TASK.to_dict()
    assert plain["status"] == "failed"
    assert type(plain["status"]) is str
    assert type(plain["model"]) is str
    assert plain["created_at"] == "2026-03-04T05:06:07.890123+05:30"
    assert plain["result"]["finished_at"] == plain["created_at"]
    unknown = vg.Task.from_dict({**plain, "status": "archived", "later_field": 1})
    assert unknown.status == "archived"
    assert unknown.to_dict()["status"] == "archived"
    utc = vg.CreatedTask("t", created_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert utc.to_dict()["created_at"] == "2026-01-01T00:00:00Z"
    progress = GatherProgress(total=3, succeeded=2, pending=1, paused=True, elapsed=1.5)
    assert json.loads(progress.to_json())["paused"] is True
    assert GatherProgress.from_dict(progress.to_dict()) == progress
    entry = SAMPLES["entry"]
    assert json.loads(entry.to_json())["created_at"] == "2026-03-04T05:06:07.890123+05:30"


def test_from_dict_names_each_bad_field() -> None:
    with pytest.raises(ValueError, match=r"Task\.task_id") as info:
        vg.Task.from_dict({"status": "running", "credits_cost": "lots"})
    assert "credits_cost" in str(info.value)
    with pytest.raises(ValueError, match="expected a mapping"):
        vg.Task.from_dict(["t-1"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# RawResponse and ResponseInfo
# --------------------------------------------------------------------------------------------


async def _echoing(server: HostileServer, request: web.Request) -> web.StreamResponse:
    """A balance whose answer echoes the request's key in its headers and its envelope."""
    key = request.headers.get("Authorization", "")
    body = {
        "code": 200,
        "trace_id": f"trace {key}",
        "message": f"hello {key}",
        "data": {"api_available_credits": 5, "api_total_credits": 9},
    }
    return web.json_response(body, headers={"X-Echo": key, "X-Token": key.split()[-1]})


@pytest.fixture
async def echoing() -> Iterator[HostileServer]:
    async for server in serve():
        server.api = _echoing
        yield server


async def test_raw_responses_and_results_pickle_without_an_echoed_key(
    echoing: HostileServer,
) -> None:
    async with vg.AsyncVideoGen(KEY, echoing.base_url) as client:
        raw = await client.with_raw_response.credits.get()
        balance = await client.credits.get()
    assert echoing.authorization == f"Bearer {KEY}"  # the key did go out, and came back
    for what, value in (("RawResponse", raw), ("_response", balance._response)):
        # What a pretty printer (rich's tracebacks with locals) walks shows no key either.
        assert_no_key([(f"pretty print of {what}", rich.pretty.pretty_repr(value))])
        data = pickle.dumps(value)
        assert_no_key([(f"pickle of {what}", data.decode("latin-1"))])
        back = pickle.loads(data)  # noqa: S301 - our own bytes
        assert back.trace_id == f"trace Bearer {REDACTED}"
        assert back.headers["x-echo"] == f"Bearer {REDACTED}"
    back_raw = pickle.loads(pickle.dumps(raw))  # noqa: S301 - our own bytes
    assert back_raw.parse() == raw.parse()
    assert back_raw.status_code == 200
    assert repr(back_raw) == repr(raw)


async def _echoing_results(server: HostileServer, request: web.Request) -> web.StreamResponse:
    """A task and a project whose texts echo the request's key."""
    key = request.headers.get("Authorization", "").split()[-1]
    if request.path == "/v1/tasks":
        data: dict[str, Any] = {
            "task_id": request.query["task_id"],
            "status": "failed",
            "model": f"model-{key}",
            "result": {"video_url": f"https://cdn.example.com/{key}.mp4", "error_message": key},
        }
    else:
        data = {"project_id": "p-1", "status": "running", "view_script": f"0-5s: {key}"}
    return web.json_response({"code": 200, "trace_id": "tr", "message": None, "data": data})


async def test_results_never_hold_a_key_the_service_echoes_in_their_fields() -> None:
    async for server in serve():
        server.api = _echoing_results
        async with vg.AsyncVideoGen(KEY, server.base_url) as client:
            task = await client.tasks.get("t-1")
            project = await client.projects.get("p-1")
    assert task.error_message == REDACTED
    assert task.video_url == f"https://cdn.example.com/{REDACTED}.mp4"
    assert project.view_script == f"0-5s: {REDACTED}"
    timeout = vg.WaitTimeoutError("still running", last=task, pending=["t-1"])
    texts = [repr(task), repr(project), task.to_json(), project.to_json()]
    texts += [pickle.dumps(v).decode("latin-1") for v in (task, project, timeout)]
    assert_no_key([("result", text) for text in texts])
