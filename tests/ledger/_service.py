"""A video service of the tests' own, for faults from inside its handlers.

It answers creates (of tasks, of projects and of their video batches) and status queries in
the service's envelope, counts what it was sent (the server-side truth: POSTs and their
bodies, credits charged, ids handed out), and runs the test's hook inside each POST handler
before it answers: a database crashed, connections killed, a disk filled while the create is
at the service. ``answer_id`` makes it hand out hostile ids.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from videogen_async import AsyncVideoGen

CREATE = "/v1/video/videomodel-2"
PROJECTS = "/v1/video/viral-ads-clone"
NOW = "2026-01-01T00:00:00Z"


class Service:
    """Serve on 127.0.0.1 (``async with``); ``base_url``, ``client()``, and the counts.

    Args:
        price: Credits charged per task.
        on_post: Awaited inside each POST handler with its number (from 1), before answering.
        answer_id: The ``task_id`` answered to the n-th POST (default: a fresh UUID).
        polls_to_finish: Status queries of an id before it reads ``succeeded``.
        create_status: Answer creates with this HTTP status (and an error envelope) instead.
        batch_project: The ``project_id`` echoed with a video batch (default: the path's).
    """

    def __init__(
        self,
        *,
        price: float = 8.0,
        on_post: Callable[[int], Awaitable[None]] | None = None,
        answer_id: Callable[[int], Any] | None = None,
        polls_to_finish: int = 1,
        create_status: int = 200,
        batch_project: Any = None,
    ) -> None:
        self.price = price
        self.on_post = on_post
        self.answer_id = answer_id or (lambda n: str(uuid.uuid4()))
        self.polls_to_finish = polls_to_finish
        self.create_status = create_status
        self.batch_project = batch_project
        self.posts = 0
        self.bodies: list[Any] = []
        self.requests: list[web.Request] = []
        self.answered = 0
        self.charged = 0.0
        self.ids: list[Any] = []
        self.polls: collections.Counter[str] = collections.Counter()
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> Service:
        app = web.Application(middlewares=[self._sent])
        app.router.add_post(CREATE, self._create)
        app.router.add_post(PROJECTS, self._create)
        app.router.add_post(PROJECTS + "/{project_id}/videos", self._create)
        app.router.add_get("/v1/tasks", self._status)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def client(self) -> AsyncVideoGen:
        """A client of this service."""
        return AsyncVideoGen(api_key="test-key", base_url=self.base_url)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, looked at again as each request arrives or ends."""
        while not condition():
            self._changed.clear()
            await self._changed.wait()

    def _touch(self) -> None:
        self._changed.set()

    @staticmethod
    def _answer(data: Any, code: int = 200, status: int = 200) -> web.Response:
        body = {"code": code, "trace_id": uuid.uuid4().hex, "message": None, "data": data}
        return web.json_response(body, status=status)

    @web.middleware
    async def _sent(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Count a POST as answered once its whole answer was handed to the connection."""
        response: web.StreamResponse = await handler(request)
        if request.method == "POST":
            await response.prepare(request)
            await response.write_eof()
            self.answered += 1
            self._touch()
        return response

    async def _create(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json() if await request.read() else None)
        self.requests.append(request)
        self.posts += 1
        number = self.posts
        self._touch()
        try:
            if self.on_post is not None:
                await self.on_post(number)
        finally:
            self._touch()
        if self.create_status != 200:
            return self._answer(None, code=self.create_status, status=self.create_status)
        if request.path.endswith("/videos"):  # a video batch: two tasks
            task_ids = [self.answer_id(number), self.answer_id(number)]
            self.ids += task_ids
            self._touch()
            project_id = self.batch_project or request.match_info["project_id"]
            return self._answer({"project_id": project_id, "task_ids": task_ids})
        if request.path == PROJECTS:
            self.charged += 10.0
            return self._answer(
                {"project_id": f"p-{number}", "status": "draft", "credits_cost": 10}
            )
        task_id = self.answer_id(number)
        self.ids.append(task_id)
        self.charged += self.price
        self._touch()
        return self._answer(
            {"task_id": task_id, "status": "running", "created_at": NOW, "credits_cost": self.price}
        )

    async def _status(self, request: web.Request) -> web.Response:
        task_id = request.query.get("task_id", "")
        self.polls[task_id] += 1
        self._touch()
        if task_id not in self.ids:
            return self._answer(None, code=404, status=404)
        done = self.polls[task_id] >= self.polls_to_finish
        result = {"video_url": f"https://cdn.example.com/{task_id}.mp4", "finished_at": NOW}
        return self._answer(
            {
                "task_id": task_id,
                "status": "succeeded" if done else "running",
                "model": "videomodel_2_0",
                "created_at": NOW,
                "updated_at": NOW,
                "credits_cost": self.price,
                "result": result if done else None,
            }
        )


class LogEvent(logging.Handler):
    """An event set when the SDK logs a record whose text holds ``text`` (``with`` it)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.event = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self._loop.call_soon_threadsafe(self.event.set)

    def __enter__(self) -> LogEvent:
        logging.getLogger("videogen_async").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("videogen_async").removeHandler(self)

    async def wait(self) -> None:
        """Wait for the record (again after :meth:`rearm`)."""
        await self.event.wait()

    def rearm(self) -> None:
        """Wait for the next such record."""
        self.event.clear()
