"""Answers of creates the ledger could not record yet, kept in local files until it can.

A file per answer (:func:`spool_directory`), written whole or not at all (``write_whole``): a
reader sees a whole record or none, and a disk that refuses one leaves nothing of it. The
methods block: call them in a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from .._files import write_whole


def spool_directory() -> Path:
    """``$VIDEOGEN_LEDGER_SPOOL``, else ``videogen-async/ledger-spool`` in the state home.

    The state home is ``$XDG_STATE_HOME``, by default ``~/.local/state``.
    """
    given = os.environ.get("VIDEOGEN_LEDGER_SPOOL")
    if given:
        return Path(given)
    return (
        Path(os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state"))
        / "videogen-async"
        / "ledger-spool"
    )


class Spool:
    """The answers kept for one ledger: ``where``, a file's path (``local``) or a URL."""

    def __init__(self, where: str, *, local: bool) -> None:
        self._where = where
        self._local = local

    def _prefix(self) -> str:
        where = os.path.realpath(self._where) if self._local else self._where
        return hashlib.sha256(where.encode()).hexdigest()[:16]

    def put(self, record: dict[str, Any]) -> str:
        """Keep a record; return the path of its file.

        Raises:
            OSError: The record could not be written (nothing of it is left: ``write_whole``).
        """
        path = spool_directory() / f"{self._prefix()}-{uuid.uuid4().hex}.json"
        write_whole(path, json.dumps({"ledger": self._where, **record}))
        return str(path)

    def load(self) -> list[tuple[str, dict[str, Any]]]:
        """Every record kept for this ledger, with its file's path."""
        found = []
        with contextlib.suppress(FileNotFoundError):
            for path in sorted(spool_directory().glob(f"{self._prefix()}-*.json")):
                try:
                    found.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
                except (OSError, ValueError):
                    continue  # taken by another process meanwhile, or not ours to read
        return found

    @staticmethod
    def drop(path: str) -> None:
        """Forget a record once the ledger holds it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
