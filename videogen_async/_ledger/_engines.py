"""The engine of a ledger URL.

A file path or ``sqlite:///PATH`` (``_sqlite``), or
``postgresql://...`` (``_postgres``).
"""

from __future__ import annotations

import os
import urllib.parse

from .._contract._exceptions import LedgerError
from .._contract._redact import redact_url
from ._postgres import PostgresEngine
from ._protocol import Engine
from ._sqlite import SQLiteEngine


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
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    shown = redact_url(text)
    if not sep or scheme == "sqlite":
        # sqlite:///PATH: the path after the third slash (sqlite:////PATH: an absolute one).
        path = rest[1:] if rest.startswith("/") and not rest.startswith("//") else rest
        path = path if sep else text
        if not path or path == ":memory:":
            raise LedgerError(
                f"ledger url {shown!r}: needs a file path (':memory:' cannot be shared)"
            )
        return SQLiteEngine(path)
    if scheme in {"postgresql", "postgres"}:
        parsed = urllib.parse.urlsplit(text)
        try:
            parsed.port  # noqa: B018 - validates the port
        except ValueError:
            raise LedgerError(f"ledger url {shown!r}: the port is not a number") from None
        if not parsed.hostname and "host=" not in parsed.query:
            raise LedgerError(f"ledger url {shown!r}: no host")
        return PostgresEngine(text)
    raise LedgerError(
        f"ledger url {shown!r}: unknown scheme {scheme!r}"
        " (use a file path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DBNAME)"
    )
