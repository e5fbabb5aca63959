"""What one run of ``videogen batch`` knows of its lines: the manifest's records and the end.

The run's phases (:mod:`._batch`), its downloads (:mod:`._batch_download`) and its summary
(:mod:`._batch_report`) all read and write this one object.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from .._contract._exceptions import VideoGenError
from ._batch_input import InputLine
from ._common import EXIT_API_ERROR, EXIT_OK, EXIT_SOME_FAILED

__all__ = [
    "INVALID",
    "NOT_CREATED",
    "PENDING",
    "REFUSED",
    "UNKNOWN",
    "BatchState",
]

#: Manifest statuses besides the task statuses (succeeded, failed, error).
INVALID = "invalid"
NOT_CREATED = "not_created"
PENDING = "pending"
REFUSED = "refused"
UNKNOWN = "unknown"


class BatchState:
    """The records of a batch's lines (one manifest row each) and how the run ends.

    Args:
        manifest: Where the manifest is written.
    """

    def __init__(self, manifest: Path) -> None:
        self.manifest = manifest
        self.records: dict[int, dict[str, Any]] = {}
        self.fatal: VideoGenError | None = None
        self.download_failures = 0
        #: Lines whose create another process holds (it is sending it, or stopped mid-send).
        self.in_doubt: set[int] = set()

    def record(self, line: InputLine, **fields: Any) -> dict[str, Any]:
        """Update (or start) a line's record with ``fields``."""
        record = self.records.get(line.line_no)
        if record is None:
            record = {
                "line": line.line_no,
                "input": line.raw,
                "task_id": None,
                "status": NOT_CREATED,
                "video_url": None,
                "error": None,
                "credits": None,
                "path": None,
            }
            self.records[line.line_no] = record
        record.update(fields)
        return record

    def ordered(self) -> list[dict[str, Any]]:
        """Every line's record, in input order."""
        return [self.records[no] for no in sorted(self.records)]

    def counts(self) -> Counter[str]:
        """Lines per manifest status."""
        return Counter(str(r["status"]) for r in self.records.values())

    def exit_code(self) -> int:
        """0 when every line succeeded (and downloaded), 3 after a fatal API error, else 1."""
        if self.fatal is not None:
            return EXIT_API_ERROR
        if self.counts()["succeeded"] == len(self.records) and not self.download_failures:
            return EXIT_OK
        return EXIT_SOME_FAILED

    def needs_rerun(self) -> bool:
        """Whether a rerun with the same ledger would do more work."""
        counts = self.counts()
        return (
            self.download_failures > 0
            or bool(self.in_doubt)
            or any(counts[s] for s in (PENDING, NOT_CREATED, REFUSED))
        )

    async def write_manifest(self) -> None:
        """Write the manifest atomically (a temporary file, then a rename), off the event loop."""
        target, rows = self.manifest, self.ordered()

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(name, target)
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(write)
