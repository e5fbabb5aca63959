"""One workload process: ``python -m tests.torture.workload CONFIG ROLE NUMBER INCARNATION``.

Each is a seeded random mix of the ledger's public API (``Ledger``, ``AsyncVideoGen``,
``webhook``), appending every operation's invocation and outcome to its own history file.
Roles:

* ``writer``: creates with fresh keys, keys shared between processes, keys it created
  before, and no key; metadata updates; ``resend`` of some unknown entries. Several
  operations in flight at once.
* ``capped``: creates on the capped ledger (``max_credits``), several in flight.
* ``watcher``: ``ledger.watch`` with a short lease, settling entries.
* ``consumer``: ``ledger.changes(after=P)`` where ``P`` is the last position its earlier
  incarnations recorded; ends by itself after a random number of changes (the runner starts
  it again, a new process), and in the last phase once it read the runner's end mark.
* ``waiter``: ``ledger.wait`` on keys it hears of becoming pending.
* ``dispatcher``: ``ledger.dispatch`` of a signed webhook to the runner's receiver.

The process ends when the runner creates the stop file (the consumers: at the end mark).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from tests.torture.history import Recorder, read
from videogen_async import (
    AmbiguousCreateError,
    AsyncVideoGen,
    Ledger,
    LedgerError,
    webhook,
)

END_KEY = "torture-end"
"""The entry whose metadata ``{"end": True}`` the runner writes last: the consumers stop there."""
SHARED_WINDOW = 0.5
"""Seconds during which the writers of every process share the same two fresh keys."""
OP_DEADLINE = 90.0
"""Seconds any one operation may take (the ledger's outage timeout, 30 s, twice, and more).

It holds a network stall too (``faults.py``): a statement or a connect held at most 8 s, under
the driver's 10 s connect and pool timeouts and its 60 s statement timeout, is late, not
failed; a stall ended by a cut is one more outage the ledger retries for up to 30 s. A stall
(network lane) and a crash (the other lane) may follow each other at once: 8 s, then the
crash's outage and 30 s of retries, still under 90 s.
"""
CAP_DURATION = 5


def price(model: str, duration: int) -> float:
    """The capped ledger's estimate: the sandbox's highest price per second, 2 credits."""
    return 2.0 * duration


class Process:
    """What every role shares: its config, its history, its random draws, its stop."""

    def __init__(self, config: dict[str, Any], role: str, number: int, incarnation: int) -> None:
        self.config, self.role, self.number, self.incarnation = config, role, number, incarnation
        self.name = f"{role}{number}"
        folder = Path(config["folder"])
        self.history = Recorder(folder / "hist" / f"{self.name}.{incarnation}.jsonl", self.name)
        self.stop_file = folder / "stop"
        self.seed = f"{config['seed']}:{self.name}:{incarnation}"
        self.count = 0

    def rng(self, lane: int | str) -> random.Random:
        """The random draws of one lane of operations (the same for the same seed)."""
        return random.Random(f"{self.seed}:{lane}")

    def stopping(self) -> bool:
        return self.stop_file.exists()

    def client(self) -> AsyncVideoGen:
        return AsyncVideoGen(api_key=self.config["api_key"], base_url=self.config["base_url"])

    async def op(
        self,
        op: str,
        call: Callable[[], Awaitable[Any]],
        *,
        deadline: float = OP_DEADLINE,
        **fields: Any,
    ) -> Any:
        """Run one operation under its deadline, recorded; its result, or ``None`` if it raised.

        A watch or a dispatch runs until the process stops: its deadline is ``math.inf``.
        """
        number = self.history.invoke(op, **fields)
        try:
            with anyio.move_on_after(deadline) as deadline_scope:
                result = await call()
            if deadline_scope.cancelled_caught:
                self.history.write(op, phase="fail", of=number, error="hung", hung=True, **fields)
                return None
        except anyio.get_cancelled_exc_class():
            self.history.write(op, phase="cancelled", of=number, **fields)
            raise
        except Exception as exc:
            extra = {"key": exc.key} if isinstance(exc, AmbiguousCreateError) else {}
            self.history.fail(op, number, exc, **{**fields, **extra})
            return None
        self.history.ok(op, number, **{**fields, **describe(result)})
        return result

    async def until_stopped(self) -> None:
        while not self.stopping():
            await anyio.sleep(0.1)


def describe(result: Any) -> dict[str, Any]:
    """What a history keeps of an operation's result."""
    if isinstance(result, list):
        return {"keys": [entry.key for entry in result]}
    if result is None or not hasattr(result, "state"):
        return {} if result is None else {"value": result if isinstance(result, int) else None}
    return {
        "key": result.key,
        "state": result.state,
        "task_id": result.task_id,
        "credits": result.credits_cost,
        "version": result.version,
        "finished_at": result.finished_at.timestamp() if result.finished_at else None,
    }


async def writer(proc: Process, url: str, cap: dict[str, Any], lanes: int, capped: bool) -> None:
    """Creates and metadata updates, ``lanes`` at once, until the stop file, in sessions.

    Each session is a ledger opened afresh (its own connections, its own creator) whose lanes
    start together and end after a drawn number of operations: the first writes of a process
    are where transactions take their positions in another order than they began (the
    burst of a fresh pool's first creates, grouped in one transaction each), and sessions
    make many such starts in one process.
    """
    mine: dict[int, list[str]] = {lane: [] for lane in range(lanes)}
    async with proc.client() as client:
        session = 0
        while not proc.stopping():
            ledger = await _open(proc, url, cap)
            if session == 0:
                proc.history.write("ready")
            budget = proc.rng(f"session.{session}").randrange(5, 40)
            try:
                async with anyio.create_task_group() as tg:
                    if capped:  # refunds recorded free budget: the cap is reached again and again
                        tg.start_soon(_settle, proc, ledger, client)
                    async with anyio.create_task_group() as writes:
                        for lane in range(lanes):
                            args = (ledger, client, session, lane, budget, capped, mine[lane])
                            writes.start_soon(_writer_lane, proc, *args)
                    tg.cancel_scope.cancel()
            finally:
                await ledger.aclose()
            session += 1


async def _settle(proc: Process, ledger: Ledger, client: AsyncVideoGen) -> None:
    async with ledger.watch(client, lease=5.0, claim_interval=0.2) as finished:
        async for entry in finished:
            proc.history.write("settled", key=entry.key, state=entry.state)


async def _writer_lane(
    proc: Process,
    ledger: Ledger,
    client: AsyncVideoGen,
    session: int,
    lane: int,
    budget: int,
    capped: bool,
    mine: list[str],
) -> None:
    rng = proc.rng(f"{session}.{lane}")
    for n in range(budget):
        if proc.stopping():
            return
        tag = f"{proc.name}.{proc.incarnation}.{session}.{lane}.{n}"
        draw = rng.random()
        if capped:
            key: str | None = f"cap-{tag}"
        elif draw < 0.2 and mine:
            key = rng.choice(mine)
            patch = {"n": rng.randrange(5), "by": proc.name} if rng.random() < 0.8 else {"n": None}
            await proc.op("update", partial(ledger.update_metadata, key, patch), key=key)
            continue
        elif draw < 0.3:
            await _project(proc, ledger, client, rng, f"p-{tag}")
            continue
        elif draw < 0.4:  # keys of this instant: creates of other processes race for them
            key = f"shared-{int(time.time() / SHARED_WINDOW)}-{rng.randrange(2)}"
        elif draw < 0.45 and mine:
            key = rng.choice(mine)
        elif draw < 0.52:
            key = None
        else:
            key = f"k-{tag}"
        await _create(proc, ledger, client, rng, key, tag, capped, mine)
        if capped:
            await anyio.sleep(rng.uniform(0, 0.05))  # the cap is reached soon: pace the rest


async def _create(
    proc: Process,
    ledger: Ledger,
    client: AsyncVideoGen,
    rng: random.Random,
    key: str | None,
    tag: str,
    capped: bool,
    mine: list[str],
) -> None:
    # The prompt names the key and the invocation: the sandbox's record of each charge is
    # so traced back to a key (a resend sends the same prompt again).
    # Some tasks fail and are refunded: under the cap, their credits come back and the
    # capped creates cross the cap again and again.
    fail = " sandbox-fail" if rng.random() < (0.5 if capped else 0.1) else ""
    prompt = f"torture|{'cap' if capped else 'main'}|{key or '-'}|{tag}{fail}"
    duration = CAP_DURATION if capped else rng.choice([4, 5, 6])
    metadata = {"by": proc.name, "tag": tag}
    entry = await proc.op(
        "create",
        lambda: ledger.create_task(client, prompt, key=key, duration=duration, metadata=metadata),
        key=key,
        prompt=prompt,
    )
    if entry is not None and key is not None and key not in mine and not capped:
        mine.append(key)
    if entry is None and key is not None and rng.random() < 0.3:
        current = await ledger.get(key) if not proc.stopping() else None
        if current is not None and current.state == "unknown":
            await proc.op("resend", lambda: ledger.resend(client, key), key=key)


async def _project(
    proc: Process, ledger: Ledger, client: AsyncVideoGen, rng: random.Random, key: str
) -> None:
    """A manual project, then once its script is ready a batch of up to 4 videos.

    The batch's tasks are recorded in one transaction with the batch's answer: a write of
    several changes, between which other processes' writes take their positions.
    """
    ref, images = "https://cdn.example.com/ref.mp4", ["https://cdn.example.com/p.png"]
    call = partial(ledger.create_project, client, ref, images, key=key, mode="manual")
    project = await proc.op("create_project", call, key=key)
    if project is None or project.project_id is None:
        return
    with anyio.move_on_after(30):
        while True:
            with contextlib.suppress(Exception):  # asked again: the service may be faulty
                if (await client.projects.get(project.project_id)).status == "succeeded":
                    break
            await anyio.sleep(0.05)
    call = partial(ledger.create_videos, client, key, out_number=rng.randrange(2, 5))
    await proc.op("create_videos", call, key=key)


async def watcher(proc: Process, ledger: Ledger) -> None:
    """A watcher settling entries, until the stop file."""
    async with proc.client() as client, anyio.create_task_group() as tg:

        async def watch() -> None:
            async with ledger.watch(client, lease=5.0, claim_interval=0.2) as finished:
                async for entry in finished:
                    proc.history.write("settled", key=entry.key, state=entry.state)

        tg.start_soon(partial(proc.op, "watch", watch, deadline=math.inf))
        await proc.until_stopped()
        tg.cancel_scope.cancel()


async def dispatcher(proc: Process, ledger: Ledger) -> None:
    """A dispatcher of signed webhooks to the runner's receiver, until the stop file."""
    hook = webhook(proc.config["hook_url"], proc.config["hook_secret"], timeout=5.0)
    async with anyio.create_task_group() as tg:
        dispatch = partial(ledger.dispatch, "torture", hook, lease=5.0, backlog=True)
        tg.start_soon(partial(proc.op, "dispatch", dispatch, deadline=math.inf))
        await proc.until_stopped()
        tg.cancel_scope.cancel()


def _resume_position(proc: Process) -> int:
    """The last position this consumer's earlier incarnations recorded (0: none)."""
    folder = Path(proc.config["folder"]) / "hist"
    last = 0
    for path in folder.glob(f"{proc.name}.*.jsonl"):
        if int(path.stem.split(".")[1]) < proc.incarnation:
            last = max([last, *(r["pos"] for r in read(path) if r["op"] == "change")])
    return last


async def consumer(proc: Process, ledger: Ledger) -> None:
    """``changes(after=P)`` from where the earlier incarnations stopped; ends by itself."""
    after = _resume_position(proc)
    budget = proc.rng(0).randrange(30, 400)
    proc.history.write("resume", after=after, budget=budget)
    # No deadline of its own: the last phase waits for the runner's end mark, which comes
    # after the drain (the runner reports a consumer that never reads up to it).
    async with ledger.changes(after=after) as changes:
        async for entry in changes:
            proc.history.write(
                "change",
                pos=entry.position,
                key=entry.key,
                version=entry.version,
                state=entry.state,
            )
            if entry.key == END_KEY and entry.metadata.get("end"):
                proc.history.write("end")
                return
            budget -= 1
            if budget <= 0 and not proc.stopping():
                return


async def waiter(proc: Process, ledger: Ledger) -> None:
    """Waits on entries it hears of becoming pending, several at once, until the stop file."""
    rng = proc.rng(0)
    async with anyio.create_task_group() as tg:
        limit = anyio.CapacityLimiter(8)

        async def wait_one(key: str, timeout: float) -> None:
            async with limit:
                call = lambda: ledger.wait(key, timeout=timeout)  # noqa: E731
                await proc.op("wait", call, key=key, timeout=timeout)

        async def hear() -> None:
            async with ledger.changes(states=["pending"]) as changes:
                async for entry in changes:
                    if rng.random() < 0.3 and limit.borrowed_tokens < 8:
                        tg.start_soon(wait_one, entry.key, rng.choice([5.0, 30.0]))

        tg.start_soon(hear)
        await proc.until_stopped()
        tg.cancel_scope.cancel()


async def _open(proc: Process, url: str, cap: dict[str, Any]) -> Ledger:
    """The ledger, opened again while the database is away (an open does not wait)."""
    with anyio.fail_after(OP_DEADLINE):
        while True:
            try:
                return await Ledger.open(url, **cap)
            except LedgerError as exc:
                proc.history.write(
                    "open", phase="retry", error=type(exc).__name__, msg=str(exc)[:200]
                )
                await anyio.sleep(0.2)


async def main(config: dict[str, Any], role: str, number: int, incarnation: int) -> None:
    proc = Process(config, role, number, incarnation)
    proc.history.write("start")
    capped = role == "capped"
    url = config["cap_url" if capped else "url"]
    cap = {"max_credits": config["cap"], "price_estimate": price} if capped else {}
    try:
        if role in ("writer", "capped"):
            await writer(proc, url, cap, config["lanes"], capped)
            return
        ledger = await _open(proc, url, cap)
        proc.history.write("ready")
        try:
            await globals()[role](proc, ledger)
        finally:
            await ledger.aclose()
    finally:
        proc.history.write("exit")
        proc.history.close()


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        loaded = json.load(file)
    asyncio.run(main(loaded, sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
