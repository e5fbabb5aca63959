"""The blocking client's cost: per call against the async client, and shared between threads.

In one run against one sandbox (a separate process, so that its work does not share this
process's interpreter lock):

1. **Per call**: ``client.credits.get()`` of one ``VideoGen`` called in a loop from one
   thread, then from 4 threads at once, against ``await client.credits.get()`` of an
   ``AsyncVideoGen`` from as many tasks on one event loop; rounds alternate, the ratios are
   the medians of the rounds' ratios, of wall time and of this process's CPU time. Target:
   the blocking call at most 1.15x the async one, in both. The same run prints a call that
   sends nothing (the blocking client's own cost per call).
2. **Shared between threads**: 20 threads calling ``credits.get()`` on one shared
   ``VideoGen``, against 20 threads each with a ``VideoGen`` of its own. Target: the shared
   client at least 1.0x the requests per second, with one connection pool (and one loop
   thread) instead of twenty. Connections are counted as this process's sockets to the
   sandbox (Linux ``/proc``), at the end of each run.

    python bench/sync.py [--calls 300] [--call-rounds 15] [--threads 20] [--per-thread 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import aiohttp

from videogen_async import AsyncVideoGen, VideoGen
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


def loop_threads() -> int:
    return sum(t.name == "videogen-async-loop" for t in threading.enumerate())


def per_call(
    base: str, key: str, calls: int, rounds: int, threads: int
) -> tuple[float, float, float, float, float]:
    """Per call of (async, blocking): best wall, and the medians of the rounds' ratios.

    ``threads`` callers: as many tasks awaiting on one loop, against as many threads calling
    one shared ``VideoGen``. Each round of one is followed by a round of the other, so both
    see the same load; the figures are the best round of each (seconds per call), the ratios
    the medians of the rounds' ratios (wall, and this process's CPU in all its threads).
    Returns (async wall, blocking wall, wall ratio, CPU ratio, a call that sends nothing).
    """
    loop = asyncio.new_event_loop()
    client = AsyncVideoGen(api_key=key, base_url=base)
    share = calls // threads

    async def async_round() -> tuple[float, float]:
        async def caller() -> None:
            for _ in range(share):
                await client.credits.get()

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(caller() for _ in range(threads)))
        return (time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls

    def blocking_round(client: VideoGen, pool: ThreadPoolExecutor) -> tuple[float, float]:
        def caller() -> None:
            for _ in range(share):
                client.credits.get()

        started, cpu = time.perf_counter(), time.process_time()
        for future in [pool.submit(caller) for _ in range(threads)]:
            future.result()
        return (time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls

    def empty_round(client: VideoGen) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            client._loop.run(asyncio.sleep, 0)  # a call that sends nothing
        return (time.perf_counter() - started) / calls

    pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
    empty: list[float] = []
    try:
        with VideoGen(api_key=key, base_url=base) as blocking, ThreadPoolExecutor(threads) as pool:
            loop.run_until_complete(async_round())  # warm up: connections, caches
            blocking_round(blocking, pool)
            for _ in range(rounds):
                pairs.append(
                    (loop.run_until_complete(async_round()), blocking_round(blocking, pool))
                )
                empty.append(empty_round(blocking))
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    wall = statistics.median(b[0] / a[0] for a, b in pairs)
    cpu = statistics.median(b[1] / a[1] for a, b in pairs)
    best_async, best_blocking = min(a[0] for a, _ in pairs), min(b[0] for _, b in pairs)
    return best_async, best_blocking, wall, cpu, min(empty)


def threaded(
    threads: int, per_thread: int, client_of: Callable[[int], VideoGen], port: int
) -> tuple[float, int | None, int]:
    """Requests per second of ``threads`` threads, the sockets and loop threads they used."""
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
        sockets, loops = sockets_to(port), loop_threads()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per round, part 1")
    parser.add_argument("--call-rounds", type=int, default=15, help="rounds of each, part 1")
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--per-thread", type=int, default=200, help="calls per thread, part 2")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with SandboxProcess("--manual-clock") as sandbox:
        base, key = sandbox.base_url, sandbox.api_key
        per = [(n, per_call(base, key, args.calls, args.call_rounds, n)) for n in (1, 4)]
        rows = shared_against_own(base, key, args.threads, args.per_thread, args.rounds)

    print(
        f"\ncredits.get() against a sandbox process;"
        f" Python {sys.version.split()[0]}, aiohttp {aiohttp.__version__}, {os.cpu_count()} CPUs"
    )
    print(
        f"\nper call ({args.call_rounds} alternating rounds of {args.calls} calls): callers"
        f" awaiting AsyncVideoGen on one loop, against as many threads calling one VideoGen"
        f"\n{'callers':>7} {'async us':>9} {'blocking us':>12} {'wall':>6} {'CPU':>6}"
        f" {'no request us':>14}   target: wall and CPU <= 1.15x"
    )
    for n, (async_s, blocking_s, wall, cpu, empty) in per:
        verdict = "met" if wall <= 1.15 and cpu <= 1.15 else "NOT met"
        print(
            f"{n:>7} {async_s * 1e6:>9.0f} {blocking_s * 1e6:>12.0f} {wall:>5.2f}x {cpu:>5.2f}x"
            f" {empty * 1e6:>14.1f}   {verdict}"
        )
    shared, own = rows["shared"], rows["own"]
    print(
        f"\n{args.threads} threads x {args.per_thread} calls"
        f"{'':<12} {'req/s':>9} {'ratio':>7} {'sockets':>8} {'loops':>6}   target"
    )
    print(f"{'a VideoGen per thread':<34} {own[0]:>9.0f} {1.0:>6.2f}x {own[1]!s:>8} {own[2]:>6}")
    ratio = shared[0] / own[0]
    verdict = "met" if ratio >= 1.0 else "NOT met"
    print(
        f"{'one VideoGen shared':<34} {shared[0]:>9.0f} {ratio:>6.2f}x {shared[1]!s:>8}"
        f" {shared[2]:>6}   >= 1.0x ({verdict})"
    )
    print(
        "(us/call: the best round; ratio: the median of the rounds' ratios. sockets: open"
        " connections to the sandbox; loops: the clients' loop threads; best of"
        f" {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
