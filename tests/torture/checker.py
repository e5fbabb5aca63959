"""The checker: the ledger's promises, judged from the histories and the final state only.

``check(folder)`` reads ``hist/*.jsonl`` (each process's operations, the runner's faults and
kills, the receiver's deliveries) and ``final.json`` (every change from position 0 up to the
end mark, every entry of both ledgers, every task the sandbox charged) and returns one line
per violation, naming the operations involved and their times:

* nothing paid is lost: each task the sandbox charged is in the ledger with its id (or is
  the create of an entry left ``unknown``, which says it may have been charged);
* no key is paid twice (but for each ``resend`` asked);
* the capped ledger's charges never pass its ``max_credits``;
* every consumer yields every committed change exactly once, in position order, across its
  restarts: its (position, key, version) agree with the final log, none missing up to the end
  mark (a change is committed when it is in the final log or was seen by anyone);
* every entry that finished is delivered to the webhook at least once, and every delivery's
  signature is valid;
* every ``wait`` returns within :data:`WAIT_BOUND` of the finish (more across a database
  outage), and a ``wait`` never times out when the entry finished within its timeout;
* no operation outlived its deadline or never returned in a process that was not killed,
  and no process ended with an error or hung at the stop.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.torture.history import read_all

TERMINAL = {"succeeded", "failed", "error"}
WAIT_BOUND = 10.0
"""Seconds a wait may return after the finish was recorded (the listener's read, a busy box)."""
OUTAGE_ALLOWANCE = 45.0
"""More seconds when the database was away meanwhile (the listener reconnects with backoff)."""
CAP = 100.0
"""The capped ledger's ``max_credits``: ten creates of its price, reached early and often."""
KEYED_OPS = ("create", "update", "resend", "create_project", "create_videos")


def _at(record: dict[str, Any], start: float) -> str:
    return f"{record['f']}#{record['n']} at t+{record['t'] - start:.2f}s"


class History:
    """The records of a run, indexed."""

    def __init__(self, folder: Path) -> None:
        self.records = read_all(folder / "hist")
        self.final = json.loads((folder / "final.json").read_text())
        self.start = min((r["t"] for r in self.records), default=0.0)
        self.runner = [r for r in self.records if r["f"] == "runner.0"]
        self.killed = {(r["target"], r["inc"]) for r in self.runner if r["op"] == "kill"}
        self.outages: list[tuple[float, float]] = []
        down = None
        for r in self.runner:
            if r["op"] == "pg_down":
                down = r["t"]
            elif r["op"] == "pg_up" and down is not None:
                self.outages.append((down, r["t"]))
            elif r["op"] == "fault" and r["kind"] == "pg_terminate":
                self.outages.append((r["t"], r["t"] + 1.0))
        self.by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        invocations = {(r["f"], r["n"]): r for r in self.records if r.get("phase") == "invoke"}
        for r in self.records:
            # A keyless create's key is known from its outcome: listed by its invocation.
            asked = invocations.get((r["f"], r.get("of")), r)
            if r.get("key") and r["op"] in KEYED_OPS and (asked is r or not asked.get("key")):
                self.by_key[r["key"]].append(asked)

    def ops_on(self, key: str) -> str:
        # A project's task or batch (``KEY/...``) is made by its project's operations.
        ops = (self.by_key.get(key) or self.by_key.get(key.split("/", maxsplit=1)[0], []))[:6]
        return ", ".join(f"{r['op']} {_at(r, self.start)}" for r in ops) or "no operation recorded"

    def outage_between(self, low: float, high: float) -> bool:
        return any(a <= high and b >= low for a, b in self.outages)


def _consumers(h: History) -> list[str]:
    log = {pos: (key, version) for pos, key, version, _ in h.final["log"]}
    if not log:
        return ["the final log is empty: the run did not reach the end mark"]
    found: list[str] = []
    streams: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ends: dict[str, bool] = defaultdict(bool)
    for r in sorted(
        (r for r in h.records if r["p"].startswith("consumer")),
        key=lambda r: (r["p"], int(r["f"].split(".")[1]), r["n"]),
    ):
        if r["op"] == "change":
            streams[r["p"]].append(r)
        ends[r["p"]] |= r["op"] == "end"
    for name, stream in sorted(streams.items()):
        if not ends[name]:
            found.append(f"{name} never read up to the end mark")
        last: dict[str, Any] | None = None
        seen: set[int] = set()
        for r in stream:
            pos = r["pos"]
            if last is not None and pos <= last["pos"]:
                twice = "again" if pos in seen else "out of position order"
                found.append(
                    f"{name} yielded position {pos} ({r['key']} v{r['version']}) {twice}"
                    f" at {_at(r, h.start)},"
                    f" after position {last['pos']} at {_at(last, h.start)}"
                )
            elif pos not in log:
                found.append(
                    f"{name} yielded position {pos} ({r['key']} v{r['version']}) at"
                    f" {_at(r, h.start)},"
                    f" not in the final log"
                )
            elif log[pos] != (r["key"], r["version"]):
                found.append(
                    f"{name} yielded position {pos} as {r['key']} v{r['version']} at"
                    f" {_at(r, h.start)};"
                    f" the final log has {log[pos]}"
                )
            seen.add(pos)
            last = r if last is None or pos > last["pos"] else last
        top = max(seen, default=0)
        times = {r["pos"]: r for r in stream}
        for pos in sorted(p for p in log if p <= top and p not in seen):
            key, version = log[pos]
            before = max((p for p in times if p < pos), default=None)
            after = min((p for p in times if p > pos), default=None)
            between = ", ".join(
                f"{'before' if p == before else 'after'}: position {p} at {_at(times[p], h.start)}"
                for p in (before, after)
                if p is not None
            )
            found.append(
                f"MISSED CHANGE: {name} never yielded position {pos} ({key!r} version {version});"
                f" {between}; operations on the key: {h.ops_on(key)}"
            )
    if not streams:
        found.append("no consumer yielded anything")
    return found


def _money(h: History) -> list[str]:
    entries = h.final["entries"]
    ids = {e["task_id"] for e in entries.values() if e["task_id"]}
    unknown = {
        (name.split("|", 1)[0], e["prompt"])
        for name, e in entries.items()
        if e["state"] == "unknown"
    }
    resends = Counter(
        r["key"] for r in h.records if r["op"] == "resend" and r.get("phase") == "invoke"
    )
    paid: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    lost_by_key: Counter[str] = Counter()
    found: list[str] = []
    for task in h.final["tasks"]:
        prompt = task.get("prompt") or ""
        parts = prompt.split("|")
        if len(parts) < 4 or parts[0] != "torture" or not task.get("charged"):
            continue
        ledger, key = parts[1], parts[2]
        # A resend replaces the id of an unknown entry: the earlier charge is then counted
        # against the key's resends below, not lost.
        lost = task["task_id"] not in ids and (ledger, prompt) not in unknown
        lost_by_key[key] += lost
        if lost and lost_by_key[key] > resends[key]:
            found.append(
                f"PAID AND LOST: task {task['task_id']} ({task['charged']} credits, prompt"
                f" {prompt!r}) is in no ledger entry; operations on {key!r}: {h.ops_on(key)}"
            )
        if key != "-":
            paid[(ledger, key)].append(task)
    for (ledger, key), tasks in sorted(paid.items()):
        if len(tasks) > 1 + resends[key]:
            listed = ", ".join(t["task_id"] for t in tasks)
            found.append(
                f"PAID TWICE: {ledger} key {key!r} charged {len(tasks)} times ({listed}) with"
                f" {resends[key]} resend(s); operations: {h.ops_on(key)}"
            )
    found += _cap(h)
    return found


def _cap(h: History) -> list[str]:
    """The capped ledger's live charges never pass its cap, at any moment.

    A task's charge lives from its creation until its refund (a failed task's, at its
    finish, as the sandbox says). The ledger frees a reservation only once a watcher recorded
    the refund, after it happened: if the ledger kept its cap, the sandbox's charges did too.
    """
    events: list[tuple[float, int, float, str]] = []
    for task in h.final["tasks"]:
        if (task.get("prompt") or "").startswith("torture|cap|") and task.get("charged"):
            created = datetime.fromisoformat(task["created"].replace("Z", "+00:00")).timestamp()
            events.append((created, 1, float(task["charged"]), task["task_id"]))
            if task.get("refunded"):
                events.append((task["finished"], 0, -float(task["charged"]), task["task_id"]))
    live, found = 0.0, []
    for at, _, amount, task_id in sorted(events):
        live += amount
        if live > CAP + 1e-9:
            found.append(
                f"CAP PASSED: the capped ledger's live charges reached {live:g} credits (cap"
                f" {CAP:g}) at t+{at - h.start:.2f}s with task {task_id}"
            )
            break
    return found


def _deliveries(h: History) -> list[str]:
    found: list[str] = []
    delivered: set[tuple[str, str]] = set()
    for r in h.records:
        if r["op"] == "delivery":
            if not r["valid"]:
                found.append(
                    f"BAD SIGNATURE: delivery {r['id']} of {r['key']!r} at {_at(r, h.start)}"
                )
            else:
                delivered.add((r["key"], r["state"]))
    for name, entry in sorted(h.final["entries"].items()):
        ledger, key = name.split("|", 1)
        if (
            ledger == "main"
            and entry["state"] in TERMINAL
            and (key, entry["state"]) not in delivered
        ):
            found.append(
                f"NOT DELIVERED: {key!r} finished {entry['state']} (finished_at"
                f" t+{(entry['finished_at'] or h.start) - h.start:.2f}s) was never delivered"
            )
    return found


def _waits(h: History) -> list[str]:
    found: list[str] = []
    invocations = {(r["f"], r["n"]): r for r in h.records if r.get("phase") == "invoke"}
    resent = {r["key"] for r in h.records if r["op"] == "resend"}
    for r in h.records:
        if r["op"] != "wait" or r.get("phase") not in ("ok", "fail") or r["key"] in resent:
            continue
        asked = invocations.get((r["f"], r["of"]))
        entry = h.final["entries"].get(f"main|{r['key']}")
        if asked is None or entry is None or entry["finished_at"] is None:
            continue
        finished = entry["finished_at"]
        bound = WAIT_BOUND + (OUTAGE_ALLOWANCE if h.outage_between(asked["t"], r["t"]) else 0.0)
        if r["phase"] == "ok" and r["t"] - max(finished, asked["t"]) > bound:
            found.append(
                f"LATE WAIT: wait({r['key']!r}) {_at(asked, h.start)} returned at"
                f" t+{r['t'] - h.start:.2f}s,"
                f" {r['t'] - max(finished, asked['t']):.1f}s after the finish recorded at"
                f" t+{finished - h.start:.2f}s"
            )
        elif (
            r["phase"] == "fail"
            and r["error"] == "WaitTimeoutError"
            and finished + bound < asked["t"] + asked["timeout"]
        ):
            found.append(
                f"WAIT TIMED OUT: wait({r['key']!r}, timeout={asked['timeout']})"
                f" {_at(asked, h.start)}"
                f" timed out at t+{r['t'] - h.start:.2f}s though the entry finished at"
                f" t+{finished - h.start:.2f}s"
            )
    return found


def _liveness(h: History) -> list[str]:
    found: list[str] = []
    answered = {(r["f"], r["of"]) for r in h.records if "of" in r}
    for r in h.records:
        name, inc = r["f"].split(".")[0], int(r["f"].split(".")[1])
        if r.get("hung"):
            found.append(
                f"HUNG: {r['op']} of {name} past its deadline ({_at(r, h.start)}): {r.get('key')}"
            )
        elif (
            r.get("phase") == "invoke"
            and (r["f"], r["n"]) not in answered
            and (name, inc) not in h.killed
        ):
            found.append(
                f"NEVER RETURNED: {r['op']} {_at(r, h.start)} ({r.get('key')}) in a process that"
                f" was not killed"
            )
    for r in h.runner:
        if r["op"] == "hung":
            found.append(
                f"HUNG PROCESS: {r['target']}.{r['inc']} did not end within its deadline after the"
                f" stop"
            )
        elif r["op"] == "exited" and r["code"] != 0 and (r["target"], r["inc"]) not in h.killed:
            found.append(
                f"PROCESS FAILED: {r['target']}.{r['inc']} ended with status {r['code']}"
                f" at {_at(r, h.start)}"
                f" (see logs/{r['target']}.{r['inc']}.log)"
            )
    return found


def check(folder: Path) -> list[str]:
    """Every violation of the run kept in ``folder`` (see the module docstring)."""
    h = History(folder)
    return [*_consumers(h), *_money(h), *_deliveries(h), *_waits(h), *_liveness(h)]


def summary(folder: Path) -> str:
    """What the run did, in one line."""
    h = History(folder)
    ops = Counter(f"{r['op']}:{r['phase']}" for r in h.records if r.get("phase") in ("ok", "fail"))
    faults = Counter(r["kind"] for r in h.runner if r["op"] == "fault")
    yields = sum(r["op"] == "change" for r in h.records)
    deliveries = sum(r["op"] == "delivery" for r in h.records)
    charged = sum(1 for t in h.final["tasks"] if t.get("charged"))
    return (
        f"{len(h.final['log'])} changes in the log, {yields} yielded to consumers, {charged} tasks"
        f" charged, {deliveries} deliveries; operations {dict(sorted(ops.items()))}; faults"
        f" {dict(faults)}"
    )


if __name__ == "__main__":
    problems = check(Path(sys.argv[1]))
    print(summary(Path(sys.argv[1])))
    print("\n".join(problems) or "no violation")
    sys.exit(1 if problems else 0)
