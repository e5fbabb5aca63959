"""Soak: 100,000 pending ids gathered against the sandbox for minutes; memory and sockets stay flat.

Run it with ``nox -s bench`` or directly::

    python bench/soak.py            # 100,000 ids for 150 s, a sample every 5 s
    python bench/soak.py --quick    # 10,000 ids for 40 s, a sample every 2 s

The sandbox runs in a child process (``python -m videogen_async.testing --port 0``); its ids are
made in one request to ``POST /_sandbox/tasks/bulk`` and stay pending for the whole run, so the
one ``gather_until_done`` of this process polls all of them, at its concurrency limit, until
its timeout ends it. Every few seconds the script samples:

* this process's RSS (``/proc/self/statm``) and the sandbox process's;
* the connections checked out of the client's pool (``client._transport.owner.open_connections``)
  and the TCP sockets this process holds (``/proc/self/fd`` entries that are sockets, counted
  against ``/proc/net/tcp*``: no ``ss`` needed), minus the one control connection;
* the sandbox's statistics: requests served, in flight now, the peak in flight;
* the gather's progress: polls sent, in flight, its concurrency limit.

It prints one table row per sample and a verdict: memory is flat when the RSS after the first
minute (``--quick``: the first third) grows by less than ``max(16 MiB, 5 %)``; connections are
bounded when no sample shows more open connections than the pool size (``--pool``, 64) and the
sandbox never saw more requests in flight than the gather's limit (``--concurrency``, 32). The
exit status is 1 when either fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from videogen_async import AsyncVideoGen, WaitTimeoutError
from videogen_async._waiting._gather import gather_until_done
from videogen_async.testing import SandboxProcess

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


@dataclass
class Sample:
    t: float
    rss: int
    sandbox_rss: int
    pool: int
    sockets: int
    served: int
    in_flight: int
    peak: int
    polls: int
    limit: int


def rss_of(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/statm") as handle:
        return int(handle.read().split()[1]) * PAGE


def tcp_inodes() -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            next(handle, None)
            inodes.update(line.split()[9] for line in handle if line.strip())
    return inodes


def tcp_sockets() -> int:
    """TCP sockets held by this process: its socket fds whose inode is a TCP socket."""
    tcp = tcp_inodes()
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in tcp:
                count += 1
    return count


class Sandbox:
    """The sandbox in a child process, and a control session to it."""

    def __init__(self) -> None:
        self.child = SandboxProcess("--seed", "1", "--credits", "1e12")
        self.base_url = ""
        self.api_key = ""
        self.session: aiohttp.ClientSession | None = None

    @property
    def pid(self) -> int:
        assert self.child.process is not None
        return self.child.process.pid

    async def start(self) -> Sandbox:
        await asyncio.to_thread(self.child.start)
        self.base_url, self.api_key = self.child.base_url, self.child.api_key
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.api_key}"},
            connector=aiohttp.TCPConnector(limit=1),
        )
        return self

    async def control(self, method: str, path: str, body: Any = None) -> Any:
        assert self.session is not None
        async with self.session.request(method, f"{self.base_url}/_sandbox{path}", json=body) as r:
            return (await r.json())["data"]

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
        await asyncio.to_thread(self.child.close)


async def soak(args: argparse.Namespace) -> int:
    box = await Sandbox().start()
    samples: list[Sample] = []
    try:
        made = time.monotonic()
        created = await box.control(
            "POST", "/tasks/bulk", {"count": args.ids, "finish_in": 1e9, "prompt": "soak"}
        )
        ids = created["task_ids"]
        print(
            f"{len(ids):,} pending ids made in {time.monotonic() - made:.1f} s; gathering for"
            f" {args.duration:g} s at max_concurrency={args.concurrency}, pool={args.pool}"
        )
        await box.control("POST", "/reset-stats")
        header = (
            f"{'t (s)':>6} {'RSS MiB':>8} {'sandbox MiB':>11} {'pool':>5} {'TCP':>4}"
            f" {'served':>8} {'in flight':>9} {'peak':>5} {'polls':>8} {'limit':>5}"
        )
        print(header)
        print("-" * len(header))
        async with AsyncVideoGen(box.api_key, box.base_url, connection_limit=args.pool) as client:
            results = gather_until_done(
                client, ids, timeout=args.duration, max_concurrency=args.concurrency
            )
            started = time.monotonic()

            async def consume() -> None:
                with contextlib.suppress(WaitTimeoutError):
                    async with results as stream:
                        async for task in stream:
                            raise SystemExit(f"a pending task was yielded: {task!r}")

            consumer = asyncio.ensure_future(consume())
            while not consumer.done():
                await asyncio.wait({consumer}, timeout=args.every)
                stats = await box.control("GET", "/stats")
                progress = results.progress
                sample = Sample(
                    t=time.monotonic() - started,
                    rss=rss_of(),
                    sandbox_rss=rss_of(box.pid),
                    pool=client._transport.owner.open_connections,
                    sockets=max(tcp_sockets() - 1, 0),  # minus the control connection
                    served=stats["requests"],
                    in_flight=stats["in_flight"],
                    peak=stats["peak_in_flight"],
                    polls=progress.requests,
                    limit=progress.concurrency_limit,
                )
                samples.append(sample)
                print(
                    f"{sample.t:6.1f} {sample.rss / MIB:8.1f} {sample.sandbox_rss / MIB:11.1f}"
                    f" {sample.pool:5d} {sample.sockets:4d} {sample.served:8,d}"
                    f" {sample.in_flight:9d} {sample.peak:5d} {sample.polls:8,d}"
                    f" {sample.limit:5d}",
                    flush=True,
                )
            await consumer
            left_open = client._transport.owner.open_connections
        after_close = max(tcp_sockets() - 1, 0)
    finally:
        await box.close()
    return verdict(args, samples, left_open, after_close)


def verdict(args: argparse.Namespace, samples: list[Sample], left_open: int, closed: int) -> int:
    warm = [s for s in samples if s.t >= args.warmup]
    ok = True
    if len(warm) >= 2:
        base = warm[0].rss
        growth = max(s.rss for s in warm) - base
        allowed = max(16 * MIB, base // 20)
        flat = growth <= allowed
        ok &= flat
        print(
            f"\nmemory after {args.warmup:.0f} s: {base / MIB:.1f} MiB, then at most"
            f" {growth / MIB:+.1f} MiB (allowed {allowed / MIB:.0f} MiB): "
            + ("FLAT" if flat else "GROWING")
        )
    else:
        print("\nmemory: too few samples after the warm-up to judge")
    most_pool = max((s.pool for s in samples), default=0)
    most_sockets = max((s.sockets for s in samples), default=0)
    peak = max((s.peak for s in samples), default=0)
    bounded = most_pool <= args.pool and most_sockets <= args.pool and peak <= args.concurrency
    ok &= bounded
    print(
        f"connections: at most {most_pool} checked out and {most_sockets} TCP sockets (pool"
        f" {args.pool}); sandbox peak in flight {peak} (limit {args.concurrency}): "
        + ("BOUNDED" if bounded else "EXCEEDED")
    )
    clean = left_open == 0 and closed == 0
    ok &= clean
    print(
        f"after the gather: {left_open} connections checked out; after closing the client:"
        f" {closed} TCP sockets: " + ("CLEAN" if clean else "LEFT OPEN")
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 ids for 40 s")
    parser.add_argument("--ids", type=int, default=None, help="pending ids (100,000)")
    parser.add_argument("--duration", type=float, default=None, help="seconds (150)")
    parser.add_argument("--every", type=float, default=None, help="seconds between samples (5)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before judging (60)")
    parser.add_argument("--concurrency", type=int, default=32, help="gather max_concurrency")
    parser.add_argument("--pool", type=int, default=64, help="the client's connection_limit")
    # nox -s bench passes the same arguments to every script; ignore the others' options.
    args, _ = parser.parse_known_args()
    quick = args.quick
    args.ids = args.ids or (10_000 if quick else 100_000)
    args.duration = args.duration or (40.0 if quick else 150.0)
    args.every = args.every or (2.0 if quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else args.duration / 3 if quick else 60.0
    return asyncio.run(soak(args))


if __name__ == "__main__":
    raise SystemExit(main())
