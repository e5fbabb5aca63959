"""The blocking client's loop, shared by many threads: never left without a driver.

Each calling thread drives the loop while its call runs, and hands it to a parked caller when
its own call ends first. A hand-over lost in a race leaves every parked caller waiting for
ever. The races are between a few statements of ``_driven_loop.py``, so these runs make the
rare interleavings common: at every call into C there (a lock's acquire or release, a list's
append) the thread gives up the interpreter now and then (``time.sleep(0)``, chosen by a
profile hook), and the interpreter switches threads every microsecond. Seeded mixes of calls
(returning at once, after some turns of the loop, after a timer, raising) come from plain
threads and from threads that run an event loop of their own. A run that does not end is
reported with the seed that made it.

Ctrl-C runs its handler between any two statements of the main thread: a second one, which
raises, must find the hand-over whole wherever it lands. A trace function presses it (calls
the handler as a signal would, with the frame it interrupts) at seeded statements of the main
thread's call, while other threads call: every one of them still gets its own answer.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from videogen_async import AsyncVideoGen, _driven_loop
from videogen_async._driven_loop import Loop

HANG_GUARD = 120  # seconds: only a lost hand-over takes this long


@pytest.fixture
def switching() -> Iterator[None]:
    """Threads switched at the hand-off's statements far more often than they would be."""
    chance = random.Random(7)
    module = _driven_loop.__file__

    def yielding(frame: FrameType, event: str, _: Any) -> None:
        if event == "c_call" and frame.f_code.co_filename == module and chance.random() < 0.3:
            time.sleep(0)  # the interpreter to another thread

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threading.setprofile(yielding)  # the threads started by the test (and by the loop)
    try:
        yield
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setswitchinterval(interval)


async def _work(kind: int, number: int) -> int:
    if kind == 1:
        for _ in range(number % 4):
            await asyncio.sleep(0)
    elif kind == 2:
        await asyncio.sleep((number % 3) / 20_000)
    elif kind == 3:
        raise ValueError(number)
    return number


def _run_seed(seed: int, threads: int, calls: int) -> None:
    rng = random.Random(seed)
    plans = [
        [(rng.randrange(4), rng.randrange(1000)) for _ in range(calls)] for _ in range(threads)
    ]
    loop = Loop(AsyncVideoGen(api_key="sk-test", base_url="http://127.0.0.1:9"))
    wrong: list[str] = []
    done = [0] * threads

    def calling(index: int) -> None:
        for kind, number in plans[index]:
            try:
                answer = loop.run(_work, kind, number)
            except ValueError:
                answer = -1 if kind == 3 else -2
            if answer != (-1 if kind == 3 else number):
                wrong.append(f"thread {index}: {kind, number} gave {answer}")
            done[index] += 1

    def calling_from_a_loop(index: int) -> None:
        async def main() -> None:
            calling(index)

        asyncio.run(main())

    started = [
        threading.Thread(target=calling_from_a_loop if index % 4 == 3 else calling, args=(index,))
        for index in range(threads)
    ]
    for thread in started:
        thread.daemon = True  # a hung run must not hold the test process at its exit
        thread.start()
    for thread in started:
        thread.join(HANG_GUARD)
    hung = [index for index, thread in enumerate(started) if thread.is_alive()]
    assert not hung, f"seed {seed}: threads {hung} never got their answers (done: {done})"
    assert not wrong
    loop.close()


@pytest.mark.allow_blocking  # a thread running a loop of its own makes blocking calls: tested
@pytest.mark.parametrize(("first_seed", "threads", "calls"), [(0, 8, 200), (100, 16, 100)])
@pytest.mark.usefixtures("switching")
def test_threads_calling_at_once_always_find_a_driver(
    first_seed: int, threads: int, calls: int
) -> None:
    for seed in range(first_seed, first_seed + 8):
        _run_seed(seed, threads, calls)


@pytest.mark.allow_blocking
@pytest.mark.usefixtures("switching")
def test_two_threads_handing_the_loop_back_and_forth_always_find_a_driver() -> None:
    for seed in range(1000, 1020):
        _run_seed(seed, threads=2, calls=300)


def _pressing(presses: set[int], pressed: list[int]) -> Callable[[FrameType, str, Any], Any]:
    """A trace function pressing Ctrl-C before the main thread's ``presses``-th statements.

    Counted while the call's own handler is set (before and after it, Python's default
    handler raises, as for any code).
    """
    count = itertools.count()

    def trace(frame: FrameType, event: str, _: Any) -> Any:
        handler = signal.getsignal(signal.SIGINT)
        if (
            event == "line"
            and handler is not signal.default_int_handler
            and (number := next(count)) in presses
        ):
            pressed.append(number)
            handler(signal.SIGINT, frame)  # type: ignore[operator,misc]
        return trace

    return trace


