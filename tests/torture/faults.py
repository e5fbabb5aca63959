"""The fault schedule: drawn from the seed alone, so ``--seed N`` replays it.

A fault is ``(at, kind, target, params)``, ``at`` in seconds from the start of the workload:

* ``kill``: SIGKILL of a workload process (``target``, e.g. ``writer1``), started again after
  ``params["restart"]`` seconds (``None``: not restarted before the workload ends);
* ``pg_restart``: PostgreSQL stopped at once (``pg_ctl stop -m immediate``, as a crash) and
  started again after ``params["down"]`` seconds;
* ``pg_terminate``: ``pg_terminate_backend`` of every connection to the ledgers' databases;
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


def schedule(seed: int, seconds: float, postgres: bool, processes: list[str]) -> list[Fault]:
    """The faults of a run of ``seconds`` of workload: one every 2.5 s on average.

    On PostgreSQL the schedule holds at least one restart and one termination of backends
    (when the run is 10 s or longer), placed by the seed.
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
    return sorted(faults)
