"""Benchmark: waiting through the ledger against waiting in memory, on a sandbox process.

Run it with ``nox -s bench`` or directly::

    python bench/ledger.py            # 20,000 tasks finishing over 60 s
    python bench/ledger.py --quick    # 2,000 tasks finishing over 20 s
    python bench/ledger.py --creates  # only the table of creates (last below)

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
after their finish, and queries within 0.5 s of the previous query of the same task.

Last, creates: ``--n`` (500) creates, 1 and 16 at a time, against a service process that
answers at once, plain ``client.tasks.create`` against ``Ledger.create_task`` on SQLite and on
PostgreSQL (a throwaway cluster of its own, ``fsync`` and ``synchronous_commit`` on, with
``pg_stat_statements``): wall and CPU time per create and their ratios to plain ones of the
same run, statements and commits per create (SQLite: the execute calls its connection was
given; PostgreSQL: the server's counts), WAL bytes per create, the PostgreSQL cluster's CPU per
create and SQLite's time per statement inside its execute calls. ``--no-change-log`` drops the
ledgers' change-log triggers first, to show what they cost.

The floor is measured in the same run, each round: ``asyncpg pair`` (the two statements of an
uncapped create, its write ahead and its answer, each committed alone, on a pool of 4
connections as the ledger's, a connection taken per statement, and the cluster's CPU for
them), ``sqlite3 off loop`` (the same two statements on ``sqlite3``, WAL and ``synchronous =
NORMAL`` as the ledger sets its file, each handed to a thread and awaited: SQLite must not run on
the event loop, and a hop there and back is part of what a statement costs the caller; the
statements queued meanwhile share a commit), ``sqlite3 pair`` (the same statements in this
thread, blocking: SQLite's own time) and the disk's flush (the median ``fsync`` of an 8 kB
write, in the ledger's directory and in the cluster's). ``floor x`` is a ledger create's wall
time against a plain create plus its engine's pair (``asyncpg pair``, ``sqlite3 off loop``):
what the ledger costs above the statements it cannot do without.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import itertools
import json
import os
import queue
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

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
    def __init__(self, options: str = "-c fsync=off") -> None:
        self.options = options
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
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 {self.options}"
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


# ---------------------------------------------------------------------------------------------
# Creates: plain `tasks.create` against creates through the ledger
# ---------------------------------------------------------------------------------------------

CREATE_PATH = "/v1/video/videomodel-2"
CREATE_N = 500
CONCURRENCY = (1, 16)


def serve() -> None:
    """A service that answers every create at once (run in a process of its own)."""
    count = itertools.count()

    async def create(request: web.Request) -> web.Response:
        await request.read()
        data = {"task_id": f"t{next(count)}", "status": "running", "credits_cost": 10.0}
        return web.json_response({"code": 200, "trace_id": "b", "message": None, "data": data})

    async def run() -> None:
        app = web.Application()
        app.router.add_post(CREATE_PATH, create)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


@dataclass
class CreateRow:
    name: str
    concurrency: int
    wall: float
    cpu: float
    statements: float | None = None
    commits: float | None = None
    wal: float | None = None
    server_cpu: float | None = None  # PostgreSQL: the cluster's processes, seconds in all
    inside: float | None = None  # SQLite: seconds inside its execute calls, in all
    loop_cpu: float | None = None  # the event loop's thread alone, seconds in all
    pair: list[tuple[Any, ...]] | None = None  # SQLite: a create's two statements, as run


class Counter:
    """Counts the statements a SQLite ledger's connection is given, its commits, their time."""

    def __init__(self, ledger: Ledger) -> None:
        self.statements = self.commits = 0
        self.inside = 0.0
        self.pair: list[tuple[Any, ...]] = []
        self.engine = ledger.store.engine
        self.conn = self.engine._conn  # type: ignore[attr-defined]
        self.engine._conn = self  # type: ignore[attr-defined]

    def _count(self, sql: str) -> None:
        self.statements += 1
        word = sql.lstrip().split(None, 1)[0].upper()
        if word == "COMMIT" or (
            word in {"INSERT", "UPDATE", "DELETE", "WITH"} and not self.conn.in_transaction
        ):
            self.commits += 1

    def execute(self, sql: str, *args: Any) -> Any:
        self._count(sql)
        # The first create's pair, as run: its write ahead, then its answer.
        if not self.pair and sql.lstrip().startswith("INSERT INTO videogen_ledger_entries"):
            self.pair = [(sql, *args)]
        elif (
            len(self.pair) == 1
            and sql.lstrip().startswith("UPDATE videogen_ledger_entries")
            and args[0][0] == self.pair[0][1][0]  # the same key
        ):
            self.pair.append((sql, *args))
        t0 = time.perf_counter()
        try:
            return self.conn.execute(sql, *args)
        finally:
            self.inside += time.perf_counter() - t0

    def executemany(self, sql: str, *args: Any) -> Any:
        self._count(sql)
        t0 = time.perf_counter()
        try:
            return self.conn.executemany(sql, *args)
        finally:
            self.inside += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def server_cpu(data: str) -> float:
    """CPU seconds (user and system) of a cluster's processes so far: the postmaster's
    children that live (the pool's backends live through a run), and the postmaster."""
    with open(os.path.join(data, "postmaster.pid")) as file:
        postmaster = int(file.readline())
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


