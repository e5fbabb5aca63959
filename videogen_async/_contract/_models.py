"""The service's payloads as frozen attrs classes, parsed by one private cattrs converter.

Lenient where the service may grow: unknown fields are ignored, an unknown enum value reads as
a member of its own (the enums are open: ``_enums``). Strict where it matters: dates are
timezone-aware (no offset: UTC; a leap second is ``23:59:59.999999``); a missing id, a field
of the wrong JSON type or a non-finite number is a malformed response, never read with a
substitute. A text holding an API key reads ``<redacted>``. Every model has ``to_dict()``,
``to_json()`` and ``from_dict()`` (``_serial``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import attrs

from ._dates import parse_datetime
from ._enums import (
    TERMINAL_PROJECT_STATUSES,
    TERMINAL_TASK_STATUSES,
    Model,
    ProjectMode,
    ProjectStatus,
    ProjectStep,
    TaskStatus,
)
from ._meta import HasResponse
from ._redact import contains_secret, redact_value
from ._serial import Serializable, converter

__all__ = [
    "Billing",
    "CreatedProject",
    "CreatedTask",
    "CreditBalance",
    "Project",
    "ProjectTask",
    "Task",
    "TaskResult",
    "VideoBatch",
]

_T = TypeVar("_T")


@attrs.frozen
class CreditBalance(HasResponse, Serializable):
    """The API credit balance of the authenticated user.

    Attributes:
        api_available_credits: Credits that can still be spent.
        api_total_credits: Credits bought in total.
    """

    api_available_credits: float
    api_total_credits: float


@attrs.frozen
class CreatedTask(HasResponse, Serializable):
    """A direct video task as returned at creation.

    Attributes:
        task_id: The id to poll with ``client.tasks.get``.
        status: ``running`` right after creation.
        created_at: When the service created the task.
        credits_cost: Credits charged for the task.
    """

    task_id: str
    status: TaskStatus = TaskStatus.RUNNING
    created_at: datetime | None = None
    credits_cost: float = 0.0


@attrs.frozen
class TaskResult(Serializable):
    """The outcome of a finished task.

    Attributes:
        video_url: Location of the generated video once the task has succeeded.
        error_message: Failure text when the task failed.
        finished_at: When the task finished.
    """

    video_url: str | None = None
    error_message: str | None = None
    finished_at: datetime | None = None


@attrs.frozen
class Task(HasResponse, Serializable):
    """A video task as returned by the status query.

    Attributes:
        task_id: The task's id.
        status: ``queued``, ``running``, ``succeeded``, ``failed``, ``error`` (or a newer value,
            kept as a string).
        model: The model the task was created with.
        created_at: When the task was created.
        updated_at: When the task last changed.
        credits_cost: Credits charged; 0 when a failed task was refunded.
        result: The outcome, ``None`` while the task is in progress.
    """

    task_id: str
    status: TaskStatus
    model: Model | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    credits_cost: float = 0.0
    result: TaskResult | None = None

    @property
    def is_terminal(self) -> bool:
        """Whether the task has finished (succeeded, failed or error).

        A status this SDK does not know yet counts as finished once the result carries a
        ``finished_at`` time.
        """
        return _task_is_terminal(self.status, self.result)

    @property
    def is_succeeded(self) -> bool:
        """Whether the task succeeded."""
        return self.status == TaskStatus.SUCCEEDED

    @property
    def is_failed(self) -> bool:
        """Whether the task finished without a video (failed, error or an unknown end state)."""
        return self.is_terminal and not self.is_succeeded

    @property
    def video_url(self) -> str | None:
        """``result.video_url``, or ``None``."""
        return self.result.video_url if self.result is not None else None

    @property
    def error_message(self) -> str | None:
        """``result.error_message``, or ``None``."""
        return self.result.error_message if self.result is not None else None

    @property
    def finished_at(self) -> datetime | None:
        """``result.finished_at``, or ``None``."""
        return self.result.finished_at if self.result is not None else None


#: Reads one task by id (the client's ``tasks.get``).
GetTask = Callable[[str], Awaitable[Task]]


def _task_is_terminal(status: str | None, result: TaskResult | None) -> bool:
    if status in TERMINAL_TASK_STATUSES:
        return True
    if status is None or TaskStatus(status).is_known:
        return False
    return result is not None and result.finished_at is not None


@attrs.frozen
class ProjectTask(Serializable):
    """One video task as listed inside a project.

    The service documents only ``credits_cost`` for these elements; the other fields are read
    when present and ``None`` otherwise. Use ``client.tasks.get(task_id)`` for the full state.

    Attributes:
        credits_cost: Credits charged or reserved for the task.
        task_id: The task's id, when listed.
        status: The task's status, when listed.
        model: The model, when listed.
        created_at: When the task was created, when listed.
        updated_at: When the task last changed, when listed.
        result: The outcome, when listed.
    """

    credits_cost: float = 0.0
    task_id: str | None = None
    status: TaskStatus | None = None
    model: Model | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    result: TaskResult | None = None

    @property
    def is_terminal(self) -> bool:
        """Whether the listed status is terminal (``False`` when no status is listed)."""
        return _task_is_terminal(self.status, self.result)


@attrs.frozen
class Billing(Serializable):
    """Credits a project has cost so far.

    Attributes:
        script_credits_cost: Credits charged for script generation.
        video_credits_cost: Credits charged or reserved for its non-failed video tasks.
        total_credits_cost: Script plus video.
    """

    script_credits_cost: float = 0.0
    video_credits_cost: float = 0.0
    total_credits_cost: float = 0.0


@attrs.frozen
class CreatedProject(HasResponse, Serializable):
    """A viral ad clone project as returned at creation.

    Attributes:
        project_id: The id to use with the other ``client.projects`` calls.
        status: The project status (``draft`` right after creation).
        current_step: The step (``preparing_media`` right after creation).
        mode: ``auto`` or ``manual``.
        credits_cost: Credits charged at creation (10, for the script).
        created_at: When the project was created, if given.
    """

    project_id: str
    status: ProjectStatus = ProjectStatus.DRAFT
    current_step: ProjectStep = ProjectStep.PREPARING_MEDIA
    mode: ProjectMode = ProjectMode.AUTO
    credits_cost: float = 0.0
    created_at: datetime | None = None


@attrs.frozen
class Project(HasResponse, Serializable):
    """A viral ad clone project.

    Attributes:
        project_id: The project's id.
        status: ``draft``, ``running``, ``succeeded`` or ``failed``.
        current_step: ``preparing_media``, ``analyzing``, ``generating_script``,
            ``script_ready``, ``generating_video`` or ``failed``.
        mode: ``auto`` or ``manual``.
        error_message: Why the project failed, if it did.
        view_script: The reviewable script, once generated (``None`` before).
        billing: Credits charged so far.
        task_ids: Ids of all video tasks of the project, every batch.
        tasks: All video tasks of the project, every batch.
        created_at: When the project was created.
        updated_at: When the project last changed.
    """

    project_id: str
    status: ProjectStatus
    current_step: ProjectStep | None = None
    mode: ProjectMode | None = None
    error_message: str | None = None
    view_script: str | None = None
    billing: Billing = attrs.field(factory=Billing)
    task_ids: tuple[str, ...] = ()
    tasks: tuple[ProjectTask, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def is_failed(self) -> bool:
        """Whether the project failed."""
        return self.status == ProjectStatus.FAILED or self.current_step == ProjectStep.FAILED

    @property
    def has_script(self) -> bool:
        """Whether the reviewable script has been generated."""
        return bool(self.view_script and self.view_script.strip())

    @property
    def is_terminal(self) -> bool:
        """Whether the project and every task it lists have finished.

        A listed task with no status does not hold this up; ``client.projects.wait`` checks
        those through the task status query.
        """
        return self.is_failed or (
            self.status in TERMINAL_PROJECT_STATUSES
            and all(t.is_terminal for t in self.tasks if t.status is not None)
        )


@attrs.frozen
class VideoBatch(HasResponse, Serializable):
    """The answer to ``client.projects.create_videos``.

    Attributes:
        project_id: The project's id.
        project_status: The project status after the call (``running``).
        current_step: The project step after the call (``generating_video``).
        task_ids: One id per task created by this call.
    """

    project_id: str
    project_status: ProjectStatus | None = None
    current_step: ProjectStep | None = None
    task_ids: tuple[str, ...] = ()


# Parsing, by the converter of ``_serial`` (which reads the field types resolved here): the
# models are the names this module exports.
for _name in __all__:
    attrs.resolve_types(globals()[_name])
del _name


def structure(data: Mapping[str, Any], cls: type[_T]) -> _T:
    """Parse the decoded ``data`` object of an envelope into a model of ``cls``.

    Raises:
        TypeError: ``data`` is not a JSON object.
        cattrs.BaseValidationError: A required field is missing, or a field has the wrong
            type (``null`` included, unless the model's field may be ``None``) or a number
            that is not finite.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"expected a JSON object for {cls.__name__}, got {type(data).__name__}")
    return converter.structure(redact_value(data), cls)


