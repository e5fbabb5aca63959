"""What tests and benchmarks read and steer on a sandbox: the base class of ``SandboxServer``.

The server-side truth (every task and project, as the sandbox sees it), exact scheduling of
outcomes, the balance, the statistics and the request log. The same operations are served
over HTTP under ``/_sandbox/`` by :mod:`._control`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._contract._exceptions import InvalidRequestError
from .._contract._validation import validate_task_request
from ._clock import SandboxClock
from ._config import Duration, check_duration
from ._faults import FaultInjector
from ._openapi import build_openapi
from ._scheduling import create_tasks, schedule_project, schedule_task
from ._simulation import SandboxError
from ._state import SandboxState
from ._stats import RequestRecord, RequestStats, SandboxStats

__all__ = ["ServerTruth"]

_T = TypeVar("_T")
_BULK_MAX = 1_000_000


class ServerTruth:
    """Reading and steering one sandbox's simulated service (see ``SandboxServer``)."""

    clock: SandboxClock
    faults: FaultInjector
    _state: SandboxState
    _stats: RequestStats

    def _origin(self) -> str:
        raise NotImplementedError

    def _base_url_or_none(self) -> str | None:
        raise NotImplementedError

    @property
    def task_ids(self) -> tuple[str, ...]:
        """Every task created (direct and project batches), in creation order."""
        return tuple(self._state.tasks)

    @property
    def project_ids(self) -> tuple[str, ...]:
        """Every project created, in creation order."""
        return tuple(self._state.projects)

    def describe_task(self, task_id: str) -> dict[str, Any]:
        """Return what the status query would show, plus the sandbox's own view.

        Args:
            task_id: The task.

        Returns:
            The ``GET /v1/tasks`` data plus ``project_id``, ``batch``, ``charged``,
            ``refunded``, ``now`` and ``schedule`` (``created_at``, ``started_at`` and
            ``finish_at`` in simulated seconds; ``finish_at_wall``, the real Unix time at which
            it ends or ended, ``None`` while a paused clock has not reached it; ``outcome``,
            ``error_message``).

        Raises:
            KeyError: No such task.
        """
        return self._wrap_lookup(lambda: self._state.describe_task(task_id, self._origin()))

    def describe_project(self, project_id: str) -> dict[str, Any]:
        """Return what the project endpoint would show, plus inputs, batches and schedule.

        Args:
            project_id: The project.

        Returns:
            The project data plus ``inputs``, ``script``, ``batches``, ``now`` and
            ``schedule``.

        Raises:
            KeyError: No such project.
        """
        return self._wrap_lookup(lambda: self._state.describe_project(project_id, self._origin()))

    def schedule_task(
        self,
        task_id: str,
        *,
        finish_in: float,
        outcome: str | None = None,
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when and how a pending task ends.

        Args:
            task_id: The task.
            finish_in: Simulated seconds from now until it ends; ``0`` ends it now.
            outcome: ``"succeeded"``, ``"failed"`` or ``"error"``; unchanged when omitted.
            error_message: The failure text of a failed/error outcome.

        Returns:
            The task as :meth:`describe_task` shows it.

        Raises:
            KeyError: No such task.
            ValueError: The task has already ended, or a bad argument.
        """
        self._wrap_lookup(
            lambda: schedule_task(
                self._state,
                task_id,
                finish_in=finish_in,
                outcome=outcome,
                error_message=error_message,
            )
        )
        return self.describe_task(task_id)

    def create_tasks(
        self,
        count: int,
        *,
        prompt: str = "a sandbox bulk task",
        model: str | None = None,
        duration: int | None = None,
        finish_in: Duration | None = None,
        outcome: str | None = None,
    ) -> list[str]:
        """Create many direct tasks at once, each as if created through the service.

        For benchmarks and soak runs that need many ids quickly (``POST
        /_sandbox/tasks/bulk`` over HTTP). Each task is charged like a created task and
        appears in :attr:`task_ids` and in the statistics' ``tasks_created``; no request is
        logged.

        Args:
            count: How many tasks, 1 to 1,000,000.
            prompt: Their prompt (the failure marker works as usual).
            model: Their model (default ``videomodel_2_0``).
            duration: Their duration in seconds, 4 to 15 (default 5).
            finish_in: When each ends, in simulated seconds from now: a number, a
                ``(low, high)`` range drawn per task, or a callable(rng); the sandbox's task
                duration when ``None``. A very large value keeps them pending.
            outcome: ``"succeeded"``, ``"failed"`` or ``"error"`` for all; drawn from the
                failure rates when ``None``.

        Returns:
            The new ids, in creation order.

        Raises:
            ValueError: A bad argument, or a balance that does not cover them all (then
                none is created).
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _BULK_MAX:
            raise ValueError(f"count must be an integer from 1 to {_BULK_MAX}, got {count!r}")
        spec = None if finish_in is None else check_duration(finish_in, "finish_in")
        try:
            body = validate_task_request({"prompt": prompt, "model": model, "duration": duration})
        except InvalidRequestError as exc:
            raise ValueError(str(exc)) from None
        tasks = self._wrap_lookup(
            lambda: create_tasks(self._state, body, count, finish_in=spec, outcome=outcome)
        )
        return [task.task_id for task in tasks]

    def schedule_project(
        self,
        project_id: str,
        *,
        script_ready_in: float,
        outcome: str = "succeeded",
        error_message: str | None = None,
    ) -> dict[str, Any]:
        """Set exactly when a project's script gets ready, or when it fails instead.

        Args:
            project_id: The project (its script must not be ready yet).
            script_ready_in: Simulated seconds from now until the script is ready, or with
                ``outcome="failed"`` until the project fails.
            outcome: ``"succeeded"`` or ``"failed"``.
            error_message: The project's ``error_message`` when it fails.

        Returns:
            The project as :meth:`describe_project` shows it.

        Raises:
            KeyError: No such project.
            ValueError: The script is already ready or the project failed; a bad argument.
        """
        self._wrap_lookup(
            lambda: schedule_project(
                self._state,
                project_id,
                script_ready_in=script_ready_in,
                outcome=outcome,
                error_message=error_message,
            )
        )
        return self.describe_project(project_id)

    @staticmethod
    def _wrap_lookup(call: Callable[[], _T]) -> _T:
        try:
            return call()
        except SandboxError as exc:
            if exc.status == 404:
                raise KeyError(exc.message) from None
            raise ValueError(exc.message) from None

    def credits(self) -> dict[str, float | int]:
        """Return the balance as ``GET /v1/credits`` shows it."""
        return self._state.credits_data()

    def set_credits(self, *, available: float | None = None, total: float | None = None) -> None:
        """Set the balance.

        Args:
            available: New ``api_available_credits``.
            total: New ``api_total_credits`` (raised to ``available`` if lower).
        """
        self._state.set_credits(available=available, total=total)

    def add_credits(self, amount: float) -> None:
        """Top the balance up (both total and available).

        Args:
            amount: Credits to add.
        """
        state = self._state
        state.set_credits(
            available=state.wallet.available + amount, total=state.wallet.total + amount
        )

    @property
    def request_log(self) -> tuple[RequestRecord, ...]:
        """The recent requests (control endpoints excluded), oldest first."""
        return tuple(self._stats.log)

    def stats(self) -> SandboxStats:
        """Return the counters since the last :meth:`reset_stats`."""
        return self._stats.snapshot()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` is true: checked now, then as each request arrives or ends.

        For a test that must act at a point of the traffic (every id polled once, a create in
        flight, a second client polling) without sleeping and looking again. Await it on the
        server's event loop, under the caller's deadline (``anyio.fail_after``).

        Args:
            condition: Reads the server (``stats()``, ``request_log``, ...); called on the
                server's event loop, after every change of the counters.
        """
        while not condition():
            await self._stats.changed()

    def reset_stats(self) -> None:
        """Zero the counters, the peaks and the request log (tasks and projects stay)."""
        self._stats.clear()
        self.faults.reset_counts()

    def openapi(self) -> dict[str, Any]:
        """Return the OpenAPI 3.1 document of the service, with this server's URL."""
        return build_openapi(self._base_url_or_none())
