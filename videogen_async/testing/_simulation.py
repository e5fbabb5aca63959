"""The simulation's objects: tasks, batches and projects as state machines on time; the balance.

Nothing runs in the background: an object stores the simulated instants it changes at and its
state is computed from the clock when read, so 100,000 pending tasks cost bytes, no timers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs

from .._contract._enums import ProjectStatus, ProjectStep, TaskStatus
from .._contract._service import TASK_REQUEST

_V = TypeVar("_V")


QUEUED = TaskStatus.QUEUED.value
RUNNING = TaskStatus.RUNNING.value
SUCCEEDED = TaskStatus.SUCCEEDED.value
FAILED = TaskStatus.FAILED.value
ERROR = TaskStatus.ERROR.value
TASK_OUTCOMES = (SUCCEEDED, FAILED, ERROR)

DEFAULT_MODEL: str = TASK_REQUEST.field("model").default
DEFAULT_DURATION: int = TASK_REQUEST.field("duration").default

INSUFFICIENT_CREDITS = "Insufficient API credits"
MEDIA_NOT_STORED = "Failed to store media from URL"

TASK_FAILURE_MESSAGES = (
    "The prompt was rejected by the content policy.",
    "The reference media could not be used for generation.",
    "Video generation failed; no credits were charged.",
)
TASK_ERROR_MESSAGE = "Internal error during video generation; no credits were charged."
PROJECT_FAILURES = {
    ProjectStep.ANALYZING.value: "Analysis failed: the reference video could not be analysed.",
    ProjectStep.GENERATING_SCRIPT.value: (
        "Script generation failed; the script charge was refunded."
    ),
}
AUTO_BATCH_NO_CREDITS = (
    "Insufficient API credits to create the automatic video batch; add credits and create"
    " videos with the videos endpoint."
)

_SCRIPT_BEATS = (
    "Hook: close-up of {product} in hand, bold on-screen headline, fast push-in.",
    "Problem: the everyday frustration the product solves, quick cuts, relatable framing.",
    "Reveal: {product} shown clearly on a clean background, brand colours.",
    "Demonstration: {avatar} uses {product}, showing the key selling point.",
    "Proof: close-ups of results and a short testimonial line on screen.",
    "Offer: {product} with price tag and benefits as animated captions.",
    "Call to action: {avatar} looks into the camera, 'Tap to shop now', logo end card.",
)


@attrs.define
class SandboxError(Exception):
    """A failure answered with the service's error envelope (``status``, ``code``, ``message``).

    An attrs exception: its fields are its ``args``.
    """

    status: int
    code: int
    message: str
    headers: Mapping[str, str] = attrs.field(factory=dict)

    def __str__(self) -> str:
        return self.message


class NotFound(SandboxError, KeyError):
    """404: no such task or project; a ``KeyError`` to a test calling the sandbox's methods."""


class Conflict(SandboxError, ValueError):
    """409: the request conflicts with the state (a balance, a step); a ``ValueError`` to a test.

    The methods of ``SandboxServer`` raise these as they are: the control API answers them with
    their status and code, a test catches the ``KeyError`` or ``ValueError`` they document.
    """


