"""``gather_until_done``: wait on many task ids at once, with one scheduler for all of them.

The function (checks, ids, classes) and the results object; polling is ``_coordinator``'s.
**No cancel scope across a yield**: the polling's task group is owned by the ``async with``
block or by a background task started by a plain ``async for``'s first ``__anext__``; results
come through an anyio memory object stream, never yielded inside a cancel scope.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, cast, overload

import anyio
from anyio.abc import TaskGroup

from .._contract import _checks as checks
from .._contract._exceptions import TaskPollError
from .._contract._models import Task
from .._contract._validation import check_id
from ._cohorts import ClassState, IdState
from ._coordinator import _Coordinator, _Fatal, _Item
from ._policy import DEFAULT_POLICY, PollPolicy
from ._polling import PollingClient, TaskSource, source_of
from ._progress import GatherProgress
from ._schedule import FinishTimeMemory

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream
    from typing_extensions import Unpack

DEFAULT_MAX_CONCURRENCY = 32
"""Requests in flight at most, by default (see ``bench/gather.py``)."""

_BACKGROUND: set[asyncio.Task[None]] = set()
"""Strong references to the background runners of plain ``async for`` consumers."""


#: What a gather yields: ``Task``, or ``Task | TaskPollError`` with ``return_exceptions=True``
#: (the default, for a bare ``GatherResults``). Checkers read the default (PEP 696) from
#: typing_extensions; at run time a TypeVar's default changes nothing.
if TYPE_CHECKING:
    from typing_extensions import TypeVar as TypeVarWithDefault

    _R_co = TypeVarWithDefault("_R_co", covariant=True, default=Task | TaskPollError)
else:
    _R_co = TypeVar("_R_co", covariant=True)


class GatherOptions(TypedDict, total=False):
    """The keyword arguments of :func:`gather_until_done` besides ``return_exceptions``.

    Typed, so that a checker refuses a misspelt one (``timout=60``), as Python does at run time.
    """

    timeout: float | None
    max_concurrency: int
    poll_policy: PollPolicy | None
    on_progress: Callable[[GatherProgress], Any] | None
    progress_interval: float
    classes: Mapping[str, Hashable] | Callable[[str], Hashable] | None
    finish_times: FinishTimeMemory | None
    open_ended: bool


class GatherResults(Generic[_R_co]):
    """The async iterator returned by :func:`gather_until_done`.

    Use it as ``async with ... as results: async for task in results`` (structured: polling
    stops when the block exits) or as a plain ``async for`` (polling stops when the iterator
    is exhausted, raises, is closed with :meth:`aclose`, or is garbage collected).
    """

    def __init__(self, coordinator: _Coordinator, key_of: Callable[[str], object]) -> None:
        self._core, self._key_of = coordinator, key_of
        self._receive: MemoryObjectReceiveStream[_Item] | None = None
        self._mode = "new"
        self._tg: TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def progress(self) -> GatherProgress:
        """A snapshot of the progress so far (cheap; readable at any time)."""
        return self._core.snapshot()

    def add(self, task_ids: Iterable[str]) -> int:
        """Join more ids to this gather, polled on the schedule of their class; how many joined.

        Each id's class comes from the gather's ``classes`` (looked up now). An id the gather
        is polling is not added again; an id it finished (or discarded) joins again, polled
        anew. Made for a gather started with ``open_ended=True``; adding to a gather that has
        ended polls nothing.

        Raises:
            InvalidRequestError: An id is not a non-empty string (named ``task_id``).
        """
        states = _new_states(task_ids, self._key_of, self._core.known, self._core.schedule.classes)
        self._core.add(states)
        return len(states)

    def discard(self, task_ids: Iterable[str]) -> list[str]:
        """Stop polling pending ids without yielding them (e.g. handed to another poller).

        Returns the ids that were pending and are no longer polled.
        """
        return [task_id for task_id in task_ids if self._core.discard(task_id)]

    def end_input(self) -> None:
        """Say that no more ids join (``open_ended=True``): the gather ends when they are done."""
        self._core.end_input()

    async def __aenter__(self) -> GatherResults[_R_co]:
        if self._mode != "new":
            raise RuntimeError("this gather_until_done() was already started")
        self._mode = "context"
        self._receive = self._core.open_stream()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._core.run)
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        tg, self._tg = self._tg, None
        self._shutdown()
        if tg is not None:
            tg.cancel_scope.cancel()
            # The block's own exception is not handed to the task group, which would wrap it
            # in an exception group: the runner never raises, so the block's exception (or a
            # cancellation from outside, re-raised by the task group) is the one propagating.
            await tg.__aexit__(None, None, None)
        return None

    def __aiter__(self) -> GatherResults[_R_co]:
        return self

    async def __anext__(self) -> _R_co:
        if self._mode == "new" and not self._closed:  # a plain `async for`: start a runner
            self._mode = "background"
            self._receive = self._core.open_stream()
            self._task = asyncio.get_running_loop().create_task(
                self._core.run(), name="videogen_async.gather_until_done"
            )
            _BACKGROUND.add(self._task)
            self._task.add_done_callback(_BACKGROUND.discard)
        receive = self._receive
        if self._closed or receive is None:
            raise StopAsyncIteration
        try:
            item = await receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            await self.aclose()
            raise StopAsyncIteration from None
        except BaseException:
            # Cancelled while waiting: nobody else will stop a background runner.
            if self._mode == "background":
                with anyio.CancelScope(shield=True):
                    await self.aclose()
            raise
        if isinstance(item, _Fatal):
            await self.aclose()
            raise item.error
        return cast("_R_co", item)  # a TaskPollError comes only with return_exceptions=True

    def _shutdown(self) -> None:
        """Stop polling and close the consumer's end (synchronous; safe in ``__del__``)."""
        self._closed = True
        self._core.stop()
        if self._receive is not None:
            self._receive.close()

    async def aclose(self) -> None:
        """Stop polling and wait until no poll is in flight. Idempotent.

        In the ``async with`` form the polling task group itself is left at the block's end.
        """
        self._shutdown()
        if self._mode == "new":
            return
        with anyio.CancelScope(shield=True):
            task = self._task
            if task is not None and not task.done():  # the background runner
                task.cancel()
                await asyncio.wait({task})
            elif self._tg is not None:  # inside the `async with` block
                await self._core.finished.wait()

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if self._receive is not None:
            self._receive.close()
        task = self._task
        if task is None:
            self._core.stop()
            return
        loop = task.get_loop()
        if not task.done() and not loop.is_closed():  # stopped from the loop's own thread
            loop.call_soon_threadsafe(self._core.stop)
            loop.call_soon_threadsafe(task.cancel)


