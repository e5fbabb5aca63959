"""A server that echoes the API key back never gets it into an event hook or a result's answer.

Over every request path x every way a key can come back, every event the hooks receive
(request, response, retry, poll: their ``repr`` and every field) and the response metadata of
a result (``_request_id``, ``_response``: its ``repr``, ``trace_id`` and headers) hold no form
of the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import pytest

import videogen_async as vg
from videogen_async import AsyncVideoGen

from ._behaviours import ECHOES, KEY, Misbehaviour, raw
from ._paths import PATHS, RequestPath
from ._scan import assert_no_key
from ._server import HostileServer
from .test_bodies import use

#: A successful answer to every path (terminal, so waits end) with the key where a success
#: carries text of the server's own: the ``trace_id`` and the response headers.
_DATA = {
    "task_id": "t-1",
    "project_id": "p-1",
    "status": "succeeded",
    "current_step": "generating_video",
    "view_script": "a script",
    "api_available_credits": 1,
    "api_total_credits": 1,
    "task_ids": ["t-1"],
    "tasks": [{"task_id": "t-1", "status": "succeeded", "credits_cost": 1}],
    "result": {"video_url": "http://127.0.0.1:9/v.mp4", "finished_at": "2026-01-01T00:00:00Z"},
}
_FORMS = {"bare": KEY, "bearer": f"Bearer {KEY}", "quoted": quote(KEY, safe="")}
SUCCESS_ECHOES = tuple(
    raw(
        f"success-{where}-{form}",
        200,
        json.dumps(
            {"code": 200, "trace_id": text if where != "headers" else "tr-1", "data": _DATA}
        ),
        headers={"X-Request-Echo": text, "X-Trace": text} if where != "trace-id" else None,
        may_succeed=True,
    )
    for where in ("trace-id", "headers", "both")
    for form, text in _FORMS.items()
)


def _event_texts(events: list[Any]) -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = []
    for event in events:
        name = type(event).__name__
        texts.append((f"repr({name})", repr(event)))
        texts.append((f"fields({name})", repr(attrs.asdict(event))))
    return texts


def _result_texts(result: object) -> list[tuple[str, str]]:
    info = getattr(result, "_response", None)
    if info is None:
        return []
    return [
        ("result._request_id", repr(getattr(result, "_request_id", None))),
        ("repr(result._response)", repr(info)),
        ("result._response.headers", repr(dict(info.headers))),
    ]


@pytest.mark.parametrize("echo", ECHOES + SUCCESS_ECHOES, ids=str)
@pytest.mark.parametrize("path", PATHS, ids=str)
async def test_an_echoed_key_never_reaches_a_hook_or_a_result(
    hostile: HostileServer, path: RequestPath, echo: Misbehaviour, tmp_path: Path
) -> None:
    use(hostile, path, echo)
    events: list[Any] = []

    async def record(event: object) -> None:
        events.append(event)

    hooks = {name: [record] for name in ("request", "response", "retry", "poll")}
    async with AsyncVideoGen(KEY, hostile.base_url, max_retries=1, event_hooks=hooks) as client:
        try:
            result = await path.call(client, hostile, tmp_path)
        except vg.VideoGenError:
            result = None
    # Every path but a download by URL (a media host, not the service) sends a request.
    assert events or path.name == "download(url)"
    assert_no_key(_event_texts(events) + _result_texts(result))
