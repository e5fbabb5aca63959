"""The sandbox's service state: tasks and projects on the sandbox clock, and their events.

The few changes that have effects beyond the object itself happen through a time-ordered event
heap that :meth:`SandboxState.settle` drains up to the current time before every read or write:

* a task that ends ``failed`` or ``error`` gives its credits back;
* a project that fails before its script is generated gives the script charge back;
* an ``auto`` project whose script becomes ready gets its one automatic batch of tasks.

Each event runs exactly once (settling is synchronous, so concurrent requests of one event loop
cannot interleave with it) and in time order, so the ledger is the same whether a test reads it
after every simulated second or once after a jump of an hour.

The objects themselves are in :mod:`._simulation`, the balance in :mod:`._billing` and the
JSON answers in :mod:`._render`.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .._enums import ProjectMode, ProjectStep
from ._billing import Wallet
from ._clock import SandboxClock
from ._config import Duration, Pricing, ProjectTiming, sample_duration
from ._render import Renderer
from ._scheduling import Scheduler
from ._simulation import (
    AUTO_BATCH_NO_CREDITS,
    DEFAULT_MODEL,
    ERROR,
    EV_PROJECT_FAIL,
    EV_PROJECT_SCRIPT,
    EV_TASK_REFUND,
    FAILED,
    MEDIA_NOT_STORED,
    PROJECT_FAILURES,
    PROJECT_TASK_MODEL,
    SUCCEEDED,
    TASK_ERROR_MESSAGE,
    TASK_FAILURE_MESSAGES,
    Batch,
    Project,
    SandboxError,
    Task,
    host_is_invalid,
    make_script,
    shorten,
)

__all__ = ["SandboxError", "SandboxState"]


_V = TypeVar("_V")


def _lookup(table: Mapping[str, _V], kind: str, key: str) -> _V:
    found = table.get(key)
    if found is None:
        raise SandboxError(404, 404, f"{kind} not found: {shorten(key)}")
    return found


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
        self.wallet = Wallet(credits)
        self.render = Renderer(clock)
        self.schedule = Scheduler(self)
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
            if kind == EV_TASK_REFUND:
                self._refund_task(obj)
            elif kind == EV_PROJECT_FAIL:
                self._refund_script(obj)
            else:
                self._script_ready(obj, at)
        return now

    def push(self, at: float, kind: int, obj: Task | Project) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, obj, obj.version))

    def _refund_task(self, task: Task) -> None:
        if not task.refunded:
            task.refunded = True
            self.wallet.refund(task.cost)

    def _refund_script(self, project: Project) -> None:
        if project.fails_before_script and project.script_cost:
            self.wallet.refund(project.script_cost)
            project.script_cost = 0.0

    def _script_ready(self, project: Project, at: float) -> None:
        """The script of an ``auto`` project is ready: create its one automatic batch."""
        if project.mode != ProjectMode.AUTO.value or project.batches or project.failed(at):
            return
        out_number = int(project.inputs["out_number"])
        resolution = project.inputs["resolution"]
        cost = out_number * self.pricing.project_video_cost(project.inputs["duration"], resolution)
        if not self.wallet.can_pay(cost):
            project.fail_at = at
            project.fail_message = AUTO_BATCH_NO_CREDITS
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

    def credits_data(self) -> dict[str, Any]:
        """The ``data`` of ``GET /v1/credits``, after settling."""
        self.settle()
        return self.render.credits(self.wallet)

    def set_credits(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set the balance (``total`` defaults to ``max(total, available)``)."""
        self.settle()
        self.wallet.set(available=available, total=total)

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
            return FAILED, self.rng.choice(TASK_FAILURE_MESSAGES)
        if draw < self.failure_rate + self.error_rate:
            return ERROR, TASK_ERROR_MESSAGE
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
            self.push(task.finished_at, EV_TASK_REFUND, task)
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
        self.wallet.charge(cost)
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

    def get_task(self, task_id: str) -> Task:
        """Look a task up.

        Raises:
            SandboxError: 404 when there is no such task.
        """
        return _lookup(self.tasks, "Task", task_id)

    def describe_task(self, task_id: str, origin: str) -> dict[str, Any]:
        """Everything the sandbox knows about a task, for tests and benchmarks."""
        now = self.settle()
        return self.render.describe_task(self.get_task(task_id), now, origin)

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
        self.wallet.charge(self.pricing.script_credits)
        project = Project(
            self._new_id(self.projects), inputs, now, self.clock.wall_now(), make_script(inputs)
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
            self.fail_before_script(project, project.analysis_done_at, None)
        elif draw < self.project_failure_rate:
            failing_step = self.rng.choice((project.analysis_done_at, project.script_ready_at))
            self.fail_before_script(project, failing_step, None)
        else:
            self.push(project.script_ready_at, EV_PROJECT_SCRIPT, project)
        self.projects[project.project_id] = project
        return project

    def fail_before_script(self, project: Project, at: float, message: str | None) -> None:
        project.fails_before_script = True
        project.fail_at = at
        if message is None:
            step = (
                ProjectStep.ANALYZING.value
                if at <= project.analysis_done_at
                else ProjectStep.GENERATING_SCRIPT.value
            )
            message = PROJECT_FAILURES[step]
        project.fail_message = message
        self.push(at, EV_PROJECT_FAIL, project)

    def get_project(self, project_id: str) -> Project:
        """Look a project up.

        Raises:
            SandboxError: 404 when there is no such project.
        """
        return _lookup(self.projects, "Project", project_id)

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
        self.wallet.charge(cost * out_number)
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

    def describe_project(self, project_id: str, origin: str) -> dict[str, Any]:
        """Everything the sandbox knows about a project, for tests and benchmarks."""
        now = self.settle()
        return self.render.describe_project(self.get_project(project_id), now, origin)
