"""One event loop shared by the threads that call it, each running it while its own call runs.

What :class:`VideoGen` (``_blocking.py``) runs its calls on. The loop has no thread of its own:
a thread making a call runs the loop itself (it *drives* it) until its call ends, so that a
single caller's call costs no thread hand-off at all (a loop thread costs each call two
wake-ups, one each way, and the caches of two threads: ``bench/sync.py``). Several threads
share the loop as leader and followers: one drives and runs every call handed to the loop; each
other caller parks on a lock of its own, released when its call ends or, when the driver's own
call ends first, to make it the next driver (:meth:`Loop._follow`).

Who drives, who is parked and whose call ended are decided under one mutex (``_mutex``), and a
parked caller is woken only by the thread that takes it off the list (``_unpark``): each park
has exactly one wake-up, and a caller that leaves (an exception) passes on a wake-up it may
have been given, so the loop is never left without a driver while a call waits.

Nothing runs on the loop between calls: a gather or a watch polls while its iterator is asked
for the next item. A caller that cannot drive (its thread runs an event loop of its own: a
notebook's, or an ``async def`` calling blocking code) waits while a helper thread drives for
it.
"""

from __future__ import annotations

# signal's C module: signal's wrappers (enums) cost 6 us per call, these 0.4 us (no stubs).
import _signal  # type: ignore[import-not-found]
import asyncio
import collections
import contextlib
import functools
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterable
from types import FrameType
from typing import Any, ParamSpec

from ._client import AsyncVideoGen

_P = ParamSpec("_P")
_SIGINT = int(_signal.SIGINT)

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
    # No call of Python code between the two (``inspect.isawaitable`` is some): a second
    # Ctrl-C raised there would leave ``result`` never awaited.
    return await result if hasattr(result, "__await__") else result


class _Waiter:
    """One call handed to the loop: its outcome, and how its caller is woken.

    ``lock`` (a follower's, held by it) is released once per park, by whoever unparks it
    (``parked``, both under the loop's mutex): when its call ends, or to make it drive. Plain
    class attributes, no ``__init__``: one call of Python less per call.
    """

    finished = failed = parked = interrupted = False
    # The thread a second Ctrl-C came to (``quit``: the main thread's ident), and the thread
    # parked, where one raises at once (``parking``); 0: none. A helper thread calling for
    # the main thread (``_here``) is neither.
    quit = parking = 0
    outcome: Any = None
    lock: threading.Lock
    task: asyncio.Task[None] | None = None


def _here(func: Callable[..., None], *args: Any, wait: bool = True) -> None:
    """``func(*args)`` here, or in a thread of its own if this one runs an event loop.

    A thread running a loop (a notebook's, or an ``async def`` calling blocking code) cannot
    run another.
    """
    if asyncio._get_running_loop() is None:
        func(*args)
        return
    helper = threading.Thread(target=func, args=args, name="videogen-async", daemon=True)
    helper.start()
    if wait:
        helper.join()