def _run_pressed_seed(seed: int, from_a_loop: bool, threads: int = 3, calls: int = 40) -> None:
    rng = random.Random(seed)
    loop = Loop(AsyncVideoGen(api_key="sk-test", base_url="http://127.0.0.1:9"))
    wrong: list[str] = []
    done = [0] * threads

    def calling(index: int, plan: list[tuple[int, int]]) -> None:
        for kind, number in plan:
            try:
                answer = loop.run(_work, kind, number)
            except ValueError:
                answer = -1
            except BaseException as exc:  # a Ctrl-C of another thread's is wrong
                wrong.append(f"thread {index}: {kind, number} raised {exc!r}")
                continue
            if answer != (-1 if kind == 3 else number):
                wrong.append(f"thread {index}: {kind, number} gave {answer}")
            done[index] += 1

    started = [
        threading.Thread(
            target=calling,
            args=(index, [(rng.randrange(3), rng.randrange(1000)) for _ in range(calls)]),
            daemon=True,  # a hung run must not hold the test process at its exit
        )
        for index in range(threads)
    ]
    for thread in started:
        thread.start()
    first = rng.randrange(300)
    presses = {first, *(first + 1 + rng.randrange(200) for _ in range(rng.randrange(3)))}
    pressed: list[int] = []
    main = threading.main_thread().ident
    assert main is not None
    fired: list[bool] = []

    def press_once_more() -> None:  # a call left waiting for ever: the watchdog frees it
        fired.append(True)
        signal.pthread_kill(main, signal.SIGINT)

    watchdog = threading.Timer(HANG_GUARD, press_once_more)

    def main_calls() -> None:
        for number in range(calls):
            if number == calls // 4:
                sys.settrace(_pressing(presses, pressed))
                watchdog.start()
            try:
                answer = loop.run(_work, 1, number)
            except KeyboardInterrupt:
                answer = -1
            finally:
                sys.settrace(None)
                watchdog.cancel()
            assert not fired, f"seed {seed}: the pressed call never ended"
            # Pressed during this call (once or more): it ends in a KeyboardInterrupt.
            assert answer == (-1 if pressed and number == calls // 4 else number), (seed, pressed)

    async def main_calls_from_a_loop() -> None:  # each call made by a helper thread
        signal.signal(signal.SIGINT, signal.default_int_handler)  # not asyncio.run's
        main_calls()

    if from_a_loop:
        asyncio.run(main_calls_from_a_loop())
        started += [t for t in threading.enumerate() if t.name == "videogen-async"]
    else:
        main_calls()
    for thread in started:
        thread.join(HANG_GUARD)
    hung = [index for index, thread in enumerate(started) if thread.is_alive()]
    assert not hung, f"seed {seed}: threads {hung} never got their answers (done: {done})"
    assert not wrong, f"seed {seed}: {wrong}"
    assert loop.run(_work, 1, 7) == 7  # the loop still serves calls, and closes
    loop.close()


@pytest.mark.allow_blocking
@pytest.mark.usefixtures("switching")
def test_ctrl_c_twice_anywhere_in_a_call_leaves_every_other_threads_call_its_answer() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("a signal's handler runs in the main thread only")
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for seed in range(60):
            _run_pressed_seed(seed, from_a_loop=seed % 3 == 2)
    finally:
        signal.signal(signal.SIGINT, handler)


@pytest.mark.allow_blocking  # the driver's call holds its loop on purpose
def test_a_call_closed_as_it_starts_still_runs_its_first_step() -> None:
    """``close()`` in the turn that starts another thread's call: it ends, its code awaited.

    A task cancelled before its first step runs none of its code: the call's coroutine was
    then never awaited, and the code that tells its caller the call ended never ran.
    """
    loop = Loop(AsyncVideoGen(api_key="sk-test", base_url="http://127.0.0.1:9"))
    holding, hold = threading.Event(), threading.Event()

    async def holding_a_turn() -> int:  # the other thread's call: it drives, held here
        holding.set()
        hold.wait(HANG_GUARD)
        return 1

    driver = threading.Thread(target=loop.run, args=(holding_a_turn,), daemon=True)
    driver.start()
    assert holding.wait(HANG_GUARD)

    def trace(frame: FrameType, event: str, _: Any) -> Any:
        # The call handed over (its start queued): the close is queued next, in that turn.
        if event == "line" and frame.f_code is Loop._follow.__code__ and not hold.is_set():
            loop._loop.call_soon_threadsafe(loop.close)
            hold.set()
        return trace

    fired: list[bool] = []

    def stop_the_loop() -> None:  # the thread left running it for ever: the watchdog frees it
        fired.append(True)
        loop._loop.call_soon_threadsafe(loop._loop.stop)

    watchdog = threading.Timer(HANG_GUARD, stop_the_loop)
    watchdog.start()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        sys.settrace(trace)
        try:
            with pytest.raises(RuntimeError, match="closed while the call ran"):
                loop.run(_work, 1, 5)
        finally:
            sys.settrace(None)
            watchdog.cancel()
        driver.join(HANG_GUARD)
        gc.collect()
    assert not fired, "the call cancelled before its first step: its thread ran the loop for ever"
    assert not driver.is_alive()
    assert not [str(w.message) for w in warned if "never awaited" in str(w.message)]
