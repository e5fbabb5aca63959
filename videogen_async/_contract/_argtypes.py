"""Numbers typed on a command line: ``argparse`` types that refuse a bad value as it is read.

Shared by the ``videogen`` command and the sandbox's own command line (``python -m
videogen_async.testing``), which sits below it: a value out of range is a usage error (exit 2)
naming what was expected, before anything starts.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def number_type(
    convert: Callable[[str], Any],
    *,
    minimum: int,
    maximum: int | None = None,
    strict: bool = False,
    what: str = "a number",
) -> Callable[[str], Any]:
    """An ``argparse`` type: a finite number from ``minimum`` (above it when ``strict``).

    Args:
        convert: ``int`` or ``float``, applied to the text.
        minimum: The least value (excluded when ``strict``).
        maximum: The greatest value, if any.
        strict: Whether ``minimum`` itself is refused.
        what: What is expected, as the error message names it.
    """

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (
            (value > minimum if strict else value >= minimum)  # NaN fails both
            and math.isfinite(value)
            and (maximum is None or value <= maximum)
        ):
            bound = (
                f"from {minimum} to {maximum}"
                if maximum is not None
                else f"{'>' if strict else '>='} {minimum}"
            )
            raise argparse.ArgumentTypeError(f"expected {what} {bound}, got {text!r}")
        return value

    return parse
