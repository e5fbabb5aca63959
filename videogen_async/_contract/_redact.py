"""Keeping the API key out of every exception text and log record, whatever a server sends.

A server or proxy may echo the key: in ``Authorization``, bare, percent-encoded, JSON-escaped,
as HTML character references, or split by whitespace. Wire text passes :func:`redact_text`
before it enters an error or a log record; a filter on the ``videogen_async`` logger is the
safety net. The secrets: the clients' keys and ``VIDEOGEN_API_KEY`` (the last :data:`MAX_SECRETS`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import traceback
import urllib.parse
from collections import OrderedDict
from typing import Any

REDACTED = "<redacted>"
#: How many distinct keys the registry remembers (the most recently registered win).
MAX_SECRETS = 256
#: Shorter values are not redacted: replacing every ``k`` of every message would make errors
#: unreadable, and a real API key is far longer.
MIN_SECRET_LENGTH = 8
#: Separators a server may put inside an echoed key (folded header lines, wrapped text).
_GAP = r"(?:\s|\\[nrt]){0,8}"

_lock = threading.Lock()
_secrets: OrderedDict[str, None] = OrderedDict()
_pattern: re.Pattern[str] | None = None


def _char_forms(ch: str) -> str:
    """A regex matching one character of a secret as itself or in an escaped form."""
    code = ord(ch)
    forms = [re.escape(ch)]
    if code < 0x10000:
        forms.append(rf"\\[uU](?i:{code:04x})")
    if code < 0x100:
        forms += [f"%(?i:{code:02x})", *{" ": [r"\+"], "/": [r"\\/"]}.get(ch, [])]
    forms += [f"&#0*{code};", f"&#(?i:x)0*(?i:{code:x});"]
    return "(?:" + "|".join(forms) + ")"


def register_secret(secret: str) -> None:
    """Redact ``secret`` (an API key) from now on (not one below ``MIN_SECRET_LENGTH``)."""
    global _pattern  # noqa: PLW0603
    secret = str(secret)  # a ``_Secret`` str subclass becomes a plain str
    if len(secret.strip()) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if secret in _secrets:
            _secrets.move_to_end(secret)
            return
        _secrets[secret] = None
        while len(_secrets) > MAX_SECRETS:
            _secrets.popitem(last=False)
        # Each secret: its characters in any recognised form, gaps allowed between them;
        # longest first, so that a key that contains another is redacted whole.
        _pattern = re.compile(
            "|".join(
                _GAP.join(map(_char_forms, s)) for s in sorted(_secrets, key=len, reverse=True)
            )
        )


def contains_secret(text: str) -> bool:
    """Whether ``text`` holds a registered secret in any of the recognised forms."""
    pattern = _pattern
    return pattern is not None and pattern.search(text) is not None


def holds_api_key(text: str, key: str = "") -> bool:
    """Whether ``text`` holds an API key: ``key``, ``VIDEOGEN_API_KEY``'s, or one seen before."""
    for secret in (key, os.environ.get("VIDEOGEN_API_KEY") or ""):
        register_secret(secret)
    return contains_secret(text)


def redact_text(text: str) -> str:
    """``text`` with every registered secret (in any recognised form) as ``<redacted>``."""
    pattern = _pattern
    if pattern is None or not text:
        return text
    return pattern.sub(REDACTED, text)


def _copy_keys(
    source: dict[Any, Any],
    copy: dict[Any, Any],
    pattern: re.Pattern[str],
    chars: int,
    stack: list[tuple[Any, Any, Any]],
) -> int:
    """Fill ``copy`` with the redacted keys of ``source``, their values to do on ``stack``.

    Returns the characters left to search. Past the budget a key becomes ``<redacted>N``
    (numbered, so two keys never collapse into one).
    """
    for k, v in source.items():
        new_key = k
        if isinstance(k, str):
            chars -= len(k)
            new_key = pattern.sub(REDACTED, k) if chars >= 0 else f"{REDACTED}{len(copy)}"
        copy[new_key] = None
        stack.append((v, copy, new_key))
    return chars


