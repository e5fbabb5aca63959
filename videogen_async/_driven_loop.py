"""One event loop shared by the threads that call it, each running it while its own call runs.

What :class:`VideoGen` (``_blocking.py``) runs its calls on. The loop has no thread of its own:
a thread making a call runs the loop itself (it *drives* it) until its call ends, so that a
single caller's call costs no thread hand-off at all (a loop thread costs each call two
wake-ups, one each way, and the caches of two threads: ``bench/sync.py``). Several threads
share the loop as leader and followers: one drives and runs every call handed to the loop; each
other caller waits on a lock of its own, released when its call ends or, when the driver's own
call ends first, to make it the next driver (:meth:`Loop._hand_over`).

Nothing runs on the loop between calls: a gather or a watch polls while its iterator is asked
for the next item. A caller that cannot drive (its thread runs an event loop of its own: a
notebook's, or an ``async def`` calling blocking code) waits while a helper thread drives for
it.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, ParamSpec

from ._client import AsyncVideoGen

_P = ParamSpec("_P")

_FORKED = (
    "this VideoGen client was created in process {parent} and is used in process {child}, a"
    " fork of it: its event loop and its connections belong to the parent. Create the client"
    " in the child, after the fork (Celery: in a worker_process_init handler; gunicorn: in"
    " post_fork or at the first request; multiprocessing: in the worker function)"
)
_ON_LOOP = (
    "a blocking call of a VideoGen client was made while this thread runs that client's event"
    " loop (from a callback such as on_update, on_progress or an event hook, which run there):"
    " it would wait for itself. Make the call from another thread, or await the AsyncVideoGen"
    " call in async code"
)
_CLOSED_WHILE = "this VideoGen client was closed while the call ran"


async def awaited(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``func(*args, **kwargs)`` as a coroutine, its result awaited if it is awaitable."""
    result = func(*args, **kwargs)
    return await result if inspect.isawaitable(result) else result


class _Waiter:
    """One call handed to the loop: its outcome, and how its caller is woken.

    ``lock`` (a follower's, held while it may wait) is released once per wake-up, by a driver
    only: when the call ends (``finished``) or to make the caller drive (``woken``, cleared by
    the caller once it holds the lock again), never twice between two of the caller's waits.
    Plain class attributes, no ``__init__``: one call of Python less per call.
    """

    finished = failed = woken = False
    outcome: Any = None
    lock: threading.Lock | None = None
    task: asyncio.Task[None] | None = None


def _here(func: Callable[..., None], *args: Any) -> None:
    """``func(*args)`` here, or in a thread of its own if this one runs an event loop.

    A thread running a loop (a notebook's, or an ``async def`` calling blocking code) cannot
    run another.
    """
    if asyncio._get_running_loop() is None:
        func(*args)
    else:
        helper = threading.Thread(target=func, args=args, daemon=True)
        helper.start()
        helper.join()


def _close(loop: asyncio.AbstractEventLoop, client: AsyncVideoGen, calls: Iterable[Any]) -> None:
    """Run the calls still running to their end (cancelled), close the client and the loop."""

    async def closing() -> None:
        running = list(calls)
        _cancel(running)
        if running:
            await asyncio.wait(running)
        await client.aclose()
        await loop.shutdown_asyncgens()
        await loop.shutdown_default_executor()

    try:
        loop.run_until_complete(closing())
    finally:
        loop.close()


def _close_dropped(
    pid: int, loop: asyncio.AbstractEventLoop, client: AsyncVideoGen, calls: Iterable[Any]
) -> None:
    """The last handle of an open client is gone, or the interpreter exits: close it.

    Never in a forked child. Nobody drives the loop (a caller keeps its client); a call left
    running (by Ctrl-C) ends first: a create in flight runs to its answer.
    """
    if os.getpid() == pid and not loop.is_closed():
        _here(_close, loop, client, calls)


def _cancel(tasks: Iterable[asyncio.Task[Any]]) -> None:
    for task in list(tasks):
        task.cancel()


