"""Benchmark: waiting through the ledger against waiting in memory, on a sandbox process.

Run it with ``nox -s bench`` or directly::

    python bench/ledger.py            # 20,000 tasks finishing over 60 s
    python bench/ledger.py --quick    # 2,000 tasks finishing over 20 s

Each strategy gets a fresh sandbox *process* (same seed): ``N`` tasks created at once through
the sandbox's bulk endpoint, finishing uniformly over the next ``D`` seconds (real time). Then:

* ``gather`` (first) and ``gather 2`` (last): one in-memory ``gather_until_done`` over the ids;
  the baseline "a" is the mean of the two, so that a drift of the machine's load during the
  run shows, and favours no strategy;
* ``sqlite x1``: one ``Ledger.watch`` on a SQLite file, in this process;
* ``pg xK``: K watcher processes (K = 1, 2, 4) on one PostgreSQL ledger (a throwaway cluster
  started by the benchmark: ``initdb``/``pg_ctl`` must be on PATH or under
  /usr/lib/postgresql/*/bin).

The ids are put in the ledger as pending entries (``Ledger.record_project_tasks``, one
transaction) before the watch starts. Columns: status queries per task (as the sandbox counted
them), detection lag p50/p95 (yield time minus the scheduled finish), ledger write
transactions per task, client CPU per task (this process, or the sum of the watcher processes),
and the ratios to "a" (the output says how each is computed). A second table breaks each
strategy's status queries down per task from the sandbox's request log: before the task's
finish, after it (1.00 is the least: the query that sees it finished), tasks queried twice
after their finish, and queries within 0.5 s of the previous query of the same task. Last, the
overhead of ``Ledger.create_task`` over ``client.tasks.create`` on SQLite, per create.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from videogen_async import AsyncVideoGen, Ledger, gather_until_done
from videogen_async.testing import SandboxProcess

ROUTE = "GET /v1/tasks"
SEED = 20261123


@dataclass
class Result:
    name: str
    n: int
    requests: int = 0
    writes: int = 0
    cpu: float = 0.0
    lags: list[float] = field(default_factory=list)
    polls: dict[str, list[float]] = field(default_factory=dict)
    finishes: dict[str, float] = field(default_factory=dict)

    def lag(self, q: float) -> float:
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Sandbox:
    def __init__(self) -> None:
        self.child = SandboxProcess("--seed", str(SEED), "--credits", "1e12")
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Sandbox:
        await asyncio.to_thread(self.child.start)
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.child.api_key}"},
            connector=aiohttp.TCPConnector(limit=64),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()
        await asyncio.to_thread(self.child.close)

    async def control(self, method: str, path: str, body: Any = None) -> Any:
        assert self.session is not None
        url = f"{self.child.base_url}/_sandbox{path}"
        async with self.session.request(method, url, json=body) as resp:
            payload = await resp.json()
        if payload.get("code") != 200:
            raise RuntimeError(f"sandbox control {path}: {payload}")
        return payload["data"]

    async def bulk(self, n: int, spread: float) -> list[str]:
        ids: list[str] = []
        while len(ids) < n:
            count = min(5000, n - len(ids))
            data = await self.control(
                "POST", "/tasks/bulk", {"count": count, "finish_in": [1.0, spread]}
            )
            ids += data["task_ids"]
        return ids

    async def polls(self) -> dict[str, list[float]]:
        """``{task_id: [arrival time of each status query]}`` from the sandbox's request log."""
        data = await self.control("GET", "/requests?limit=1000000")
        polls: dict[str, list[float]] = {}
        for record in data["requests"]:
            if record["route"] == ROUTE and record["query"].startswith("task_id="):
                polls.setdefault(record["query"][8:], []).append(record["started_at"])
        return polls

    async def finish_walls(self, ids: list[str]) -> dict[str, float]:
        sem = asyncio.Semaphore(32)

        async def one(task_id: str) -> tuple[str, float]:
            async with sem:
                data = await self.control("GET", f"/tasks/{task_id}")
            return task_id, float(data["schedule"]["finish_at_wall"])

        return dict(await asyncio.gather(*(one(i) for i in ids)))


# ---------------------------------------------------------------------------------------------
# A throwaway PostgreSQL cluster
# ---------------------------------------------------------------------------------------------


