"""A file written whole or not at all: how the package writes a file of its own.

The text goes to a temporary file beside the target, under a hidden name (``.NAME.XXXX.part``:
no reader looking for the target's name or pattern takes it), is flushed and fsynced, then
renamed over the target (atomic on one file system), and the rename is made durable where the
system allows. A disk that refuses the write (full, read-only, past a file size limit) fails at
the open, the write, the flush, the fsync or the rename: whichever it is, the temporary file is
removed and the target is left as it was. Closing a file whose buffered text the disk refused
fails again (Python flushes on close), and it is closed all the same: the removal still runs.

Used by the ledger's spool, the command line's batch manifest and the sandbox's OpenAPI
document; a download streams into a ``.part`` file of its own (``_download/_file.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, creating its folder if needed.

    Raises:
        OSError: The disk refused the file (nothing of it is left, ``path`` is untouched).
            An error of a write names no file: callers say which file it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with contextlib.suppress(FileNotFoundError):  # a file replaced keeps its mode (else 0600)
            os.chmod(name, stat.S_IMODE(os.stat(path).st_mode))
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(name, path)
    except BaseException:
        os.unlink(name)
        raise
    with contextlib.suppress(OSError):  # the rename itself made durable, where it can be
        descriptor = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