@overload
def gather_until_done(
    client: PollingClient | TaskSource,
    task_ids: Iterable[str],
    *,
    return_exceptions: Literal[False] = False,
    **options: Unpack[GatherOptions],
) -> GatherResults[Task]: ...


@overload
def gather_until_done(
    client: PollingClient | TaskSource,
    task_ids: Iterable[str],
    *,
    return_exceptions: bool,
    **options: Unpack[GatherOptions],
) -> GatherResults[Task | TaskPollError]: ...


def gather_until_done(
    client: PollingClient | TaskSource,
    task_ids: Iterable[str],
    *,
    timeout: float | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    return_exceptions: bool = False,
    poll_policy: PollPolicy | None = None,
    on_progress: Callable[[GatherProgress], Any] | None = None,
    progress_interval: float = 1.0,
    classes: Mapping[str, Hashable] | Callable[[str], Hashable] | None = None,
    finish_times: FinishTimeMemory | None = None,
    open_ended: bool = False,
) -> GatherResults[Any]:
    """Wait for many tasks at once, yielding each as soon as it is terminal.

    ::

        async with gather_until_done(client, ids, timeout=600) as results:
            async for task in results:
                await notify(task.task_id, task.status, task.video_url)

    A failed or error task is a result, not an exception; transient poll failures slow that id
    down (a 429 slows everyone) and never end the batch. See docs/waiting.md.

    Args:
        client: The client (``AsyncVideoGen``), whose pacing the polls share (they do not
            retry: the gather owns the backoff), or a :class:`TaskSource`.
        task_ids: The ids; duplicates are polled once and yielded once.
        timeout: Deadline in seconds for the whole gather (``None``: none).
        max_concurrency: Polls in flight at most.
        return_exceptions: For an id that cannot be polled (404, 401, 403, 400, or
            ``max_consecutive_failures`` transient failures in a row) or is pending at the
            deadline: ``False`` stops every poll and raises the first error (the deadline:
            :class:`WaitTimeoutError` with ``.pending``); ``True`` yields a
            :class:`TaskPollError` (``__cause__``: the error) and goes on.
        poll_policy: The poll policy (``None``: the client's, else the defaults).
        on_progress: Quick, non-blocking callback given a :class:`GatherProgress` after each
            id finishes, on 429 pauses, at the end and every ``progress_interval`` seconds;
            an exception it raises ends the gather.
        progress_interval: Seconds between periodic ``on_progress`` calls.
        classes: Each id's class for ids that take different times (e.g. ``(model,
            duration)``): a mapping id -> hashable key, or a callable; finish times are
            learned per class.
        finish_times: Where what is learned per class is kept between gathers (``None``:
            the client's ``finish_times``, if any); ids without a class are under ``None``.
        open_ended: Keep running when the ids are done, for ids added later
            (:meth:`GatherResults.add`), until :meth:`GatherResults.end_input`.

    Returns:
        A :class:`GatherResults`: an async iterator (and async context manager) of
        :class:`Task` (and :class:`TaskPollError` with ``return_exceptions=True``), with a
        ``progress`` property.

    Raises:
        InvalidRequestError: ``max_concurrency`` not a whole number >= 1, a negative
            ``timeout``, a non-positive ``progress_interval``, an id that is not a string,
            ``classes`` neither a mapping nor a callable, or a class key not hashable.
    """
    checks.whole("max_concurrency", max_concurrency)
    checks.seconds_or_none("timeout", timeout)
    checks.positive("progress_interval", progress_interval)
    key_of = _class_keys(classes)
    source = source_of(client)
    results = GatherResults(
        _Coordinator(
            source,
            timeout=timeout,
            max_concurrency=max_concurrency,
            return_exceptions=return_exceptions,
            policy=poll_policy or source.poll_policy or DEFAULT_POLICY,
            on_progress=on_progress,
            progress_interval=progress_interval,
            memory=finish_times if finish_times is not None else source.finish_times,
            open_ended=open_ended,
        ),
        key_of,
    )
    results.add(task_ids)  # not started: the ids are scheduled when the polling starts
    return results


