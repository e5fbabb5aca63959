"""The lines of ``videogen batch``: the input, and what one run knows of them.

Each input line is checked before anything is sent; the run's records (one manifest row per
line) are read and written by its phases (:mod:`._batch`), downloads and summary
(:mod:`._batch_report`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import attrs

from .._contract._exceptions import InvalidRequestError, VideoGenError
from .._contract._validation import json_text, validate_task_request
from ._common import EXIT_API_ERROR, EXIT_OK, EXIT_SOME_FAILED

#: Manifest statuses besides the task statuses (succeeded, failed, error).
INVALID = "invalid"
NOT_CREATED = "not_created"
PENDING = "pending"
REFUSED = "refused"
UNKNOWN = "unknown"


@attrs.frozen
class InputLine:
    """One input line: its JSON (or text), its checked request or ``problem``, its ``key``."""

    line_no: int
    raw: Any
    request: dict[str, Any] | None
    problem: str | None = None
    key: str | None = None


def read_input(text: str) -> list[InputLine]:
    """The request lines of the input (blank and ``#`` lines left out), each checked."""
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), start=1)]
    return [_read_line(n, line) for n, line in lines if line and not line.startswith("#")]


def _read_line(number: int, line: str) -> InputLine:
    try:
        data = json.loads(line)
    except ValueError as exc:
        return InputLine(number, line, None, f"not valid JSON: {exc}")
    if not isinstance(data, dict):
        return InputLine(number, data, None, "not a JSON object")
    fields = dict(data)
    key = fields.pop("key", None)
    if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 500):
        return InputLine(number, data, None, "key: must be a non-empty string")
    try:
        return InputLine(number, data, validate_task_request(fields), key=key)
    except InvalidRequestError as exc:
        return InputLine(number, data, None, str(exc))


def default_paths(input_path: Path) -> tuple[Path, Path]:
    """``prompts.journal.sqlite`` and ``prompts.results.jsonl`` beside ``prompts.jsonl``."""
    stem = input_path.name.removesuffix(".jsonl").removesuffix(".json")
    return input_path.with_name(f"{stem}.journal.sqlite"), input_path.with_name(
        f"{stem}.results.jsonl"
    )


class BatchState:
    """The records of a batch's lines (one ``manifest`` row each) and how the run ends."""

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
            empty = dict.fromkeys(("task_id", "status", "video_url", "error", "credits", "path"))
            record = {"line": line.line_no, "input": line.raw, **empty, "status": NOT_CREATED}
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
                    handle.writelines(json_text(row, "", ensure_ascii=False) + "\n" for row in rows)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(name, target)
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(write)
