"""The blocking client's cost: per call against the async client, and shared between threads.

In one run against one sandbox (a separate process, so that its work does not share this
process's interpreter lock):

1. **Per call**: ``client.credits.get()`` of one ``VideoGen`` called in a loop from one
   thread, then from 4 threads at once, against ``await client.credits.get()`` of an
   ``AsyncVideoGen`` from as many tasks on one event loop; rounds alternate, the ratios are
   the medians of the rounds' ratios, of wall time and of this process's CPU time. Target:
   the blocking call at most 1.15x the async one, in both. The same rounds time, from as many
   threads, a blocking call that sends nothing (the blocking client's own cost per call) and
   the floor of any hand-off between threads (``call_soon_threadsafe(lock.release)`` to an
   idle loop in a thread of its own), and count the voluntary context switches per call
   (Linux ``/proc``): an awaited call wakes no other thread, nor does a blocking call from one
   thread (it runs the client's loop itself), but with several threads at once most calls are
   handed to the thread running the loop, which wakes their caller with the answer, and each
   wait for the interpreter lock between them counts too.

   ``floor`` prints the least wall ratio a call can reach: ``1.00x`` from one thread, which
   hands nothing over; from several, ``1 + loop trip / async``, a call handed to another
   thread and back (a hand-off overlaps the loop's other work only where neither holds the
   interpreter lock: the kernel's wake-ups). What is left to the client itself is the gap
   between ``wall`` and ``floor``.
2. **Shared between threads**: 20 threads calling ``credits.get()`` on one shared
   ``VideoGen``, against 20 threads each with a ``VideoGen`` of its own. Target: the shared
   client at least 1.0x the requests per second, with one connection pool (and one event
   loop) instead of twenty. Connections are counted as this process's sockets to the sandbox
   (Linux ``/proc``), and threads as this process's threads beyond the callers, at the end of
   each run.

On a busy machine the wall and CPU times swing with the load far more than the client's
own cost moves; ``--instructions`` counts instead the machine instructions per call of one
caller, under valgrind (``cachegrind``): ``credits.get()`` awaited, called on a
``VideoGen``, and a blocking call of a coroutine that returns at once (the client's own cost
per call: the call's task, starting and stopping the loop in the calling thread). Each kind
runs once with 0 and once with ``--counted`` calls after the same warm-up, the difference
divided by the count; the kinds alternate ``--repeat`` times and the medians are printed.

    python bench/sync.py [--calls 300] [--call-rounds 15] [--threads 20] [--per-thread 200]
    python bench/sync.py --instructions [--counted 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple
from urllib.parse import urlsplit

import aiohttp

from videogen_async import AsyncVideoGen, VideoGen
from videogen_async._blocking import _blocking, _Namespace
from videogen_async.testing import SandboxProcess


def sockets_to(port: int) -> int | None:
    """This process's open TCP sockets whose remote port is ``port`` (``None`` off Linux)."""
    try:
        inodes = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        count = 0
        for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
            with open(table, encoding="ascii") as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                        count += 1
        return count
    except OSError:
        return None


def client_threads(callers: int) -> int:
    """This process's threads but the main one and ``callers``: those the clients started."""
    return threading.active_count() - 1 - callers


def switches() -> int | None:
    """Voluntary context switches so far, of all this process's threads (``None`` off Linux).

    A thread that waits (for a lock, the interpreter lock, a socket) and is woken again counts
    one: what a hand-off between threads costs beyond the code it runs.
    """
    try:
        total = 0
        for thread in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{thread}/status", encoding="ascii") as lines:
                for line in lines:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        return total
    except OSError:
        return None


class Round(NamedTuple):
    """One round, per call: wall and CPU seconds, voluntary context switches."""

    wall: float
    cpu: float
    switches: float

    @classmethod
    def timed(cls, run: Callable[[], object], calls: int) -> Round:
        before, started, cpu = switches(), time.perf_counter(), time.process_time()
        run()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        after = switches()
        waits = math.nan if before is None or after is None else after - before
        return cls(wall / calls, cpu / calls, waits / calls)


