"""Where the client is observed: event hooks and OpenTelemetry spans around requests and waits.

:class:`RequestObserver` wraps each attempt in the ``request``/``response``/``retry`` hooks and
one ``CLIENT`` span (HTTP client conventions; a retry is a new span with
``http.request.resend_count``); :func:`wait_span` and :func:`observe_gather` span a wait or a
gather. What nothing observes does not run: no hook and no recording span, no observer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from .._contract._exceptions import APIStatusError, WaitTimeoutError
from .._contract._models import GetTask, Project, Task
from .._contract._redact import redact_text, redact_value
from . import _otel
from ._hooks import EventHooks, PollEvent, RequestEvent, ResponseEvent, RetryEvent

# An answer: the transport's response, or the ``APIStatusError`` of a failure the service sent
# (both have ``status_code``, ``trace_id`` and ``headers``).
_R = TypeVar("_R")
_Span = _otel.SpanLike | None
"""A span, or ``None`` where none records."""


class RequestObserver:
    """The hooks and spans of one client's requests."""

    __slots__ = ("_server", "active", "hooks")

    def __init__(self, hooks: EventHooks, server_address: str, server_port: int | None) -> None:
        self.hooks = hooks
        #: Whether a request needs the observer now: a hook is set (a client's hooks are fixed
        #: when it is made: decided here, once), or spans would record (asked per request, so
        #: that a tracer provider set later traces the next request). One call per request,
        #: to ``_otel.recording`` itself when there is no hook.
        self.active: Callable[[], bool] = True.__bool__ if hooks else _otel.recording
        self._server: dict[str, Any] = {"server.address": server_address}
        if server_port is not None:
            self._server["server.port"] = server_port

    async def send(
        self, send: Callable[[], Awaitable[_R]], *, method: str, path: str, url: str, attempt: int
    ) -> _R:
        """Run one attempt under the hooks and a ``CLIENT`` span (``send()`` sends, decodes)."""
        request = RequestEvent(method, path, url, attempt)
        if self.hooks.wants("request"):
            await self.hooks.emit("request", request)
        if not _otel.recording():
            return await self._answer(send, None, request)
        attributes = {
            "http.request.method": method,
            **self._server,
            "url.full": url,
        }
        if attempt > 1:
            attributes["http.request.resend_count"] = attempt - 1
        with _otel.span(method, attributes, client=True) as span:
            return await self._answer(send, span, request)

    async def _answer(
        self, send: Callable[[], Awaitable[_R]], span: _Span, request: RequestEvent
    ) -> _R:
        started = time.monotonic()
        try:
            response = await send()
        except APIStatusError as exc:
            error = type(exc).__name__
            if span is not None:
                _otel.set_error(span, str(exc.status_code or error))
            await self._answered(span, exc, error, started, request)
            raise
        except Exception as exc:
            if span is not None:
                _otel.set_error(span, type(exc).__name__)
            raise
        await self._answered(span, response, None, started, request)
        return response

    async def _answered(
        self,
        span: _Span,
        answer: Any,
        error: str | None,
        started: float,
        request: RequestEvent,
    ) -> None:
        """Record an answer (a success, or a failure the service sent) on the span and hooks."""
        status, trace_id = answer.status_code, answer.trace_id
        if span is not None:
            if status is not None:
                span.set_attribute("http.response.status_code", status)
            if trace_id:
                span.set_attribute("videogen.trace_id", trace_id)
        if status is None or not self.hooks.wants("response"):
            return
        await self.hooks.emit(
            "response",
            ResponseEvent(
                request.method,
                request.path,
                request.url,
                request.attempt,
                status,
                None if trace_id is None else redact_text(trace_id),
                time.monotonic() - started,
                redact_value(dict(answer.headers.items())),
                error,
            ),
        )

    async def retry(
        self, method: str, path: str, attempt: int, delay: float, exc: BaseException
    ) -> None:
        """Tell the ``retry`` hooks that ``attempt`` failed with ``exc`` and is retried."""
        if not self.hooks.wants("retry"):
            return
        error, trace = type(exc).__name__, getattr(exc, "trace_id", None)
        trace = redact_text(trace) if isinstance(trace, str) else None
        await self.hooks.emit(
            "retry",
            RetryEvent(
                method,
                path,
                attempt,
                delay,
                redact_text(f"{error}: {exc}"),
                error,
                exc.status_code if isinstance(exc, APIStatusError) else None,
                trace,
            ),
        )


