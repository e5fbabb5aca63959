"""The lines of ``videogen batch``: the input, and what one run knows of them.

Each input line is checked before anything is sent; the run's records (one manifest row per
line) are used by its phases (:mod:`._batch`) and reports (:mod:`._batch_report`).
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs

from .._contract import _service as service
from .._contract._checks import check_key
from .._contract._exceptions import InvalidRequestError, VideoGenError
from .._contract._validation import json_text, validate_task_request
from .._files import write_whole
from ._common import EXIT_OK, EXIT_SOME_FAILED, exit_code_for

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


def _cell(name: str, text: str) -> Any:
    """A CSV cell as its field's type has it: a whole number, URLs apart by spaces, or text."""
    kind = service.TASK_REQUEST.field(name).type if name in service.TASK_REQUEST.names else ""
    if kind == "integer" and text.strip().lstrip("+-").isdigit():
        return int(text)
    return text.split() if kind == "urls" else text


def _csv_rows(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """Each data row of a CSV whose header row names the fields: its non-empty cells."""
    reader = csv.reader(text.splitlines(keepends=True))
    header = [name.strip().lstrip("\ufeff") for name in next(reader, [])]
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        # A short row: the rest is empty.
        row = {
            name: _cell(name, cell)
            for name, cell in zip(header, cells, strict=False)
            if cell.strip()
        }
        extra = f"{len(cells)} cells, the header names {len(header)}"
        yield reader.line_num, row, extra if len(cells) > len(header) else None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_lines(text: str) -> Iterator[tuple[int, Any, str | None]]:
    """Each JSON line (blank and ``#`` lines left out): its value.

    ``NaN`` and ``Infinity`` (which Python's reader accepts, JSON does not) make the line bad
    here, kept as its text: parsed, it could not be written back into the manifest.
    """
    for number, stripped in enumerate(map(str.strip, text.splitlines()), start=1):
        if not stripped or stripped.startswith("#"):
            continue
        try:
            yield number, json.loads(stripped, parse_constant=_not_json), None
        except ValueError as exc:
            yield number, stripped, f"not valid JSON: {exc}"


def read_input(text: str, *, csv_format: bool = False) -> list[InputLine]:
    """The request lines of the input, each checked: JSON Lines, or CSV with a header row."""
    lines = []
    for number, data, problem in (_csv_rows if csv_format else _json_lines)(text):
        if problem is not None or not isinstance(data, dict):
            lines.append(InputLine(number, data, None, problem or "not a JSON object"))
            continue
        fields = dict(data)
        key = fields.pop("key", None)
        try:
            if key is not None:
                check_key(key)  # the ledger's own rule, checked before anything is sent
            request = validate_task_request(fields)
        except InvalidRequestError as exc:
            lines.append(InputLine(number, data, None, str(exc)))
            continue
        lines.append(InputLine(number, data, request, key=key))
    return lines


def default_paths(input_path: Path) -> tuple[Path, Path]:
    """``prompts.journal.sqlite`` and ``prompts.results.jsonl`` beside ``prompts.jsonl``.

    A CSV file keeps its extension (``prompts.csv.journal.sqlite``): ``prompts.csv`` beside
    ``prompts.jsonl`` is another batch, with a manifest and a ledger of its own.
    """
    stem = input_path.name.removesuffix(".jsonl").removesuffix(".json")
    return (
        input_path.with_name(f"{stem}.journal.sqlite"),
        input_path.with_name(f"{stem}.results.jsonl"),
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
        #: Lines created by this run (what it charged, apart from what earlier runs did).
        self.created_now: set[int] = set()
        #: Why the manifest could not be written (a full disk...): its lines go to stdout.
        self.manifest_error: str | None = None

    def record(self, line: InputLine, **fields: Any) -> None:
        """Update (or start) a line's record with ``fields``."""
        # A new record has every manifest field, in the manifest's order.
        self.records.setdefault(
            line.line_no,
            {
                "line": line.line_no,
                "input": line.raw,
                **dict.fromkeys(("task_id", "status", "video_url", "error", "credits", "path")),
                "status": NOT_CREATED,
            },
        ).update(fields)

    def ordered(self) -> list[dict[str, Any]]:
        """Every line's record, in input order."""
        return [self.records[no] for no in sorted(self.records)]

    def created(self) -> int:
        """How many lines have a task (created by this run or an earlier one)."""
        return sum(1 for r in self.records.values() if r["task_id"])

    def credits(self, lines: Collection[int] | None = None) -> float:
        """The credits charged for the created lines (of ``lines``; all when ``None``)."""
        return sum(
            float(r["credits"] or 0)
            for no, r in self.records.items()
            if r["task_id"] is not None and (lines is None or no in lines)
        )

    def counts(self) -> Counter[str]:
        """Lines per manifest status."""
        return Counter(str(r["status"]) for r in self.records.values())

    def exit_code(self) -> int:
        """0 when every line succeeded (and downloaded), that of a fatal API error, else 1."""
        if self.fatal is not None:
            return exit_code_for(self.fatal)
        if (
            self.counts()["succeeded"] == len(self.records)
            and not self.download_failures
            and self.manifest_error is None
        ):
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
        """Write the manifest whole or not at all (``write_whole``), off the event loop.

        A disk that refuses it (full, read-only, past a size limit) leaves no temporary file
        and whatever was at the path untouched; why is kept in ``manifest_error`` (the summary
        then prints the lines, task ids and all, on stdout: with ``--no-journal`` the manifest
        is the only record of what was charged).
        """
        target = self.manifest
        text = "".join(json_text(row, "", ensure_ascii=False) + "\n" for row in self.ordered())
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(write_whole, target, text)
        except OSError as exc:
            self.manifest_error = f"writing {target} failed: {exc}; its lines follow on stdout"