class Wallet:
    """The API credit balance of the sandbox's one user."""

    __slots__ = ("available", "total")

    def __init__(self, credits: float) -> None:
        self.total = self.available = float(credits)

    def charge(self, amount: float) -> None:
        """Take ``amount`` credits.

        Raises:
            SandboxError: 409 / 300111 when the balance is too low (nothing is taken).
        """
        if amount > self.available:
            raise Conflict(409, 300111, INSUFFICIENT_CREDITS)
        self.available = round(self.available - amount, 2)

    def refund(self, amount: float) -> None:
        """Give ``amount`` credits back."""
        self.available = round(self.available + amount, 2)

    def set(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set the balance (``total`` is raised to ``available`` if lower)."""
        if available is not None:
            self.available = float(available)
        if total is not None:
            self.total = float(total)
        self.total = max(self.total, self.available)


def iso(unix: float) -> str:
    """Format a Unix time as ISO 8601 UTC with milliseconds and a ``Z``."""
    return (
        datetime.fromtimestamp(unix, tz=timezone.utc)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def num(value: float) -> float | int:
    """Render a credit amount: an integral value as an ``int``."""
    return int(value) if float(value).is_integer() else value


def host_is_invalid(url: str) -> bool:
    """Whether a URL's host is under the reserved ``.invalid`` top-level domain (RFC 2606)."""
    try:
        host = (urlsplit(url).hostname or "").rstrip(".").lower()
    except ValueError:
        return False
    return host == "invalid" or host.endswith(".invalid")


@attrs.define(eq=False)
class Task:
    """One video task: the instants at which it changes, and what it ends as."""

    task_id: str
    model: str
    duration: int
    cost: float
    created_at: float
    started_at: float
    finished_at: float
    outcome: str
    error_message: str | None
    created_wall: float
    project_id: str | None = None
    batch: int = 0
    aspect_ratio: str | None = None
    resolution: int | str | None = None
    refunded: bool = False
    version: int = 0
    prompt: str | None = None

    def status(self, now: float) -> str:
        """The status at simulated time ``now``."""
        if now >= self.finished_at:
            return self.outcome
        if now >= self.started_at:
            return RUNNING
        return QUEUED

    def credits_cost(self, now: float) -> float:
        """Credits charged at ``now``: 0 once the task has ended failed or error."""
        if self.outcome != SUCCEEDED and now >= self.finished_at:
            return 0.0
        return self.cost

    def updated_at(self, now: float) -> float:
        """The simulated time of the last change at or before ``now``."""
        return max(
            (t for t in (self.created_at, self.started_at, self.finished_at) if t <= now),
            default=self.created_at,
        )


@attrs.define(eq=False)
class Batch:
    """One batch of a project's video tasks."""

    batch: int  # 1 for the first
    created_at: float
    out_number: int
    resolution: int | str
    aspect_ratio: str
    script: str | None
    automatic: bool
    task_ids: list[str] = attrs.field(factory=list)


@attrs.define(eq=False)
class Project:
    """One viral ad clone project: its inputs, its timeline and its batches.

    The ends of its steps (``media_done_at``...) and its script charge are set by the creation
    (``_routes.create_project``) as it draws them.
    """

    project_id: str
    inputs: dict[str, Any]
    created_at: float
    created_wall: float
    script: str
    media_done_at: float = 0.0
    analysis_done_at: float = 0.0
    script_ready_at: float = 0.0
    fail_at: float | None = None
    fail_message: str | None = None
    fails_before_script: bool = False
    script_cost: float = 0.0
    batches: list[Batch] = attrs.Factory(list)
    tasks: list[Task] = attrs.Factory(list)
    version: int = 0

    @property
    def mode(self) -> str:
        """``auto`` or ``manual``, as created."""
        return str(self.inputs["mode"])

    def failed(self, now: float) -> bool:
        """Whether the project has failed by ``now``."""
        return self.fail_at is not None and now >= self.fail_at

    def script_ready(self, now: float) -> bool:
        """Whether the script has been generated by ``now``."""
        return now >= self.script_ready_at and not self.fails_before_script

    def phase(self, now: float) -> tuple[str, str]:
        """``(status, current_step)`` at ``now``."""
        if self.failed(now):
            return ProjectStatus.FAILED.value, ProjectStep.FAILED.value
        if now < self.media_done_at:
            return ProjectStatus.DRAFT.value, ProjectStep.PREPARING_MEDIA.value
        if now < self.analysis_done_at:
            return ProjectStatus.RUNNING.value, ProjectStep.ANALYZING.value
        if now < self.script_ready_at:
            return ProjectStatus.RUNNING.value, ProjectStep.GENERATING_SCRIPT.value
        if any(now < t.finished_at for t in self.tasks):
            return ProjectStatus.RUNNING.value, ProjectStep.GENERATING_VIDEO.value
        return ProjectStatus.SUCCEEDED.value, ProjectStep.SCRIPT_READY.value

    def updated_at(self, now: float) -> float:
        """The simulated time of the last change at or before ``now``.

        A failed project changed last when it failed: its later steps never happened.
        """
        limit = now if self.fail_at is None else min(now, self.fail_at)
        return max(
            [
                *(
                    mark
                    for mark in (
                        self.created_at,
                        self.media_done_at,
                        self.analysis_done_at,
                        self.script_ready_at,
                        self.fail_at,
                    )
                    if mark is not None and mark <= limit
                ),
                *(task.updated_at(now) for task in self.tasks),
            ]
        )


def lookup(table: Mapping[str, _V], kind: str, key: str) -> _V:
    """The task or project ``key`` of ``table`` (``kind`` names it in the error).

    Raises:
        SandboxError: 404 when there is no such task or project.
    """
    found = table.get(key)
    if found is None:
        raise NotFound(404, 404, f"{kind} not found: {key if len(key) <= 80 else key[:77] + '...'}")
    return found


def make_script(inputs: Mapping[str, Any]) -> str:
    """The reviewable script of a project: one line per time range."""
    total = int(inputs["duration"])
    count = len(inputs["product_image_urls"])
    product = "the product" if count == 1 else f"the {count} products"
    avatar = "the presenter" if inputs.get("avatar_image_url") else "a presenter"
    # A beat every 3 s (every second for a very short ad), the call to action last, taking the
    # rest of the time however long the ad is.
    step = 3 if total >= 6 else 1
    shown = min(-(-total // step), len(_SCRIPT_BEATS))
    edges = [*range(0, shown * step, step), total]
    lines = [
        f"{start}-{end}s: " + beat.format(product=product, avatar=avatar)
        for start, end, beat in zip(
            edges, edges[1:], [*_SCRIPT_BEATS[: shown - 1], _SCRIPT_BEATS[-1]], strict=False
        )
    ]
    language = inputs.get("speech_language_option") or "the reference video's language"
    lines.append(f"Voiceover: {language}; aspect ratio {inputs['aspect_ratio']}.")
    if inputs.get("prompt"):
        lines.append(f"Brief: {str(inputs['prompt']).strip()[:200]}")
    return "\n".join(lines)