def poll_event(value: Task | Project, *, is_terminal: bool) -> PollEvent:
    """The ``poll`` hook's event for a task or project just read."""
    step = value.current_step if isinstance(value, Project) else None
    return PollEvent(
        "project" if isinstance(value, Project) else "task",
        value.project_id if isinstance(value, Project) else value.task_id,
        str(value.status),
        None if step is None else str(step),
        is_terminal,
        value._request_id,
    )


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, WaitTimeoutError):
        return "timeout"
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return "cancelled"
    return "error"


@contextmanager
def _waiting_span(name: str, attributes: dict[str, Any]) -> Iterator[_Span]:
    """The span of a wait or a gather (``None`` when spans would not record).

    An exception leaving it sets its outcome: ``timeout``, ``cancelled`` or ``error``.
    """
    if not _otel.recording():
        yield None
        return
    with _otel.span(name, attributes) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("videogen.outcome", _outcome(exc))
            raise


def wait_span(kind: str, object_id: str) -> AbstractContextManager[_Span]:
    """The span (or ``None``) of a single wait: of a ``task``, a ``project`` or a ``script``.

    The caller sets the outcome with :func:`end_wait`.
    """
    return _waiting_span(
        f"videogen.wait {kind}",
        {"videogen.wait.kind": kind, "videogen.id": object_id, "videogen.ids.count": 1},
    )


def end_wait(span: _Span, value: Task | Project) -> None:
    """Record a finished wait's outcome (the final status) and credits on its span."""
    if span is None:
        return
    span.set_attribute(
        "videogen.credits_charged",
        value.billing.total_credits_cost if isinstance(value, Project) else value.credits_cost,
    )
    span.set_attribute("videogen.outcome", str(value.status))


class GatherWatch:
    """What a gather reports of itself: its poll hooks, and the span's credits and outcome."""

    def __init__(
        self,
        fetch: GetTask,
        hooks: EventHooks | None,
        span: _Span,
    ) -> None:
        self._inner = fetch
        self._hooks = hooks if hooks is not None and hooks.wants("poll") else None
        self._span = span
        self._credits: dict[str, float] = {}
        #: What the gather polls through (``fetch`` itself when nothing observes it).
        self.fetch = self._observed if self._hooks is not None or span is not None else fetch

    async def _observed(self, task_id: str) -> Task:
        task = await self._inner(task_id)
        terminal = task.is_terminal
        if terminal and self._span is not None:
            self._credits[task_id] = task.credits_cost
        if self._hooks is not None:
            await self._hooks.emit("poll", poll_event(task, is_terminal=terminal))
        return task

    def done(
        self, *, succeeded: int, failed: int, errors: int, fatal: BaseException | None
    ) -> None:
        """Record the gather's counts, credits and outcome on its span."""
        span = self._span
        if span is None:
            return
        span.set_attribute("videogen.credits_charged", sum(self._credits.values()))
        span.set_attribute("videogen.succeeded", succeeded)
        span.set_attribute("videogen.failed", failed)
        span.set_attribute("videogen.errors", errors)
        if fatal is not None:
            span.set_attribute("videogen.outcome", _outcome(fatal))
            _otel.set_error(span, type(fatal).__name__)
        else:
            span.set_attribute("videogen.outcome", "completed" if not errors else "partial")


@contextmanager
def observe_gather(fetch: GetTask, hooks: EventHooks | None, count: int) -> Iterator[GatherWatch]:
    """One span around the polling of a gather of ``count`` ids, and its ``poll`` hooks.

    The gather polls through the watch's ``fetch`` (its own read, observed) and calls its
    ``done`` at the end.
    """
    with _waiting_span("videogen.gather", {"videogen.ids.count": count}) as span:
        yield GatherWatch(fetch, hooks, span)
