"""``VideoGen``: the blocking client, a thin layer over :class:`AsyncVideoGen`.

One event loop, run by the calling threads, runs each call (``_driven_loop.Loop``); the
caller blocks until its answer. Each blocking call wraps its async call
(``create = _blocking(Tasks.create)``), docstring included.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from ._client import AsyncVideoGen
from ._contract._exceptions import ConfigurationError, TaskPollError
from ._contract._meta import HasResponse
from ._contract._models import Task
from ._driven_loop import Loop, awaited
from ._resources._credits import Credits
from ._resources._projects import Projects
from ._resources._raw import RawResponse
from ._resources._tasks import Tasks
from ._waiting._gather import GatherResults
from ._waiting._progress import GatherProgress

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._resources._tasks import GatherCallOptions

_P = ParamSpec("_P")
_T = TypeVar("_T")
_Item = TypeVar("_Item", bound="Task | TaskPollError")
_R = TypeVar("_R", bound=HasResponse)
_Self = TypeVar("_Self", bound="BlockingIterator[Any]")

_END = object()  # what an async iterator's anext() gives at its end, here


class _Namespace:
    """What a blocking namespace holds: the loop and the async object it runs calls of."""

    def __init__(self, loop: Loop, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __repr__(self) -> str:
        return f"<blocking {self._target!r}>"


class _Call(Generic[_P, _T]):
    """A call of a blocking namespace: the same-named call of its async object, on the loop."""

    def __init__(self, name: str, wrap: Callable[[Loop, Any], Any] | None = None) -> None:
        self._name = name
        self._wrap = wrap

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self._name:
            raise TypeError(f"{owner.__name__}.{name} would run {self._name}")

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _Call[_P, _T]: ...

    @overload
    def __get__(self, obj: _Namespace, owner: type | None = None) -> Callable[_P, _T]: ...

    def __get__(self, obj: _Namespace | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        target = getattr(obj._target, self._name)
        loop, wrap = obj._loop, self._wrap
        # A coroutine function's own coroutine is the call's task: one frame less on the loop.
        make = target if inspect.iscoroutinefunction(target) else functools.partial(awaited, target)

        @functools.wraps(target)
        def call(*args: Any, **kwargs: Any) -> Any:
            loop.check()
            result = loop.wait(make(*args, **kwargs))
            return result if wrap is None else wrap(loop, result)

        obj.__dict__[self._name] = call  # found there from now on, before this descriptor
        return call


def _blocking(method: Callable[Concatenate[Any, _P], Awaitable[_T]]) -> _Call[_P, _T]:
    """The blocking form of a coroutine method: its signature, its result."""
    return _Call(method.__name__)


def _sync(method: Callable[Concatenate[Any, _P], _T]) -> _Call[_P, _T]:
    """A plain method of an object that lives on the loop, called there."""
    return _Call(method.__name__)


def _raw(method: Callable[Concatenate[Any, _P], Awaitable[_R]]) -> _Call[_P, RawResponse[_R]]:
    """The blocking form of a ``with_raw_response`` call."""
    return _Call(method.__name__)


def _iterating(
    method: Callable[Concatenate[Any, _P], AsyncIterator[_T]],
) -> _Call[_P, BlockingIterator[_T]]:
    """The blocking form of a method returning an async iterator: a plain iterator."""
    return _Call(method.__name__, BlockingIterator)


class BlockingIterator(_Namespace, Iterator[_T]):
    """An async iterator of the client, iterated from a blocking thread.

    Also a context manager: leaving the ``with`` block (or :meth:`close`) stops what the
    iterator runs on the client's loop, and waits until nothing of it is left running.
    """

    def __init__(self, loop: Loop, iterator: AsyncIterator[_T]) -> None:
        super().__init__(loop, iterator)
        self._done = False

    def __next__(self) -> _T:
        if self._done:
            raise StopIteration
        item: _T = self._loop.run(anext, self._target, _END)
        if item is _END:
            self._done = True
            raise StopIteration
        return item

    def close(self) -> None:
        """Stop the iteration and what it runs on the loop. Idempotent."""
        if self._done:
            return
        self._done = True
        aclose = getattr(self._target, "aclose", None)
        if aclose is not None and not self._loop.closed and os.getpid() == self._loop.pid:
            self._loop.run(aclose)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class BlockingGather(BlockingIterator[_Item]):
    """``client.tasks.gather_until_done(...)`` of :class:`VideoGen`: a plain iterator.

    The same as :class:`~videogen_async.GatherResults`, iterated with ``for``::

        with client.tasks.gather_until_done(ids, timeout=600) as results:
            for task in results:
                print(task.task_id, task.status)
    """

    add = _sync(GatherResults.add)
    discard = _sync(GatherResults.discard)
    end_input = _sync(GatherResults.end_input)

    @property
    def progress(self) -> GatherProgress:
        """A snapshot of the progress so far."""
        progress: GatherProgress = self._loop.run(getattr, self._target, "progress")
        return progress


class BlockingTasks(_Namespace):
    """``client.tasks`` of :class:`VideoGen`: the calls of ``AsyncVideoGen().tasks``."""

    with_raw_response: _RawTasks

    create = _blocking(Tasks.create)
    get = _blocking(Tasks.get)
    wait = _blocking(Tasks.wait)
    watch = _iterating(Tasks.watch)
    if TYPE_CHECKING:  # the overloads of Tasks.gather_until_done: Task, or with errors

        @overload
        def gather_until_done(
            self,
            task_ids: Iterable[str],
            *,
            return_exceptions: Literal[False] = False,
            **options: Unpack[GatherCallOptions],
        ) -> BlockingGather[Task]: ...

        @overload
        def gather_until_done(
            self,
            task_ids: Iterable[str],
            *,
            return_exceptions: bool,
            **options: Unpack[GatherCallOptions],
        ) -> BlockingGather[Task | TaskPollError]: ...

        def gather_until_done(self, *args: Any, **kwargs: Any) -> Any: ...
    else:
        gather_until_done = _Call("gather_until_done", BlockingGather)


class BlockingProjects(_Namespace):
    """``client.projects`` of :class:`VideoGen`: the calls of ``AsyncVideoGen().projects``."""

    with_raw_response: _RawProjects

    create = _blocking(Projects.create)
    get = _blocking(Projects.get)
    create_videos = _blocking(Projects.create_videos)
    wait_for_script = _blocking(Projects.wait_for_script)
    wait = _blocking(Projects.wait)


class BlockingCredits(_Namespace):
    """``client.credits`` of :class:`VideoGen`."""

    with_raw_response: _RawCredits

    get = _blocking(Credits.get)


class _RawTasks(_Namespace):
    create = _raw(Tasks.create)
    get = _raw(Tasks.get)


class _RawProjects(_Namespace):
    create = _raw(Projects.create)
    get = _raw(Projects.get)
    create_videos = _raw(Projects.create_videos)


class _RawCredits(_Namespace):
    get = _raw(Credits.get)


class _RawResponses:
    """``client.with_raw_response`` of :class:`VideoGen`, each namespace's own too."""

    def __init__(self, loop: Loop, raw: Any, client: VideoGen) -> None:
        self.tasks = client.tasks.with_raw_response = _RawTasks(loop, raw.tasks)
        self.projects = client.projects.with_raw_response = _RawProjects(loop, raw.projects)
        self.credits = client.credits.with_raw_response = _RawCredits(loop, raw.credits)


