"""Every request path of the client, as a call a hostile test can make."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from videogen_async import AsyncVideoGen, PollPolicy

from ._server import HostileServer

#: Fast polling; the waits give up at the first transient failure (see `_quick`).
FAST = PollPolicy(min_interval=0.01, max_interval=0.02, dense_interval=0.01, coalesce=0.001)
WAIT = 0.5  # a wait's deadline: hostile answers end a wait long before

Call = Callable[[AsyncVideoGen, HostileServer, Path], Awaitable[Any]]


@attrs.frozen
class RequestPath:
    """One public call. ``creates``: it sends a creating POST (which may charge)."""

    name: str
    call: Call
    creates: bool = False
    media: bool = False  # the misbehaving answer comes from the media host

    def __str__(self) -> str:
        return self.name


def _quick(client: AsyncVideoGen) -> AsyncVideoGen:
    """The client, its waits giving up at the first transient failure (raising it)."""
    return client.with_options(backoff=attrs.evolve(client.backoff, max_consecutive_failures=1))


async def _gather(client: AsyncVideoGen, server: HostileServer, tmp: Path) -> list[Any]:
    return [
        task
        async for task in _quick(client).tasks.gather_until_done(
            ["t-1", "t-2"], timeout=WAIT, poll_policy=FAST
        )
    ]


PATHS = (
    RequestPath("credits.get", lambda c, s, t: c.credits.get()),
    RequestPath("tasks.create", lambda c, s, t: c.tasks.create("a cat"), creates=True),
    RequestPath("tasks.get", lambda c, s, t: c.tasks.get("t-1")),
    RequestPath(
        "tasks.wait", lambda c, s, t: _quick(c).tasks.wait("t-1", timeout=WAIT, poll_policy=FAST)
    ),
    RequestPath("gather_until_done", _gather),
    RequestPath(
        "projects.create",
        lambda c, s, t: c.projects.create(
            "https://media.example/ref.mp4", ["https://media.example/p.png"]
        ),
        creates=True,
    ),
    RequestPath("projects.get", lambda c, s, t: c.projects.get("p-1")),
    RequestPath(
        "projects.create_videos", lambda c, s, t: c.projects.create_videos("p-1"), creates=True
    ),
    RequestPath(
        "projects.wait_for_script",
        lambda c, s, t: _quick(c).projects.wait_for_script("p-1", timeout=WAIT, poll_policy=FAST),
    ),
    RequestPath(
        "projects.wait",
        lambda c, s, t: _quick(c).projects.wait("p-1", timeout=WAIT, poll_policy=FAST),
    ),
    RequestPath("download(task id)", lambda c, s, t: c.download("t-1", t / "by-id.mp4")),
    RequestPath(
        "download(url)",
        lambda c, s, t: c.download(s.media_url, t / "by-url.mp4", attempts=1),
        media=True,
    ),
)
