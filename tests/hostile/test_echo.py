"""A server or proxy that echoes the API key back never puts it in an error or a log record.

Over every request path x every way a key can come back (the request's headers repeated in
an envelope or an HTML page, the bare key, percent-, form- and JSON-escaped, as HTML
character references, split over lines, across the cut of an excerpt or of a message, in the
``trace_id``, in ``data`` (values and keys), in response headers, in a field that does not
parse, deep in a huge body), the error's text, repr, args, attributes, chained causes and
traceback, and every record of the ``videogen_async`` logger at DEBUG, hold no form of it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import videogen_async as vg
from videogen_async import AsyncVideoGen

from ._behaviours import ECHOES, KEY, Misbehaviour
from ._paths import PATHS, RequestPath
from ._scan import assert_no_key, error_texts, record_texts
from ._server import HostileServer
from .test_bodies import use


@pytest.mark.parametrize("echo", ECHOES, ids=str)
@pytest.mark.parametrize("path", PATHS, ids=str)
async def test_an_echoed_key_never_reaches_an_error_or_a_log(
    hostile: HostileServer,
    path: RequestPath,
    echo: Misbehaviour,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="videogen_async")
    use(hostile, path, echo)
    async with AsyncVideoGen(KEY, hostile.base_url, max_retries=0) as client:
        try:
            await path.call(client, hostile, tmp_path)
        except vg.VideoGenError as exc:
            texts = error_texts(exc)
        else:
            texts = []
            assert echo.may_succeed or path.name.endswith("wait"), "no error for an echo"
    texts += record_texts(caplog.records)
    assert texts  # there was something to scan
    assert_no_key(texts)


def test_the_scan_catches_every_form() -> None:
    from ._behaviours import KEY_FORMS

    for form in KEY_FORMS:
        with pytest.raises(AssertionError):
            assert_no_key([("text", f"before {form} after")])


def test_the_logger_redacts_what_a_message_quotes(caplog: pytest.LogCaptureFixture) -> None:
    """The safety net: a record of the ``videogen_async`` logger that quotes the key in its
    arguments, in its message or in its exception reaches no handler with it."""
    AsyncVideoGen(KEY, "http://127.0.0.1:1")  # registers the key, as every client does
    caplog.set_level(logging.DEBUG, logger="videogen_async")
    log = logging.getLogger("videogen_async")
    log.debug("answer: %s", f"Authorization: Bearer {KEY}")
    log.info(f"inline {KEY}")
    try:
        raise ValueError(f"cause {KEY}")
    except ValueError:
        log.exception("failed")
    assert len(caplog.records) == 3
    assert_no_key(record_texts(caplog.records))
    assert "<redacted>" in caplog.records[0].getMessage()
