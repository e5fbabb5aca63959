"""Every Python snippet of README.md and docs/*.md passes ``mypy --strict``, as a user's would.

A reader copies a snippet into a project checked by mypy; it must not fail there
(``entry.task.video_url`` on an ``Optional``, a ``Task | TaskPollError`` where only a task
comes). One mypy run checks them all at once (written to a temporary directory, one module
each), with ``tests/typing/``: the public API used as a user would, and what it must refuse.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import ALL_BLOCKS, ROOT, RUN, TEST
from videogen_async import AsyncVideoGen

TYPING = ROOT / "tests" / "typing"


def _module_name(block_name: str) -> str:
    return "snippet_" + re.sub(r"\W", "_", block_name)


def test_every_snippet_and_the_typing_examples_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    blocks = [b for b in ALL_BLOCKS if b.info in (RUN, TEST) and "--8<--" not in b.code]
    assert blocks, "no python snippets found"
    names = {}
    for block in blocks:
        name = _module_name(block.name)
        (tmp_path / f"{name}.py").write_text(block.code, encoding="utf-8")
        names[name] = block.name
    for example in TYPING.glob("*.py"):
        shutil.copy(example, tmp_path / example.name)
    result = subprocess.run(  # noqa: S603 - mypy on files this test wrote
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    report = result.stdout
    for name, block in names.items():  # the page and line of each snippet, not the temp file
        report = report.replace(str(tmp_path / f"{name}.py"), block)
    assert result.returncode == 0, report + result.stderr


def test_a_misspelt_keyword_is_a_clear_error_at_run_time() -> None:
    # The checker refuses it (tests/typing/gather_and_ledger.py); Python names it too.
    client = AsyncVideoGen(api_key="k" * 16, base_url="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="unexpected keyword argument 'timout'"):
        client.tasks.gather_until_done(["t-1"], timout=60)  # type: ignore[call-overload]
