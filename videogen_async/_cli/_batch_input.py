"""The input of ``videogen batch``: one direct-task request per line, checked before sending."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from .._contract._exceptions import InvalidRequestError
from .._contract._validation import validate_task_request

__all__ = ["InputLine", "default_paths", "read_input"]


@attrs.frozen
class InputLine:
    """One line of the input file.

    Attributes:
        line_no: The line number, from 1.
        raw: The decoded JSON (or the text, when it is not JSON).
        request: The validated request body; ``None`` for a bad line.
        problem: Why the line is bad.
        key: The line's own ledger key (its ``key`` field), if it has one.
    """

    line_no: int
    raw: Any
    request: dict[str, Any] | None
    problem: str | None = None
    key: str | None = None


def read_input(text: str) -> list[InputLine]:
    """Parse and check the input file (no I/O).

    Args:
        text: The file's content.

    Returns:
        The request lines (blank and ``#`` lines left out), each valid or with its problem.
    """
    lines: list[InputLine] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        stripped = raw_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            lines.append(InputLine(number, stripped, None, f"not valid JSON: {exc}"))
            continue
        if not isinstance(data, dict):
            lines.append(InputLine(number, data, None, "not a JSON object"))
            continue
        fields = dict(data)
        key = fields.pop("key", None)
        if key is not None and (not isinstance(key, str) or not key.strip() or len(key) > 500):
            lines.append(InputLine(number, data, None, "key: must be a non-empty string"))
            continue
        try:
            request = validate_task_request(fields)
        except InvalidRequestError as exc:
            lines.append(InputLine(number, data, None, str(exc)))
            continue
        lines.append(InputLine(number, data, request, key=key))
    return lines


def default_paths(input_path: Path) -> tuple[Path, Path]:
    """The default journal and manifest beside the input.

    Args:
        input_path: The input file, e.g. ``prompts.jsonl``.

    Returns:
        ``prompts.journal.sqlite`` and ``prompts.results.jsonl`` in the same directory.
    """
    stem = input_path.name.removesuffix(".jsonl").removesuffix(".json")
    return (
        input_path.with_name(f"{stem}.journal.sqlite"),
        input_path.with_name(f"{stem}.results.jsonl"),
    )
