"""The fuzz tests are collected where schemathesis is installed, and only there."""

from __future__ import annotations

import importlib.util

from . import conftest


def test_the_fuzz_tests_are_left_out_rather_than_skipped_without_schemathesis() -> None:
    installed = importlib.util.find_spec("schemathesis") is not None
    assert conftest.collect_ignore == ([] if installed else ["test_schemathesis.py"])
