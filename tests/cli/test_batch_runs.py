"""``videogen batch`` run twice, or beside another input: what each run says it charged, whose
manifest and ledger it uses, and a line Python's JSON reader accepts but JSON does not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .conftest import CREATE_ROUTE, Run, ThreadedSandbox, read_manifest


def _credits(sandbox: ThreadedSandbox, cli: Callable[..., Run]) -> float:
    return float(cli("--json", "credits").json()["api_available_credits"])


def test_a_rerun_says_it_charged_nothing_and_what_the_batch_cost(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "a", "duration": 5}\n{"prompt": "b", "duration": 6}\n')
    first = cli("--json", "batch", str(path))
    assert first.code == 0, first
    assert first.json()["credits_charged"] == first.json()["credits_total"] == 22
    before = _credits(sandbox, cli)
    again = cli("batch", str(path))
    assert again.code == 0, again
    assert _credits(sandbox, cli) == before
    assert "this run charged 0 credits (22 for the batch in all)" in again.out
    assert "22 credits charged then" in again.err
    summary = cli("--json", "batch", str(path)).json()
    assert (summary["credits_charged"], summary["credits_total"]) == (0, 22)


def test_two_inputs_never_share_a_manifest_or_a_ledger_by_default(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    (tmp_path / "prompts.csv").write_text("prompt,duration\na fox,5\n")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "a boat", "duration": 6}\n')
    assert cli("batch", str(tmp_path / "prompts.csv")).code == 0
    assert cli("batch", str(tmp_path / "prompts.jsonl")).code == 0
    csv_rows = read_manifest(tmp_path / "prompts.csv.results.jsonl")
    jsonl_rows = read_manifest(tmp_path / "prompts.results.jsonl")
    assert [r["input"]["prompt"] for r in csv_rows] == ["a fox"]
    assert [r["input"]["prompt"] for r in jsonl_rows] == ["a boat"]
    assert (tmp_path / "prompts.csv.journal.sqlite").is_file()
    # prompts.json would default to prompts.jsonl's ledger: refused, nothing sent.
    (tmp_path / "prompts.json").write_text('{"prompt": "a kite", "duration": 4}\n')
    creates = sandbox.routes(CREATE_ROUTE)
    refused = cli("batch", str(tmp_path / "prompts.json"))
    assert refused.code == 2, refused
    assert "holds the batch of prompts.jsonl" in refused.err
    assert "--journal PATH --manifest PATH" in refused.err
    assert sandbox.routes(CREATE_ROUTE) == creates
    assert [r["input"]["prompt"] for r in read_manifest(tmp_path / "prompts.results.jsonl")] == [
        "a boat"
    ]
    # Said on purpose: --journal shares it.
    shared = cli(
        "batch",
        str(tmp_path / "prompts.json"),
        "--journal",
        str(tmp_path / "prompts.journal.sqlite"),
        "--manifest",
        str(tmp_path / "kite.jsonl"),
    )
    assert shared.code == 0, shared


def test_a_line_with_nan_costs_nothing_and_the_manifest_is_written(
    sandbox: ThreadedSandbox, cli: Callable[..., Run], tmp_path: Path
) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "bad", "duration": NaN}\n{"prompt": "good", "duration": 5}\n')
    run = cli("batch", str(path))
    assert run.code == 1, run  # one line is invalid: not every line succeeded
    assert "line 1: skipped" in run.err
    assert "NaN is not a JSON number" in run.err
    assert "Error" not in run.err.replace("error", "")
    assert sandbox.routes(CREATE_ROUTE) == 1
    rows = read_manifest(tmp_path / "prompts.results.jsonl")
    assert [r["status"] for r in rows] == ["invalid", "succeeded"]
    assert rows[0]["input"] == '{"prompt": "bad", "duration": NaN}'
    assert json.loads(json.dumps(rows))  # the manifest is plain JSON
