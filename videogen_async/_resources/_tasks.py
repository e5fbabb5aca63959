"""``client.tasks``: direct video tasks and their status."""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from .._contract._enums import FunctionMode, Model, Ratio
from .._contract._exceptions import TaskPollError, WaitTimeoutError
from .._contract._models import CreatedTask, Task
from .._contract._validation import as_url_list, check_id, validate_task_request
from .._http._options import (
    NO_OPTIONS,
    CallOptions,
    Headers,
    PollOptions,
    Query,
    RequestOptions,
    call_options,
)
from .._http._transport import Transport
from .._waiting._gather import GatherOptions, GatherResults, gather_until_done
from .._waiting._policy import PollPolicy
from .._waiting._polling import TaskSource, UpdateCallback, wait_on_source
from .._waiting._schedule import FinishTimeMemory
from ._raw import raw_call
from ._resource import Resource

if TYPE_CHECKING:
    from typing_extensions import Unpack


class GatherCallOptions(PollOptions, GatherOptions, total=False):
    """The keyword arguments of ``client.tasks.gather_until_done`` but ``return_exceptions``."""


class Tasks(Resource):
    """Direct video tasks: create, read, wait for one, wait for many."""

    @property
    def with_raw_response(self) -> RawTasks:
        """The calls that send one request, each returning a :class:`RawResponse`."""
        return RawTasks(self)  # made anew: kept here, it would hold this object in a cycle

    async def create(
        self,
        prompt: str,
        *,
        model: Model | str | None = None,
        function_mode: FunctionMode | str | None = None,
        ratio: Ratio | str | None = None,
        duration: int | None = None,
        image_urls: Sequence[str] | None = None,
        audio_urls: Sequence[str] | None = None,
        video_urls: Sequence[str] | None = None,
        **options: Unpack[RequestOptions],
    ) -> CreatedTask:
        """Create a video generation task (``POST /v1/video/videomodel-2``).

        Arguments are checked before anything is sent; omitted ones take the service's
        defaults. Retried only when the request cannot have taken effect (see docs/errors.md).

        Args:
            prompt: The text prompt (required, non-blank).
            model: ``videomodel_2_0`` or ``videomodel_2_0_fast``.
            function_mode: ``omni_reference`` or ``first_last_frames``.
            ratio: ``21:9``, ``16:9``, ``4:3``, ``1:1``, ``3:4`` or ``9:16``.
            duration: Seconds, 4 to 15.
            image_urls: Up to 9 image URLs (up to 2 with ``first_last_frames``).
            audio_urls: Up to 3 audio URLs; with ``omni_reference`` they need an image or
                a video beside them.
            video_urls: Up to 3 video URLs.
            **options: The per-call options (:class:`RequestOptions`); ``extra_body`` wins
                over the arguments above, unchecked (a value this version does not know).

        Returns:
            The created task (its ``task_id``, status ``running``, cost).

        Raises:
            InvalidRequestError: An argument breaks a rule; nothing was sent.
            InsufficientCreditsError: Not enough credits.
            APIStatusError: The service refused the request.
            APIConnectionError: The service could not be reached; check
                ``request_may_have_taken_effect`` before creating again.
        """
        body = validate_task_request(
            {
                "prompt": prompt,
                "model": model,
                "function_mode": function_mode,
                "ratio": ratio,
                "duration": duration,
                "image_urls": as_url_list(image_urls),
                "audio_urls": as_url_list(audio_urls),
                "video_urls": as_url_list(video_urls),
            },
            unknown_hint=True,
        )
        return await self._create(
            "/v1/video/videomodel-2", body, CreatedTask, call_options(options)
        )

    async def get(self, task_id: str, **options: Unpack[RequestOptions]) -> Task:
        """Read a task's status and result (``GET /v1/tasks?task_id=``).

        Args:
            task_id: The id returned by :meth:`create` (or listed in a project).
            **options: The per-call options (:class:`RequestOptions`).

        Returns:
            The task; ``result`` is ``None`` while it runs.

        Raises:
            InvalidRequestError: ``task_id`` is empty.
            NotFoundError: No such task.
            APIStatusError: The service answered with another failure.
            APIConnectionError: The service could not be reached.
        """
        # The transport awaited here, not through ``_get``: one coroutine less per read.
        call = call_options(options)
        response = await self._transport.request(
            "GET",
            "/v1/tasks",
            params={"task_id": check_id("task_id", task_id, encode=True)},
            options=call,
        )
        return self._parse(response, Task)

    async def _fetch_once(self, task_id: str, options: CallOptions = NO_OPTIONS) -> Task:
        """One poll of a wait or a gather: no retries (the waiting loop owns the backoff).

        As :meth:`get`, the transport awaited here: thousands of ids polled by a gather each
        pay one coroutine less.
        """
        response = await self._transport.request(
            "GET",
            "/v1/tasks",
            params={"task_id": check_id("task_id", task_id, encode=True)},
            retries=0,
            options=options,
        )
        return self._parse(response, Task)

    def __init__(
        self,
        transport: Transport,
        poll_policy: PollPolicy,
        finish_times: FinishTimeMemory | None = None,
    ) -> None:
        super().__init__(transport, poll_policy)
        self._finish_times = finish_times  # the client's, for its gathers

    def _source(self, options: CallOptions = NO_OPTIONS) -> TaskSource:
        """The narrow interface the waiting engines poll through (``options`` with every read).

        One read with no retries of its own (the engine's loop owns the backoff), paced by
        the client. Without options (most waits and gathers), the bound read itself: a
        partial's keyword would cost every poll a dict.
        """
        fetch = self._fetch_once
        return TaskSource(
            fetch=fetch if options is NO_OPTIONS else functools.partial(fetch, options=options),
            pacing=self._transport.pacing,
            poll_policy=self._poll_policy,
            backoff=self._transport.backoff,
            finish_times=self._finish_times,
            hooks=self._transport.hooks,
        )

    async def wait(
        self,
        task_id: str,
        *,
        timeout: float | None = None,
        raise_on_failure: bool = False,
        poll_policy: PollPolicy | None = None,
        on_update: UpdateCallback[Task] | None = None,
        **options: Unpack[PollOptions],
    ) -> Task:
        """Poll one task until it is terminal (succeeded, failed or error).

        Still running is not an error: the task is polled on the client's poll policy (a first
        poll soon, then growing intervals with jitter, up to a cap). Transient failures of a
        poll (connection errors, 429, 5xx) back off and go on.

        Args:
            task_id: The task to wait for.
            timeout: The deadline in seconds for the whole wait (``None``: no deadline).
            raise_on_failure: Raise :class:`TaskFailedError` when the task ends failed or
                error, instead of returning it.
            poll_policy: Overrides the client's poll policy for this wait.
            on_update: Called (awaited if it returns a coroutine) with the first state and
                each changed one, the final included; an exception it raises ends the wait.
            **options: Sent with every poll (:class:`PollOptions`).

        Returns:
            The task in a terminal state.

        Raises:
            WaitTimeoutError: The deadline passed; ``.last`` holds the last state seen.
            TaskFailedError: The task failed and ``raise_on_failure`` was set.
            NotFoundError: No such task.
            AuthenticationError: The API key was refused.
        """
        task_id = check_id("task_id", task_id)
        return await wait_on_source(
            self._source(call_options(options, polls=True)),
            task_id,
            timeout=timeout,
            raise_on_failure=raise_on_failure,
            poll_policy=poll_policy or self._poll_policy,
            on_update=on_update,
        )

    async def watch(
        self,
        task_id: str,
        *,
        timeout: float | None = None,
        poll_policy: PollPolicy | None = None,
        **options: Unpack[PollOptions],
    ) -> AsyncIterator[Task]:
        """Yield each distinct state of a task until it is terminal.

        The async-iterator form of ``wait(on_update=...)``::

            async for task in client.tasks.watch(task_id, timeout=600):
                await message.edit(f"{task.status}")

        No poll runs while your loop body does: a slow body delays the next poll. The polls
        follow the same schedule as ``wait`` (gaps that grow with the task's age), each
        state being one wait for a state that differs from the last.

        Args:
            task_id: The task to watch.
            timeout: Deadline in seconds for the whole watch, loop body included (``None``:
                none).
            poll_policy: Overrides the client's poll policy.
            **options: Sent with every poll (:class:`PollOptions`).

        Yields:
            Each distinct state once, the first and the terminal one included.

        Raises:
            WaitTimeoutError: The deadline passed; ``.last`` holds the last state seen.
            NotFoundError: No such task.
        """
        task_id = check_id("task_id", task_id)
        source = self._source(call_options(options, polls=True))
        deadline = None if timeout is None else time.monotonic() + timeout
        last: Task | None = None
        while last is None or not last.is_terminal:
            try:
                last = await wait_on_source(
                    source,
                    task_id,
                    timeout=None if deadline is None else max(0.0, deadline - time.monotonic()),
                    raise_on_failure=False,
                    poll_policy=poll_policy or self._poll_policy,
                    done=functools.partial(operator.ne, last),
                    after=last,
                )
            except WaitTimeoutError as exc:
                if exc.last is None:
                    exc.last = last
                exc.message = f"task {task_id} was not terminal after {timeout:g} s"
                exc.args = (exc.message,)
                raise
            yield last

    @overload
    def gather_until_done(
        self,
        /,
        task_ids: Iterable[str],
        *,
        return_exceptions: Literal[False] = False,
        **options: Unpack[GatherCallOptions],
    ) -> GatherResults[Task]: ...

    @overload
    def gather_until_done(
        self,
        /,
        task_ids: Iterable[str],
        *,
        return_exceptions: bool,
        **options: Unpack[GatherCallOptions],
    ) -> GatherResults[Task | TaskPollError]: ...

    def gather_until_done(
        self,
        /,
        task_ids: Iterable[str],
        *,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        return_exceptions: bool = False,
        **options: Unpack[GatherOptions],
    ) -> GatherResults[Any]:
        """Wait for many tasks at once, yielding each as soon as it is terminal.

        :func:`videogen_async.gather_until_done` with this client; see it for the options.

        Args:
            task_ids: The ids to wait for (duplicates are polled and yielded once).
            extra_headers: Headers sent as given with every poll.
            extra_query: Query parameters sent as given with every poll.
            return_exceptions: Yield a :class:`TaskPollError` for an id that cannot be
                polled, instead of raising it (see :func:`videogen_async.gather_until_done`).
            **options: Options of :func:`videogen_async.gather_until_done`.

        Returns:
            An async iterator of :class:`Task`, also usable as an async context manager.
        """
        source = self._source(
            call_options({"extra_headers": extra_headers, "extra_query": extra_query}, polls=True)
        )
        return gather_until_done(source, task_ids, return_exceptions=return_exceptions, **options)


class RawTasks:
    """``client.tasks.with_raw_response``: ``create``, ``get``."""

    def __init__(self, tasks: Tasks) -> None:
        self.create = raw_call(tasks.create)
        self.get = raw_call(tasks.get)
