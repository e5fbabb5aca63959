"""The suite's blocking-call detector (``tests/_blocking.py``) catches what it should."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from blockbuster import BlockingError

from tests._blocking import ROOT
from videogen_async._waiting._polling import poll_until


def blocking_function_at(path: Path) -> Callable[[], None]:
    """A function that calls ``time.sleep``, compiled as if it lived at ``path``."""
    namespace: dict[str, object] = {}
    source = "import time\n\ndef block():\n    time.sleep(0)\n"
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102
    block = namespace["block"]
    assert callable(block)
    return block


async def library_code_calling(callback: Callable[[], None]) -> None:
    """Have the package call ``callback`` from its own frames, inside the running loop.

    ``poll_until`` calls its ``done`` predicate synchronously and lets what it raises
    propagate, so a blocking predicate blocks in the middle of library code.
    """

    async def fetch() -> int:
        return 1

    def done(_value: int) -> bool:
        callback()
        return True

    await poll_until(fetch, done, timeout=1, poll_policy=None, what="probe")


SCANNED_PLACES = [
    ROOT / "examples" / "probe.py",
    ROOT / "docs" / "probe.md",
    ROOT / "README.md",
]
TEST_CODE = ROOT / "tests" / "probe.py"


async def test_a_blocking_call_inside_the_package_fails() -> None:
    with pytest.raises(BlockingError, match=r"time\.sleep"):
        await library_code_calling(blocking_function_at(TEST_CODE))


@pytest.mark.parametrize("path", SCANNED_PLACES, ids=lambda p: str(p.relative_to(ROOT)))
async def test_a_blocking_call_in_examples_and_docs_fails(path: Path) -> None:
    with pytest.raises(BlockingError, match=r"time\.sleep"):
        blocking_function_at(path)()


async def test_test_code_is_not_scanned() -> None:
    blocking_function_at(TEST_CODE)()


def test_nothing_is_detected_outside_a_running_loop() -> None:
    blocking_function_at(SCANNED_PLACES[0])()


@pytest.mark.allow_blocking("the detector is off for this test")
async def test_the_detector_can_be_turned_off_for_one_test() -> None:
    await library_code_calling(blocking_function_at(TEST_CODE))