class Loop:
    """One event loop, run by the threads whose calls it serves (see the module docstring)."""

    def __init__(self, client: AsyncVideoGen) -> None:
        self.pid = os.getpid()
        self.closed = False
        self._client = client
        self._loop = asyncio.new_event_loop()
        # Held by the thread running the loop; the thread's ident, and the call it drives for.
        self._driving = threading.Lock()
        self._driver = 0
        self._driven: _Waiter | None = None
        # The followers that may wait for the loop, oldest first (a caller may be there more
        # than once, or after its call ended: the hand-over skips those).
        self._waiting: collections.deque[_Waiter] = collections.deque()
        # The calls running on the loop, each with its waiter (used on the loop only).
        self._calls: dict[asyncio.Task[None], _Waiter] = {}
        # Every handle dropped without close(): the client is closed.
        weakref.finalize(self, _close_dropped, self.pid, self._loop, client, self._calls)

    def check(self) -> None:
        """Refuse a call this loop cannot serve, with the cause and the fix."""
        if os.getpid() != self.pid:
            raise RuntimeError(_FORKED.format(parent=self.pid, child=os.getpid()))
        if self.closed:
            raise RuntimeError("this VideoGen client is closed")
        if threading.get_ident() == self._driver:
            raise RuntimeError(_ON_LOOP)

    def run(self, func: Callable[_P, Any], *args: _P.args, **kwargs: _P.kwargs) -> Any:
        """Run ``func(*args, **kwargs)`` on the loop (awaited if awaitable); its outcome here."""
        self.check()
        return self.wait(awaited(func, *args, **kwargs))

    def wait(self, call: Coroutine[Any, Any, Any]) -> Any:
        """Run ``call`` on the loop as a task until it ends; its outcome here.

        The caller made ``call`` after :meth:`check` (a refused call leaves no coroutine
        unawaited). A coroutine runs none of its code when made, so it may be made in the
        caller's thread.
        """
        waiter = _Waiter()
        try:
            if asyncio._get_running_loop() is None and self._driving.acquire(blocking=False):
                self._start(call, waiter)  # nobody drives: no hand-off at all
                self._drive(waiter)
            else:
                _here(self._serve, call, waiter)
        except BaseException:  # e.g. Ctrl-C in this thread: the call stops on the loop too
            if waiter.task is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(waiter.task.cancel)
            raise
        finally:
            if waiter.task is None:  # never started: the loop closed first
                call.close()
        if waiter.finished and not waiter.failed:
            return waiter.outcome
        closed = isinstance(waiter.outcome, asyncio.CancelledError) and self.closed
        if closed or not waiter.finished:  # the loop closed while or before the call ran
            raise RuntimeError(_CLOSED_WHILE) from None
        raise waiter.outcome

    def _serve(self, call: Coroutine[Any, Any, Any], waiter: _Waiter) -> None:
        if self._driving.acquire(blocking=False):  # nobody drives (any more)
            self._start(call, waiter)
            self._drive(waiter)
            return
        waiter.lock = threading.Lock()
        waiter.lock.acquire()
        try:
            self._loop.call_soon_threadsafe(self._start, call, waiter)
        except RuntimeError:  # the loop is closed
            return
        # A follower: wait for the call's end, driving the loop whenever nobody else does.
        while not waiter.finished:
            self._waiting.append(waiter)
            if self._driving.acquire(blocking=False):
                self._drive(waiter)
                return
            waiter.lock.acquire()
            # Woken: the call ended, or the loop is this thread's to drive (``woken`` cleared
            # while it holds the lock, so that the call's end releases it again).
            waiter.woken = False

    def _start(self, call: Coroutine[Any, Any, Any], waiter: _Waiter) -> None:
        if self.closed:  # since the caller's check: the closing may not see this call
            waiter.outcome, waiter.failed = asyncio.CancelledError(), True
            self._finish(waiter)
            return
        waiter.task = task = self._loop.create_task(self._run(call, waiter))
        self._calls[task] = waiter

    async def _run(self, call: Coroutine[Any, Any, Any], waiter: _Waiter) -> None:
        # The call's outcome kept for its caller, its end told at once (a done callback would
        # cost the loop a turn more per call).
        try:
            waiter.outcome = await call
        except BaseException as exc:  # raised to the caller, in its thread
            waiter.outcome, waiter.failed = exc, True
        finally:
            del self._calls[waiter.task]  # type: ignore[arg-type]
            self._finish(waiter)

    def _finish(self, waiter: _Waiter) -> None:
        waiter.finished = True
        if waiter is self._driven:
            self._loop.stop()  # after this turn: the driver's own call has ended
        elif waiter.lock is not None and not waiter.woken:
            waiter.lock.release()

    def _drive(self, waiter: _Waiter) -> None:
        """Run the loop until ``waiter``'s call ends (``_driving`` held), then let it go."""
        self._driver, self._driven = threading.get_ident(), waiter
        try:
            while not waiter.finished and not self.closed:
                self._loop.run_forever()
        finally:
            self._driver, self._driven = 0, None
            try:
                if self.closed:  # closed from a callback: the driver closes
                    self._end()
            finally:
                self._driving.release()
                if self._waiting:
                    self._hand_over()

    def _hand_over(self) -> None:
        """Wake one caller waiting for an unfinished call: it drives next.

        After ``_driving`` is released: a caller that found it held a moment before is in
        ``_waiting`` by then (it adds itself first), and is woken here or by the next driver.
        """
        while self._waiting and self._driving.acquire(blocking=False):
            try:
                while self._waiting:
                    waiter = self._waiting.popleft()
                    if not waiter.finished and not waiter.woken:
                        waiter.woken = True
                        waiter.lock.release()  # type: ignore[union-attr]
                        return
            finally:
                self._driving.release()

    def _end(self) -> None:
        """Close the client and the loop (``_driving`` held); wake every caller still waiting."""
        if not self._loop.is_closed():
            _close(self._loop, self._client, self._calls)
        while self._waiting:  # each one's call never started: the loop ended first
            waiter = self._waiting.popleft()
            if not waiter.finished and not waiter.woken:
                waiter.woken = True
                waiter.lock.release()  # type: ignore[union-attr]

    def close(self) -> None:
        """Cancel the calls still running, close the client and the loop."""
        if self.closed:  # two at once do all twice, harmlessly: no lock needed
            return
        self.closed = True
        if os.getpid() != self.pid:
            return  # a forked child: the loop and its connections are the parent's
        if threading.get_ident() == self._driver:
            _cancel(self._calls)  # on the loop: its driver closes once its call ends
        else:
            _here(self._closing)

    def _closing(self) -> None:
        try:  # a driver's call is cancelled: it lets the loop go
            self._loop.call_soon_threadsafe(_cancel, self._calls)
        except RuntimeError:  # the loop is closed
            return
        with self._driving:
            self._end()
