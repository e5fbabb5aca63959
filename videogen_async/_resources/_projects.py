"""``client.projects``: viral ad clone projects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from .._contract._enums import AspectRatio, ProjectMode, SpeechLanguage
from .._contract._exceptions import ProjectFailedError
from .._contract._models import CreatedProject, Project, Task, VideoBatch
from .._contract._validation import (
    as_url_list,
    check_id,
    validate_project_request,
    validate_videos_request,
)
from .._http._options import CallOptions, PollOptions, RequestOptions, call_options
from .._http._transport import Transport
from .._observe._spans import end_wait, wait_span
from .._waiting._policy import PollPolicy
from .._waiting._polling import UpdateCallback, on_read, poll_until
from ._raw import raw_call
from ._resource import Resource

if TYPE_CHECKING:
    from typing_extensions import Unpack


def _path(project_id: str, suffix: str = "") -> str:
    pid = check_id("project_id", project_id, encode=True)
    return f"/v1/video/viral-ads-clone/{pid}{suffix}"


class Projects(Resource):
    """Viral ad clone projects: a reference ad and product images in, scripts and videos out."""

    @property
    def with_raw_response(self) -> RawProjects:
        """The calls that send one request, each returning a :class:`RawResponse`."""
        return RawProjects(self)  # made anew: kept here, it would hold this object in a cycle

    def __init__(
        self,
        transport: Transport,
        poll_policy: PollPolicy,
        get_task: Callable[[str, CallOptions], Awaitable[Task]],
    ) -> None:
        super().__init__(transport, poll_policy)
        # Reads one task once with a call's options, without retries (the wait owns them).
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
        **options: Unpack[RequestOptions],
    ) -> CreatedProject:
        """Create a project (``POST /v1/video/viral-ads-clone``); charges 10 credits.

        The script is written in the background; then ``auto`` creates ``out_number`` videos,
        ``manual`` waits for :meth:`create_videos`.

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
            **options: The per-call options (:class:`RequestOptions`); ``extra_body`` wins
                over the arguments above, unchecked (a value this version does not know).

        Returns:
            The created project.

        Raises:
            InvalidRequestError: An argument breaks a rule; nothing was sent.
            InsufficientCreditsError: Not enough credits (nothing was created).
            MediaStorageError: A media URL could not be stored (nothing was charged).
            APIConnectionError: The service could not be reached; check
                ``request_may_have_taken_effect`` before creating again.
        """
        body = validate_project_request(
            {
                "reference_video_url": reference_video_url,
                "product_image_urls": as_url_list(product_image_urls),
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
        return await self._create(
            "/v1/video/viral-ads-clone", body, CreatedProject, call_options(options)
        )

    async def get(self, project_id: str, **options: Unpack[RequestOptions]) -> Project:
        """Read a project with its script, tasks and billing.

        Args:
            project_id: The id returned by :meth:`create`.
            **options: The per-call options (:class:`RequestOptions`).

        Returns:
            The project.

        Raises:
            InvalidRequestError: ``project_id`` is empty.
            NotFoundError: No such project.
            APIStatusError: The service answered with another failure.
            APIConnectionError: The service could not be reached.
        """
        return await self._get(_path(project_id), Project, options=call_options(options))

    async def create_videos(
        self,
        project_id: str,
        *,
        script: str | None = None,
        out_number: int | None = None,
        resolution: int | str | None = None,
        aspect_ratio: AspectRatio | str | None = None,
        **options: Unpack[RequestOptions],
    ) -> VideoBatch:
        """Create a new batch of video tasks from a project whose script is ready.

        Each call creates (and charges) a new batch; omitted arguments: the project's defaults.

        Args:
            project_id: The project.
            script: A script for this batch only (non-blank); the project's ``view_script``
                is used when omitted and is never overwritten.
            out_number: 1 to 4 videos.
            resolution: Resolution of this batch.
            aspect_ratio: ``9:16``, ``1:1`` or ``16:9``.
            **options: The per-call options (:class:`RequestOptions`); ``extra_body`` wins
                over the arguments above, unchecked (a value this version does not know).

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
        return await self._create(
            path,
            validate_videos_request(
                {
                    "script": script,
                    "out_number": out_number,
                    "resolution": resolution,
                    "aspect_ratio": aspect_ratio,
                },
                unknown_hint=True,
            ),
            VideoBatch,
            call_options(options),
        )

    async def wait_for_script(
        self,
        project_id: str,
        *,
        timeout: float | None = None,
        poll_policy: PollPolicy | None = None,
        on_update: UpdateCallback[Project] | None = None,
        **options: Unpack[PollOptions],
    ) -> Project:
        """Poll a project until its script is ready.

        Args:
            project_id: The project.
            timeout: The deadline in seconds (``None``: no deadline).
            poll_policy: Overrides the client's poll policy.
            on_update: Called (or awaited) with the first state and each changed one, the
                final included; an exception it raises ends the wait.
            **options: Sent with every poll (:class:`PollOptions`).

        Returns:
            The project, with ``view_script`` set.

        Raises:
            ProjectFailedError: The project failed.
            WaitTimeoutError: The deadline passed; ``.last`` holds the last project seen.
            NotFoundError: No such project.
        """
        path = _path(project_id)  # checks the id before the first poll
        call = call_options(options, polls=True)

        async def read() -> Project:
            return await self._get(path, Project, retries=0, options=call)

        def ready(project: Project) -> bool:
            if project.is_failed:
                raise ProjectFailedError(project)
            return project.has_script

        return await self._poll(
            "script",
            project_id,
            read,
            ready,
            on_read(self._transport.hooks, on_update, lambda p: p.has_script),
            timeout,
            poll_policy,
        )

    async def wait(
        self,
        project_id: str,
        *,
        timeout: float | None = None,
        poll_policy: PollPolicy | None = None,
        on_update: UpdateCallback[Project] | None = None,
        **options: Unpack[PollOptions],
    ) -> Project:
        """Poll a project until it and every one of its video tasks are terminal.

        A manual-mode project with no batch is done once its script is ready. A failed
        project is returned, not raised: check ``project.is_failed``.

        Args:
            project_id: The project.
            timeout: The deadline in seconds (``None``: no deadline).
            poll_policy: Overrides the client's poll policy.
            on_update: Called (or awaited) with the first state and each changed one, the
                final included; an exception it raises ends the wait.
            **options: Sent with every poll (:class:`PollOptions`).

        Returns:
            The project in its final state.

        Raises:
            WaitTimeoutError: The deadline passed; ``.last`` holds the last project seen.
            NotFoundError: No such project.
        """
        path = _path(project_id)  # checks the id before the first poll
        call = call_options(options, polls=True)
        settled: set[str] = set()  # listed tasks seen terminal
        finished = False

        async def read() -> Project:
            nonlocal finished
            project = await self._get(path, Project, retries=0, options=call)
            finished = await self._finished(project, settled, call)
            return project

        return await self._poll(
            "project",
            project_id,
            read,
            lambda _: finished,
            on_read(self._transport.hooks, on_update, lambda p: p.is_terminal),
            timeout,
            poll_policy,
        )

    async def _finished(self, project: Project, settled: set[str], call: CallOptions) -> bool:
        """Whether a project is failed, or terminal with every task it lists."""
        if project.is_failed:
            return True
        if not project.is_terminal:  # not failed: its status is terminal, its listed tasks too
            return False
        # Tasks the project lists without a status are checked one by one.
        listed = {t.task_id for t in project.tasks if t.task_id and t.status is not None}
        for task_id in project.task_ids:
            if task_id in listed or task_id in settled:
                continue
            task = await self._get_task(task_id, call)
            if not task.is_terminal:
                return False
            settled.add(task_id)
        return True

    async def _poll(
        self,
        kind: str,
        project_id: str,
        read: Callable[[], Awaitable[Project]],
        done: Callable[[Project], bool],
        on_value: Callable[[Project], Awaitable[object]] | None,
        timeout: float | None,
        poll_policy: PollPolicy | None,
    ) -> Project:
        """One wait on a project, in its span: ``read`` polled until ``done``."""
        with wait_span(kind, project_id) as span:
            project = await poll_until(
                read,
                done,
                timeout=timeout,
                poll_policy=poll_policy or self._poll_policy,
                what=f"project {project_id}",
                backoff=self._transport.backoff,
                on_value=on_value,
            )
            end_wait(span, project)
        return project


class RawProjects:
    """``client.projects.with_raw_response``: ``create``, ``get``, ``create_videos``."""

    def __init__(self, projects: Projects) -> None:
        self.create = raw_call(projects.create)
        self.get = raw_call(projects.get)
        self.create_videos = raw_call(projects.create_videos)
