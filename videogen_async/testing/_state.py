"""The sandbox's service state: credits ledger, tasks and projects, all on the sandbox clock.

Nothing here runs in the background. A task or project stores the simulated instants at which
it changes (start, finish, each project step) and its state is computed from the clock when it
is read, so a hundred thousand pending tasks cost a few hundred bytes each and no timer.

The few changes that have effects beyond the object itself happen through a time-ordered event
heap that :meth:`SandboxState.settle` drains up to the current time before every read or write:

* a task that ends ``failed`` or ``error`` gives its credits back;
* a project that fails before its script is generated gives the script charge back;
* an ``auto`` project whose script becomes ready gets its one automatic batch of tasks.

Each event runs exactly once (settling is synchronous, so concurrent requests of one event loop
cannot interleave with it) and in time order, so the ledger is the same whether a test reads it
after every simulated second or once after a jump of an hour.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from .._enums import ProjectMode, ProjectStatus, ProjectStep, TaskStatus
from ._clock import SandboxClock
from ._config import Duration, Pricing, ProjectTiming, sample_duration

__all__ = ["SandboxError", "SandboxState"]

QUEUED = TaskStatus.QUEUED.value
RUNNING = TaskStatus.RUNNING.value
SUCCEEDED = TaskStatus.SUCCEEDED.value
FAILED = TaskStatus.FAILED.value
ERROR = TaskStatus.ERROR.value
TASK_OUTCOMES = (SUCCEEDED, FAILED, ERROR)

DEFAULT_MODEL = "videomodel_2_0"
PROJECT_TASK_MODEL = "videomodel_2_0"

INSUFFICIENT_CREDITS = "Insufficient API credits"
MEDIA_NOT_STORED = "Failed to store media from URL"

_TASK_FAILURE_MESSAGES = (
    "The prompt was rejected by the content policy.",
    "The reference media could not be used for generation.",
    "Video generation failed; no credits were charged.",
)
_TASK_ERROR_MESSAGE = "Internal error during video generation; no credits were charged."
_PROJECT_FAILURES = {
    ProjectStep.ANALYZING.value: "Analysis failed: the reference video could not be analysed.",
    ProjectStep.GENERATING_SCRIPT.value: (
        "Script generation failed; the script charge was refunded."
    ),
}
_AUTO_BATCH_NO_CREDITS = (
    "Insufficient API credits to create the automatic video batch; add credits and create"
    " videos with the videos endpoint."
)

_EV_TASK_REFUND = 0
_EV_PROJECT_FAIL = 1
_EV_PROJECT_SCRIPT = 2

_SCRIPT_BEATS = (
    "Hook: close-up of {product} in hand, bold on-screen headline, fast push-in.",
    "Problem: the everyday frustration the product solves, quick cuts, relatable framing.",
    "Reveal: {product} shown clearly on a clean background, brand colours.",
    "Demonstration: {avatar} uses {product}, showing the key selling point.",
    "Proof: close-ups of results and a short testimonial line on screen.",
    "Offer: {product} with price tag and benefits as animated captions.",
    "Call to action: {avatar} looks into the camera, 'Tap to shop now', logo end card.",
)


class SandboxError(Exception):
    """A failure the sandbox answers with the service's error envelope.

    Attributes:
        status: The HTTP status.
        code: The envelope ``code``.
        message: The envelope ``message``.
        headers: Extra HTTP headers of the answer.
    """

    def __init__(
        self, status: int, code: int, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def iso(unix: float) -> str:
    """Format a Unix time as ISO 8601 UTC with milliseconds and a ``Z``."""
    text = datetime.fromtimestamp(unix, tz=timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


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


class Task:
    """One video task: the instants at which it changes, and what it ends as."""

    __slots__ = (
        "aspect_ratio",
        "batch",
        "cost",
        "created_at",
        "created_wall",
        "duration",
        "error_message",
        "finished_at",
        "model",
        "outcome",
        "project_id",
        "refunded",
        "resolution",
        "started_at",
        "task_id",
        "version",
    )

    def __init__(
        self,
        task_id: str,
        model: str,
        duration: int,
        cost: float,
        created_at: float,
        started_at: float,
        finished_at: float,
        outcome: str,
        error_message: str | None,
        created_wall: float,
    ) -> None:
        self.task_id = task_id
        self.model = model
        self.duration = duration
        self.cost = cost
        self.created_at = created_at
        self.started_at = started_at
        self.finished_at = finished_at
        self.outcome = outcome
        self.error_message = error_message
        self.created_wall = created_wall
        self.project_id: str | None = None
        self.batch = 0
        self.aspect_ratio: str | None = None
        self.resolution: int | str | None = None
        self.refunded = False
        self.version = 0

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
        if now >= self.finished_at:
            return self.finished_at
        if now >= self.started_at:
            return self.started_at
        return self.created_at


class Batch:
    """One batch of a project's video tasks."""

    __slots__ = (
        "aspect_ratio",
        "automatic",
        "created_at",
        "index",
        "out_number",
        "resolution",
        "script",
        "task_ids",
    )

    def __init__(
        self,
        index: int,
        created_at: float,
        out_number: int,
        resolution: int | str,
        aspect_ratio: str,
        script: str | None,
        automatic: bool,
    ) -> None:
        self.index = index
        self.created_at = created_at
        self.out_number = out_number
        self.resolution = resolution
        self.aspect_ratio = aspect_ratio
        self.script = script
        self.automatic = automatic
        self.task_ids: list[str] = []


