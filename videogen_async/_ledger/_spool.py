"""Answers of creates the ledger could not record yet, kept in local files until it can.

A file per answer (:func:`spool_directory`), written to a temporary name, flushed, renamed: a
reader sees a whole record or none. The methods block: call them in a worker thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any


def spool_directory() -> Path:
    """``$VIDEOGEN_LEDGER_SPOOL``, else ``videogen-async/ledger-spool`` in the state home.

    The state home is ``$XDG_STATE_HOME``, by default ``~/.local/state``.
    """
    given = os.environ.get("VIDEOGEN_LEDGER_SPOOL")
    if given:
        return Path(given)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state) / "videogen-async" / "ledger-spool"


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
            OSError: The record could not be written (nothing of it is left).
        """
        directory = spool_directory()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self._prefix()}-{uuid.uuid4().hex}.json"
        partial = path.with_suffix(".partial")
        try:
            with open(partial, "w", encoding="utf-8") as file:
                json.dump({"ledger": self._where, **record}, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, path)
        except OSError:
            # A disk that refused the record (full, past a size limit): no partial file left
            # to take its room; the caller logs the id at ERROR.
            partial.unlink(missing_ok=True)
            raise
        with contextlib.suppress(OSError):  # the rename itself made durable, where it can be
            descriptor = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        return str(path)

    def load(self) -> list[tuple[str, dict[str, Any]]]:
        """Every record kept for this ledger, with its file's path."""
        directory = spool_directory()
        found = []
        with contextlib.suppress(FileNotFoundError):
            for path in sorted(directory.glob(f"{self._prefix()}-*.json")):
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
