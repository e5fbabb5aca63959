"""The engine of a ledger URL.

A file path or ``sqlite:///PATH`` (``_sqlite``), or
``postgresql://...`` (``_postgres``).
"""

from __future__ import annotations

import os
import urllib.parse

from .._contract._exceptions import LedgerError
from ._postgres import PostgresEngine, redact
from ._protocol import Engine
from ._sqlite import SQLiteEngine

__all__ = ["engine_for", "redact"]


def engine_for(url: str | os.PathLike[str]) -> Engine:
    """The engine of a ledger URL (nothing is opened yet).

    Raises:
        LedgerError: A URL that is neither a file path, ``sqlite:///PATH`` nor
            ``postgresql://...``.
    """
    text = os.fspath(url) if isinstance(url, os.PathLike) else url
    if not isinstance(text, str) or not text.strip():
        raise LedgerError(f"ledger url: must be a file path or a database URL, got {url!r}")
    text = text.strip()
    scheme, sep, _rest = text.partition("://")
    shown = redact(text)
    if not sep:
        if text == ":memory:":
            raise LedgerError("ledger url: ':memory:' cannot be shared; give a file path")
        return SQLiteEngine(text)
    if scheme.lower() == "sqlite":
        path = text[len("sqlite://") :]
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        if not path or path == ":memory:":
            raise LedgerError(f"ledger url {shown!r}: sqlite:///PATH needs a file path")
        return SQLiteEngine(path)
    if scheme.lower() in {"postgresql", "postgres"}:
        parsed = urllib.parse.urlsplit(text)
        try:
            parsed.port  # noqa: B018 - validates the port
        except ValueError:
            raise LedgerError(f"ledger url {shown!r}: the port is not a number") from None
        if not parsed.hostname and "host=" not in parsed.query:
            raise LedgerError(f"ledger url {shown!r}: no host")
        return PostgresEngine(text)
    raise LedgerError(
        f"ledger url {shown!r}: unknown scheme {scheme.lower()!r}"
        " (use a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DBNAME)"
    )