# The floor a ledger create is compared against, measured in the same run: the two statements
# of an uncapped create (its write ahead, its answer), each committed alone, with nothing of
# the ledger around them, and the disk's flush.
FLOOR_TABLE = (
    "CREATE TABLE IF NOT EXISTS floor (key TEXT PRIMARY KEY, state TEXT NOT NULL,"
    " task_id TEXT, request TEXT NOT NULL)"
)
FLOOR_INSERT = "INSERT INTO floor (key, state, request) VALUES ($1, 'creating', $2)"
FLOOR_UPDATE = "UPDATE floor SET state = 'pending', task_id = $2 WHERE key = $1"
FLOOR_REQUEST = json.dumps({"duration": 5, "model": "v1", "prompt": "clip"})


async def pg_pair(url: str, concurrency: int, n: int, prefix: str, data: str = "") -> CreateRow:
    """``n`` pairs of statements on asyncpg, ``concurrency`` at a time: a pool as the
    ledger's (4 connections), a connection taken for each statement, as the ledger does
    (``data``: the cluster's directory, to count its CPU)."""
    pool = await asyncpg.create_pool(url, min_size=4, max_size=4)
    try:
        await pool.execute(FLOOR_TABLE)
        numbers = iter(range(n))

        async def pair(key: str) -> None:
            await pool.execute(FLOOR_INSERT, key, FLOOR_REQUEST)
            await pool.execute(FLOOR_UPDATE, key, "t")

        async def worker() -> None:
            for i in numbers:
                await pair(f"{prefix}{i}")

        await asyncio.gather(*(pair(f"{prefix}w{i}") for i in range(concurrency)))  # warm up
        server0 = server_cpu(data) if data else 0.0
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        row = CreateRow("asyncpg pair", concurrency, wall, cpu)
        if data:
            row.server_cpu = server_cpu(data) - server0
        return row
    finally:
        await pool.close()


def sqlite_pair(path: str, n: int, prefix: str) -> tuple[float, float]:
    """``n`` pairs of statements on ``sqlite3`` as the ledger sets a file up (WAL,
    ``synchronous = NORMAL``), each committed alone: ``(wall, CPU)`` seconds."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(FLOOR_TABLE)
        insert, update = (sql.replace("$", "?") for sql in (FLOOR_INSERT, FLOOR_UPDATE))
        cpu0, t0 = time.thread_time(), time.perf_counter()
        for i in range(n):
            conn.execute(insert, (f"{prefix}{i}", FLOOR_REQUEST))
            conn.execute(update, (f"{prefix}{i}", f"t{i}"))
        return time.perf_counter() - t0, time.thread_time() - cpu0
    finally:
        conn.close()


def ledger_pair(path: str, pair: list[tuple[Any, ...]], n: int, prefix: str) -> tuple[float, float]:
    """``n`` pairs of a SQLite ledger's own statements of a create (``pair``, as its connection
    ran them: its write ahead and its answer) on its file, blocking, each committed alone:
    ``(wall, CPU)`` seconds. Its schema's cost (indexes, change-log triggers) against the
    floor's table; the key and the task id of each pair made new."""
    (insert, insert_args), (update, update_args) = pair
    key, task_id = insert_args[0], update_args[2]

    def renamed(args: tuple[Any, ...], i: int) -> tuple[Any, ...]:
        new = {key: f"{prefix}{i}", task_id: f"{prefix}t{i}"}
        return tuple(new.get(arg, arg) if isinstance(arg, str) else arg for arg in args)

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        cpu0, t0 = time.thread_time(), time.perf_counter()
        for i in range(n):
            conn.execute(insert, renamed(insert_args, i)).fetchall()
            conn.execute(update, renamed(update_args, i)).fetchall()
        return time.perf_counter() - t0, time.thread_time() - cpu0
    finally:
        conn.close()


