"""The sandbox's service state: tasks and projects on the sandbox clock, and their events.

Effects beyond the object (a failed task's refund, a project's script refund, an ``auto``
project's batch) are events of a time-ordered heap that :meth:`SandboxState.settle` drains
before every read or write, once each, in order: the ledger is the same however often a test
reads. Objects and balance: :mod:`._simulation`; creation and schedules: :mod:`._routes`,
:mod:`._truth`.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._contract import _checks as checks
from .._contract._enums import ProjectMode, ProjectStep
from .._contract._service import Pricing
from . import _simulation as sim
from ._clock import SandboxClock
from ._config import (
    Duration,
    ProjectTiming,
    duration_field,
    rate_field,
    sample_duration,
)
from ._render import Renderer


@attrs.define(eq=False, slots=False)
class SandboxState:
    """The whole simulated service behind one sandbox (the settings: see ``SandboxServer``).

    Raises:
        ValueError: A setting is out of range (the balance, a rate, a duration).
    """

    clock: SandboxClock
    seed: int | str | None
    credits: float
    pricing: Pricing
    task_duration: Duration = duration_field("task_duration")  # noqa: RUF009 - an attrs field
    queue_delay: Duration = duration_field("queue_delay")  # noqa: RUF009 - an attrs field
    failure_rate: float = rate_field("failure_rate")
    error_rate: float = rate_field("error_rate")
    project_timing: ProjectTiming = attrs.Factory(ProjectTiming)
    project_failure_rate: float = rate_field("project_failure_rate")
    failure_marker: str | None = None
    media_rejects: Callable[[str], bool] | None = None

    def __attrs_post_init__(self) -> None:
        checks.number("credits", self.credits)
        if self.failure_rate + self.error_rate > 1:
            raise ValueError("failure_rate + error_rate must not exceed 1")
        seed = self.seed
        self.rng = random.Random(None if seed is None else f"{seed}:behaviour")
        self._id_rng = random.Random(None if seed is None else f"{seed}:ids")
        self.wallet, self.render = sim.Wallet(self.credits), Renderer(self.clock)
        self.tasks: dict[str, sim.Task] = {}
        self.projects: dict[str, sim.Project] = {}
        # (when, order of pushing, the effect, its task or project, the object's version).
        self._events: list[tuple[float, int, Callable[[Any, float], None], Any, int]] = []
        self._seq = itertools.count()

    def settle(self) -> float:
        """Apply every event due by now, in time order; return the current simulated time."""
        now = self.clock.now()
        events = self._events
        while events and events[0][0] <= now:
            at, _seq, effect, obj, version = heapq.heappop(events)
            if obj.version == version:  # else rescheduled since: a later event replaces it
                effect(obj, at)
        return now

    def balance(self) -> dict[str, float | int]:
        """The balance as ``GET /v1/credits`` shows it (refunds due by now applied first)."""
        self.settle()
        wallet = self.wallet
        return {
            "api_available_credits": sim.num(wallet.available),
            "api_total_credits": sim.num(wallet.total),
        }

    def push(self, at: float, effect: Callable[[Any, float], None], obj: Any) -> None:
        """Apply ``effect(obj, at)`` once the clock reaches ``at`` (the next :meth:`settle`).

        ``obj`` is a task or project; a change of its ``version`` cancels the event.
        """
        heapq.heappush(self._events, (at, next(self._seq), effect, obj, obj.version))

    def refund_task(self, task: sim.Task, at: float) -> None:
        """A failed task ends: its charge comes back (an event)."""
        if not task.refunded:
            task.refunded = True
            self.wallet.refund(task.cost)

    def refund_script(self, project: sim.Project, at: float) -> None:
        """A project fails before its script: the script charge comes back (an event)."""
        if project.fails_before_script and project.script_cost:
            self.wallet.refund(project.script_cost)
            project.script_cost = 0.0

    def script_ready(self, project: sim.Project, at: float) -> None:
        """A project's script is ready: an ``auto`` one gets its one automatic batch (an event)."""
        if project.mode != ProjectMode.AUTO.value or project.batches or project.failed(at):
            return
        try:
            self.create_batch(project, at, {}, automatic=True)
        except sim.SandboxError:  # the balance cannot pay it: nothing was charged
            project.fail_at = at
            project.fail_message = sim.AUTO_BATCH_NO_CREDITS

    def fail_before_script(
        self, project: sim.Project, at: float, message: str | None = None
    ) -> None:
        """Make a project fail at ``at``, before its script (the script charge is refunded)."""
        project.fails_before_script = True
        project.fail_at = at
        # An empty message is kept as given; none is the step's failure.
        project.fail_message = (
            sim.PROJECT_FAILURES[
                ProjectStep.ANALYZING.value
                if at <= project.analysis_done_at
                else ProjectStep.GENERATING_SCRIPT.value
            ]
            if message is None
            else message
        )
        self.push(at, self.refund_script, project)

    def create_batch(
        self, project: sim.Project, at: float, body: Mapping[str, Any], *, automatic: bool
    ) -> sim.Batch:
        """Charge and create one batch of a project's video tasks at ``at``.

        ``body`` is a checked videos request: what it leaves out is the project's.

        Raises:
            SandboxError: 409 / 300111 when the balance does not cover the batch (nothing is
                charged or created).
        """
        inputs, script = project.inputs, body.get("script")
        out_number = body.get("out_number") or inputs["out_number"]
        resolution = body.get("resolution") or inputs["resolution"]
        aspect_ratio = body.get("aspect_ratio") or inputs["aspect_ratio"]
        cost = self.pricing.project_video_cost(inputs["duration"], resolution)
        self.wallet.charge(cost * out_number)
        batch = sim.Batch(
            len(project.batches) + 1, at, out_number, resolution, aspect_ratio, script, automatic
        )
        forced_failure = (
            "The batch script was rejected (sandbox failure marker)."
            if self.marked(script)
            else None
        )
        for _ in range(out_number):
            task = self.new_task(
                at,
                sim.DEFAULT_MODEL,  # the model a project's video tasks show
                inputs["duration"],
                cost,
                forced_failure,
                project.created_wall,
                project_id=project.project_id,
                batch=batch.batch,
                aspect_ratio=aspect_ratio,
                resolution=resolution,
            )
            batch.task_ids.append(task.task_id)
            project.tasks.append(task)
        project.batches.append(batch)
        return batch

    def new_id(self, taken: Mapping[str, Any]) -> str:
        while True:
            new = str(uuid.UUID(int=self._id_rng.getrandbits(128), version=4))
            if new not in taken:
                return new

    def _draw_outcome(self, forced_failure: str | None) -> tuple[str, str | None]:
        draw = self.rng.random()
        if forced_failure is not None:
            return sim.FAILED, forced_failure
        if draw < self.failure_rate:
            return sim.FAILED, self.rng.choice(sim.TASK_FAILURE_MESSAGES)
        if draw < self.failure_rate + self.error_rate:
            return sim.ERROR, sim.TASK_ERROR_MESSAGE
        return sim.SUCCEEDED, None

    def new_task(
        self,
        at: float,
        model: str,
        duration: int,
        cost: float,
        forced_failure: str | None,
        floor: float = 0.0,
        **fields: Any,
    ) -> sim.Task:
        """A new task created at ``at``, its schedule and outcome drawn; ``fields``: the rest.

        Its creation time is never before ``floor`` (a batch's task not before its project).
        """
        queued = sample_duration(self.queue_delay, self.rng)
        running = sample_duration(self.task_duration, self.rng)
        outcome, message = self._draw_outcome(forced_failure)
        # Stamped with the real time the clock reached ``at``; an instant not reached yet (the
        # present one on a paused clock included) with the current real time.
        clock = self.clock
        wall = clock.wall_time_of(at) if at < clock.now() else None
        task = sim.Task(
            self.new_id(self.tasks),
            model,
            duration,
            cost,
            at,
            at + queued,
            at + queued + running,
            outcome,
            message,
            max(clock.wall_now() if wall is None else wall, floor),
            **fields,
        )
        self.tasks[task.task_id] = task
        if outcome != sim.SUCCEEDED:
            self.push(task.finished_at, self.refund_task, task)
        return task

    def marked(self, text: Any) -> bool:
        """Whether ``text`` holds the failure marker."""
        marker = self.failure_marker  # None when off (an empty marker is off too)
        return marker is not None and isinstance(text, str) and marker in text

    def create_task(self, body: Mapping[str, Any]) -> sim.Task:
        """Create a direct video task from a validated body.

        Raises:
            SandboxError: 409 / 300111 when the balance does not cover its price.
        """
        now = self.settle()
        model = body.get("model") or sim.DEFAULT_MODEL
        duration = body.get("duration") or sim.DEFAULT_DURATION
        cost = self.pricing.task_cost(model, duration)
        self.wallet.charge(cost)
        bad = next(
            (
                u
                for k in ("image_urls", "audio_urls", "video_urls")
                for u in body.get(k, ())
                if sim.host_is_invalid(u)
            ),
            None,
        )
        prompt = body.get("prompt")
        forced = (
            f"Failed to fetch media from URL: {bad}"
            if bad is not None
            else "The prompt was rejected by the content policy (sandbox failure marker)."
            if self.marked(prompt)
            else None
        )
        return self.new_task(now, model, duration, cost, forced, prompt=prompt)

    def show(
        self, kind: str, key: str, render: Callable[[Any, float, str], Any], origin: str
    ) -> dict[str, Any]:
        """The task or project (``kind``) ``key`` rendered as of now.

        ``render`` is a :class:`Renderer` method: what the service shows of it, or what the
        sandbox knows (``describe_task``); ``origin`` is the base of video URLs.

        Raises:
            SandboxError: 404 when there is no such task or project.
        """
        now = self.settle()
        return render(  # type: ignore[no-any-return]
            sim.lookup(self.tasks if kind == "Task" else self.projects, kind, key), now, origin
        )
