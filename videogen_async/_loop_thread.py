"""A loop thread: one event loop in one daemon thread, serving calls made in other threads.

What :class:`VideoGen` (``_blocking.py``) runs its calls on. A call is handed over by one
``call_soon_threadsafe`` that starts its task, whose done callback releases the caller's lock
(see :meth:`Loop.wait`; an anyio portal costs two round trips, and
``asyncio.run_coroutine_threadsafe`` a future more per call: ``bench/sync.py``). The thread is
ours so that it can be told to stop without a join: by a finalizer (maybe on the loop's own
thread), never in a forked child, which has no such thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, ParamSpec

from ._client import AsyncVideoGen

_P = ParamSpec("_P")
_Started = concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]]

_FORKED = (
    "this VideoGen client was created in process {parent} and is used in process {child}, a"
    " fork of it: its event loop thread and its connections exist only in the parent. Create"
    " the client in the child, after the fork (Celery: in a worker_process_init handler;"
    " gunicorn: in post_fork or at the first request; multiprocessing: in the worker function)"
)
_ON_LOOP = (
    "a blocking call of a VideoGen client was made on that client's own event loop thread"
    " (from a callback such as on_update, on_progress or an event hook, which run there):"
    " it would wait for itself. Make the call from another thread, or await the AsyncVideoGen"
    " call in async code"
)
_CLOSED_WHILE = "this VideoGen client was closed while the call ran"


async def _serve(client: AsyncVideoGen, started: _Started) -> None:
    """The loop thread's main task: wait until asked to stop, then close the client."""
    stop = asyncio.Event()
    started.set_result((asyncio.get_running_loop(), stop))
    await stop.wait()
    await client.aclose()


class _Handed(set[threading.Lock]):
    """The callers' locks of the calls handed to a loop and not finished; ``ended`` once it is.

    Shared by the loop's thread and its :class:`Loop`, not the Loop itself: the thread must not
    keep its Loop alive (the Loop's finalizer stops the thread).
    """

    ended = False

    def end(self) -> None:
        """The loop has ended: release every caller still waiting (its hand-off dropped)."""
        self.ended = True
        while self:
            self.pop().release()


def _run(client: AsyncVideoGen, started: _Started, handed: _Handed) -> None:
    try:
        asyncio.run(_serve(client, started))
    except BaseException as exc:
        if started.done():
            raise
        started.set_exception(exc)
    finally:
        handed.end()


def _request_stop(pid: int, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Ask the loop to close the client and end (from any thread; never waits)."""
    if os.getpid() == pid:
        with contextlib.suppress(RuntimeError):  # the loop has ended already
            loop.call_soon_threadsafe(stop.set)


async def awaited(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` as a coroutine, its result awaited if it is awaitable."""
    result = func(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


def _cancel(tasks: Iterable[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()


class Loop:
    """One event loop in one daemon thread, and the calls handed to it from other threads."""

    def __init__(self, client: AsyncVideoGen) -> None:
        self.pid = os.getpid()
        self.closed = False
        # The calls running on the loop, each with its caller's lock (used there only).
        self._calls: dict[asyncio.Task[Any], threading.Lock] = {}
        self._handed = _Handed()
        started: _Started = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=_run,
            args=(client, started, self._handed),
            name="videogen-async-loop",
            daemon=True,
        )
        self._thread.start()
        self._loop, stop = started.result()
        self._stop = functools.partial(_request_stop, self.pid, self._loop, stop)
        # Every handle dropped without close(): the loop closes the client and ends.
        weakref.finalize(self, self._stop)

    def check(self) -> None:
        """Refuse a call this loop cannot serve, with the cause and the fix."""
        if os.getpid() != self.pid:
            raise RuntimeError(_FORKED.format(parent=self.pid, child=os.getpid()))
        if self.closed:
            raise RuntimeError("this VideoGen client is closed")
        if threading.get_ident() == self._thread.ident:
            raise RuntimeError(_ON_LOOP)

    def run(self, func: Callable[_P, Any], *args: _P.args, **kwargs: _P.kwargs) -> Any:
        """Run ``func(*args, **kwargs)`` on the loop (awaited if awaitable); its outcome here."""
        self.check()
        return self.wait(awaited(func, *args, **kwargs))

    def wait(self, call: Coroutine[Any, Any, Any]) -> Any:
        """Hand ``call`` to the loop as a task and block until it ends; its outcome here.

        The caller made ``call`` after :meth:`check` (a refused call leaves no coroutine
        unawaited). A coroutine runs none of its code when made, so it may be made in the
        caller's thread: the loop then steps one coroutine less than through ``awaited``.

        Not ``asyncio.run_coroutine_threadsafe``: the future it chains to the task costs a
        second done callback, a condition and a lock per call. The task's one done callback
        releases the caller's plain lock (a future's condition would wake the caller twice);
        the caller then reads the task's outcome, which no longer changes.
        """
        done = threading.Lock()
        done.acquire()
        made: list[asyncio.Task[Any]] = []
        # A close() in another thread may end the loop after this call's check: before this
        # hand-off (refused: the loop is closed) or before the loop ran it (dropped with the
        # loop). The loop's end releases every lock handed and not released by a call's end:
        # a caller never waits for ever (and pays no timed wait for it).
        self._handed.add(done)
        try:  # noqa: SIM105 - contextlib.suppress costs each call three calls more
            self._loop.call_soon_threadsafe(self._start, call, done, made)
        except RuntimeError:  # the loop is closed
            pass
        try:
            if not self._handed.ended:  # ended: its release may have come before the add
                done.acquire()
        except BaseException:  # e.g. Ctrl-C in this thread: the call stops on the loop too
            with contextlib.suppress(RuntimeError):  # the loop has ended: nothing runs there
                self._loop.call_soon_threadsafe(_cancel, made)
            raise
        finally:
            if not made and self._handed.ended:  # never started: the loop ended
                call.close()
        if not made or not made[0].done():  # the loop ended before the call did
            raise RuntimeError(_CLOSED_WHILE)
        try:
            return made[0].result()
        except asyncio.CancelledError:
            if not self.closed:
                raise
            raise RuntimeError(_CLOSED_WHILE) from None

    def _start(
        self, call: Coroutine[Any, Any, Any], done: threading.Lock, made: list[asyncio.Task[Any]]
    ) -> None:
        task = self._loop.create_task(call)
        made.append(task)
        self._calls[task] = done
        # One callback, not one per duty: each is a handle the loop makes and runs.
        task.add_done_callback(self._finish)
        if self.closed:  # since the caller's check: close() may not have seen this call
            task.cancel()

    def _finish(self, task: asyncio.Task[Any]) -> None:
        done = self._calls.pop(task)
        self._handed.discard(done)
        done.release()

    def close(self) -> None:
        """Cancel the calls still running, close the client, end the loop and its thread."""
        if self.closed:  # two at once do all twice, harmlessly: no lock needed
            return
        self.closed = True
        if os.getpid() != self.pid:
            return  # a forked child: the thread and the loop are the parent's
        with contextlib.suppress(RuntimeError):  # ahead of the client's aclose(), below
            self._loop.call_soon_threadsafe(_cancel, self._calls)
        self._stop()
        if threading.get_ident() != self._thread.ident:
            self._thread.join()
