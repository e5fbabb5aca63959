"""``write_whole``: a file written whole or not at all (its refusals: tests/_disk.py users)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from videogen_async._files import write_whole


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
def test_a_file_replaced_keeps_its_mode_and_a_new_one_is_the_owners(tmp_path: Path) -> None:
    shared = tmp_path / "openapi.json"
    shared.write_text("old")
    shared.chmod(0o644)
    write_whole(shared, "new")
    assert shared.read_text() == "new"
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
    fresh = tmp_path / "folder" / "manifest.jsonl"
    write_whole(fresh, "line\n")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600  # may hold charged ids: the owner's
    assert sorted(p.name for p in tmp_path.rglob("*")) == [
        "folder",
        "manifest.jsonl",
        "openapi.json",
    ]
