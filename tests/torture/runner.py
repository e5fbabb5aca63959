"""The runner: ``python -m tests.torture.runner --seed N --seconds S --engine sqlite|postgresql``.

It starts the sandbox (a process on loopback), the database (a throwaway PostgreSQL cluster, or
a SQLite file), a webhook receiver (``aiohttp.web`` on loopback, checking each delivery's
Standard Webhooks signature with the ``standardwebhooks`` package), on PostgreSQL a TCP proxy in
front of the cluster (``proxy.py``: the workload processes connect through it, the runner's own
connections go direct) and the workload processes; plays the seed's fault schedule for ``S``
seconds (the network's cuts and stalls in a lane of their own, beside the other faults); then
stops the workload, settles what is left (a watcher and a dispatcher of its own, with
``stop_when_idle``), writes the end mark the consumers read up to, reads the final state (every
change from position 0, every entry, every task the sandbox charged) and runs the checker. Exit
status 1 when the checker found a violation (each printed with the seed), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import standardwebhooks
from aiohttp import web

from tests.ledger.conftest import Cluster, find_pg_bin
from tests.torture import checker, faults
from tests.torture.history import Recorder, read
from tests.torture.proxy import Proxy
from tests.torture.workload import END_KEY, OP_DEADLINE
from videogen_async import AsyncVideoGen, Ledger, webhook
from videogen_async.testing import SandboxProcess

ROOT = Path(__file__).resolve().parents[2]
HOOK_SECRET = "whsec_" + "dG9ydHVyZS10b3J0dXJlLXRvcnR1cmUtdG9ydHVyZSE="  # fixed: replayable
LANES = 6
PROCESSES = {"writer": 3, "capped": 2, "watcher": 2, "consumer": 3, "waiter": 1, "dispatcher": 1}
DRAIN_DEADLINE = 150.0


class Slot:
    """One workload process's place: its role, number, incarnations, and when it may restart."""

    def __init__(self, role: str, number: int) -> None:
        self.role, self.number, self.name = role, number, f"{role}{number}"
        self.incarnation = -1
        self.process: subprocess.Popen[bytes] | None = None
        self.down_until = 0.0