class Project:
    """One viral ad clone project: its inputs, its timeline and its batches."""

    __slots__ = (
        "analysis_done_at",
        "batches",
        "created_at",
        "created_wall",
        "fail_at",
        "fail_message",
        "fails_before_script",
        "inputs",
        "media_done_at",
        "mode",
        "project_id",
        "script",
        "script_cost",
        "script_ready_at",
        "tasks",
        "version",
    )

    def __init__(
        self,
        project_id: str,
        inputs: dict[str, Any],
        created_at: float,
        created_wall: float,
        script: str,
    ) -> None:
        self.project_id = project_id
        self.inputs = inputs
        self.mode: str = inputs["mode"]
        self.created_at = created_at
        self.created_wall = created_wall
        self.media_done_at = created_at
        self.analysis_done_at = created_at
        self.script_ready_at = created_at
        self.fail_at: float | None = None
        self.fail_message: str | None = None
        self.fails_before_script = False
        self.script = script
        self.script_cost = 0.0
        self.batches: list[Batch] = []
        self.tasks: list[Task] = []
        self.version = 0

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
        """The simulated time of the last change at or before ``now``."""
        latest = self.created_at
        limit = self.fail_at if self.failed(now) else None
        for boundary in (self.media_done_at, self.analysis_done_at, self.script_ready_at):
            if boundary <= now and (limit is None or boundary <= limit):
                latest = max(latest, boundary)
        if limit is not None:
            latest = max(latest, limit)
        for task in self.tasks:
            latest = max(latest, task.updated_at(now))
        return latest