def _sqlite_worker(conn: sqlite3.Connection, jobs: Any) -> None:
    """The floor's SQLite thread: whatever is queued, in one transaction (group commit)."""
    while (job := jobs.get()) is not None:
        batch = [job]
        while not jobs.empty() and (job := jobs.get()) is not None:
            batch.append(job)
        if len(batch) > 1:
            conn.execute("BEGIN IMMEDIATE")
        for _future, sql, args in batch:
            conn.execute(sql, args)
        if len(batch) > 1:
            conn.execute("COMMIT")
        for future, _sql, _args in batch:
            future.get_loop().call_soon_threadsafe(future.set_result, None)
        if job is None:
            return


async def sqlite_pair_off_loop(path: str, concurrency: int, n: int, prefix: str) -> CreateRow:
    """The pair of statements on ``sqlite3``, each handed to a thread of its own and awaited.

    Off the event loop, as the ledger must run SQLite (a statement may wait for another
    process's lock): a ``queue.SimpleQueue`` to one thread, each outcome handed back with
    ``call_soon_threadsafe`` (the cheapest hand-off measured), the statements queued meanwhile
    committed together (``concurrency`` > 1). ``concurrency`` creators, ``n`` pairs in all.
    """
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(FLOOR_TABLE)
    insert, update = (sql.replace("$", "?") for sql in (FLOOR_INSERT, FLOOR_UPDATE))
    jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    thread = threading.Thread(target=_sqlite_worker, args=(conn, jobs))
    thread.start()
    loop = asyncio.get_running_loop()

    async def statement(sql: str, *args: str) -> None:
        future = loop.create_future()
        jobs.put((future, sql, args))
        await future

    numbers = iter(range(n))

    async def worker() -> None:
        for i in numbers:
            await statement(insert, f"{prefix}{i}", FLOOR_REQUEST)
            await statement(update, f"{prefix}{i}", f"t{i}")

    try:
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        jobs.put(None)
        thread.join()
        conn.close()
    return CreateRow("sqlite3 off loop", concurrency, wall, cpu)


def flush_time(directory: str, times: int = 200) -> float:
    """The median seconds of an ``fsync`` of an 8 kB write in ``directory`` (the disk's flush)."""
    path = os.path.join(directory, "flush-probe")
    found = []
    with open(path, "wb") as file:
        for _ in range(times):
            file.write(os.urandom(8192))
            file.flush()
            t0 = time.perf_counter()
            os.fsync(file.fileno())
            found.append(time.perf_counter() - t0)
    os.unlink(path)
    return statistics.median(found)


async def pg_counts(url: str) -> tuple[int, int, int]:
    """``(statements, commits, WAL bytes)`` the server counted (the database of ``url``)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        statements = await conn.fetchval(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        commits = await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        wal = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
    finally:
        await conn.close()
    return int(statements), int(commits), int(wal)


UNLOGGED = False
"""``--no-change-log``: the ledgers' change-log triggers dropped (what they cost)."""


async def drop_change_log(ledger: Ledger, url: str) -> None:
    drops = [f"DROP TRIGGER IF EXISTS videogen_ledger_{name}" for name in ("added", "changed")]
    if url.startswith("postgres"):
        conn = await asyncpg.connect(url)
        try:
            for drop in drops:
                await conn.execute(f"{drop} ON videogen_ledger_entries")
        finally:
            await conn.close()
    else:
        for drop in drops:
            ledger.store.engine._conn.execute(drop)  # type: ignore[attr-defined]


