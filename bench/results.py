"""Benchmark: results beyond one process: waits across processes, and dispatch.

Run it with ``nox -s bench`` or directly::

    python bench/results.py            # the full sizes
    python bench/results.py --quick    # smaller sizes, the same rows

In one run, each figure beside a ratio to a baseline of the same run:

* **commit to waiter**: the time from a watcher's commit of a terminal state (the watcher's
  own statement, ``finish_many``, run by this process) to the return of ``Ledger.wait`` in
  another process, p50 and p95, on SQLite and on PostgreSQL (a throwaway cluster), with 1
  waiter (one wait at a time) and with 1,000 (all waiting at once, commits 5 ms apart);
  ``CLOCK_MONOTONIC`` is one clock for every process of the machine. The ratio is to the
  1-waiter p95 of the same engine.
* **requests per task**: 1,000 tasks of a sandbox process finishing over 20 s, waited by a
  process of 1,000 ``Ledger.wait`` calls and one watcher (SQLite), against one
  ``gather_until_done`` in one process on a fresh sandbox of the same seed; the status
  queries the sandbox served, per task.
* **deliveries per second**: terminal entries dispatched by one, then two, dispatcher
  processes (``ledger.dispatch`` with ``webhook``) to a receiver on loopback, from the first
  delivery's start to the last one's arrival; the ratio is two dispatchers against one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from videogen_async import AsyncVideoGen, Ledger, Task, gather_until_done, webhook
from videogen_async._ledger import _claims as claims
from videogen_async._ledger._entry import task_to_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ledger import Cluster, Sandbox  # bench/ledger.py, beside this file

SECRET = "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
OWNER = "watcher:bench"


def _task(task_id: str) -> str:
    return task_to_json(
        Task.from_dict(
            {
                "task_id": task_id,
                "status": "succeeded",
                "model": "videomodel_2_0",
                "created_at": "2026-11-25T00:00:00Z",
                "updated_at": "2026-11-25T00:00:10Z",
                "credits_cost": 10,
                "result": {"video_url": f"https://cdn.example.com/{task_id}.mp4"},
            }
        )
    )


async def pending(ledger: Ledger, count: int, prefix: str) -> list[str]:
    """``count`` pending entries (keys ``PREFIX/ID``), claimed by this process as a watcher."""
    ids = [f"{prefix}-{n:05d}" for n in range(count)]
    await ledger.record_project_tasks(prefix, prefix, ids)
    await ledger.store.write(claims.claim, OWNER, 3600.0, count)
    return [f"{prefix}/{task_id}" for task_id in ids]


async def finish(ledger: Ledger, keys: list[str]) -> None:
    """The watcher's commit of terminal states."""
    items = [(key, "succeeded", 10.0, _task(key.rpartition("/")[2])) for key in keys]
    await ledger.store.write(claims.finish_many, OWNER, items, [])


def me(*args: str) -> list[str]:
    """The command that runs this script as a child."""
    return [sys.executable, __file__, *args]


