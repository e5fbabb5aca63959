"""``client.projects``: viral ad clone projects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from .._contract._enums import TERMINAL_PROJECT_STATUSES, AspectRatio, ProjectMode, SpeechLanguage
from .._contract._exceptions import ProjectFailedError, WaitTimeoutError
from .._contract._models import CreatedProject, Project, Task, VideoBatch
from .._contract._validation import (
    as_url_list,
    check_id,
    validate_project_request,
    validate_videos_request,
)
from .._http._options import CallOptions, Headers, Query
from .._http._session import Timeout
from .._http._transport import Transport
from .._observe._spans import end_wait, wait_span
from .._waiting._policy import PollPolicy
from .._waiting._polling import UpdateCallback, on_read, poll_until
from ._resource import Resource

__all__ = ["Projects"]


def _path(project_id: str, suffix: str = "") -> str:
    pid = check_id("project_id", project_id)
    return f"/v1/video/viral-ads-clone/{quote(pid, safe='')}{suffix}"


class Projects(Resource):
    """Viral ad clone projects: a reference ad and product images in, scripts and videos out."""

    def __init__(
        self,
        transport: Transport,
        poll_policy: PollPolicy,
        get_task: Callable[[str, CallOptions], Awaitable[Task]],
    ) -> None:
        """A namespace over ``transport``.

        Args:
            transport: The client's transport.
            poll_policy: The client's default poll policy.
            get_task: Reads one task once, with a call's options and without retries of
                its own (the wait loop owns the backoff).
        """
        super().__init__(transport, poll_policy)
        self._get_task = get_task

    async def create(
        self,
        reference_video_url: str,
        product_image_urls: Sequence[str],
        *,
        avatar_image_url: str | None = None,
        prompt: str | None = None,
        aspect_ratio: AspectRatio | str | None = None,
        speech_language_option: SpeechLanguage | str | None = None,
        duration: int | None = None,
        resolution: int | str | None = None,
        out_number: int | None = None,
        mode: ProjectMode | str | None = None,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: Timeout | float | None = None,
    ) -> CreatedProject:
        """Create a project (``POST /v1/video/viral-ads-clone``); charges 10 credits.

        The service stores the media, then analyses the reference and writes a script in
        the background. In ``auto`` mode it then creates one batch of ``out_number`` videos;
        in ``manual`` mode it stops at the script and waits for :meth:`create_videos`.

        Args:
            reference_video_url: Public http(s) URL of the reference ad video.
            product_image_urls: At least one public http(s) URL of a product image.
            avatar_image_url: Public http(s) URL of a person or avatar image.
            prompt: Free instructions: selling points, style, restrictions, language.
            aspect_ratio: ``9:16`` (default), ``1:1`` or ``16:9``.
            speech_language_option: Language of generated speech; ``""`` (default) follows
                the reference video.
            duration: Target duration in seconds (default 15).
            resolution: Target resolution, e.g. 720 (default) or 1080.
            out_number: 1 to 4 (default 1): videos of the automatic batch, or the default
                batch size of :meth:`create_videos` in manual mode.
            mode: ``auto`` (default) or ``manual``.
            extra_headers: Headers sent as given (a ``None`` value removes the client's).
            extra_query: Query parameters sent as given.
            extra_body: JSON fields sent as given, unchecked, winning over the arguments
                above (a value or a field this version does not know).
            timeout: This call's per-attempt timeouts (seconds or a :class:`Timeout`).

        Returns:
            The created project.

        Raises:
            InvalidRequestError: An argument breaks a rule; nothing was sent.
            InsufficientCreditsError: Not enough credits (nothing was created).
            MediaStorageError: A media URL could not be stored (nothing was charged).
            APIConnectionError: The service could not be reached; check
                ``request_may_have_taken_effect`` before creating again.
        """
        images = as_url_list(product_image_urls)
        body = validate_project_request(
            {
                "reference_video_url": reference_video_url,
                "product_image_urls": images,
                "avatar_image_url": avatar_image_url,
                "prompt": prompt,
                "aspect_ratio": aspect_ratio,
                "speech_language_option": speech_language_option,
                "duration": duration,
                "resolution": resolution,
                "out_number": out_number,
                "mode": mode,
            },
            unknown_hint=True,
        )
        options = CallOptions.of(extra_headers, extra_query, extra_body, timeout)
        return await self._create("/v1/video/viral-ads-clone", body, CreatedProject, options)

    async def get(
        self,
        project_id: str,
        *,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: Timeout | float | None = None,
    ) -> Project:
        """Read a project with its script, tasks and billing.

        Args:
            project_id: The id returned by :meth:`create`.
            extra_headers: Headers sent as given (a ``None`` value removes the client's).
            extra_query: Query parameters sent as given.
            extra_body: A JSON body sent as given.
            timeout: This call's per-attempt timeouts (seconds or a :class:`Timeout`).

        Returns:
            The project.

        Raises:
            InvalidRequestError: ``project_id`` is empty.
            NotFoundError: No such project.
            APIStatusError: The service answered with another failure.
            APIConnectionError: The service could not be reached.
        """
        options = CallOptions.of(extra_headers, extra_query, extra_body, timeout)
        return await self._get(_path(project_id), Project, options=options)

    async def create_videos(
        self,
        project_id: str,
        *,
        script: str | None = None,
        out_number: int | None = None,
        resolution: int | str | None = None,
        aspect_ratio: AspectRatio | str | None = None,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: Timeout | float | None = None,
    ) -> VideoBatch:
        """Create a new batch of video tasks from a project whose script is ready.

        May be called any number of times; each call creates (and charges) a new batch.
        Omitted arguments take the project's defaults.

        Args:
            project_id: The project.
            script: A script for this batch only (non-blank); the project's ``view_script``
                is used when omitted and is never overwritten.
            out_number: 1 to 4 videos.
            resolution: Resolution of this batch.
            aspect_ratio: ``9:16``, ``1:1`` or ``16:9``.
            extra_headers: Headers sent as given (a ``None`` value removes the client's).
            extra_query: Query parameters sent as given.
            extra_body: JSON fields sent as given, unchecked, winning over the arguments
                above (a value or a field this version does not know).
            timeout: This call's per-attempt timeouts (seconds or a :class:`Timeout`).

        Returns:
            The batch, with one task id per video.

        Raises:
            InvalidRequestError: An argument breaks a rule; nothing was sent.
            ConflictError: The project's script is not ready yet.
            NotFoundError: No such project.
            APIConnectionError: The service could not be reached; check
                ``request_may_have_taken_effect`` before creating again.
        """
        path = _path(project_id, "/videos")
        body = validate_videos_request(
            {
                "script": script,
                "out_number": out_number,
                "resolution": resolution,
                "aspect_ratio": aspect_ratio,
            },
            unknown_hint=True,
        )
        options = CallOptions.of(extra_headers, extra_query, extra_body, timeout)
        return await self._create(path, body, VideoBatch, options)

    async def wait_for_script(
        self,
        project_id: str,
        *,
        timeout: float | None = None,
        poll_policy: PollPolicy | None = None,
        on_update: UpdateCallback[Project] | None = None,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
    ) -> Project:
        """Poll a project until its script is ready.

        Args:
            project_id: The project.
            timeout: The deadline in seconds (``None``: no deadline).
            poll_policy: Overrides the client's poll policy.
            on_update: Called (or awaited) with the first state read and then with each
                state that differs from the one before (a new ``current_step``, a script,
                new tasks), the final one included; an exception it raises ends the wait.
            extra_headers: Headers sent as given with every poll.
            extra_query: Query parameters sent as given with every poll.

        Returns:
            The project, with ``view_script`` set.

        Raises:
            ProjectFailedError: The project failed.
            WaitTimeoutError: The deadline passed; ``.last`` holds the last project seen.
            NotFoundError: No such project.
        """
        check_id("project_id", project_id)
        options = CallOptions.of(extra_headers, extra_query)

        def ready(project: Project) -> bool:
            if project.is_failed:
                raise ProjectFailedError(project)
            return project.has_script

        on_value = on_read(self._transport.hooks, on_update, lambda p: p.has_script)
        with wait_span("script", project_id) as span:
            project = await poll_until(
                lambda: self._get(_path(project_id), Project, retries=0, options=options),
                ready,
                timeout=timeout,
                poll_policy=poll_policy or self._poll_policy,
                what=f"project {project_id}",
                backoff=self._transport.backoff,
                on_value=on_value,
            )
            end_wait(span, project)
        return project

    async def wait(
        self,
        project_id: str,
        *,
        timeout: float | None = None,
        poll_policy: PollPolicy | None = None,
        on_update: UpdateCallback[Project] | None = None,
        extra_headers: Headers | None = None,
        extra_query: Query | None = None,
    ) -> Project:
        """Poll a project until it and every one of its video tasks are terminal.

        A manual-mode project with no batch is done once its script is ready. A failed
        project is returned, not raised: check ``project.is_failed``.

        Args:
            project_id: The project.
            timeout: The deadline in seconds (``None``: no deadline).
            poll_policy: Overrides the client's poll policy.
            on_update: Called (or awaited) with the first state read and then with each
                state that differs from the one before (its status, step, script, billing
                or listed tasks changed), the final one included; an exception it raises
                ends the wait.
            extra_headers: Headers sent as given with every poll.
            extra_query: Query parameters sent as given with every poll.

        Returns:
            The project in its final state.

        Raises:
            WaitTimeoutError: The deadline passed; ``.last`` holds the last project seen.
            NotFoundError: No such project.
        """
        check_id("project_id", project_id)
        options = CallOptions.of(extra_headers, extra_query)
        settled: set[str] = set()

        async def snapshot() -> tuple[Project, bool]:
            project = await self._get(_path(project_id), Project, retries=0, options=options)
            if project.is_failed:
                return project, True
            if project.status not in TERMINAL_PROJECT_STATUSES or not project.is_terminal:
                return project, False
            # Tasks the project lists without a status are checked one by one.
            listed = {t.task_id for t in project.tasks if t.task_id and t.status is not None}
            for task_id in project.task_ids:
                if task_id in listed or task_id in settled:
                    continue
                task = await self._get_task(task_id, options)
                if not task.is_terminal:
                    return project, False
                settled.add(task_id)
            return project, True

        seen = on_read(self._transport.hooks, on_update, lambda p: p.is_terminal)

        async def on_value(state: tuple[Project, bool]) -> None:
            if seen is not None:
                await seen(state[0])

        try:
            with wait_span("project", project_id) as span:
                project, _ = await poll_until(
                    snapshot,
                    lambda state: state[1],
                    timeout=timeout,
                    poll_policy=poll_policy or self._poll_policy,
                    what=f"project {project_id}",
                    backoff=self._transport.backoff,
                    on_value=on_value if seen is not None else None,
                )
                end_wait(span, project)
        except WaitTimeoutError as exc:
            if isinstance(exc.last, tuple):
                exc.last = exc.last[0]
            raise
        return project