async def creates(
    name: str,
    concurrency: int,
    base_url: str,
    url: str = "",
    n: int = CREATE_N,
    prefix: str = "",
    data: str = "",
) -> CreateRow:
    """``n`` creates, ``concurrency`` at a time: plain (``url`` empty) or through a ledger."""
    async with AsyncVideoGen(api_key="bench", base_url=base_url) as client:
        ledger = await Ledger.open(url) if url else None
        try:
            if ledger is None:
                one = lambda i: client.tasks.create(f"clip {i}")  # noqa: E731
            else:
                one = lambda i: ledger.create_task(client, f"clip {i}", key=f"{prefix}{i}")  # noqa: E731
            if ledger is not None and UNLOGGED:
                await drop_change_log(ledger, url)
            for i in range(-concurrency, 0):  # warm up: connections, prepared statements
                await one(i)
            sqlite = ledger is not None and not url.startswith("postgres")
            counter = Counter(ledger) if sqlite else None
            before = await pg_counts(url) if url.startswith("postgres") else (0, 0, 0)
            server0 = server_cpu(data) if data else 0.0
            numbers = iter(range(n))

            async def worker() -> None:
                for i in numbers:
                    await one(i)

            cpu0, t0, loop0 = time.process_time(), time.perf_counter(), time.thread_time()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            row = CreateRow(name, concurrency, time.perf_counter() - t0, time.process_time() - cpu0)
            row.loop_cpu = time.thread_time() - loop0
            if data:
                row.server_cpu = server_cpu(data) - server0
        finally:
            if ledger is not None:
                await ledger.aclose()
    if counter is not None:
        row.statements, row.commits = counter.statements / n, counter.commits / n
        row.inside = counter.inside
        row.pair = counter.pair
    elif url:
        after = await pg_counts(url)
        # The counting query of `pg_counts` itself: one statement, one commit.
        row.statements = (after[0] - before[0] - 2) / n
        row.commits = (after[1] - before[1] - 2) / n
        row.wal = (after[2] - before[2]) / n
    return row


