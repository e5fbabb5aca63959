"""The fault schedule: drawn from the seed alone, so ``--seed N`` replays it.

A fault is ``(at, kind, target, params)``, ``at`` in seconds from the start of the workload:

* ``kill``: SIGKILL of a workload process (``target``, e.g. ``writer1``), started again after
  ``params["restart"]`` seconds (``None``: not restarted before the workload ends);
* ``pg_restart``: PostgreSQL stopped at once (``pg_ctl stop -m immediate``, as a crash) and
  started again after ``params["down"]`` seconds;
* ``pg_terminate``: ``pg_terminate_backend`` of every connection to the ledgers' databases;
* ``cut`` (PostgreSQL only): every connection between the ledger processes and the server
  reset at once, both sides (the proxy of ``proxy.py``);
* ``stall`` (PostgreSQL only): nothing forwarded either way for ``params["seconds"]`` (1-8 s),
  new connections held, then forwarding resumes, or (``params["cut"]``) the stall ends with a
  cut;
* ``service``: a fault rule of the sandbox (``params``: a ``FaultRule`` as JSON) for the next
  ``times`` matching requests: late answers, 5xx, connections dropped after charging.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

CREATE = "POST /v1/video/videomodel-2"
POLL = "GET /v1/tasks"


class Fault(NamedTuple):
    at: float
    kind: str
    target: str
    params: dict[str, Any]

    def __str__(self) -> str:
        return f"t+{self.at:.1f}s {self.kind} {self.target} {self.params}"


def _service(rng: random.Random) -> tuple[str, dict[str, Any]]:
    times = rng.randrange(1, 6)
    route = rng.choice([CREATE, CREATE, POLL])
    kind = rng.choice(
        ["latency", "error", "drop_after", "drop_after"]
        if route == CREATE
        else ["latency", "error"]
    )
    rule: dict[str, Any] = {"route": route, "times": times}
    if kind == "latency":
        rule["latency"] = round(rng.uniform(0.5, 4.0), 2)
    elif kind == "error":
        rule["error_rate"] = 1.0
    else:
        rule["drop_after_rate"] = 1.0
    return route, rule


def _network(seed: int, seconds: float) -> list[Fault]:
    """The network's faults, from a stream of draws of their own: one every 6 s on average.

    A stream of its own keeps the other faults of a seed what they were before the network
    had any (the mutants' seeds still find what they were chosen for). They never overlap (a
    stall's successor comes after its end), so the runner plays them in a lane of their own,
    beside the others, and a stall delays no other fault. A stall ends at least 1 s before the
    workload does (shortened when drawn longer): the run lasts its seconds and the stop finds
    the network flowing. A run of 10 s or longer begins with one of each, in a drawn order (a
    stall drawn first leaves room for the cut after it).
    """
    rng = random.Random(f"network:{seed}")
    first = rng.sample(["cut", "stall"], 2) if seconds >= 10 else []
    found: list[Fault] = []
    at = rng.uniform(2.0, 6.0)
    while at < seconds - 2.0:
        kind = first.pop(0) if first else rng.choice(["cut", "stall", "stall"])
        length = 0.0
        if kind == "cut":
            found.append(Fault(round(at, 2), kind, "network", {}))
        else:
            room = seconds - (3.5 if first else 1.0) - at
            length = round(max(1.0, min(rng.uniform(1.0, 8.0), room)), 2)
            cut = rng.random() < 0.3
            found.append(Fault(round(at, 2), kind, "network", {"seconds": length, "cut": cut}))
        at += length + (rng.uniform(0.2, 1.0) if first else rng.expovariate(1 / 6.0))
    return found


def schedule(seed: int, seconds: float, postgres: bool, processes: list[str]) -> list[Fault]:
    """The faults of a run of ``seconds`` of workload: one every 2.5 s on average.

    On PostgreSQL the schedule holds at least one restart and one termination of backends
    (when the run is 10 s or longer), placed by the seed, and the network's faults
    (:func:`_network`).
    """
    rng = random.Random(f"faults:{seed}")
    kinds = (
        ["kill"] * 5 + ["service"] * 3 + (["pg_restart", "pg_terminate"] * 1 if postgres else [])
    )
    faults: list[Fault] = []
    at = rng.uniform(1.0, 3.0)
    while at < seconds - 2.0:
        kind = rng.choice(kinds)
        if kind == "kill":
            target = rng.choice(processes)
            restart = None if rng.random() < 0.15 else round(rng.uniform(0.0, 3.0), 2)
            faults.append(Fault(round(at, 2), kind, target, {"restart": restart}))
        elif kind == "service":
            route, rule = _service(rng)
            faults.append(Fault(round(at, 2), kind, route, rule))
        elif kind == "pg_restart":
            faults.append(
                Fault(round(at, 2), kind, "postgres", {"down": round(rng.uniform(0.5, 5.0), 2)})
            )
        else:
            faults.append(Fault(round(at, 2), kind, "postgres", {}))
        at += rng.expovariate(1 / 2.5)
    if postgres and seconds >= 10:
        present = {f.kind for f in faults}
        if "pg_restart" not in present:
            faults.append(
                Fault(
                    round(rng.uniform(3, seconds - 5), 2), "pg_restart", "postgres", {"down": 2.0}
                )
            )
        if "pg_terminate" not in present:
            faults.append(
                Fault(round(rng.uniform(3, seconds - 5), 2), "pg_terminate", "postgres", {})
            )
    return sorted(faults + (_network(seed, seconds) if postgres else []), key=lambda f: f[:3])