def _new_states(
    task_ids: Iterable[str],
    key_of: Callable[[str], object],
    known: Mapping[str, IdState],
    by_key: Mapping[object, ClassState],
) -> list[IdState]:
    """Checked states of the distinct ids not pending in ``known``, each with its class."""
    if isinstance(task_ids, str):
        raise checks.fail("task_ids", "must be an iterable of ids, not a single string")
    made = dict(by_key)  # the gather's classes, and those its new ids bring
    new = {}
    for task_id in task_ids:
        check_id("task_id", task_id)
        former = known.get(task_id)
        if (former is None or former.done) and task_id not in new:
            key = key_of(task_id)
            klass = made.get(key)
            if klass is None:
                klass = made[key] = ClassState(key)
            new[task_id] = IdState(task_id, klass)
    return list(new.values())


def _class_keys(
    classes: Mapping[str, Hashable] | Callable[[str], Hashable] | None,
) -> Callable[[str], object]:
    """A checked ``id -> class key`` function for ``gather_until_done``'s ``classes``."""
    if classes is None:
        return lambda _task_id: None
    if isinstance(classes, Mapping):
        find: Callable[[str], object] = classes.get
    elif callable(classes):
        find = classes
    else:
        raise checks.fail("classes", "must be a mapping of id to key, or a callable", classes)

    def key_of(task_id: str) -> object:
        key = find(task_id)
        try:
            hash(key)
        except TypeError:
            raise checks.fail(
                "classes", f"the class key of {task_id!r} must be hashable", key
            ) from None
        return key

    return key_of