_TASK_STATUS = {m.value: m for m in TaskStatus}
_MODEL = {m.value: m for m in Model}


def _fast_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError("not text")


def structure_task(data: Any) -> Task:
    """``structure(data, Task)`` for the answer every poll decodes: the polling hot path.

    A hand-written parser that gives exactly what :func:`structure` gives (a property test
    holds them equal) and hands anything unusual (a wrong type, an odd number) to it. It
    builds ``Task`` and ``TaskResult`` by position, in the order of their shapes in
    ``_contract._service`` (``tests/test_models.py`` holds the three together).
    """
    try:
        status, task_id, model = data["status"], data["task_id"], data.get("model")
        raw_result, cost = data.get("result"), data.get("credits_cost", 0.0)
        if (
            type(task_id) is not str
            or type(status) is not str
            or type(raw_result) not in (dict, type(None))
            or type(cost) not in (int, float)
            or not -math.inf < cost < math.inf
            or type(model) not in (str, type(None))
        ):
            raise ValueError("unusual")  # noqa: TRY301
        result = None
        if raw_result is not None:
            result = TaskResult(
                _fast_text(raw_result.get("video_url")),
                _fast_text(raw_result.get("error_message")),
                parse_datetime(raw_result.get("finished_at")),
            )
        texts = [task_id, status, model or ""]
        if result is not None:
            texts += (result.video_url or "", result.error_message or "")
        if contains_secret("\0".join(texts)):  # one search: NUL never joins two parts of a key
            raise ValueError("unusual")  # noqa: TRY301  # an echoed key: redacted by structure()
        return Task(
            task_id,
            _TASK_STATUS.get(status) or TaskStatus(status),
            (_MODEL.get(model) or Model(model)) if model is not None else None,
            parse_datetime(data.get("created_at")),
            parse_datetime(data.get("updated_at")),
            float(cost),
            result,
        )
    except (KeyError, ValueError, TypeError, AttributeError, OverflowError):
        return structure(data, Task)


def readable_fields(data: Any, cls: type[Any]) -> dict[str, Any]:
    """The fields of an answer that does not parse as ``cls`` which do, each as parsed.

    What an error carries of an unreadable answer (a created task's ``task_id``, so that
    nothing charged is lost): every field present whose value parses alone, redacted.
    """
    data = redact_value(data) if isinstance(data, Mapping) else {}
    readable = {}
    for field in attrs.fields(cls):
        if field.name in data:
            with contextlib.suppress(Exception):  # whatever the value does, it is not readable
                readable[field.name] = converter.structure(data[field.name], field.type)
    return readable


#: ``to_dict()`` of a model, for the CLI's and the ledger's callers (prefer ``to_dict()``).
unstructure = converter.unstructure
