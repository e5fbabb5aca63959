"""Shared helpers of the test suite."""

from __future__ import annotations

import re
from typing import Any

BASE = "https://api.videogen.test"
KEY = "vg-test-SECRET-key-0123456789"

TASKS_RE = re.compile(r"^https://api\.videogen\.test/v1/tasks\?.*$")


def envelope(data: Any = None, *, code: int = 200, message: str | None = None) -> dict[str, Any]:
    return {"code": code, "trace_id": "trace-123", "message": message, "data": data}


def task_data(task_id: str = "t-1", status: str = "running", **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "task_id": task_id,
        "status": status,
        "model": "videomodel_2_0",
        "created_at": "2026-11-21T10:00:00Z",
        "updated_at": "2026-11-21T10:00:05.123Z",
        "credits_cost": 20,
        "result": None,
    }
    data.update(extra)
    return data


def created_task(task_id: str = "t-1") -> dict[str, Any]:
    return {
        "task_id": task_id,
        "status": "running",
        "created_at": "2026-11-21T10:00:00Z",
        "credits_cost": 20,
    }
