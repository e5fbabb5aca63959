"""Whatever body a server sends, every call ends in a ``VideoGenError``.

Over every request path x every class of hostile body (deep nesting, numbers beyond any
range, non-JSON constants, broken encodings, wrong shapes and types, huge strings,
truncation, a lying Content-Type): the error is a ``VideoGenError``; its text is bounded; a
creating call answered 2xx or 5xx says the request may have taken effect.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

import videogen_async as vg
from videogen_async import AsyncVideoGen

from ._behaviours import BODIES, KEY, Misbehaviour
from ._paths import PATHS, RequestPath
from ._server import HostileServer

MAY = "may have taken effect"


def use(server: HostileServer, path: RequestPath, bad: Misbehaviour) -> None:
    """Send ``bad`` where ``path`` reads it: the API, or (downloads) the media host, where a
    2xx would be a video, so it is turned into a 403 with the same body."""
    if not path.media:
        server.api = bad.behaviour
        return

    async def media(server: HostileServer, request: web.Request) -> web.StreamResponse:
        response = await bad.behaviour(server, request)
        if response.status < 300 and not response.prepared:
            response.set_status(403)
        return response

    server.media = media


@pytest.mark.parametrize("bad", BODIES, ids=str)
@pytest.mark.parametrize("path", PATHS, ids=str)
async def test_every_hostile_body_ends_as_a_videogen_error(
    hostile: HostileServer, path: RequestPath, bad: Misbehaviour, tmp_path: Path
) -> None:
    use(hostile, path, bad)
    async with AsyncVideoGen(KEY, hostile.base_url, max_retries=0) as client:
        try:
            await path.call(client, hostile, tmp_path)
        except vg.VideoGenError as exc:
            error = exc
        else:
            assert bad.may_succeed, "a hostile body was taken for a valid answer"
            return
    text = str(error)
    assert len(text) < 5_000, len(text)
    assert len(repr(error)) < 10_000
    if path.creates and (200 <= bad.status < 300 or bad.status >= 500):
        assert error.request_may_have_taken_effect, repr(error)
        assert MAY in text
    if path.media:
        assert not list(tmp_path.iterdir())  # nothing partial left
