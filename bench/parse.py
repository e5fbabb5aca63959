"""Micro-benchmark of the polling hot path's parse of a ``Task``: the fast parser
(``structure_task``) against the converter it must agree with (``structure``), and
``Resource._parse``, without and with the response metadata the request loop attaches.

Run: ``python bench/parse.py`` (quiet machine; the minimum of several repeats is printed).
"""

from __future__ import annotations

import functools
import timeit
from collections.abc import Callable
from typing import Any

from videogen_async._contract._meta import ResponseInfo
from videogen_async._contract._models import Task, structure, structure_task
from videogen_async._http._envelope import Response
from videogen_async._resources._resource import Resource

RUNNING = {
    "task_id": "t_1",
    "status": "running",
    "model": "videomodel_2_0",
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:01.123Z",
    "credits_cost": 12.5,
    "result": None,
}
SUCCEEDED = dict(
    RUNNING,
    status="succeeded",
    result={
        "video_url": "https://x/v.mp4",
        "error_message": None,
        "finished_at": "2026-01-01T00:01:00Z",
    },
)
N = 100_000


def best(call: Callable[[], Any]) -> float:
    return min(timeit.repeat(call, number=N, repeat=7)) / N * 1e9


def main() -> None:
    resource = Resource.__new__(Resource)
    info = ResponseInfo(200, {}, "tr", "GET", "https://api.example.com/v1/tasks?task_id=t_1")
    for name, data in (("running", RUNNING), ("succeeded", SUCCEEDED)):
        bare = Response(200, data, "tr", "ok", {})
        full = Response(200, data, "tr", "ok", {}, 1, info)
        cases = {
            "structure (the converter)": functools.partial(structure, data, Task),
            "structure_task (the fast parser)": functools.partial(structure_task, data),
            "Resource._parse, no metadata": functools.partial(resource._parse, bare, Task),
            "Resource._parse, with metadata": functools.partial(resource._parse, full, Task),
        }
        for what, call in cases.items():
            print(f"{what} (Task, {name}): {best(call):.0f} ns")


if __name__ == "__main__":
    main()
