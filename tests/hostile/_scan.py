"""What a user could see of an error or a log record, as texts to scan for the key."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable

from ._behaviours import KEY_FORMS


def error_texts(exc: BaseException) -> list[tuple[str, str]]:
    """The text, repr, args, attributes and traceback of ``exc`` and of every exception it
    chains to (``__cause__``, ``__context__``, exception groups)."""
    texts: list[tuple[str, str]] = []
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        name = type(current).__name__
        texts.append((f"str({name})", str(current)))
        texts.append((f"repr({name})", repr(current)))
        texts.append((f"args({name})", repr(current.args)))
        texts.append((f"vars({name})", repr(vars(current))))
        texts.append((f"traceback({name})", "".join(traceback.format_exception(current))))
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        stack.extend(getattr(current, "exceptions", ()))
    return texts


def record_texts(records: Iterable[logging.LogRecord]) -> list[tuple[str, str]]:
    """Each record as a handler formats it, its args, and its exception."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    texts: list[tuple[str, str]] = []
    for record in records:
        texts.append((f"log {record.name}", formatter.format(record)))
        texts.append((f"log args {record.name}", repr(record.args)))
        if record.exc_info and record.exc_info[1] is not None:
            texts.extend(error_texts(record.exc_info[1]))
    return texts


def assert_no_key(texts: Iterable[tuple[str, str]]) -> None:
    for where, text in texts:
        for form in KEY_FORMS:
            assert form not in text, f"the key ({form!r}) leaked in {where}: {text[:400]}"