async def start_waiter(url: str, mode: str, keys: list[str]) -> asyncio.subprocess.Process:
    """A waiter process (see :func:`waiter_child`), once it is ready."""
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as file:
        json.dump(keys, file)
    proc = await asyncio.create_subprocess_exec(
        *me("--waiter", url, mode, path), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    return proc


async def waiter_done(proc: asyncio.subprocess.Process) -> dict[str, float]:
    """When each wait of a waiter process returned (its monotonic clock)."""
    assert proc.stdout is not None
    done: dict[str, float] = json.loads(await proc.stdout.readline())
    await proc.wait()
    return done


# --------------------------------------------------------------------------------------------
# commit -> waiter
# --------------------------------------------------------------------------------------------


async def waiter_child(url: str, mode: str, keys_file: str) -> None:
    """Wait on the keys (all at once, or one after the other); print ``ready``, then when
    each wait returned."""
    keys = json.loads(Path(keys_file).read_text())
    count = len(keys)
    done: dict[str, float] = {}
    async with Ledger.open(url) as ledger, ledger.changes(keys=["-"]):

        async def wait(key: str) -> None:
            await ledger.wait(key, timeout=600)
            done[key] = time.monotonic()

        if mode == "many":
            tasks = [asyncio.create_task(wait(key)) for key in keys]
            while len(ledger._waits.listener._by_key) < count:  # every wait registered
                await asyncio.sleep(0.01)
            print("ready", flush=True)
            await asyncio.gather(*tasks)
        else:
            print("ready", flush=True)
            for key in keys:
                await wait(key)
    print(json.dumps(done), flush=True)


async def latency(url: str, mode: str, count: int, gap: float) -> list[float]:
    """Commit ``count`` keys ``gap`` s apart; the commit-to-waiter times, in ms."""
    prefix = f"lat{mode}{os.getpid()}"
    async with Ledger.open(url) as ledger:
        keys = await pending(ledger, count, prefix)
        proc = await start_waiter(url, mode, keys)
        committed: dict[str, float] = {}
        for key in keys:
            await finish(ledger, [key])
            committed[key] = time.monotonic()
            await asyncio.sleep(gap)
        done = await waiter_done(proc)
    return [(done[key] - committed[key]) * 1000 for key in keys]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --------------------------------------------------------------------------------------------
# requests per task
# --------------------------------------------------------------------------------------------


async def requests_per_task(count: int, spread: float) -> tuple[float, float]:
    """``(status queries per task: gather in one process, waiters + one watcher)``."""
    figures = []
    for strategy in ("gather", "ledger"):
        async with Sandbox() as sandbox:
            base_url, api_key = sandbox.child.base_url, sandbox.child.api_key
            ids = await sandbox.bulk(count, spread)
            await sandbox.control("POST", "/reset-stats")
            async with AsyncVideoGen(api_key=api_key, base_url=base_url) as client:
                if strategy == "gather":
                    async with gather_until_done(client, ids) as results:
                        async for _ in results:
                            pass
                else:
                    url = os.path.join(tempfile.mkdtemp(), "ledger.db")
                    async with Ledger.open(url) as ledger:
                        entries = await ledger.record_project_tasks("req", "req", ids)
                        proc = await start_waiter(url, "many", [e.key for e in entries])
                        async with ledger.watch(client, stop_when_idle=True) as finished:
                            async for _ in finished:
                                pass
                        assert len(await waiter_done(proc)) == count, "every wait returned"
            polls = await sandbox.polls()
            figures.append(sum(len(times) for times in polls.values()) / count)
    return figures[0], figures[1]


# --------------------------------------------------------------------------------------------
# deliveries per second
# --------------------------------------------------------------------------------------------


async def dispatcher_child(url: str, receiver: str, name: str) -> None:
    async with Ledger.open(url) as ledger:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        count = await ledger.dispatch(
            name, webhook(receiver, SECRET), backlog=True, stop_when_idle=True
        )
        print(count, flush=True)


class Receiver:
    """Counts the deliveries (their signatures are the tests' business)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.arrived: list[float] = []
        self.all_in = asyncio.Event()

    async def receive(self, request: web.Request) -> web.Response:
        await request.read()
        self.arrived.append(time.monotonic())
        if len(self.arrived) >= self.count:
            self.all_in.set()
        return web.Response(status=204)


async def deliveries(url: str, count: int) -> list[float]:
    """Deliveries per second of one dispatcher, then of two."""
    async with Ledger.open(url) as ledger:
        keys = await pending(ledger, count, "dlv")
        for start in range(0, count, 500):
            await finish(ledger, keys[start : start + 500])
    rates = []
    for dispatchers in (1, 2):
        receiver = Receiver(count)
        app = web.Application()
        app.router.add_post("/hook", receiver.receive)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        hook = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
        procs = [
            await asyncio.create_subprocess_exec(
                *me("--dispatcher", url, hook, f"x{dispatchers}"),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(dispatchers)
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert (await proc.stdout.readline()).strip() == b"ready"
        started = time.monotonic()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        await receiver.all_in.wait()
        rates.append(count / (receiver.arrived[count - 1] - started))
        for proc in procs:
            await proc.communicate()
        await runner.cleanup()
    return rates


# --------------------------------------------------------------------------------------------


async def main(quick: bool) -> None:
    many, rounds = (1000, 60) if not quick else (300, 30)
    tasks, spread = (1000, 20.0) if not quick else (300, 10.0)
    dispatched = 2000 if not quick else 500
    print("# results benchmark\n")
    with Cluster() as cluster:
        engines = {
            "sqlite": lambda name: os.path.join(tempfile.mkdtemp(), f"{name}.db"),
            "postgresql": cluster.database,
        }
        rows = []
        for engine, make in engines.items():
            one = await latency(make("lat1"), "one", rounds, 0.05)
            all_ = await latency(make("latmany"), "many", many, 0.005)
            rows.append((f"{engine}, 1 waiter", one, pct(one, 0.95)))
            rows.append((f"{engine}, {many:,} waiters", all_, pct(one, 0.95)))
            print(f"  {engine} latency: done", file=sys.stderr)
        print(f"{'commit -> waiter in another process':<38} {'p50 ms':>8} {'p95 ms':>8}"
              f" {'p95 x(1 waiter)':>16}")  # fmt: skip
        for name, values, base in rows:
            p95 = pct(values, 0.95)
            print(f"{name:<38} {statistics.median(values):>8.2f} {p95:>8.2f} {p95 / base:>16.2f}")

        gather, ledger = await requests_per_task(tasks, spread)
        print(f"\n{f'requests per task ({tasks:,} tasks)':<38} {'req/task':>8} {'x(gather)':>10}")
        print(f"{'gather_until_done, one process':<38} {gather:>8.2f} {1.0:>10.2f}")
        waits = f"1 watcher + {tasks:,} waits elsewhere"
        print(f"{waits:<38} {ledger:>8.2f} {ledger / gather:>10.2f}")
        print(f"\n{f'deliveries per second ({dispatched:,})':<38} {'per s':>8} {'x(one)':>10}")
        for engine, make in engines.items():
            one_rate, two_rate = await deliveries(make("dispatch"), dispatched)
            print(f"{f'{engine}, 1 dispatcher':<38} {one_rate:>8.0f} {1.0:>10.2f}")
            print(f"{f'{engine}, 2 dispatchers':<38} {two_rate:>8.0f} {two_rate / one_rate:>10.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, the same rows")
    parser.add_argument("--waiter", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--dispatcher", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.waiter:
        asyncio.run(waiter_child(*args.waiter))
    elif args.dispatcher:
        asyncio.run(dispatcher_child(*args.dispatcher))
    else:
        asyncio.run(main(args.quick))