def redact_value(value: Any, *, max_items: int = 100_000, max_chars: int = 1_000_000) -> Any:
    """A copy of a decoded JSON value (or a mapping of headers) with every string redacted.

    Iterative (deep nesting cannot exhaust the stack); the value itself when the copy equals
    it. Bounded, so a hostile body cannot stall the loop: past ``max_items`` strings,
    dicts and lists or ``max_chars`` searched characters, the rest is ``<redacted>``.
    """
    pattern = _pattern
    if pattern is None:
        return value
    if isinstance(value, str):
        return redact_text(value) if len(value) <= max_chars else REDACTED
    if not isinstance(value, (dict, list)):  # a number, None, another object: no text
        return value
    root = [None]
    # (source, target container, key in target)
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    items = max_items
    chars = max_chars
    while stack:
        source, target, key = stack.pop()
        items -= 1
        if items < 0:
            target[key] = REDACTED
        elif isinstance(source, str):
            chars -= len(source)
            target[key] = pattern.sub(REDACTED, source) if chars >= 0 else REDACTED
        elif isinstance(source, dict):
            copy: dict[Any, Any] = {}
            target[key] = copy
            chars = _copy_keys(source, copy, pattern, chars, stack)
        elif isinstance(source, list):
            elements = [None] * len(source)
            target[key] = elements
            stack.extend((v, elements, i) for i, v in enumerate(source))
        else:
            target[key] = source
    # The value itself when nothing changed (a number, None, a body without a secret):
    # callers may keep it, and equal copies would only cost memory.
    return value if root[0] == value else root[0]


def _chain(exc: BaseException | None) -> list[BaseException]:
    """An exception and every exception it chains to (causes, contexts, groups), once each."""
    seen = set()
    found = []
    stack = [exc] if exc is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found.append(current)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        stack.extend(e for e in getattr(current, "exceptions", ()) if isinstance(e, BaseException))
    return found


def drop_locals(exc: BaseException | None) -> None:
    """Clear the local variables of the finished frames an exception chain went through.

    A traceback printed with locals (``pytest --showlocals``, error trackers) would show the
    raw answer a frame held, echoed key and all. Each traceback's first frame (where it was
    caught) may still run, or be a suspended coroutine that clearing would close: it is left
    alone; the frames below are done.
    """
    for current in _chain(exc):
        tb = current.__traceback__
        if tb is not None:
            traceback.clear_frames(tb.tb_next)


def scrub_exception(exc: BaseException | None) -> None:
    """Redact, in place, the texts an exception chain holds (``args`` and string attributes).

    For exceptions of other libraries (aiohttp, cattrs) that quote what a server sent and
    become the ``__cause__`` of one of ours; the locals of their frames are dropped too.
    """
    drop_locals(exc)
    if _pattern is None:
        return
    for current in _chain(exc):
        try:
            current.args = tuple(redact_value(a) if isinstance(a, str) else a for a in current.args)
            attributes = vars(current)
        except (TypeError, AttributeError):  # pragma: no cover - exotic exception types
            attributes = {}
        for name, attr in list(attributes.items()):
            if isinstance(attr, (str, dict, list)):
                with contextlib.suppress(TypeError, AttributeError):  # a read-only attribute
                    setattr(current, name, redact_value(attr))
        notes = getattr(current, "__notes__", None)
        if isinstance(notes, list):
            notes[:] = [redact_text(n) if isinstance(n, str) else n for n in notes]


class RedactingFilter(logging.Filter):
    """A logging filter that redacts registered secrets from a record's message and traceback.

    Installed on the ``videogen_async`` logger (and on the handler that ``VIDEOGEN_LOG``
    attaches): whatever a message quotes from the wire, the record that reaches a handler
    holds no key.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place; never drops it."""
        if _pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the handler's to report
            message = str(record.msg)
        redacted = redact_text(message)
        if redacted != message:
            record.msg = redacted
            record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            scrub_exception(record.exc_info[1])
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


_PASSWORD_PARAMETER = re.compile(r"((?:^|&)password=)[^&]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` without its password (``postgresql://user:***@host/db``), for messages.

    A database URL given on a command line or in a setting carries its password; whatever
    shows the URL back (an error, a "to resume, run:" line) shows this instead.
    """
    try:
        parsed = urllib.parse.urlsplit(url)
        password = parsed.password
    except ValueError:
        return "<malformed url>"
    if password is not None:
        parsed = parsed._replace(netloc=parsed.netloc.replace(f":{password}@", ":***@"))
    # libpq and asyncpg also take the password as a parameter: ?password=... (any case).
    query = _PASSWORD_PARAMETER.sub(r"\1***", parsed.query)
    if password is None and query == parsed.query:
        return url  # as given: a round trip through urlunsplit may respell it
    return urllib.parse.urlunsplit(parsed._replace(query=query))
