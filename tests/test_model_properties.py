"""Property tests: the converter parses every payload the service may send.

Payloads are generated with the documented fields in every allowed shape (dates with ``Z``,
offsets and any number of fractional digits, nulls where allowed), plus fields a later
service version may add and enum values the SDK does not know yet.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import videogen_async as vg
from videogen_async._contract._models import structure
from videogen_async._contract._redact import contains_secret

# Hypothesis also draws the package's own string constants, the sandbox's key among them: a
# value holding a key that a client of this process was given is redacted, by design.
ids = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != "" and not contains_secret(s))
numbers = st.one_of(
    st.integers(min_value=0, max_value=10**9),
    st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False),
)
new_words = st.from_regex(r"[a-z][a-z_]{0,20}", fullmatch=True)


@st.composite
def dates(draw: st.DrawFn) -> tuple[str, datetime]:
    moment = draw(
        st.datetimes(
            min_value=datetime(2000, 1, 1),
            max_value=datetime(2100, 1, 1),
            timezones=st.just(timezone.utc),
        )
    )
    moment = moment.replace(microsecond=draw(st.integers(0, 999_999)))
    offset_minutes = draw(st.integers(-14 * 60, 14 * 60))
    offset = timezone(timedelta(minutes=offset_minutes))
    local = moment.astimezone(offset)
    base = local.strftime("%Y-%m-%dT%H:%M:%S")
    digits = draw(st.integers(0, 9))
    micro = f"{local.microsecond:06d}"
    fraction = ("." + (micro + "000")[:digits]) if digits else ""
    if offset_minutes == 0 and draw(st.booleans()):
        suffix = draw(st.sampled_from(["Z", "z", "+00:00"]))
    else:
        sign = "+" if offset_minutes >= 0 else "-"
        hours, minutes = divmod(abs(offset_minutes), 60)
        suffix = f"{sign}{hours:02d}:{minutes:02d}"
    kept = int(micro[: min(digits, 6)].ljust(6, "0")) if digits else 0
    expected = local.replace(microsecond=kept)
    return base + fraction + suffix, expected


def enum_value(cls: type[vg.TaskStatus] | Any) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([m.value for m in cls]), new_words)


extras = st.dictionaries(
    new_words.map(lambda w: "x_" + w),
    st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3)),
    max_size=3,
)


@st.composite
def task_payloads(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    created, created_dt = draw(dates())
    updated, _ = draw(dates())
    result: dict[str, Any] | None = draw(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {
                    "video_url": st.one_of(st.none(), st.just("https://cdn.example.com/v.mp4")),
                    "error_message": st.one_of(st.none(), st.text(max_size=20)),
                    "finished_at": st.one_of(st.none(), dates().map(lambda d: d[0])),
                },
                optional={"status": enum_value(vg.TaskStatus)},
            ),
        )
    )
    payload = {
        "task_id": draw(ids),
        "status": draw(enum_value(vg.TaskStatus)),
        "model": draw(st.one_of(st.none(), enum_value(vg.Model))),
        "created_at": created,
        "updated_at": updated,
        "credits_cost": draw(numbers),
        "result": result,
        **draw(extras),
    }
    return payload, {"created_at": created_dt}


@settings(max_examples=150, deadline=None)
@given(task_payloads())
def test_every_task_payload_parses(case: tuple[dict[str, Any], dict[str, Any]]) -> None:
    payload, expected = case
    task = structure(payload, vg.Task)
    assert task.task_id == payload["task_id"]
    assert task.status == payload["status"]
    assert task.created_at == expected["created_at"]
    assert task.created_at is not None
    assert task.created_at.tzinfo is not None
    assert task.credits_cost == float(payload["credits_cost"])
    known = payload["status"] in vg.TaskStatus.values()
    assert isinstance(task.status, vg.TaskStatus)
    assert task.status.is_known == known
    if payload["status"] in ("succeeded", "failed", "error"):
        assert task.is_terminal
    if payload["status"] in ("queued", "running"):
        assert not task.is_terminal


@st.composite
def project_payloads(draw: st.DrawFn) -> dict[str, Any]:
    task_list = draw(
        st.lists(
            st.fixed_dictionaries(
                {"credits_cost": numbers},
                optional={
                    "task_id": ids,
                    "status": enum_value(vg.TaskStatus),
                    "result": st.none(),
                    "x_new": st.integers(),
                },
            ),
            max_size=5,
        )
    )
    return {
        "project_id": draw(ids),
        "status": draw(enum_value(vg.ProjectStatus)),
        "current_step": draw(enum_value(vg.ProjectStep)),
        "mode": draw(enum_value(vg.ProjectMode)),
        "error_message": draw(st.one_of(st.none(), st.text(max_size=10))),
        "view_script": draw(st.one_of(st.none(), st.just(""), st.text(max_size=50))),
        "billing": draw(
            st.fixed_dictionaries(
                {
                    "script_credits_cost": numbers,
                    "video_credits_cost": numbers,
                    "total_credits_cost": numbers,
                }
            )
        ),
        "task_ids": draw(st.lists(ids, max_size=5)),
        "tasks": task_list,
        "created_at": draw(dates())[0],
        "updated_at": draw(st.one_of(st.none(), dates().map(lambda d: d[0]))),
        **draw(extras),
    }


@settings(max_examples=100, deadline=None)
@given(project_payloads())
def test_every_project_payload_parses(payload: dict[str, Any]) -> None:
    project = structure(payload, vg.Project)
    assert project.project_id == payload["project_id"]
    assert project.task_ids == tuple(payload["task_ids"])
    assert len(project.tasks) == len(payload["tasks"])
    assert project.status == payload["status"]
    assert project.current_step == payload["current_step"]
    assert isinstance(project.is_terminal, bool)


@given(
    st.fixed_dictionaries(
        {
            "project_id": ids,
            "project_status": enum_value(vg.ProjectStatus),
            "current_step": enum_value(vg.ProjectStep),
            "task_ids": st.lists(ids, min_size=1, max_size=4),
        }
    ),
    extras,
)
def test_every_batch_payload_parses(payload: dict[str, Any], extra: dict[str, Any]) -> None:
    batch = structure({**payload, **extra}, vg.VideoBatch)
    assert batch.task_ids == tuple(payload["task_ids"])


@settings(max_examples=150, deadline=None)
@given(task_payloads(), st.sampled_from(["drop_created", "cost_str", "id_int", "none", "bool"]))
def test_fast_task_parser_equals_the_converter(
    case: tuple[dict[str, Any], dict[str, Any]], oddity: str
) -> None:
    import cattrs

    from videogen_async._contract._models import structure_task

    payload, _ = case
    for data in (payload, _odd(payload, oddity)):
        try:
            expected: Any = structure(data, vg.Task)
        except (cattrs.BaseValidationError, TypeError) as exc:
            expected = type(exc)
        try:
            got: Any = structure_task(data)
        except (cattrs.BaseValidationError, TypeError) as exc:
            got = type(exc)
        assert got == expected


def _odd(payload: dict[str, Any], oddity: str) -> dict[str, Any]:
    data = dict(payload)
    if oddity == "drop_created":
        data.pop("created_at")
    elif oddity == "cost_str":
        data["credits_cost"] = "12"
    elif oddity == "id_int":
        data["task_id"] = 12
    elif oddity == "none":
        data["result"] = {"finished_at": None, "video_url": None}
    elif oddity == "bool":
        data["credits_cost"] = True
    return data