class SandboxState:
    """The whole simulated service behind one sandbox.

    Args:
        clock: The sandbox clock.
        seed: Seed of the random draws (durations, outcomes, ids); ``None`` for entropy.
        credits: Starting balance (total and available).
        pricing: Prices.
        task_duration: Simulated running time of a video task.
        queue_delay: Simulated time a video task spends ``queued`` before it runs.
        failure_rate: Probability that a task ends ``failed``.
        error_rate: Probability that a task ends ``error``.
        project_timing: Durations of a project's steps.
        project_failure_rate: Probability that a project fails before its script.
        failure_marker: Text that makes a project (in ``reference_video_url``) or a task (in
            its prompt or batch script) fail; ``None`` disables it.
        media_rejects: Extra predicate: a project media URL for which it returns ``True``
            cannot be stored.
    """

    def __init__(
        self,
        *,
        clock: SandboxClock,
        seed: int | str | None,
        credits: float,
        pricing: Pricing,
        task_duration: Duration,
        queue_delay: Duration,
        failure_rate: float,
        error_rate: float,
        project_timing: ProjectTiming,
        project_failure_rate: float,
        failure_marker: str | None,
        media_rejects: Callable[[str], bool] | None,
    ) -> None:
        self.clock = clock
        self.pricing = pricing
        self.task_duration = task_duration
        self.queue_delay = queue_delay
        self.failure_rate = failure_rate
        self.error_rate = error_rate
        self.project_timing = project_timing
        self.project_failure_rate = project_failure_rate
        self.failure_marker = failure_marker
        self.media_rejects = media_rejects
        self.rng = random.Random(None if seed is None else f"{seed}:behaviour")
        self._id_rng = random.Random(None if seed is None else f"{seed}:ids")
        self.total_credits = float(credits)
        self.available_credits = float(credits)
        self.tasks: dict[str, Task] = {}
        self.projects: dict[str, Project] = {}
        self._events: list[tuple[float, int, int, Any, int]] = []
        self._seq = itertools.count()

    # ----------------------------------------------------------------------------------------
    # Clock and events
    # ----------------------------------------------------------------------------------------

    def settle(self) -> float:
        """Apply every event due by now, in time order.

        Returns:
            The current simulated time.
        """
        now = self.clock.now()
        events = self._events
        while events and events[0][0] <= now:
            at, _seq, kind, obj, version = heapq.heappop(events)
            if obj.version != version:
                continue  # rescheduled since
            if kind == _EV_TASK_REFUND:
                self._refund_task(obj)
            elif kind == _EV_PROJECT_FAIL:
                self._refund_script(obj)
            else:
                self._script_ready(obj, at)
        return now

    def _push(self, at: float, kind: int, obj: Task | Project) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, obj, obj.version))

    def _refund_task(self, task: Task) -> None:
        if not task.refunded:
            task.refunded = True
            self.available_credits = round(self.available_credits + task.cost, 2)

    def _refund_script(self, project: Project) -> None:
        if project.fails_before_script and project.script_cost:
            self.available_credits = round(self.available_credits + project.script_cost, 2)
            project.script_cost = 0.0

    def _script_ready(self, project: Project, at: float) -> None:
        """The script of an ``auto`` project is ready: create its one automatic batch."""
        if project.mode != ProjectMode.AUTO.value or project.batches or project.failed(at):
            return
        out_number = int(project.inputs["out_number"])
        resolution = project.inputs["resolution"]
        cost = out_number * self.pricing.project_video_cost(project.inputs["duration"], resolution)
        if cost > self.available_credits:
            project.fail_at = at
            project.fail_message = _AUTO_BATCH_NO_CREDITS
            return
        self._create_batch(
            project,
            at,
            out_number=out_number,
            resolution=resolution,
            aspect_ratio=project.inputs["aspect_ratio"],
            script=None,
            automatic=True,
        )

    # ----------------------------------------------------------------------------------------
    # Credits
    # ----------------------------------------------------------------------------------------

    def _charge(self, amount: float) -> None:
        if amount > self.available_credits:
            raise SandboxError(409, 300111, INSUFFICIENT_CREDITS)
        self.available_credits = round(self.available_credits - amount, 2)

    def set_credits(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set the balance (``total`` defaults to ``max(total, available)``)."""
        self.settle()
        if available is not None:
            self.available_credits = float(available)
        if total is not None:
            self.total_credits = float(total)
        self.total_credits = max(self.total_credits, self.available_credits)

    def credits_data(self) -> dict[str, Any]:
        """The ``data`` of ``GET /v1/credits``."""
        self.settle()
        return {
            "api_available_credits": num(self.available_credits),
            "api_total_credits": num(self.total_credits),
        }

    # ----------------------------------------------------------------------------------------
    # Tasks
    # ----------------------------------------------------------------------------------------

    def _new_id(self, taken: Mapping[str, Any]) -> str:
        while True:
            new = str(uuid.UUID(int=self._id_rng.getrandbits(128), version=4))
            if new not in taken:
                return new

    def _draw_outcome(self, forced_failure: str | None) -> tuple[str, str | None]:
        draw = self.rng.random()
        if forced_failure is not None:
            return FAILED, forced_failure
        if draw < self.failure_rate:
            return FAILED, self.rng.choice(_TASK_FAILURE_MESSAGES)
        if draw < self.failure_rate + self.error_rate:
            return ERROR, _TASK_ERROR_MESSAGE
        return SUCCEEDED, None

    def wall_of(self, sim: float, floor: float = 0.0) -> float:
        """The real (Unix) time at which the clock reached ``sim``, at least ``floor``.

        An instant not reached yet (the present one on a paused clock included) is stamped
        with the current real time.
        """
        wall = self.clock.wall_time_of(sim) if sim < self.clock.now() else None
        if wall is None:
            wall = self.clock.wall_now()
        return max(wall, floor)

    def stamp(self, sim: float, floor: float) -> str:
        """Format the real time of a past simulated instant, as the sandbox reports it."""
        wall = self.clock.wall_time_of(sim)
        return iso(floor if wall is None or wall < floor else wall)

    def _new_task(
        self,
        at: float,
        model: str,
        duration: int,
        cost: float,
        forced_failure: str | None,
        floor: float = 0.0,
    ) -> Task:
        queued = sample_duration(self.queue_delay, self.rng)
        running = sample_duration(self.task_duration, self.rng)
        outcome, message = self._draw_outcome(forced_failure)
        task = Task(
            self._new_id(self.tasks),
            model,
            duration,
            cost,
            at,
            at + queued,
            at + queued + running,
            outcome,
            message,
            self.wall_of(at, floor),
        )
        self.tasks[task.task_id] = task
        if outcome != SUCCEEDED:
            self._push(task.finished_at, _EV_TASK_REFUND, task)
        return task

    def _marked(self, text: Any) -> bool:
        marker = self.failure_marker
        if not marker or not isinstance(text, str):
            return False
        return marker in text

    def create_task(self, body: Mapping[str, Any]) -> Task:
        """Create a direct video task from a validated request body.

        Args:
            body: The body, already checked by ``validate_task_request``.

        Returns:
            The new task.

        Raises:
            SandboxError: 409 / 300111 when the balance does not cover its price.
        """
        now = self.settle()
        model = body.get("model") or DEFAULT_MODEL
        duration = int(body.get("duration") or 5)
        cost = self.pricing.task_cost(model, duration)
        self._charge(cost)
        forced: str | None = None
        media = [
            *body.get("image_urls", ()),
            *body.get("audio_urls", ()),
            *body.get("video_urls", ()),
        ]
        bad = next((u for u in media if host_is_invalid(u)), None)
        if bad is not None:
            forced = f"Failed to fetch media from URL: {bad}"
        elif self._marked(body.get("prompt")):
            forced = "The prompt was rejected by the content policy (sandbox failure marker)."
        return self._new_task(now, model, duration, cost, forced)

    def create_tasks(
        self,
        body: Mapping[str, Any],
        count: int,
        *,
        finish_in: Duration | None = None,
        outcome: str | None = None,
    ) -> list[Task]:
        """Create ``count`` direct tasks from one validated body, each charged as usual.

        Args:
            body: The body, already checked by ``validate_task_request``.
            count: How many tasks.
            finish_in: When each ends, in simulated seconds from now (a number, a range
                drawn per task, or a callable); the task duration setting when ``None``.
            outcome: How each ends (``succeeded``, ``failed``, ``error``); drawn as usual
                when ``None``.

        Returns:
            The new tasks, in creation order.

        Raises:
            SandboxError: 409 / 300111 when the balance does not cover them all (then none
                is created).
            ValueError: A bad ``outcome``.
        """
        if outcome is not None and outcome not in TASK_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(TASK_OUTCOMES)}, got {outcome!r}")
        self.settle()
        model = body.get("model") or DEFAULT_MODEL
        price = self.pricing.task_cost(model, int(body.get("duration") or 5))
        if price * count > self.available_credits:
            raise SandboxError(409, 300111, INSUFFICIENT_CREDITS)
        tasks = []
        for _ in range(count):
            task = self.create_task(body)
            if finish_in is not None or outcome is not None:
                seconds = (
                    task.finished_at - task.created_at
                    if finish_in is None
                    else sample_duration(finish_in, self.rng)
                )
                self.schedule_task(task.task_id, finish_in=seconds, outcome=outcome)
            tasks.append(task)
        return tasks

    def get_task(self, task_id: str) -> Task:
        """Look a task up.

        Raises:
            SandboxError: 404 when there is no such task.
        """
        task = self.tasks.get(task_id)
        if task is None:
            raise SandboxError(404, 404, f"Task not found: {_shorten(task_id)}")
        return task

    def created_task_data(self, task: Task, now: float) -> dict[str, Any]:
        """The ``data`` of a task creation answer."""
        return {
            "task_id": task.task_id,
            "status": task.status(now),
            "created_at": iso(task.created_wall),
            "credits_cost": num(task.cost),
        }

    def task_data(self, task: Task, now: float, origin: str) -> dict[str, Any]:
        """The ``data`` of ``GET /v1/tasks``.

        Args:
            task: The task.
            now: The simulated time (after :meth:`settle`).
            origin: ``scheme://host:port`` the video URL is built on.

        Returns:
            The JSON object.
        """
        status = task.status(now)
        result: dict[str, Any] | None = None
        if status in TASK_OUTCOMES:
            result = {
                "video_url": f"{origin}/media/{task.task_id}.mp4" if status == SUCCEEDED else None,
                "error_message": task.error_message if status != SUCCEEDED else None,
                "finished_at": self.stamp(task.finished_at, task.created_wall),
                "status": status,
            }
        return {
            "task_id": task.task_id,
            "status": status,
            "model": task.model,
            "created_at": iso(task.created_wall),
            "updated_at": self.stamp(task.updated_at(now), task.created_wall),
            "credits_cost": num(task.credits_cost(now)),
            "result": result,
        }

    def schedule_task(
        self,
        task_id: str,
        *,
        finish_in: float,
        outcome: str | None = None,
        error_message: str | None = None,
    ) -> Task:
        """Set exactly when and how a pending task ends.

        Args:
            task_id: The task.
            finish_in: Simulated seconds from now until it ends (``0`` ends it now).
            outcome: ``succeeded``, ``failed`` or ``error``; unchanged when omitted.
            error_message: The failure text of a ``failed`` / ``error`` outcome (a default
                text when omitted).

        Returns:
            The task.

        Raises:
            SandboxError: 404 for an unknown task, 409 for one that has already ended.
            ValueError: A bad ``finish_in`` or ``outcome``.
        """
        now = self.settle()
        task = self.get_task(task_id)
        if now >= task.finished_at:
            raise SandboxError(409, 409, f"Task {task_id} has already ended ({task.outcome})")
        if not isinstance(finish_in, (int, float)) or isinstance(finish_in, bool) or finish_in < 0:
            raise ValueError(f"finish_in must be a number >= 0, got {finish_in!r}")
        if outcome is not None and outcome not in TASK_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(TASK_OUTCOMES)}, got {outcome!r}")
        task.version += 1
        task.finished_at = now + float(finish_in)
        task.started_at = min(task.started_at, task.finished_at)
        if outcome is not None:
            task.outcome = outcome
        if task.outcome == SUCCEEDED:
            task.error_message = None
        else:
            default = _TASK_ERROR_MESSAGE if task.outcome == ERROR else _TASK_FAILURE_MESSAGES[2]
            task.error_message = error_message or task.error_message or default
            self._push(task.finished_at, _EV_TASK_REFUND, task)
        self.settle()
        return task

    def describe_task(self, task_id: str, origin: str) -> dict[str, Any]:
        """Everything the sandbox knows about a task, for tests and benchmarks."""
        now = self.settle()
        task = self.get_task(task_id)
        wall = self.clock.wall_time_of(task.finished_at)
        return {
            **self.task_data(task, now, origin),
            "project_id": task.project_id,
            "batch": task.batch or None,
            "charged": num(task.cost),
            "refunded": task.refunded,
            "now": now,
            "schedule": {
                "created_at": task.created_at,
                "started_at": task.started_at,
                "finish_at": task.finished_at,
                "finish_at_wall": wall,
                "outcome": task.outcome,
                "error_message": task.error_message,
            },
        }

    # ----------------------------------------------------------------------------------------
    # Projects
    # ----------------------------------------------------------------------------------------

    def _media_rejected(self, url: str) -> bool:
        if host_is_invalid(url):
            return True
        return bool(self.media_rejects is not None and self.media_rejects(url))

    def create_project(self, body: Mapping[str, Any]) -> Project:
        """Create a project from a validated request body.

        The order of work follows the service: store the media, create the project, charge
        the script, start the background steps.

        Args:
            body: The body, already checked by ``validate_project_request``.

        Returns:
            The new project.

        Raises:
            SandboxError: 409 / 100099 when a media URL cannot be stored, 409 / 300111 when
                the balance does not cover the script charge. Nothing is created or charged.
        """
        now = self.settle()
        inputs: dict[str, Any] = {
            "reference_video_url": body["reference_video_url"],
            "product_image_urls": list(body["product_image_urls"]),
            "avatar_image_url": body.get("avatar_image_url"),
            "prompt": body.get("prompt"),
            "aspect_ratio": body.get("aspect_ratio") or "9:16",
            "speech_language_option": body.get("speech_language_option") or "",
            "duration": int(body.get("duration") or 15),
            "resolution": body.get("resolution") or 720,
            "out_number": int(body.get("out_number") or 1),
            "mode": body.get("mode") or ProjectMode.AUTO.value,
        }
        urls = [inputs["reference_video_url"], *inputs["product_image_urls"]]
        if inputs["avatar_image_url"]:
            urls.append(inputs["avatar_image_url"])
        if any(self._media_rejected(u) for u in urls):
            raise SandboxError(409, 100099, MEDIA_NOT_STORED)
        self._charge(self.pricing.script_credits)
        project = Project(
            self._new_id(self.projects), inputs, now, self.clock.wall_now(), _make_script(inputs)
        )
        project.script_cost = self.pricing.script_credits
        timing = self.project_timing
        project.media_done_at = now + sample_duration(timing.preparing_media, self.rng)
        project.analysis_done_at = project.media_done_at + sample_duration(
            timing.analyzing, self.rng
        )
        project.script_ready_at = project.analysis_done_at + sample_duration(
            timing.generating_script, self.rng
        )
        draw = self.rng.random()
        if self._marked(inputs["reference_video_url"]):
            self._fail_before_script(project, project.analysis_done_at, None)
        elif draw < self.project_failure_rate:
            failing_step = self.rng.choice((project.analysis_done_at, project.script_ready_at))
            self._fail_before_script(project, failing_step, None)
        else:
            self._push(project.script_ready_at, _EV_PROJECT_SCRIPT, project)
        self.projects[project.project_id] = project
        return project

    def _fail_before_script(self, project: Project, at: float, message: str | None) -> None:
        project.fails_before_script = True
        project.fail_at = at
        if message is None:
            step = (
                ProjectStep.ANALYZING.value
                if at <= project.analysis_done_at
                else ProjectStep.GENERATING_SCRIPT.value
            )
            message = _PROJECT_FAILURES[step]
        project.fail_message = message
        self._push(at, _EV_PROJECT_FAIL, project)

    def get_project(self, project_id: str) -> Project:
        """Look a project up.

        Raises:
            SandboxError: 404 when there is no such project.
        """
        project = self.projects.get(project_id)
        if project is None:
            raise SandboxError(404, 404, f"Project not found: {_shorten(project_id)}")
        return project

    def created_project_data(self, project: Project, now: float) -> dict[str, Any]:
        """The ``data`` of a project creation answer."""
        status, step = project.phase(now)
        return {
            "project_id": project.project_id,
            "status": status,
            "current_step": step,
            "mode": project.mode,
            "credits_cost": num(project.script_cost),
            "created_at": iso(project.created_wall),
        }

    def project_data(self, project: Project, now: float, origin: str) -> dict[str, Any]:
        """The ``data`` of ``GET /v1/video/viral-ads-clone/{project_id}``."""
        status, step = project.phase(now)
        tasks = []
        video_cost = 0.0
        for task in project.tasks:
            data = self.task_data(task, now, origin)
            data["batch"] = task.batch
            data["aspect_ratio"] = task.aspect_ratio
            data["resolution"] = task.resolution
            video_cost += task.credits_cost(now)
            tasks.append(data)
        video_cost = round(video_cost, 2)
        return {
            "project_id": project.project_id,
            "status": status,
            "current_step": step,
            "mode": project.mode,
            "error_message": project.fail_message if project.failed(now) else None,
            "view_script": project.script if project.script_ready(now) else None,
            "billing": {
                "script_credits_cost": num(project.script_cost),
                "video_credits_cost": num(video_cost),
                "total_credits_cost": num(round(project.script_cost + video_cost, 2)),
            },
            "task_ids": [t.task_id for t in project.tasks],
            "tasks": tasks,
            "created_at": iso(project.created_wall),
            "updated_at": self.stamp(project.updated_at(now), project.created_wall),
        }

    def _create_batch(
        self,
        project: Project,
        at: float,
        *,
        out_number: int,
        resolution: int | str,
        aspect_ratio: str,
        script: str | None,
        automatic: bool,
    ) -> Batch:
        cost = self.pricing.project_video_cost(project.inputs["duration"], resolution)
        self._charge(cost * out_number)
        batch = Batch(
            len(project.batches) + 1, at, out_number, resolution, aspect_ratio, script, automatic
        )
        forced = (
            "The batch script was rejected (sandbox failure marker)."
            if self._marked(script)
            else None
        )
        for _ in range(out_number):
            task = self._new_task(
                at,
                PROJECT_TASK_MODEL,
                project.inputs["duration"],
                cost,
                forced,
                floor=project.created_wall,
            )
            task.project_id = project.project_id
            task.batch = batch.index
            task.aspect_ratio = aspect_ratio
            task.resolution = resolution
            batch.task_ids.append(task.task_id)
            project.tasks.append(task)
        project.batches.append(batch)
        return batch

    def create_videos(self, project_id: str, body: Mapping[str, Any]) -> tuple[Project, Batch]:
        """Create a batch of video tasks from a project's script.

        Args:
            project_id: The project.
            body: The body, already checked by ``validate_videos_request``.

        Returns:
            The project and the new batch.

        Raises:
            SandboxError: 404 for an unknown project; 409 / 409 when the project has failed or
                its script is not generated yet; 409 / 300111 when the balance does not cover
                the batch. Nothing is created or charged on failure.
        """
        now = self.settle()
        project = self.get_project(project_id)
        if project.failed(now):
            raise SandboxError(
                409, 409, f"Project {project_id} has failed; no video tasks can be created"
            )
        if not project.script_ready(now):
            _status, step = project.phase(now)
            raise SandboxError(
                409,
                409,
                f"The script of project {project_id} is not ready yet (current_step: {step});"
                " create videos once current_step is script_ready",
            )
        batch = self._create_batch(
            project,
            now,
            out_number=int(body.get("out_number") or project.inputs["out_number"]),
            resolution=body.get("resolution") or project.inputs["resolution"],
            aspect_ratio=body.get("aspect_ratio") or project.inputs["aspect_ratio"],
            script=body.get("script"),
            automatic=False,
        )
        return project, batch

    def schedule_project(
        self,
        project_id: str,
        *,
        script_ready_in: float,
        outcome: str = "succeeded",
        error_message: str | None = None,
    ) -> Project:
        """Set exactly when a project's script is ready, or when it fails instead.

        The steps still ahead are squeezed or stretched into the new span in proportion.

        Args:
            project_id: The project.
            script_ready_in: Simulated seconds from now until the script is ready (or, with
                ``outcome="failed"``, until the project fails).
            outcome: ``succeeded`` (the script gets ready) or ``failed``.
            error_message: The failure text (a default text when omitted).

        Returns:
            The project.

        Raises:
            SandboxError: 404 for an unknown project; 409 once its script is ready or it has
                failed.
            ValueError: A bad ``script_ready_in`` or ``outcome``.
        """
        now = self.settle()
        project = self.get_project(project_id)
        if project.failed(now) or now >= project.script_ready_at:
            raise SandboxError(
                409, 409, f"Project {project_id} is past its script step; it cannot be rescheduled"
            )
        span = script_ready_in
        if not isinstance(span, (int, float)) or isinstance(span, bool) or span < 0:
            raise ValueError(f"script_ready_in must be a number >= 0, got {span!r}")
        if outcome not in (ProjectStatus.SUCCEEDED.value, ProjectStatus.FAILED.value):
            raise ValueError(f"outcome must be 'succeeded' or 'failed', got {outcome!r}")
        old_span = project.script_ready_at - now
        ratio = float(span) / old_span if old_span > 0 else 0.0

        def rescale(boundary: float) -> float:
            return boundary if boundary <= now else now + (boundary - now) * ratio

        project.media_done_at = rescale(project.media_done_at)
        project.analysis_done_at = rescale(project.analysis_done_at)
        project.script_ready_at = now + float(span)
        project.version += 1
        project.fail_at = None
        project.fail_message = None
        project.fails_before_script = False
        if outcome == ProjectStatus.FAILED.value:
            self._fail_before_script(project, project.script_ready_at, error_message)
        else:
            self._push(project.script_ready_at, _EV_PROJECT_SCRIPT, project)
        self.settle()
        return project

    def describe_project(self, project_id: str, origin: str) -> dict[str, Any]:
        """Everything the sandbox knows about a project, for tests and benchmarks."""
        now = self.settle()
        project = self.get_project(project_id)
        clock = self.clock
        return {
            **self.project_data(project, now, origin),
            "inputs": dict(project.inputs),
            "script": project.script,
            "batches": [
                {
                    "batch": b.index,
                    "automatic": b.automatic,
                    "created_at": b.created_at,
                    "out_number": b.out_number,
                    "resolution": b.resolution,
                    "aspect_ratio": b.aspect_ratio,
                    "script": b.script,
                    "task_ids": list(b.task_ids),
                }
                for b in project.batches
            ],
            "now": now,
            "schedule": {
                "created_at": project.created_at,
                "media_ready_at": project.media_done_at,
                "analysis_done_at": project.analysis_done_at,
                "script_ready_at": None if project.fails_before_script else project.script_ready_at,
                "script_ready_at_wall": None
                if project.fails_before_script
                else clock.wall_time_of(project.script_ready_at),
                "fail_at": project.fail_at,
                "fail_at_wall": None
                if project.fail_at is None
                else clock.wall_time_of(project.fail_at),
            },
        }


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _make_script(inputs: Mapping[str, Any]) -> str:
    """The reviewable script of a project: one line per time range."""
    total = int(inputs["duration"])
    count = len(inputs["product_image_urls"])
    product = "the product" if count == 1 else f"the {count} products"
    avatar = "the presenter" if inputs.get("avatar_image_url") else "a presenter"
    language = inputs.get("speech_language_option") or "the reference video's language"
    step = 3 if total >= 6 else 1
    lines = []
    start = 0
    beat = 0
    while start < total:
        end = min(total, start + step)
        if end == total or beat == len(_SCRIPT_BEATS) - 1:
            end = total
            text = _SCRIPT_BEATS[-1]
        else:
            text = _SCRIPT_BEATS[beat]
        lines.append(f"{start}-{end}s: " + text.format(product=product, avatar=avatar))
        start = end
        beat += 1
    lines.append(f"Voiceover: {language}; aspect ratio {inputs['aspect_ratio']}.")
    if inputs.get("prompt"):
        lines.append(f"Brief: {str(inputs['prompt']).strip()[:200]}")
    return "\n".join(lines)
