"""Event hooks: what the client tells its observers, in httpx's ``event_hooks`` style.

A hook is a plain or ``async`` callable taking one event (awaited in line: keep it quick).
Events never carry the API key (no request headers; answers redacted). Unlike httpx, a hook
that raises is logged and the client goes on: hooks run inside calls that must keep their
promises. A cancellation propagates. See ``docs/observability.md``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Union

import attrs

from .._contract._exceptions import ConfigurationError

logger = logging.getLogger("videogen_async")

#: The events a client emits.
EVENT_NAMES = ("request", "response", "retry", "poll")


@attrs.frozen
class RequestEvent:
    """An attempt of a request is about to be sent.

    Attributes:
        method: ``GET`` or ``POST``.
        path: The path under the base URL, e.g. ``/v1/tasks``.
        url: The full URL (the key is never in it: it travels in a header).
        attempt: 1 for the first attempt, 2 for the first retry, ...
    """

    method: str
    path: str
    url: str
    attempt: int


@attrs.frozen
class ResponseEvent:
    """An answer to an attempt was received (a success or a failure the service sent).

    Attributes:
        method: The request's method.
        path: The request's path.
        url: The request's URL.
        attempt: The attempt answered.
        status_code: The HTTP status.
        trace_id: The envelope's ``trace_id`` (redacted), if any.
        elapsed: Seconds the attempt took.
        headers: The response headers (redacted).
        error: The error's class name when the answer is a failure, else ``None``.
    """

    method: str
    path: str
    url: str
    attempt: int
    status_code: int
    trace_id: str | None
    elapsed: float
    headers: Mapping[str, str] = attrs.field(repr=False)
    error: str | None = None


@attrs.frozen
class RetryEvent:
    """An attempt failed and the request will be sent again after ``delay`` seconds.

    Attributes:
        method: The request's method.
        path: The request's path.
        attempt: The attempt that failed.
        delay: Seconds until the next attempt.
        reason: Why (the error's class and text, never the key).
        error: The error's class name.
        status_code: The HTTP status of the failed attempt, if it was answered.
        trace_id: The failed answer's ``trace_id``, if any.
    """

    method: str
    path: str
    attempt: int
    delay: float
    reason: str
    error: str
    status_code: int | None = None
    trace_id: str | None = None


@attrs.frozen
class PollEvent:
    """A wait or a gather read the state of what it waits for.

    Attributes:
        kind: ``"task"`` or ``"project"``.
        id: The task's or project's id.
        status: Its status.
        current_step: A project's step (``None`` for a task).
        is_terminal: Whether the wait or gather is done with it.
        trace_id: The ``trace_id`` of the answer, if any.
    """

    kind: Literal["task", "project"]
    id: str
    status: str
    current_step: str | None = None
    is_terminal: bool = False
    trace_id: str | None = None


Event = Union[RequestEvent, ResponseEvent, RetryEvent, PollEvent]  # noqa: UP007
#: A hook: a plain or async callable taking one event.
EventHook = Callable[[Any], Union[Awaitable[object], object]]  # noqa: UP007


class EventHooks:
    """The checked hooks of one client (shared by its ``with_options`` views)."""

    __slots__ = ("_hooks",)

    def __init__(self, hooks: Mapping[str, Sequence[EventHook]] | None = None) -> None:
        checked = {}
        for name, callables in (hooks or {}).items():
            if name not in EVENT_NAMES:
                raise ConfigurationError(
                    f"event_hooks: unknown event {name!r}; the events are {', '.join(EVENT_NAMES)}"
                )
            # A bare callable is refused too: the list is what lets a second hook join later.
            if not isinstance(callables, (list, tuple)) or not all(map(callable, callables)):
                raise ConfigurationError(
                    f"event_hooks[{name!r}] must be a list of callables, got {callables!r}"
                )
            if callables:
                checked[name] = tuple(callables)
        self._hooks = checked

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def wants(self, name: str) -> bool:
        """Whether any hook listens to ``name``."""
        return name in self._hooks

    async def emit(self, name: str, event: Event) -> None:
        """Call every hook of ``name`` with ``event``; one that raises is logged and skipped."""
        for hook in self._hooks.get(name, ()):
            try:
                result = hook(event)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception(
                    "the %s event hook %s raised; the client goes on",
                    name,
                    getattr(hook, "__qualname__", None) or type(hook).__name__,
                )
