"""The suite's blocking-call detector (``tests/_blocking.py``) catches what it should."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from blockbuster import BlockingError

from tests._blocking import ROOT


def blocking_function_at(path: Path) -> Callable[[], None]:
    """A function that calls ``time.sleep``, compiled as if it lived at ``path``."""
    namespace: dict[str, object] = {}
    source = "import time\n\ndef block():\n    time.sleep(0)\n"
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102
    block = namespace["block"]
    assert callable(block)
    return block


SCANNED_PLACES = [
    ROOT / "videogen_async" / "_probe.py",
    ROOT / "videogen_async" / "testing" / "_probe.py",
    ROOT / "examples" / "probe.py",
    ROOT / "docs" / "probe.md",
    ROOT / "README.md",
]


@pytest.mark.parametrize("path", SCANNED_PLACES, ids=lambda p: str(p.relative_to(ROOT)))
async def test_a_blocking_call_in_scanned_code_fails(path: Path) -> None:
    with pytest.raises(BlockingError, match=r"time\.sleep"):
        blocking_function_at(path)()


async def test_test_code_is_not_scanned() -> None:
    blocking_function_at(ROOT / "tests" / "_probe.py")()


def test_nothing_is_detected_outside_a_running_loop() -> None:
    blocking_function_at(SCANNED_PLACES[0])()


@pytest.mark.allow_blocking("the detector is off for this test")
async def test_the_detector_can_be_turned_off_for_one_test() -> None:
    blocking_function_at(SCANNED_PLACES[0])()
