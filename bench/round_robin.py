"""The p95 lag no poller can beat on a rate-bound batch: a simulation with no overhead at all.

``bench/gather.py`` measures 100,000 ids finishing uniformly 1-60 s after creation, all
created together: every pending id then has the same chance of having finished, so the best
a poller can do is visit the ids it has not seen finish in turn, as fast as the request rate
allows. This script simulates exactly that (no network, no client: each poll takes
``1 / rate`` seconds and finds the task finished if its finish time has passed) and prints
the p50 and p95 lag at several request rates, and with the first polls held back, for
comparison with the gather's measured lag at the rate it reached.

Run: ``python bench/round_robin.py`` (a few seconds; ``--quick``: 10,000 ids).
"""

from __future__ import annotations

import argparse
import collections
import random

SEED = 1


def round_robin(ids: int, rate: float, *, start: float = 0.0) -> tuple[float, float, float]:
    """(p50 lag, p95 lag, time of the last finish seen) of the unseen ids polled in turn."""
    rng = random.Random(SEED)
    finish = [rng.uniform(1.0, 60.0) for _ in range(ids)]
    queue = collections.deque(range(ids))
    now = start
    step = 1.0 / rate
    lags: list[float] = []
    while queue:
        index = queue.popleft()
        now += step
        if finish[index] <= now:
            lags.append(now - finish[index])
        else:
            queue.append(index)
    lags.sort()
    return lags[len(lags) // 2], lags[int(0.95 * (len(lags) - 1))], now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10,000 ids instead of 100,000")
    args, _ = parser.parse_known_args()
    ids = 10_000 if args.quick else 100_000
    print(f"# bench/round_robin.py: {ids:,} ids finishing uniformly 1-60 s after creation\n")
    print(f"{'requests/s':>10} {'first poll s':>12} {'lag p50 s':>10} {'lag p95 s':>10}")
    for rate in (1_000, 1_432, 2_000, 2_864, 4_000):
        scaled = rate * ids / 100_000
        p50, p95, _ = round_robin(ids, scaled)
        print(f"{scaled:10.0f} {0.0:12.1f} {p50:10.1f} {p95:10.1f}")
    for start in (5.0, 10.0, 20.0):
        scaled = 1_432 * ids / 100_000
        p50, p95, _ = round_robin(ids, scaled, start=start)
        print(f"{scaled:10.0f} {start:12.1f} {p50:10.1f} {p95:10.1f}")


if __name__ == "__main__":
    main()