def _leaves_whole(frame: FrameType | None, waiter: _Waiter) -> bool:
    """Whether an exception raised in ``frame`` leaves the hand-over between threads whole.

    So it does in the code of ``waiter``'s own call (below its ``_run``, which keeps it as the
    call's outcome) and between the statements that start a helper thread and wait for it
    (``_here``); not in this module's other statements (who drives, who is parked), in
    another call's code, in the loop's own nor in ``threading``'s.
    """
    below = False
    while frame is not None:
        code = frame.f_code
        # This module's code, but for ``awaited`` below it (the call's own): the innermost
        # statement is ``_here``'s (not a thread's start or join), or the call runs below.
        if code.co_filename == __file__ and not (below and code is awaited.__code__):
            if below:
                return code is Loop._run.__code__ and frame.f_locals.get("waiter") is waiter
            return code is _here.__code__
        below, frame = True, frame.f_back
    return False


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
    running (by Ctrl-C) ends first: a create in flight runs to its answer. In a thread running
    an event loop (the garbage collector runs finalizers anywhere), a thread of its own closes
    it, not waited for: that loop is not to be blocked.
    """
    if os.getpid() == pid and not loop.is_closed():
        _here(_close, loop, client, calls, wait=False)


def _stop(waiter: _Waiter) -> None:
    if waiter.task is not None:
        _cancel([waiter.task])


def _cancel(tasks: Iterable[asyncio.Task[Any]]) -> None:
    # Each a turn later: a task cancelled before its first step never runs ``_run``, whose
    # ``finally`` tells the caller that its call ended (it would wait for ever).
    for task in list(tasks):
        task.get_loop().call_soon(task.cancel)


class Loop:
    """One event loop, run by the threads whose calls it serves (see the module docstring)."""

    def __init__(self, client: AsyncVideoGen) -> None:
        self.pid = os.getpid()
        self.closed = False
        self._client = client
        self._loop = asyncio.new_event_loop()
        # Guards ``_busy`` (a thread drives the loop), ``_parked`` and each follower's
        # ``parked`` and ``finished``.
        self._mutex = threading.Lock()
        self._busy = False
        # The thread driving the loop, and the call it drives for (that thread's only).
        self._driver = 0
        self._driven: _Waiter | None = None
        # The parked followers, oldest first (and entries of callers no longer parked, skipped).
        self._parked: collections.deque[_Waiter] = collections.deque()
        # Each call's coroutine until ``_start`` or its caller, leaving first, takes it (a
        # dict's pop: exactly one of two threads gets it): the one that runs or closes it.
        self._unstarted: dict[_Waiter, Coroutine[Any, Any, Any]] = {}
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
        self._unstarted[waiter] = call
        # Ctrl-C in the main thread cancels the call, as asyncio.run does, and is raised once
        # the call ended: raised inside whatever the loop runs, it could end a create in
        # flight before its answer (its id). A second Ctrl-C is raised where that leaves the
        # hand-over whole (``_on_sigint``).
        sigint = _signal.getsignal(_SIGINT) is _signal.default_int_handler and (
            threading.current_thread() is threading.main_thread()
        )
        if sigint:
            _signal.signal(_SIGINT, functools.partial(self._on_sigint, waiter))
        try:
            _here(self._serve, waiter)
        except BaseException:  # e.g. a second Ctrl-C: the call stops on the loop too
            self._on_sigint(waiter)
            raise
        finally:
            if sigint:
                _signal.signal(_SIGINT, _signal.default_int_handler)
            if unstarted := self._unstarted.pop(waiter, None):
                unstarted.close()  # left before the loop had it
        if waiter.interrupted:
            raise KeyboardInterrupt
        if waiter.finished and not waiter.failed:
            return waiter.outcome
        closed = isinstance(waiter.outcome, asyncio.CancelledError) and self.closed
        if closed or not waiter.finished:  # the loop closed while or before the call ran
            raise RuntimeError(_CLOSED_WHILE) from None
        raise waiter.outcome

    def _serve(self, waiter: _Waiter) -> None:
        with self._mutex:
            idle, self._busy = not self._busy, True
        if idle:  # nobody drives: this thread does, with no hand-off at all
            self._start(waiter)
            self._drive(waiter)
            return
        try:
            self._loop.call_soon_threadsafe(self._start, waiter)
        except RuntimeError:  # the loop is closed
            return
        if self._follow(waiter):
            self._drive(waiter)

    def _follow(self, waiter: _Waiter) -> bool:
        """Park until ``waiter``'s call ends (False) or the loop is this thread's to drive."""
        mutex = self._mutex
        lock = waiter.lock = threading.Lock()
        lock.acquire()  # released by whoever unparks it
        try:
            while True:
                with mutex:
                    if waiter.finished:
                        return False
                    if not self._busy:
                        self._busy = True
                        return True
                    waiter.parked = True
                    self._parked.append(waiter)
                waiter.parking = threading.get_ident()  # from here a second Ctrl-C raises
                if waiter.quit == waiter.parking:  # it came before
                    waiter.parking = 0
                    raise KeyboardInterrupt  # noqa: TRY301 - handed over as any other would be
                lock.acquire()
                waiter.parking = 0
        except BaseException:  # e.g. Ctrl-C twice: it leaves, and passes on a wake-up it had
            waiter.parking = 0
            with mutex:
                waiter.parked = False
                if not self._busy:
                    self._wake_next()
            raise

    def _unpark(self, waiter: _Waiter) -> None:
        """Wake ``waiter``'s caller if it is parked (``_mutex`` held): once per park."""
        if waiter.parked:
            waiter.parked = False
            waiter.lock.release()

    def _wake_next(self) -> None:
        """Wake the oldest parked caller, if any (``_mutex`` held): it drives next."""
        while self._parked:
            waiter = self._parked.popleft()
            if waiter.parked:
                self._unpark(waiter)
                return

    def _on_sigint(self, waiter: _Waiter, _: int = 0, frame: FrameType | None = None) -> None:
        """Ctrl-C during ``waiter``'s call: the first cancels the call, a second raises.

        The first (or the caller leaving by an exception) cancels it on the loop (``_stop``,
        after ``_start``).

        A handler runs between any two statements of the main thread, and an exception
        raised between two statements of the hand-over (who drives, who is parked) would
        leave the other threads' calls without a driver. So a second Ctrl-C raises at once
        where the thread waits parked or runs its call's own code (:func:`_leaves_whole`);
        anywhere else once the loop's turn ends (``_drive``), or as the thread parks.
        """
        if not waiter.interrupted:
            waiter.interrupted = True
            with contextlib.suppress(RuntimeError):  # the loop is closed: so is the call
                self._loop.call_soon_threadsafe(_stop, waiter)
            return
        waiter.quit = main = threading.get_ident()
        if waiter.parking == main or _leaves_whole(frame, waiter):
            waiter.parking = 0
            raise KeyboardInterrupt
        if self._driver == main:  # the loop stops after this turn
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _start(self, waiter: _Waiter) -> None:
        call = self._unstarted.pop(waiter, None)
        # Since the caller's check: not to be run (a caller that left took it: a helper
        # thread may still wait for it).
        if call is None or self.closed or waiter.interrupted:
            waiter.outcome, waiter.failed = asyncio.CancelledError(), True
            if call is not None:
                call.close()
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
        with self._mutex:
            waiter.finished = True
            self._unpark(waiter)
        if waiter is self._driven:
            self._loop.stop()  # after this turn: the driver's own call has ended

    def _drive(self, waiter: _Waiter) -> None:
        """Run the loop until ``waiter``'s call ends (``_busy`` set), then wake the next driver."""
        self._driver, self._driven = threading.get_ident(), waiter
        try:
            while not waiter.finished and not self.closed:
                if waiter.quit == self._driver:  # a second Ctrl-C, put off to a turn's end
                    raise KeyboardInterrupt
                self._loop.run_forever()
        finally:
            self._driver, self._driven = 0, None
            try:
                # Closed from a callback or another thread: the driver closes. Each call still
                # parked ends with it (unparked), or never started: its caller, woken in turn
                # as the next driver, finds the loop closed.
                if self.closed and not self._loop.is_closed():
                    _close(self._loop, self._client, self._calls)
            finally:
                with self._mutex:
                    self._busy = False
                    self._wake_next()

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
        # Parked as a call that never ends, until nobody drives: then it drives, and closes.
        waiter = _Waiter()
        if self._follow(waiter):
            self._drive(waiter)