def in_threads(
    pool: ThreadPoolExecutor, threads: int, calls: int, call: Callable[[], object]
) -> Round:
    """``call()`` made ``calls`` times in all, shared by ``threads`` threads of ``pool``."""

    def caller() -> None:
        for _ in range(calls // threads):
            call()

    def run() -> None:
        for future in [pool.submit(caller) for _ in range(threads)]:
            future.result()

    return Round.timed(run, calls)


@contextlib.contextmanager
def idle_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, idle until woken.

    One for all the rounds of a run: a thread started for each round made the trip of one
    caller up to three times slower, and no floor.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def loop_round_trip(
    pool: ThreadPoolExecutor, threads: int, calls: int, loop: asyncio.AbstractEventLoop
) -> Round:
    """The floor of any hand-off between threads: ``call_soon_threadsafe(lock.release)``.

    ``loop`` is idle (:func:`idle_loop`), woken by each caller to release the lock the caller
    then waits on: no task, no coroutine, nothing of the client.
    """

    def call() -> None:
        done = threading.Lock()
        done.acquire()
        loop.call_soon_threadsafe(done.release)
        done.acquire()

    return in_threads(pool, threads, calls, call)


class PerCall(NamedTuple):
    """Per call: the best round of each, the medians of the rounds' ratios."""

    async_wall: float
    blocking_wall: float
    wall: float
    cpu: float
    empty: float
    floor: float
    async_switches: float
    blocking_switches: float


def per_call(base: str, key: str, calls: int, rounds: int, threads: int) -> PerCall:
    """Per call of (async, blocking): best wall, and the medians of the rounds' ratios.

    ``threads`` callers: as many tasks awaiting on one loop, against as many threads calling
    one shared ``VideoGen``. Each round of one is followed by a round of the other, so both
    see the same load; the figures are the best round of each (seconds per call), the ratios
    the medians of the rounds' ratios (wall, and this process's CPU in all its threads). The
    same rounds time a call that sends nothing and the bare loop round trip, from as many
    threads, and count the context switches per call (the medians).
    """
    loop = asyncio.new_event_loop()
    client = AsyncVideoGen(api_key=key, base_url=base)
    share = calls // threads

    async def async_calls() -> None:
        async def caller() -> None:
            for _ in range(share):
                await client.credits.get()

        await asyncio.gather(*(caller() for _ in range(threads)))

    def async_round() -> Round:
        return Round.timed(lambda: loop.run_until_complete(async_calls()), calls)

    pairs: list[tuple[Round, Round]] = []
    empty: list[Round] = []
    floor: list[Round] = []
    try:
        with (
            VideoGen(api_key=key, base_url=base) as blocking,
            ThreadPoolExecutor(threads) as pool,
            idle_loop() as idle,
        ):
            get = blocking.credits.get
            nothing = _BlockingNothing(blocking._loop, _Nothing()).nothing
            async_round()  # warm up: connections, caches
            in_threads(pool, threads, calls, get)
            for _ in range(rounds):
                pairs.append((async_round(), in_threads(pool, threads, calls, get)))
                empty.append(in_threads(pool, threads, calls, nothing))  # sends nothing
                floor.append(loop_round_trip(pool, threads, calls, idle))
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    return PerCall(
        async_wall=min(a.wall for a, _ in pairs),
        blocking_wall=min(b.wall for _, b in pairs),
        wall=statistics.median(b.wall / a.wall for a, b in pairs),
        cpu=statistics.median(b.cpu / a.cpu for a, b in pairs),
        empty=min(e.wall for e in empty),
        floor=min(f.wall for f in floor),
        async_switches=statistics.median(a.switches for a, _ in pairs),
        blocking_switches=statistics.median(b.switches for _, b in pairs),
    )


def threaded(
    threads: int, per_thread: int, client_of: Callable[[int], VideoGen], port: int
) -> tuple[float, int | None, int]:
    """Requests per second of ``threads`` threads, the sockets and threads they used."""
    barrier = threading.Barrier(threads + 1)

    def work(number: int) -> None:
        client = client_of(number)
        client.credits.get()  # warm up: this client's first connection
        barrier.wait()
        for _ in range(per_thread):
            client.credits.get()
        barrier.wait()

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(work, n) for n in range(threads)]
        barrier.wait()
        started = time.perf_counter()
        barrier.wait()
        seconds = time.perf_counter() - started
        sockets, loops = sockets_to(port), client_threads(threads)
        for future in futures:
            future.result()
    return threads * per_thread / seconds, sockets, loops


def shared_against_own(
    base: str, key: str, threads: int, per_thread: int, rounds: int
) -> dict[str, tuple[float, int | None, int]]:
    port = urlsplit(base).port or 80
    best: dict[str, tuple[float, int | None, int]] = {}
    for _ in range(rounds):
        with VideoGen(api_key=key, base_url=base) as shared:
            row = threaded(threads, per_thread, lambda _: shared, port)
        if row[0] > best.get("shared", (0.0, 0, 0))[0]:
            best["shared"] = row
        own = [VideoGen(api_key=key, base_url=base) for _ in range(threads)]
        try:
            row = threaded(threads, per_thread, own.__getitem__, port)
        finally:
            for client in own:
                client.close()
        if row[0] > best.get("own", (0.0, 0, 0))[0]:
            best["own"] = row
    return best


class _Nothing:
    async def nothing(self) -> None:
        return None


class _BlockingNothing(_Namespace):
    """A blocking namespace whose one call, of a coroutine that returns at once, sends nothing."""

    nothing = _blocking(_Nothing.nothing)


def counted(kind: str, calls: int, base: str, key: str) -> None:
    """The child of ``--instructions``: a warm-up, then ``calls`` calls of ``kind``, one caller."""
    if kind == "async":

        async def run() -> None:
            async with AsyncVideoGen(api_key=key, base_url=base) as client:
                for _ in range(50 + calls):
                    await client.credits.get()

        asyncio.run(run())
        return
    with VideoGen(api_key=key, base_url=base) as client:
        nothing = _BlockingNothing(client._loop, _Nothing()).nothing
        call = client.credits.get if kind == "blocking" else nothing
        for _ in range(50 + calls):
            call()


