"""The chaos run: 1,000 tasks created and gathered through faults, and nothing is lost.

A sandbox on a fast clock injects, on the status reads, 10 % 5xx (envelopes and proxy HTML
pages) and 5 % 429; on the create route, dropped connections before and after the create
takes effect (plus a few 429 and 5xx); latency jitter everywhere. 1,000 direct tasks are
created through the SDK at a bounded concurrency, then every id the caller got is gathered
with ``gather_until_done``. Afterwards the caller's view is compared with the sandbox's:

* every task the sandbox created is known to the caller by its id, or is covered by an error
  that says the create may have taken effect; such errors are at least as many as the
  created-but-unknown tasks, and an error that says "not taken effect" created nothing;
* no request created two tasks and no create was sent twice after it may have taken effect:
  the create requests that reached the handler equal the tasks created, and the ids the
  caller got are distinct and all real;
* every known id has a terminal result from ``gather_until_done``;
* nothing is left open: no asyncio task, no connection checked out of the client's pool, no
  request in flight at the sandbox, no file descriptor.

The figures (requests made, faults injected by kind, tasks created, known, results, lost)
go to ``.chaos/figures.json`` and to the end of pytest's terminal report.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from videogen_async import (
    APIConnectionError,
    APIStatusError,
    AsyncVideoGen,
    BackoffPolicy,
    CreatedTask,
    PollPolicy,
    Task,
    TaskPollError,
    VideoGenError,
)
from videogen_async.testing import SandboxServer

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / ".chaos" / "figures.json"

TASKS = 1_000
CREATE_CONCURRENCY = 50
GATHER_CONCURRENCY = 32
CONNECTION_LIMIT = 64
CREATE = "POST /v1/video/videomodel-2"
READ = "GET /v1/tasks"
#: Fault kinds with which the sandbox's handler never ran (nothing created).
NOT_HANDLED = {"drop_before", "rate_limit", "error", "html"}

# Polls spaced for a fast clock (tasks run 0.1-0.3 s of real time) and a fast recovery from
# 429s, so that the run is about the faults and not about waiting.
FAST = PollPolicy(
    min_interval=0.05,
    max_interval=0.5,
    dense_interval=0.05,
    sparse_cap=0.5,
    coalesce=0.005,
)
FAST_BACKOFF = BackoffPolicy(
    initial_delay=0.02,
    max_delay=0.2,
    rate_limit_pause=0.01,
    max_retry_after=0.1,
    rate_recovery=5.0,
)


class _Summary:
    """A pytest plugin, registered by the test, that prints the figures in the terminal report
    (whatever the capture mode)."""

    def __init__(self, figures: dict[str, Any]) -> None:
        self.figures = figures

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.section("chaos run figures")
        for key, value in self.figures.items():
            terminalreporter.write_line(f"{key:>28}: {value}")


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def _settled(condition: Any, what: str, *, deadline: float = 5.0) -> None:
    """Poll ``condition()`` until true, yielding to the loop, for at most ``deadline`` s."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            pytest.fail(f"still open after {deadline} s: {what}")
        await asyncio.sleep(0.01)


async def _create_all(client: AsyncVideoGen) -> tuple[list[str], list[VideoGenError]]:
    """Create ``TASKS`` tasks, at most ``CREATE_CONCURRENCY`` at once."""
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(index: int) -> CreatedTask | VideoGenError:
        async with gate:
            try:
                return await client.tasks.create(f"chaos {index}: a paper boat on a lake")
            except (APIConnectionError, APIStatusError) as exc:
                return exc

    outcomes = await asyncio.gather(*(one(i) for i in range(TASKS)))
    ids = [o.task_id for o in outcomes if isinstance(o, CreatedTask)]
    errors = [o for o in outcomes if isinstance(o, VideoGenError)]
    assert len(ids) + len(errors) == TASKS
    return ids, errors