class Cluster:
    def __init__(self) -> None:
        found = shutil.which("pg_ctl")
        candidates = [os.path.dirname(os.path.realpath(found))] if found else []
        candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
        bins = [c for c in candidates if os.path.exists(os.path.join(c, "initdb"))]
        if not bins:
            raise SystemExit("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.bin = bins[0]
        self.root = tempfile.mkdtemp(prefix="videogen-bench-pg-")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.root_user = os.geteuid() == 0

    def run(self, *args: str) -> None:
        command = [os.path.join(self.bin, args[0]), *args[1:]]
        if self.root_user:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True)

    def __enter__(self) -> Cluster:
        if self.root_user:
            shutil.chown(self.root, "postgres", "postgres")
        data = os.path.join(self.root, "data")
        self.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-N")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run("pg_ctl", "-D", data, "-o", options, "-l", f"{self.root}/log", "-w", "start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.run("pg_ctl", "-D", os.path.join(self.root, "data"), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def database(self, name: str) -> str:
        self.run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


async def warm_up(client: AsyncVideoGen, task_id: str) -> None:
    await client.tasks.get(task_id)


async def watch_ledger(
    url: str, base_url: str, api_key: str
) -> tuple[dict[str, float], int, float]:
    """One watcher until the ledger is idle: ``({task_id: wall time seen}, writes, CPU s)``."""
    seen: dict[str, float] = {}
    async with (
        AsyncVideoGen(api_key=api_key, base_url=base_url) as client,
        Ledger.open(url) as ledger,
    ):
        cpu0 = time.process_time()
        watch = ledger.watch(client, stop_when_idle=True)
        async with watch as finished:
            async for entry in finished:
                seen[entry.task_id or ""] = time.time()
        return seen, ledger.store.writes, time.process_time() - cpu0


async def measure(name: str, n: int, spread: float, cluster: Cluster | None) -> Result:
    result = Result(name, n)
    async with Sandbox() as sandbox:
        base_url, api_key = sandbox.child.base_url, sandbox.child.api_key
        ids = await sandbox.bulk(n, spread)
        async with AsyncVideoGen(api_key=api_key, base_url=base_url) as client:
            await warm_up(client, ids[0])
        url = ""
        if name.startswith("gather"):
            pass
        elif name.startswith("sqlite"):
            url = os.path.join(tempfile.mkdtemp(), "ledger.db")
        else:
            assert cluster is not None
            url = cluster.database(name.replace(" ", "_"))
        if url:
            async with Ledger.open(url) as ledger:
                await ledger.record_project_tasks("bench", "bench", ids)
        await sandbox.control("POST", "/reset-stats")
        seen: dict[str, float] = {}
        if name.startswith("gather"):
            cpu0 = time.process_time()
            async with (
                AsyncVideoGen(api_key=api_key, base_url=base_url) as client,
                gather_until_done(client, ids) as results,
            ):
                async for task in results:
                    seen[task.task_id] = time.time()  # type: ignore[union-attr]
            result.cpu = time.process_time() - cpu0
        elif name.startswith("sqlite"):
            seen, result.writes, result.cpu = await watch_ledger(url, base_url, api_key)
        else:
            k = int(name.split("x")[1])
            procs = [
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    __file__,
                    "--child",
                    url,
                    base_url,
                    api_key,
                    stdout=asyncio.subprocess.PIPE,
                )
                for _ in range(k)
            ]
            for proc in procs:
                out, _ = await proc.communicate()
                data = json.loads(out)
                seen.update(data["seen"])
                result.writes += data["writes"]
                result.cpu += data["cpu"]
        stats = await sandbox.control("GET", "/stats")
        result.requests = int(stats["by_route"].get(ROUTE, 0))
        result.polls = await sandbox.polls()
        finishes = await sandbox.finish_walls(ids)
        result.finishes = finishes
    missing = [i for i in ids if i not in seen]
    if missing:
        raise RuntimeError(f"{name}: {len(missing)} ids never yielded")
    result.lags = [seen[i] - finishes[i] for i in ids]
    return result


async def create_overhead(count: int) -> tuple[float, float]:
    """Mean seconds per create: direct, and through a SQLite ledger."""
    async with Sandbox() as sandbox:
        base_url, api_key = sandbox.child.base_url, sandbox.child.api_key
        async with AsyncVideoGen(api_key=api_key, base_url=base_url) as client:
            await client.tasks.create("warm up")
            t0 = time.perf_counter()
            for i in range(count):
                await client.tasks.create(f"direct {i}")
            direct = (time.perf_counter() - t0) / count
            url = os.path.join(tempfile.mkdtemp(), "ledger.db")
            async with Ledger.open(url) as ledger:
                await ledger.create_task(client, "warm up", key="warm")
                t0 = time.perf_counter()
                for i in range(count):
                    await ledger.create_task(client, f"ledger {i}", key=f"k{i}")
                through = (time.perf_counter() - t0) / count
    return direct, through