async def create_table(n: int, rounds: int = 3) -> None:
    service = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", stdout=asyncio.subprocess.PIPE
    )
    assert service.stdout is not None
    base_url = f"http://127.0.0.1:{int(await service.stdout.readline())}"
    options = "-c shared_preload_libraries=pg_stat_statements -c max_connections=50"
    runs: dict[tuple[str, int], list[CreateRow]] = {}
    flushes: list[float] = []
    try:
        with Cluster(options) as cluster:
            data = os.path.join(cluster.root, "data")
            for concurrency in CONCURRENCY:
                pg = cluster.database(f"creates_{concurrency}")
                conn = await asyncpg.connect(pg)
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                await conn.close()
                for r in range(rounds):  # in turn, so that a change of the machine's load
                    directory = tempfile.mkdtemp()  # weighs on all
                    path = os.path.join(directory, "ledger.db")
                    for name, url in (("plain", ""), ("sqlite", path), ("postgresql", pg)):
                        where = data if url == pg else ""
                        row = await creates(name, concurrency, base_url, url, n, f"r{r}-", where)
                        runs.setdefault((name, concurrency), []).append(row)
                    own = runs["sqlite", concurrency][-1].pair
                    assert own is not None, "no statements counted"
                    assert len(own) == 2, own
                    wall, cpu = ledger_pair(path, own, n, f"replay-r{r}-")
                    runs.setdefault(("ledger's pair", concurrency), []).append(
                        CreateRow("ledger's pair", concurrency, wall, cpu, inside=wall)
                    )
                    floor = os.path.join(directory, "floor.db")
                    wall, cpu = sqlite_pair(floor, n, f"r{r}-")
                    runs.setdefault(("sqlite3 pair", concurrency), []).append(
                        CreateRow("sqlite3 pair", concurrency, wall, cpu, inside=wall)
                    )
                    off = os.path.join(directory, "floor-off.db")
                    runs.setdefault(("sqlite3 off loop", concurrency), []).append(
                        await sqlite_pair_off_loop(off, concurrency, n, f"r{r}-")
                    )
                    runs.setdefault(("asyncpg pair", concurrency), []).append(
                        await pg_pair(pg, concurrency, n, f"r{r}-", data)
                    )
                    flushes.append(flush_time(directory))
                    flushes.append(flush_time(cluster.root))
                print(f"  creates at concurrency {concurrency}: done", file=sys.stderr)
    finally:
        service.kill()
        await service.wait()
    # Each row: the round of median wall time.
    rows = {key: sorted(rs, key=lambda r: r.wall)[len(rs) // 2] for key, rs in runs.items()}
    flush = statistics.median(flushes)
    print(
        f"\n# {n} creates against a service process that answers at once"
        f" (PostgreSQL: a throwaway cluster, fsync and synchronous_commit on); {rounds} rounds,"
        " each row the round of median wall time\n"
    )
    head = (
        f"{'strategy':<16} {'in flight':>9} {'creates/s':>9} {'wall ms':>8} {'CPU ms':>7}"
        f" {'wall x':>7} {'CPU x':>6} {'floor x':>7} {'stmts':>6} {'commits':>7} {'WAL B':>6}"
        f" {'srv CPU ms':>10} {'us/stmt':>7} {'loop CPU ms':>11}"
    )
    print(head)
    print("-" * len(head))
    floors = {"sqlite": "sqlite3 off loop", "postgresql": "asyncpg pair"}
    for (name, concurrency), row in rows.items():
        base = rows["plain", concurrency]
        pair = rows.get((floors.get(name, ""), concurrency))
        floor_x = "" if pair is None else f"{row.wall / (base.wall + pair.wall):.2f}"
        stmts = "" if row.statements is None else f"{row.statements:.2f}"
        commits = "" if row.commits is None else f"{row.commits:.2f}"
        wal = "" if row.wal is None else f"{row.wal:.0f}"
        server = "" if row.server_cpu is None else f"{row.server_cpu / n * 1000:.3f}"
        count = 2 * n if row.statements is None else row.statements * n
        inside = "" if row.inside is None else f"{row.inside / count * 1e6:.1f}"
        loop = "" if row.loop_cpu is None else f"{row.loop_cpu / n * 1000:.3f}"
        print(
            f"{name:<16} {concurrency:>9} {n / row.wall:>9.0f} {row.wall / n * 1000:>8.3f}"
            f" {row.cpu / n * 1000:>7.3f} {row.wall / base.wall:>7.2f} {row.cpu / base.cpu:>6.2f}"
            f" {floor_x:>7} {stmts:>6} {commits:>7} {wal:>6} {server:>10} {inside:>7} {loop:>11}"
        )
    print(
        f"\nthe disk's flush (fsync of an 8 kB write, median, in this run): {flush * 1e6:.0f} us"
        "\n\nwall/CPU ms: per create (CPU: this process only; a pair: per pair of statements);"
        " x: a ratio to `plain` at the same concurrency in this run; floor x: the wall time"
        " against the floor of this run, a plain create plus its engine's pair of statements"
        " (`asyncpg pair`: the write ahead and the answer of an uncapped create, each"
        " committed alone, on a pool of 4 as the ledger's; `sqlite3 off loop`: the same on"
        " `sqlite3`, WAL and synchronous=NORMAL as the ledger sets its file, each statement"
        " handed to a thread of its own and awaited, as the ledger must run SQLite off the"
        " event loop, the statements queued meanwhile committed together; `sqlite3 pair`: the"
        " same in this thread, blocking, SQLite's own time);"
        " stmts/commits: per create, SQLite's from its connection (execute calls),"
        " PostgreSQL's from the server (pg_stat_statements calls; pg_stat_database"
        " xact_commit); WAL B: bytes of WAL per create (PostgreSQL); srv CPU ms: the"
        " cluster's CPU per create (its processes' user and system time, /proc); us/stmt:"
        " SQLite, microseconds per statement inside its execute calls; loop CPU ms: the"
        " event loop's thread alone, per create (at 16 in flight the loop never waits on the"
        " network: what it spends is the least wall time per create of one loop);"
        " `ledger's pair`: the ledger's own two statements of a create, as its connection ran"
        " them, replayed blocking on its file after the run (new keys), each committed alone:"
        " SQLite's time for them with the ledger's schema (indexes, change-log triggers),"
        " against `sqlite3 pair`'s bare table."
        + (" The change-log triggers were dropped (--no-change-log)." if UNLOGGED else "")
    )


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
    await create_table(CREATE_N)


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
    parser.add_argument(
        "--creates", action="store_true", help="only the table of creates (plain vs ledger)"
    )
    parser.add_argument("--n", type=int, default=CREATE_N, help="creates per row of that table")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of that table")
    parser.add_argument(
        "--no-change-log", action="store_true", help="that table without the change-log triggers"
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
    elif args.serve:
        serve()
    elif args.creates:
        UNLOGGED = args.no_change_log
        asyncio.run(create_table(args.n, args.rounds))
    else:
        chosen = tuple(name.strip() for name in args.strategies.split(","))
        unknown = sorted(set(chosen) - set(STRATEGIES))
        if unknown or not chosen or chosen[0] != "gather":
            parser.error(f"--strategies: from {', '.join(STRATEGIES)}, `gather` first")
        asyncio.run(main(args.quick, chosen))