@pytest.mark.slow
async def test_chaos_run_loses_nothing(request: pytest.FixtureRequest) -> None:
    started = time.monotonic()
    fds_before = _open_fds()
    tasks_before = asyncio.all_tasks()

    server = SandboxServer(
        seed=20261121,
        time_scale=0.01,
        task_duration=(50.0, 250.0),  # 0.5-2.5 s of real time
        failure_rate=0.05,
        error_rate=0.02,
        credits=1e9,
    )
    await server.start()
    fds_serving = _open_fds()  # the sandbox's listening socket, no connection yet
    jitter = (0.0, 0.004)
    server.faults.set(
        READ,
        error_rate=0.07,
        error_statuses=(500, 502, 503, 504),
        html_rate=0.03,
        rate_limit_rate=0.05,
        retry_after=0.01,
        latency=jitter,
    )
    server.faults.set(
        CREATE,
        drop_before_rate=0.04,
        drop_after_rate=0.04,
        rate_limit_rate=0.02,
        error_rate=0.01,
        retry_after=0.01,
        latency=jitter,
    )
    client = server.client(
        max_retries=3, connection_limit=CONNECTION_LIMIT, poll_policy=FAST, backoff=FAST_BACKOFF
    )
    try:
        # --- create ---------------------------------------------------------------------
        known, errors = await _create_all(client)
        create_seconds = time.monotonic() - started
        create_stats = server.stats()
        create_log = server.request_log

        # --- gather ---------------------------------------------------------------------
        server.reset_stats()
        results: dict[str, Task] = {}
        poll_errors: list[TaskPollError] = []
        async with client.tasks.gather_until_done(
            known, timeout=40, max_concurrency=GATHER_CONCURRENCY, return_exceptions=True
        ) as stream:
            async for item in stream:
                if isinstance(item, TaskPollError):
                    poll_errors.append(item)
                else:
                    assert item.task_id not in results, f"{item.task_id} yielded twice"
                    results[item.task_id] = item
        read_stats = server.stats()
        # Nothing is in flight once the gather is over: not at the sandbox, not in the pool.
        assert server.stats().in_flight == 0
        assert client._transport.owner.open_connections == 0
        # Closing the client closes every connection it opened (the sandbox keeps idle ones
        # open for a minute if the client does not): back to the listening socket alone.
        await client.aclose()
        await _settled(lambda: _open_fds() <= fds_serving, "connections after aclose()")
    finally:
        await client.aclose()
        await server.aclose()
    elapsed = time.monotonic() - started

    # --- the sandbox's truth ------------------------------------------------------------------
    created = set(server.task_ids)
    creates = [r for r in create_log if r.route == CREATE]
    create_peak = create_stats.peak_in_flight_by_route.get(CREATE, 0)
    create_faults = collections.Counter(r.fault for r in creates if r.fault in NOT_HANDLED)
    create_faults["drop_after"] = sum(r.fault == "drop_after" for r in creates)
    handled = [r for r in creates if r.fault not in NOT_HANDLED]
    answered = [r for r in creates if r.status == 200]

    may = [e for e in errors if e.request_may_have_taken_effect]
    not_taken = [e for e in errors if not e.request_may_have_taken_effect]
    unknown = created - set(known)

    figures = {
        "tasks requested": TASKS,
        "create requests made": len(creates),
        "status requests made": read_stats.by_route.get(READ, 0),
        # As the fault injector counted them; "latency" is the jitter, added to every request.
        "create faults injected": _nonzero(create_stats.faults),
        "read faults injected": _nonzero(read_stats.faults),
        "tasks created (sandbox)": len(created),
        "tasks known (ids)": len(known),
        "create errors": len(errors),
        "  may have taken effect": len(may),
        "  did not take effect": len(not_taken),
        "created but unknown": len(unknown),
        "results received": len(results),
        "results by status": dict(collections.Counter(str(t.status) for t in results.values())),
        "poll errors": len(poll_errors),
        "peak creates in flight": create_peak,
        "peak polls in flight": read_stats.peak_in_flight_by_route.get(READ, 0),
        "lost": len(unknown) - len(may) if len(unknown) > len(may) else 0,
        "seconds creating": round(create_seconds, 2),
        "seconds in all": round(elapsed, 2),
    }
    FIGURES.parent.mkdir(exist_ok=True)
    FIGURES.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    manager = request.config.pluginmanager
    previous = manager.get_plugin("videogen-chaos-summary")
    if previous is not None:  # the test ran before in this session
        manager.unregister(previous)
    manager.register(_Summary(figures), "videogen-chaos-summary")

    # --- nothing lost, nothing charged twice ----------------------------------------------
    assert len(known) == len(set(known)), "an id was returned twice"
    assert set(known) <= created, "an id the sandbox never created"
    assert len(handled) == len(created), "a create request created two tasks, or none"
    assert len(answered) == len(known)
    # Every created task is known by its id or covered by a may-have-taken-effect error...
    assert len(unknown) <= len(may), (len(unknown), len(may))
    # ...exactly the creates whose connection was dropped after they took effect.
    assert len(unknown) == create_faults["drop_after"]
    # A create whose failure says "not taken effect" created nothing: the failures that
    # reached the handler are exactly the dropped-after ones, all reported as "may have".
    assert len(known) + len(unknown) == len(created)
    assert len(errors) == TASKS - len(known)
    # Every fault the client could not see past was reported, not retried into a duplicate.
    assert (
        len(may)
        == (create_faults["drop_before"] + create_faults["drop_after"] + create_faults["error"])
        + create_faults["html"]
    )
    # The faults did happen, of every kind.
    for kind in ("drop_before", "drop_after", "rate_limit", "error"):
        assert create_faults[kind] > 0, kind
    assert all(figures["read faults injected"].get(k, 0) > 0 for k in ("error", "rate_limit"))
    # The request log and the injector agree on what was done to the creates.
    for kind, count in create_faults.items():
        assert create_stats.faults[kind] == count, kind

    # --- every known id has a terminal result -------------------------------------------
    assert not poll_errors, [str(e) for e in poll_errors[:3]]
    assert set(results) == set(known)
    assert all(t.is_terminal for t in results.values())

    # --- the bounds held ---------------------------------------------------------------------
    assert create_peak <= CREATE_CONCURRENCY
    assert read_stats.peak_in_flight_by_route.get(READ, 0) <= GATHER_CONCURRENCY

    # --- nothing left open ---------------------------------------------------------------
    await _settled(lambda: asyncio.all_tasks() <= tasks_before, "asyncio tasks")
    await _settled(lambda: _open_fds() <= fds_before, "file descriptors")
    assert figures["lost"] == 0


def _nonzero(counts: Any) -> dict[str, int]:
    return {kind: n for kind, n in sorted(counts.items()) if n}