class _Attribute(Generic[_T]):
    """A read-only attribute of :class:`VideoGen`: the same-named one of its async client."""

    def __init__(self, attribute: Callable[[AsyncVideoGen], _T]) -> None:
        self.__doc__ = attribute.__doc__  # the async client's property: its type and its doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _Attribute[_T]: ...

    @overload
    def __get__(self, obj: VideoGen, owner: type | None = None) -> _T: ...

    def __get__(self, obj: VideoGen | None, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj._target, self._name)


def _arguments_of(
    init: Callable[Concatenate[Any, _P], None], *, but: str
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, _P], None]]:
    """Give a constructor the parameters of ``init``: their types, and their signature but one.

    Type checkers still see the one left out: the constructor refuses it.
    """
    signature = inspect.signature(init)
    kept = [p for p in signature.parameters.values() if p.name != but]
    shown = signature.replace(parameters=kept)

    def same(method: Callable[..., None]) -> Callable[Concatenate[Any, _P], None]:
        method.__dict__["__signature__"] = shown
        return method

    return same


def _view(loop: Loop, client: AsyncVideoGen) -> VideoGen:
    view = VideoGen.__new__(VideoGen)
    view._attach(loop, client, owns_loop=False)
    return view


def _viewing(method: Callable[Concatenate[Any, _P], AsyncVideoGen]) -> _Call[_P, VideoGen]:
    return _Call(method.__name__, _view)


