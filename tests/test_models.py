"""Parsing payloads: dates, unknown fields and enum values, nulls, the spec's examples."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import cattrs
import pytest

import videogen_async as vg
from videogen_async._contract._models import parse_datetime, structure, structure_task, unstructure
from videogen_async._contract._service import SHAPES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T10:00:00Z", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        ("2026-11-21T10:00:00z", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        (
            "2026-11-21T10:00:00.123456789Z",
            datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=timezone.utc),
        ),
        ("2026-11-21T10:00:00.5+00:00", datetime(2026, 11, 21, 10, 0, 0, 500000, timezone.utc)),
        (
            "2026-11-21T12:00:00+02:00",
            datetime(2026, 11, 21, 12, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("2026-11-21 10:00:00", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        ("2026-11-21T10:00:00", datetime(2026, 11, 21, 10, tzinfo=timezone.utc)),
        # A leap second is the last microsecond of its minute, not a missing value.
        ("2016-12-31T23:59:60Z", datetime(2016, 12, 31, 23, 59, 59, 999999, timezone.utc)),
        ("2016-12-31T23:59:60.5Z", datetime(2016, 12, 31, 23, 59, 59, 999999, timezone.utc)),
    ],
)
def test_dates_are_aware(text: str, expected: datetime) -> None:
    parsed = parse_datetime(text)
    assert parsed == expected
    assert parsed is not None
    assert parsed.tzinfo is not None


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00Z", [], True, 0, 1e400, "", " "])
def test_bad_dates(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_datetime(bad)


def test_null_dates() -> None:
    assert parse_datetime(None) is None


SPEC_TASK = {
    "task_id": "task_abc",
    "status": "succeeded",
    "model": "videomodel_2_0",
    "created_at": "2026-11-21T10:00:00Z",
    "updated_at": "2026-11-21T10:01:30Z",
    "credits_cost": 50,
    "result": {
        "status": "succeeded",  # undocumented; tolerated, never relied on
        "video_url": "https://cdn.example.com/v.mp4",
        "error_message": None,
        "finished_at": "2026-11-21T10:01:30Z",
    },
    "brand_new_field": {"nested": True},
}


def test_task_from_spec_with_extras() -> None:
    task = structure(SPEC_TASK, vg.Task)
    assert task.status is vg.TaskStatus.SUCCEEDED
    assert task.model is vg.Model.VIDEOMODEL_2_0
    assert task.is_terminal
    assert task.is_succeeded
    assert not task.is_failed
    assert task.video_url == "https://cdn.example.com/v.mp4"
    assert task.error_message is None
    assert task.credits_cost == 50.0
    assert task.finished_at == datetime(2026, 11, 21, 10, 1, 30, tzinfo=timezone.utc)


def test_running_task_has_null_result() -> None:
    task = structure({**SPEC_TASK, "status": "running", "result": None}, vg.Task)
    assert not task.is_terminal
    assert task.video_url is None
    assert task.finished_at is None


@pytest.mark.parametrize("status", ["failed", "error"])
def test_failed_task_is_a_terminal_result(status: str) -> None:
    task = structure(
        {
            **SPEC_TASK,
            "status": status,
            "credits_cost": 0,
            "result": {"error_message": "moderation", "finished_at": "2026-11-21T10:01:30Z"},
        },
        vg.Task,
    )
    assert task.is_terminal
    assert task.is_failed
    assert task.error_message == "moderation"
    assert task.credits_cost == 0


def test_an_unknown_status_is_a_member_of_its_own() -> None:
    task = structure({**SPEC_TASK, "status": "cancelled", "result": None}, vg.Task)
    assert task.status == "cancelled"
    assert isinstance(task.status, vg.TaskStatus)
    assert (task.status.value, task.status.name, str(task.status)) == (
        "cancelled",
        "CANCELLED",
        "cancelled",
    )
    assert not task.status.is_known
    assert vg.TaskStatus.RUNNING.is_known
    assert "cancelled" not in vg.TaskStatus.values()
    assert len(list(vg.TaskStatus)) == 5  # never listed
    assert hash(task.status) == hash(vg.TaskStatus("cancelled"))
    assert pickle.loads(pickle.dumps(task.status)) == "cancelled"  # noqa: S301 - our own bytes
    assert task.to_dict()["status"] == "cancelled"
    assert not task.is_terminal
    finished = structure(
        {**SPEC_TASK, "status": "cancelled", "result": {"finished_at": "2026-11-21T10:00:00Z"}},
        vg.Task,
    )
    assert finished.is_terminal
    # An unknown value spelled like a documented one (its name the same) is unknown all the
    # same: a "SUCCEEDED" that finished is terminal by its finish time, as any new status.
    shouted = structure(
        {**SPEC_TASK, "status": "SUCCEEDED", "result": {"finished_at": "2026-11-21T10:00:00Z"}},
        vg.Task,
    )
    assert not shouted.status.is_known
    assert shouted.status != vg.TaskStatus.SUCCEEDED
    assert shouted.is_terminal


def test_known_pending_status_never_terminal_even_with_finished_at() -> None:
    task = structure(
        {**SPEC_TASK, "status": "queued", "result": {"finished_at": "2026-11-21T10:00:00Z"}},
        vg.Task,
    )
    assert not task.is_terminal


def test_unknown_model_kept() -> None:
    task = structure({**SPEC_TASK, "model": "videomodel_3_0"}, vg.Task)
    assert task.model == "videomodel_3_0"


SPEC_PROJECT = {
    "project_id": "proj_1",
    "status": "running",
    "current_step": "generating_video",
    "mode": "auto",
    "error_message": None,
    "view_script": "0-3s: a hand holds the bottle\n3-8s: close-up of the label",
    "billing": {"script_credits_cost": 10, "video_credits_cost": 40, "total_credits_cost": 50},
    "task_ids": ["t1", "t2"],
    "tasks": [
        {"task_id": "t1", "status": "succeeded", "credits_cost": 20, "extra": 1},
        {"task_id": "t2", "status": "running", "credits_cost": 20},
    ],
    "created_at": "2026-11-21T10:00:00Z",
    "updated_at": "2026-11-21T10:05:00Z",
    "inputs": {"omitted": "by the service, but tolerated"},
}


def test_project_from_spec() -> None:
    project = structure(SPEC_PROJECT, vg.Project)
    assert project.status is vg.ProjectStatus.RUNNING
    assert project.current_step is vg.ProjectStep.GENERATING_VIDEO
    assert project.mode is vg.ProjectMode.AUTO
    assert project.billing == vg.Billing(10, 40, 50)
    assert project.task_ids == ("t1", "t2")
    assert project.tasks[0] == vg.ProjectTask(credits_cost=20, task_id="t1", status="succeeded")
    assert project.has_script
    assert not project.is_terminal


def test_project_terminal_rules() -> None:
    done = structure(
        {**SPEC_PROJECT, "status": "succeeded", "tasks": [{"task_id": "t", "status": "failed"}]},
        vg.Project,
    )
    assert done.is_terminal
    pending = structure(
        {**SPEC_PROJECT, "status": "succeeded", "tasks": [{"task_id": "t", "status": "queued"}]},
        vg.Project,
    )
    assert not pending.is_terminal
    failed = structure({**SPEC_PROJECT, "current_step": "failed"}, vg.Project)
    assert failed.is_failed
    assert failed.is_terminal


def test_project_before_script_and_nulls() -> None:
    before = {
        "project_id": "p",
        "status": "draft",
        "current_step": "preparing_media",
        "mode": "manual",
        "view_script": None,
        "error_message": None,
        "created_at": None,
    }
    project = structure(before, vg.Project)
    assert not project.has_script
    assert project.task_ids == ()
    assert project.tasks == ()
    assert project.billing == vg.Billing()
    assert project.created_at is None
    # ``null`` where the model holds no None is not read as empty: the project may have tasks.
    for field in ("billing", "task_ids", "tasks"):
        with pytest.raises(cattrs.BaseValidationError):
            structure({**before, field: None}, vg.Project)


def test_new_step_value_kept() -> None:
    project = structure({**SPEC_PROJECT, "current_step": "rendering_captions"}, vg.Project)
    assert project.current_step == "rendering_captions"


def test_created_project_and_batch_and_balance() -> None:
    created = structure(
        {
            "project_id": "p",
            "status": "draft",
            "current_step": "preparing_media",
            "mode": "auto",
            "credits_cost": 10,
            "created_at": None,
        },
        vg.CreatedProject,
    )
    assert created.credits_cost == 10.0
    batch = structure(
        {
            "project_id": "p",
            "project_status": "running",
            "current_step": "generating_video",
            "task_ids": ["a", "b"],
        },
        vg.VideoBatch,
    )
    assert batch.task_ids == ("a", "b")
    balance = structure({"api_available_credits": 9.5, "api_total_credits": 100}, vg.CreditBalance)
    assert balance == vg.CreditBalance(9.5, 100.0)


def test_missing_id_is_a_parse_error() -> None:
    with pytest.raises(cattrs.BaseValidationError) as info:
        structure({"status": "running"}, vg.Task)
    assert "task_id" in " ".join(cattrs.transform_error(info.value))
    with pytest.raises(TypeError):
        structure(["not", "an", "object"], vg.Task)  # type: ignore[arg-type]


def test_models_are_frozen_and_round_trip() -> None:
    task = structure(SPEC_TASK, vg.Task)
    with pytest.raises(AttributeError):
        task.status = "x"  # type: ignore[misc]
    data = unstructure(task)
    assert data["created_at"] == "2026-11-21T10:00:00Z"
    assert structure(data, vg.Task) == task


def test_enums_accept_strings_and_compare_equal() -> None:
    assert vg.TaskStatus("succeeded") is vg.TaskStatus.SUCCEEDED
    assert vg.Ratio.R16_9 == "16:9"
    assert str(vg.AspectRatio.R9_16) == "9:16"
    assert vg.SpeechLanguage.SAME_AS_REFERENCE == ""
    assert "hindi" in vg.SpeechLanguage.values()


# The statement of the service is the one place the response shapes are written: every model
# reads exactly its shape's fields, and the fast Task parser (which builds Task and
# TaskResult by position) follows the statement's order.
MODEL_CLASSES = [
    vg.CreditBalance,
    vg.CreatedTask,
    vg.TaskResult,
    vg.Task,
    vg.ProjectTask,
    vg.Billing,
    vg.CreatedProject,
    vg.Project,
    vg.VideoBatch,
]


def test_every_shape_has_its_model() -> None:
    assert sorted(SHAPES) == sorted(cls.__name__ for cls in MODEL_CLASSES)


@pytest.mark.parametrize("cls", MODEL_CLASSES, ids=lambda c: c.__name__)
def test_models_follow_the_statement(cls: type[Any]) -> None:
    shape = SHAPES[cls.__name__]
    names = tuple(f.name for f in attrs.fields(cls))
    assert set(names) == set(shape.model_names)
    if cls in (vg.Task, vg.TaskResult):
        assert names == shape.model_names  # the fast parser builds these by position
    required = {f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING}
    id_fields = {f.name for f in shape.fields if f.type == "id"}
    assert id_fields <= required | {"task_id"}  # a missing id is a malformed response


def test_fast_task_parser_reads_every_statement_field() -> None:
    full = {
        "task_id": "t-1",
        "status": "succeeded",
        "model": "videomodel_2_0",
        "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-02T03:04:06Z",
        "credits_cost": 10,
        "result": {
            "video_url": "https://cdn.example.com/v.mp4",
            "error_message": None,
            "finished_at": "2026-01-02T03:04:06Z",
        },
    }
    assert tuple(full) == SHAPES["Task"].model_names
    assert tuple(full["result"]) == SHAPES["TaskResult"].model_names
    fast = structure_task(full)
    assert fast == structure(full, vg.Task)
    for name in SHAPES["Task"].model_names:
        assert getattr(fast, name) is not None, name
