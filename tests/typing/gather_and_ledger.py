"""Type-checked, not run: what a gather yields, and the calls a checker must refuse.

``return_exceptions`` decides the item type (``Task``, or ``Task | TaskPollError``); a
misspelt keyword (``timout``) is an error: the ``type: ignore`` below would be reported as
unused (``--strict`` warns of those) if it were accepted.
"""

from __future__ import annotations

from typing_extensions import assert_type

import videogen_async as vg


async def gathered(client: vg.AsyncVideoGen, ids: list[str], entry: vg.LedgerEntry) -> None:
    async with client.tasks.gather_until_done(ids, timeout=60) as results:
        async for task in results:
            assert_type(task, vg.Task)
    async for item in client.tasks.gather_until_done(ids, return_exceptions=True):
        assert_type(item, vg.Task | vg.TaskPollError)
    async for done in vg.gather_until_done(client, ids, max_concurrency=4):
        assert_type(done, vg.Task)
    client.tasks.gather_until_done(ids, timout=60)  # type: ignore[call-overload]
    assert_type(entry.video_url, str | None)
    assert_type(entry.task.status.value if entry.task else "", str)  # one type: the open enum


def blocking(client: vg.VideoGen, ids: list[str]) -> None:
    with client.tasks.gather_until_done(ids, timeout=60) as results:
        for task in results:
            assert_type(task, vg.Task)