def instructions(kind: str, calls: int, base: str, key: str) -> float:
    """Machine instructions per call of ``kind`` (valgrind's count of the child)."""
    totals = []
    for n in (0, calls):
        command = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
        command += ["--cachegrind-out-file=/dev/null", sys.executable, __file__]
        command += ["--child", kind, str(n), base, key]
        run = subprocess.run(command, capture_output=True, text=True, check=True)
        found = re.search(r"I\s+refs:\s+([\d,]+)", run.stderr)
        assert found, run.stderr[-2000:]
        totals.append(int(found.group(1).replace(",", "")))
    return (totals[1] - totals[0]) / calls


def print_instructions(base: str, key: str, calls: int, repeat: int) -> None:
    counts: dict[str, list[float]] = {"async": [], "blocking": [], "nothing": []}
    for _ in range(repeat):
        for kind, found in counts.items():
            found.append(instructions(kind, calls, base, key))
    a, b, empty = (statistics.median(found) for found in counts.values())
    print(
        f"\ninstructions per call of one caller (valgrind, {calls} counted, median of {repeat})"
        f"\ncredits.get() awaited {a:,.0f}, blocking {b:,.0f}: {b / a:.3f}x;"
        f" a blocking call that sends nothing {empty:,.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round, part 1")
    parser.add_argument("--call-rounds", type=int, default=15, help="rounds of each, part 1")
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--per-thread", type=int, default=200, help="calls per thread, part 2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="count, under valgrind")
    parser.add_argument("--counted", type=int, default=300, help="calls counted")
    parser.add_argument("--repeat", type=int, default=3, help="counts of each kind")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, calls, base, key = args.child
        counted(kind, int(calls), base, key)
        return
    with SandboxProcess("--manual-clock") as sandbox:
        base, key = sandbox.base_url, sandbox.api_key
        if args.instructions:
            print_instructions(base, key, args.counted, args.repeat)
            return
        per = [(n, per_call(base, key, args.calls, args.call_rounds, n)) for n in (1, 4)]
        rows = shared_against_own(base, key, args.threads, args.per_thread, args.rounds)

    print(
        f"\ncredits.get() against a sandbox process;"
        f" Python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}, {os.cpu_count()} CPUs"
    )
    print(
        f"\nper call ({args.call_rounds} alternating rounds of {args.calls} calls): callers"
        f" awaiting AsyncVideoGen on one loop, against as many threads calling one VideoGen"
        f"\n{'callers':>7} {'async us':>9} {'blocking us':>12} {'wall':>6} {'floor':>6} {'CPU':>6}"
        f" {'no request us':>14} {'loop trip us':>13} {'switches a/b':>13}"
        f"   target: wall and CPU <= 1.15x"
    )
    for n, row in per:
        verdict = "met" if row.wall <= 1.15 and row.cpu <= 1.15 else "NOT met"
        print(
            f"{n:>7} {row.async_wall * 1e6:>9.0f} {row.blocking_wall * 1e6:>12.0f}"
            f" {row.wall:>5.2f}x {1 + (n > 1) * row.floor / row.async_wall:>5.2f}x {row.cpu:>5.2f}x"
            f" {row.empty * 1e6:>14.1f}"
            f" {row.floor * 1e6:>13.1f} {row.async_switches:>6.2f}/{row.blocking_switches:<6.2f}"
            f"   {verdict}"
        )
    shared, own = rows["shared"], rows["own"]
    print(
        f"\n{args.threads} threads x {args.per_thread} calls"
        f"{'':<12} {'req/s':>9} {'ratio':>7} {'sockets':>8} {'threads':>8}   target"
    )
    print(f"{'a VideoGen per thread':<34} {own[0]:>9.0f} {1.0:>6.2f}x {own[1]!s:>8} {own[2]:>8}")
    ratio = shared[0] / own[0]
    verdict = "met" if ratio >= 1.0 else "NOT met"
    print(
        f"{'one VideoGen shared':<34} {shared[0]:>9.0f} {ratio:>6.2f}x {shared[1]!s:>8}"
        f" {shared[2]:>8}   >= 1.0x ({verdict})"
    )
    print(
        "(us/call: the best round; ratio: the median of the rounds' ratios. no request: a"
        " blocking call that sends nothing; loop trip: call_soon_threadsafe(lock.release) to an"
        " idle loop in a thread of its own, the floor of any hand-off between threads; floor:"
        " the least wall ratio of a call, 1.00x from one thread (it runs the loop itself), else"
        " 1 + loop trip / async (handed to another thread); switches a/b: voluntary context"
        " switches per call, async/blocking. sockets: open connections to the sandbox; threads:"
        f" the threads the clients started; best of {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
