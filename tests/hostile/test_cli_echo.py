"""The command line prints what an echoing server sends without the key (``--debug`` too)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ._behaviours import ECHOES, KEY, Misbehaviour
from ._scan import assert_no_key, record_texts
from ._server import HostileServer, serve


@contextmanager
def threaded(echo: Misbehaviour) -> Iterator[HostileServer]:
    """The hostile server in a thread of its own (the command line runs its own loop)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()
    box: list[HostileServer] = []

    async def run() -> None:
        async for server in serve():
            server.api = echo.behaviour
            box.append(server)
            loop.call_soon_threadsafe(ready.set)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(run(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield box[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


CLI_ECHOES = [e for e in ECHOES if e.name.startswith(("echo-request", "split", "in-trace"))]


@pytest.mark.allow_blocking("the command line's own loop waits on a loopback server thread")
@pytest.mark.parametrize("echo", CLI_ECHOES, ids=str)
def test_the_command_line_never_prints_an_echoed_key(
    echo: Misbehaviour,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cli = pytest.importorskip("videogen_async._cli")
    caplog.set_level("DEBUG", logger="videogen_async")
    with threaded(echo) as server:
        monkeypatch.setenv("VIDEOGEN_BASE_URL", server.base_url)
        monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
        monkeypatch.delenv("VIDEOGEN_LOG", raising=False)
        texts = []
        for argv in (["--debug", "credits"], ["--debug", "create", "a cat"]):
            code = cli.main(argv)
            out = capsys.readouterr()
            assert code != 0
            texts += [(f"stdout {argv}", out.out), (f"stderr {argv}", out.err)]
    assert any(text for _, text in texts)
    assert_no_key(texts + record_texts(caplog.records))
