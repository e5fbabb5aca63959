"""The history: one JSON object per line, appended by one process to its own file.

Each line is flushed to the operating system before the next step, so a process killed by
SIGKILL loses at most the line it was writing (read back as torn and ignored). Times are
``time.time()`` (every process of a run is on one machine: one clock).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class Recorder:
    """Appends records to ``path``: ``{"t": time, "p": process, "op": ..., ...}``."""

    def __init__(self, path: Path, process: str) -> None:
        self.process = process
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the process
        self._next = 0

    def write(self, op: str, **fields: Any) -> int:
        """Append one record; return its number in this file (to pair an outcome with it)."""
        number, self._next = self._next, self._next + 1
        record = {"t": time.time(), "p": self.process, "n": number, "op": op, **fields}
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()
        return number

    def invoke(self, op: str, **fields: Any) -> int:
        """An operation begins."""
        return self.write(op, phase="invoke", **fields)

    def ok(self, op: str, invocation: int, **fields: Any) -> None:
        """The operation returned."""
        self.write(op, phase="ok", of=invocation, **fields)

    def fail(self, op: str, invocation: int, error: BaseException, **fields: Any) -> None:
        """The operation raised."""
        text = str(error)[:300]
        self.write(op, phase="fail", of=invocation, error=type(error).__name__, msg=text, **fields)

    def close(self) -> None:
        self._file.close()


def read(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one file; a torn last line (a process killed while writing) is left out."""
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def read_all(folder: Path) -> list[dict[str, Any]]:
    """Every record of every history file of ``folder``, each with its file's name as ``f``."""
    records = []
    for path in sorted(folder.glob("*.jsonl")):
        records.extend({**record, "f": path.stem} for record in read(path))
    return records