class Run:
    """One run of the workload under the seed's faults (see the module docstring)."""

    def __init__(self, seed: int, seconds: float, engine: str, folder: Path) -> None:
        self.seed, self.seconds, self.engine, self.folder = seed, seconds, engine, folder
        (folder / "hist").mkdir(parents=True, exist_ok=True)
        (folder / "logs").mkdir(exist_ok=True)
        self.history = Recorder(folder / "hist" / "runner.0.jsonl", "runner")
        self.slots = [Slot(role, n) for role, count in PROCESSES.items() for n in range(count)]
        self.cluster: Cluster | None = None
        self.proxy: Proxy | None = None
        self.outages = 0  # in progress: a crash, a stall (see away)
        self.sandbox: SandboxProcess | None = None
        self.config: dict[str, Any] = {}
        self.final_phase = False
        self.done_consumers: set[tuple[str, int]] = set()
        self.delivered: set[tuple[str, str]] = set()
        self.env = dict(os.environ)
        paths = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
        self.env["VIDEOGEN_LEDGER_SPOOL"] = str(folder / "spool")
        os.environ["VIDEOGEN_LEDGER_SPOOL"] = self.env["VIDEOGEN_LEDGER_SPOOL"]  # the runner's
        # Every process started again compiles the package without the bytecode caches.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)

    # -- services -------------------------------------------------------------------------

    def start_database(self) -> tuple[str, str]:
        if self.engine == "sqlite":
            return str(self.folder / "ledger.db"), str(self.folder / "capped.db")
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.cluster = Cluster(bin_dir, crashes=True)
        self.cluster.start()
        return self.cluster.new_database(), self.cluster.new_database()

    async def receiver(self, tg: anyio.abc.TaskGroup) -> web.AppRunner:
        hooks = Recorder(self.folder / "hist" / "receiver.0.jsonl", "receiver")
        verifier = standardwebhooks.Webhook(HOOK_SECRET)

        async def receive(request: web.Request) -> web.Response:
            body = await request.read()
            try:
                event = verifier.verify(body, dict(request.headers))
                valid = True
            except standardwebhooks.WebhookVerificationError:
                event, valid = json.loads(body), False
            data = event.get("data", {})
            if valid:
                self.delivered.add((data.get("key"), data.get("state")))
            hooks.write(
                "delivery",
                id=request.headers.get("webhook-id"),
                valid=valid,
                key=data.get("key"),
                state=data.get("state"),
                version=data.get("version"),
            )
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/hooks/video", receive)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.config["hook_url"] = f"http://127.0.0.1:{runner.addresses[0][1]}/hooks/video"
        return runner

    # -- processes ------------------------------------------------------------------------

    def spawn(self, slot: Slot) -> None:
        slot.incarnation += 1
        log = open(self.folder / "logs" / f"{slot.name}.{slot.incarnation}.log", "wb")  # noqa: SIM115
        command = [
            sys.executable,
            "-m",
            "tests.torture.workload",
            str(self.folder / "config.json"),
            slot.role,
            str(slot.number),
            str(slot.incarnation),
        ]
        slot.process = subprocess.Popen(  # noqa: S603
            command, cwd=self.folder, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.history.write("spawn", target=slot.name, inc=slot.incarnation, pid=slot.process.pid)

    def ended(self, slot: Slot) -> bool:
        if slot.process is None:
            return True
        code = slot.process.poll()
        if code is None:
            return False
        self.history.write("exited", target=slot.name, inc=slot.incarnation, code=code)
        slot.process = None
        return True

    def consumer_done(self, slot: Slot) -> bool:
        # Known once per incarnation: the monitor asks every 50 ms, and a consumer that read a
        # long run's log has a history of megabytes (read again each time, it held the loop).
        done = (slot.name, slot.incarnation)
        if done not in self.done_consumers:
            path = self.folder / "hist" / f"{slot.name}.{slot.incarnation}.jsonl"
            if not (path.exists() and any(r["op"] == "end" for r in read(path))):
                return False
            self.done_consumers.add(done)
        return True

    async def monitor(self) -> None:
        """Start again each process that ended (a consumer stopping by itself, one killed)."""
        while True:
            now = time.monotonic()
            for slot in self.slots:
                if not self.ended(slot):
                    continue
                if self.final_phase:
                    if slot.role == "consumer" and not self.consumer_done(slot):
                        self.spawn(slot)
                elif now >= slot.down_until:
                    self.spawn(slot)
            await anyio.sleep(0.05)

    def kill(self, slot: Slot, restart: float | None) -> None:
        if slot.process is not None and slot.process.poll() is None:
            slot.process.send_signal(signal.SIGKILL)
            self.history.write("kill", target=slot.name, inc=slot.incarnation)
        slot.down_until = time.monotonic() + (restart if restart is not None else 1e9)
        if restart is None and slot.role == "consumer":
            slot.down_until = time.monotonic() + 5.0  # every consumer reads up to the end

    # -- faults ---------------------------------------------------------------------------

    async def play(self, schedule: list[faults.Fault], started: float) -> None:
        """Play the schedule: the network's faults in a lane of their own, beside the others.

        The network's faults never overlap one another (``faults._network``), and a stall
        played in the same lane would hold back the kills and restarts drawn during it.
        """
        async with self.control() as control, anyio.create_task_group() as tg:
            network = [f for f in schedule if f.target == "network"]
            tg.start_soon(self.lane, network, started, control)
            await self.lane([f for f in schedule if f.target != "network"], started, control)
        async with self.control() as control:
            await control("DELETE", "faults", None)

    async def lane(self, schedule: list[faults.Fault], started: float, control: Any) -> None:
        by_name = {slot.name: slot for slot in self.slots}
        for fault in schedule:
            await anyio.sleep(max(0.0, started + fault.at - time.monotonic()))
            self.history.write("fault", kind=fault.kind, target=fault.target, **fault.params)
            if fault.kind == "kill":
                self.kill(by_name[fault.target], fault.params["restart"])
            elif fault.kind == "service":
                await control("POST", "faults", fault.params)
            elif fault.kind in ("cut", "stall"):
                await self.network(fault)
            elif fault.kind == "pg_terminate" and self.cluster is not None:
                for url in (self.config["url"], self.config["cap_url"]):
                    await self.cluster.terminate_backends(url.rsplit("/", 1)[1])
            elif fault.kind == "pg_restart" and self.cluster is not None:
                await self.cluster.crash()
                self.away(+1, "crash")
                await anyio.sleep(fault.params["down"])
                await self.cluster.restart()
                self.away(-1, "crash")

    def away(self, change: int, reason: str) -> None:
        """Count the outages in progress; write ``pg_down`` at the first, ``pg_up`` after the last.

        The checker pairs each ``pg_up`` with the last ``pg_down`` before it, and a crash and
        a stall (in two lanes) may overlap: the records bracket their union, so no part of
        either is lost from the outages the checker allows waits across.
        """
        self.outages += change
        if self.outages == (1 if change > 0 else 0):
            self.history.write("pg_down" if change > 0 else "pg_up", reason=reason)

    async def network(self, fault: faults.Fault) -> None:
        """A cut, or a stall (ended by a cut if drawn so), of the ledgers' connections.

        For the ledger processes the database is away meanwhile, as when it is down: the
        runner writes ``pg_down`` and ``pg_up`` around it (:meth:`away`), and the
        checker, reading only the histories, allows a wait across it its outage allowance
        as across a crash (``checker.OUTAGE_ALLOWANCE``): a change committed as the stall
        began reaches a waiter up to 8 s late, over the most of ``checker.WAIT_BOUND``, and
        after a cut the listener reconnects with backoff. A cut is an outage of no length
        (the next connection gets through): the records bracket the instant of the reset.

        What counts as hung is unchanged: a stall is shorter than the driver's timeouts and
        far shorter than ``workload.OP_DEADLINE`` (its docstring has the sum), and it ends
        at least 1 s before the stop, so the stop's deadline and the runner's own phases
        (connected directly) never meet one.
        """
        assert self.proxy is not None
        self.away(+1, "network")
        if fault.kind == "stall":
            self.proxy.stall()
            await anyio.sleep(fault.params["seconds"])
        if fault.kind == "cut" or fault.params["cut"]:
            self.history.write("cut", sockets=self.proxy.cut())
        self.proxy.resume()
        self.away(-1, "network")

    def control(self) -> Any:
        sandbox = self.sandbox
        assert sandbox is not None
        session = aiohttp.ClientSession(
            base_url=sandbox.base_url, headers={"Authorization": f"Bearer {sandbox.api_key}"}
        )

        class Control:
            async def __aenter__(self) -> Any:
                async def call(method: str, path: str, body: Any) -> Any:
                    async with session.request(method, f"/_sandbox/{path}", json=body) as answer:
                        return (await answer.json())["data"]

                return call

            async def __aexit__(self, *exc: object) -> None:
                await session.close()

        return Control()

    # -- the run --------------------------------------------------------------------------

    async def main(self) -> int:
        schedule = faults.schedule(
            self.seed, self.seconds, self.engine == "postgresql", [s.name for s in self.slots]
        )
        print(
            f"torture: seed {self.seed}, engine {self.engine}, {self.seconds:g} s, in {self.folder}"
        )
        for fault in schedule:
            print(f"  fault {fault}")
        url, cap_url = self.start_database()
        options = ["--time-scale", "0.01", "--credits", "100000000", "--task-duration", "20-40"]
        self.sandbox = SandboxProcess("--seed", str(self.seed), *options)
        await anyio.to_thread.run_sync(self.sandbox.start)
        self.config.update(
            seed=self.seed,
            folder=str(self.folder),
            url=url,
            cap_url=cap_url,
            cap=checker.CAP,
            base_url=self.sandbox.base_url,
            api_key=self.sandbox.api_key,
            hook_secret=HOOK_SECRET,
            lanes=LANES,
            engine=self.engine,
        )
        async with anyio.create_task_group() as tg:
            receiver = await self.receiver(tg)
            if self.cluster is not None:
                # The workload's URLs through the proxy; the runner's own stay direct.
                self.proxy = Proxy(self.cluster.port)
                port = await tg.start(self.proxy.serve)
                direct = f"@127.0.0.1:{self.cluster.port}/"
                for name in ("url", "cap_url"):
                    self.config[name] = self.config[name].replace(direct, f"@127.0.0.1:{port}/")
            (self.folder / "config.json").write_text(json.dumps(self.config))
            async with AsyncVideoGen(
                api_key=self.sandbox.api_key, base_url=self.sandbox.base_url
            ) as client:
                async with Ledger.open(cap_url):
                    pass  # created before the capped writers race to create it
                async with Ledger.open(url) as ledger:
                    await ledger.create_task(client, f"torture|main|{END_KEY}|runner", key=END_KEY)
                tg.start_soon(self.monitor)
                await self.ready()
                started = time.monotonic()
                self.history.write("workload", seconds=self.seconds)
                await self.play(schedule, started)
                await anyio.sleep(max(0.0, started + self.seconds - time.monotonic()))
                await self.stop_workload()
                await self.drain(client, url, cap_url)
                self.final_phase = True
                await self.end_consumers(url)
                await self.final_state(url, cap_url)
            tg.cancel_scope.cancel()
        await receiver.cleanup()
        return self.report()

    async def ready(self) -> None:
        """Return once every first process has opened its ledger (they start slowly at once)."""
        with anyio.fail_after(DRAIN_DEADLINE):
            for slot in self.slots:
                path = self.folder / "hist" / f"{slot.name}.0.jsonl"
                while not (path.exists() and any(r["op"] == "ready" for r in read(path))):
                    await anyio.sleep(0.1)

    async def stop_workload(self) -> None:
        """The stop file; every process but the consumers ends (or is reported hung)."""
        self.history.write("stop")
        (self.folder / "stop").touch()
        deadline = time.monotonic() + OP_DEADLINE + 30
        for slot in self.slots:
            slot.down_until = 1e18
        while any(s.process is not None and s.role != "consumer" for s in self.slots):
            if time.monotonic() > deadline:
                for slot in self.slots:
                    if slot.process is not None and slot.role != "consumer":
                        self.history.write("hung", target=slot.name, inc=slot.incarnation)
                        self.kill(slot, None)
                break
            await anyio.sleep(0.1)

    async def drain(self, client: AsyncVideoGen, url: str, cap_url: str) -> None:
        """Settle every entry left, deliver every delivery due (the runner's own processes).

        The watch is ``stop_when_idle`` (an idle watcher marks a dead creator's ``creating``
        entries ``unknown``), but it is not waited on to end by itself: a project's entry
        stays ``pending`` (it never becomes terminal), and such an iteration never ends. The
        runner reads the entries instead, and stops it once nothing but projects is open.
        """
        for where in (url, cap_url):
            async with Ledger.open(where) as ledger:

                async def watch(ledger: Ledger = ledger) -> None:
                    settling = ledger.watch(
                        client, lease=5.0, claim_interval=0.2, stop_when_idle=True
                    )
                    async with settling as finished:
                        async for entry in finished:
                            self.history.write("settled", key=entry.key, state=entry.state)

                async def settled(ledger: Ledger = ledger) -> bool:
                    async for entry in ledger.entries():
                        if entry.kind != "project" and entry.state in ("creating", "pending"):
                            return False
                    return True

                await self.phase("drain_watch", watch, settled)
        async with Ledger.open(url) as ledger:
            hook = webhook(self.config["hook_url"], HOOK_SECRET, timeout=5.0)

            async def dispatch() -> None:
                await ledger.dispatch("torture", hook, lease=5.0, backlog=True)

            async def delivered() -> bool:
                async for entry in ledger.entries():
                    if entry.is_terminal and (entry.key, entry.state) not in self.delivered:
                        return False
                return True

            await self.phase("drain_dispatch", dispatch, delivered)

    async def phase(self, name: str, work: Any, done: Any) -> None:
        """Run ``work`` until ``done()`` holds (checked every half second), at most a deadline."""
        number = self.history.invoke(name)
        with anyio.move_on_after(DRAIN_DEADLINE) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(work)
                while not await done():
                    await anyio.sleep(0.5)
                tg.cancel_scope.cancel()
        if deadline.cancelled_caught:
            self.history.write(name, phase="fail", of=number, error="hung", hung=True)
        else:
            self.history.ok(name, number)

    async def end_consumers(self, url: str) -> None:
        """The end mark, then every consumer reads up to it (started again until it has)."""
        async with Ledger.open(url) as ledger:
            await ledger.update_metadata(END_KEY, {"end": True})
        number = self.history.invoke("end_mark")
        with anyio.move_on_after(DRAIN_DEADLINE) as deadline:
            while not all(
                s.process is None and self.consumer_done(s)
                for s in self.slots
                if s.role == "consumer"
            ):
                await anyio.sleep(0.1)
        if deadline.cancelled_caught:
            self.history.write("end_mark", phase="fail", of=number, error="hung", hung=True)
        else:
            self.history.ok("end_mark", number)

    async def final_state(self, url: str, cap_url: str) -> None:
        final: dict[str, Any] = {"log": [], "entries": {}, "tasks": []}
        async with Ledger.open(url) as ledger:
            with anyio.fail_after(DRAIN_DEADLINE):
                async with ledger.changes(after=0) as changes:
                    async for entry in changes:
                        final["log"].append([entry.position, entry.key, entry.version, entry.state])
                        if entry.key == END_KEY and entry.metadata.get("end"):
                            break
        for name, where in (("main", url), ("cap", cap_url)):
            async with Ledger.open(where) as ledger:
                async for entry in ledger.entries():
                    final["entries"][f"{name}|{entry.key}"] = {
                        "state": entry.state,
                        "task_id": entry.task_id,
                        "prompt": entry.request.get("prompt"),
                        "credits": entry.credits_cost,
                        "finished_at": entry.finished_at.timestamp() if entry.finished_at else None,
                        "version": entry.version,
                    }
        async with self.control() as control:
            ids = (await control("GET", "tasks?limit=1000000", None))["task_ids"]
            limit = anyio.Semaphore(16)

            async def describe(task_id: str) -> None:
                async with limit:
                    task = await control("GET", f"tasks/{task_id}", None)
                final["tasks"].append(
                    {
                        **{k: task.get(k) for k in ("task_id", "prompt", "charged", "refunded")},
                        "created": task["created_at"],
                        "finished": task["schedule"]["finish_at_wall"],
                    }
                )

            async with anyio.create_task_group() as tg:
                for task_id in ids:
                    tg.start_soon(describe, task_id)
        (self.folder / "final.json").write_text(json.dumps(final))

    def report(self) -> int:
        self.history.close()
        violations = checker.check(self.folder)
        stats = checker.summary(self.folder)
        print(f"torture: seed {self.seed}, engine {self.engine}: {stats}")
        for violation in violations:
            print(f"VIOLATION (seed {self.seed}, {self.engine}): {violation}")
        print(f"torture: seed {self.seed}, engine {self.engine}: {len(violations)} violation(s)")
        return 1 if violations else 0

    def close(self) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.kill()
                slot.process.wait()
        if self.sandbox is not None:
            self.sandbox.close()
        if self.cluster is not None:
            self.cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.torture.runner", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="the seed (default: a fresh one)")
    parser.add_argument("--seconds", type=float, default=None, help="workload seconds (default 30)")
    parser.add_argument("--minutes", type=float, default=None, help="workload minutes")
    parser.add_argument("--engine", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--folder", type=Path, default=None, help="where the histories go (kept)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    seconds = args.minutes * 60 if args.minutes is not None else (args.seconds or 30.0)
    folder = args.folder or Path(tempfile.mkdtemp(prefix=f"torture-{seed}-"))
    if (folder / "hist").exists():  # the histories are appended to: one run's only
        parser.error(f"{folder} holds the histories of another run")
    run = Run(seed, seconds, args.engine, folder)
    status = 2
    try:
        status = anyio.run(run.main)
    finally:
        run.close()
        if args.folder is None and status == 0:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"torture: the histories are kept in {folder}")
    return status


if __name__ == "__main__":
    sys.exit(main())
