"""The ``videogen_async`` logger and the ``VIDEOGEN_LOG`` switch."""

from __future__ import annotations

import logging
import os

from .._contract._redact import RedactingFilter

logger = logging.getLogger("videogen_async")
# The safety net: whatever a message quotes from the wire, no record of this logger holds a key.
logger.addFilter(RedactingFilter())

_configured = False
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def configure_from_env() -> None:
    """Attach a stderr handler when ``VIDEOGEN_LOG`` is ``debug``, ``info`` or ``warning``.

    Runs once per process; without the variable the library only logs to whatever handlers
    the application configured (none by default), as a library should.
    """
    global _configured  # noqa: PLW0603
    if _configured:
        return
    _configured = True
    level = _LEVELS.get(os.environ.get("VIDEOGEN_LOG", "").strip().lower())
    if level is None:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    logger.setLevel(level)