def breakdown(rows: list[Result]) -> None:
    """Where each strategy's status queries went, per task, from the sandbox's request log."""
    print(
        f"\n{'strategy':<10} {'logged':>7} {'before':>7} {'after':>7} {'2+ after':>8}"
        f" {'<0.5 s gap':>10}   (queries per task: all, before its finish, after it;"
        " tasks queried twice after their finish; queries within 0.5 s of the previous one)"
    )
    for r in rows:
        logged = sum(len(times) for times in r.polls.values())
        if logged < r.requests:
            print(
                f"  ({r.name}: the sandbox's request log kept the last {logged} of"
                f" {r.requests} status queries; the breakdown is over those)"
            )
    for r in rows:
        before = after = twice = close = total = 0
        for task_id, times in r.polls.items():
            finish = r.finishes.get(task_id, float("inf"))
            times.sort()
            total += len(times)
            late = sum(1 for t in times if t >= finish)
            after += late
            before += len(times) - late
            twice += late > 1
            close += sum(1 for a, b in itertools.pairwise(times) if b - a < 0.5)
        print(
            f"{r.name:<10} {total / r.n:>7.2f} {before / r.n:>7.2f} {after / r.n:>7.2f}"
            f" {twice:>8} {close / r.n:>10.3f}"
        )


@dataclass
class Reference:
    """(a): the mean of the in-memory gathers run first and last (the machine's load drifts)."""

    requests: float
    cpu: float
    p95: float


def reference(rows: list[Result]) -> Reference:
    gathers = [r for r in rows if r.name.startswith("gather")]
    return Reference(
        requests=statistics.fmean(r.requests for r in gathers),
        cpu=statistics.fmean(r.cpu for r in gathers),
        p95=statistics.fmean(r.lag(0.95) for r in gathers),
    )


def report(rows: list[Result]) -> None:
    base = reference(rows)
    head = (
        f"{'strategy':<10} {'req/task':>8} {'lag p50':>8} {'lag p95':>8} {'writes/task':>11}"
        f" {'CPU ms/task':>11} {'req x(a)':>8} {'p95 x(a)':>8} {'CPU x(a)':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r.name:<10} {r.requests / r.n:>8.2f} {statistics.median(r.lags):>8.2f}"
            f" {r.lag(0.95):>8.2f} {r.writes / r.n:>11.2f} {r.cpu / r.n * 1000:>11.3f}"
            f" {r.requests / max(base.requests, 1):>8.2f}"
            f" {r.lag(0.95) / max(base.p95, 1e-9):>8.2f}"
            f" {r.cpu / max(base.cpu, 1e-9):>8.2f}"
        )
    print(
        "\nEvery strategy waits on the same workload (same count, same seed, same spread of"
        " finishes, a fresh sandbox each) in this one run. x(a) is a ratio to (a) `gather`"
        " measured in this run (the mean of `gather`, run first, and `gather 2`, run last, so"
        " that a drift of the machine's load shows and weighs on neither end):"
        " req = status queries the sandbox served / those of (a);"
        " p95 = the 95th percentile of (time yielded - scheduled finish) / that of (a);"
        " CPU = client CPU seconds (this process, or the sum of the watcher processes, from"
        " the watch's start to its end) / those of (a)."
    )
    by_name = {r.name: r for r in rows}
    one, four = by_name.get("pg x1"), by_name.get("pg x4")
    if one is not None and four is not None:
        print(
            f"pg x4 / pg x1 status queries per task: {four.requests / max(one.requests, 1):.2f}"
            " (the four watchers together against one)"
        )


STRATEGIES = ("gather", "sqlite x1", "pg x1", "pg x2", "pg x4", "gather 2")


async def main(quick: bool, strategies: tuple[str, ...] = STRATEGIES) -> None:
    n, spread = (2_000, 20.0) if quick else (20_000, 60.0)
    print(f"# ledger benchmark: {n} tasks finishing over {spread:g} s\n")
    rows: list[Result] = []
    with Cluster() as cluster:
        for name in strategies:
            rows.append(await measure(name, n, spread, cluster))
            print(f"  {name}: done", file=sys.stderr)
    report(rows)
    breakdown(rows)
    direct, through = await create_overhead(200 if quick else 1000)
    print(
        f"\ncreate on SQLite: {direct * 1000:.2f} ms direct, {through * 1000:.2f} ms through"
        f" the ledger: overhead {(through - direct) * 1000:.2f} ms per create"
    )


def child(url: str, base_url: str, api_key: str) -> None:
    seen, writes, cpu = asyncio.run(watch_ledger(url, base_url, api_key))
    print(json.dumps({"seen": seen, "writes": writes, "cpu": cpu}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 tasks over 20 s")
    parser.add_argument(
        "--strategies",
        default=",".join(STRATEGIES),
        help="the strategies to run, comma-separated (default: all; keep `gather` first)",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
    else:
        chosen = tuple(name.strip() for name in args.strategies.split(","))
        unknown = sorted(set(chosen) - set(STRATEGIES))
        if unknown or not chosen or chosen[0] != "gather":
            parser.error(f"--strategies: from {', '.join(STRATEGIES)}, `gather` first")
        asyncio.run(main(args.quick, chosen))