class VideoGen(_Namespace):
    """The blocking client of the video generation service.

    The same namespaces, calls, results and errors as :class:`AsyncVideoGen`, for code that
    is not async (a Django or Flask view, a Celery task, a script, a notebook)::

        with VideoGen() as client:
            created = client.tasks.create("a paper boat")
            task = client.tasks.wait(created.task_id, timeout=600)

    Thread-safe, but cannot cross a ``fork``. Callbacks run on its loop, in a calling thread:
    keep them quick and never call the client from them. Takes :class:`AsyncVideoGen`'s
    arguments but ``session``. See docs/sync.md.

    Raises:
        ConfigurationError: The key or base URL is missing or invalid, or a ``session`` was
            given.
    """

    @_arguments_of(AsyncVideoGen.__init__, but="session")
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "session" in kwargs:
            raise ConfigurationError(
                "VideoGen takes no session: an aiohttp session belongs to an event loop, and"
                " the blocking client's loop is its own"
            )
        client = AsyncVideoGen(*args, **kwargs)
        self._attach(Loop(client), client, owns_loop=True)

    def _attach(self, loop: Loop, client: AsyncVideoGen, *, owns_loop: bool) -> None:
        super().__init__(loop, client)
        self._owns_loop = owns_loop
        self.tasks = BlockingTasks(loop, client.tasks)
        self.projects = BlockingProjects(loop, client.projects)
        self.credits = BlockingCredits(loop, client.credits)
        #: The same calls, each returning a :class:`RawResponse`.
        self.with_raw_response = _RawResponses(loop, client.with_raw_response, self)

    download = _blocking(AsyncVideoGen.download)
    download_many = _blocking(AsyncVideoGen.download_many)
    with_options = _viewing(AsyncVideoGen.with_options)

    def __repr__(self) -> str:
        return repr(self._target).replace("AsyncVideoGen", "VideoGen", 1)

    base_url = _Attribute(AsyncVideoGen.base_url)
    timeout = _Attribute(AsyncVideoGen.timeout)
    deadline = _Attribute(AsyncVideoGen.deadline)
    max_retries = _Attribute(AsyncVideoGen.max_retries)
    poll_policy = _Attribute(AsyncVideoGen.poll_policy)
    backoff = _Attribute(AsyncVideoGen.backoff)
    finish_times = _Attribute(AsyncVideoGen.finish_times)

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` was called (on this client or the one it was made from)."""
        return self._loop.closed

    def close(self) -> None:
        """Close the client: its connections and its loop. Idempotent.

        Calls still running in other threads end with ``RuntimeError``; a create in flight
        runs to its answer first (as :meth:`AsyncVideoGen.aclose` lets it). A view made by
        :meth:`with_options` is closed with its client; its own ``close()`` does nothing.
        """
        if self._owns_loop:
            self._loop.close()

    def __enter__(self) -> VideoGen:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
