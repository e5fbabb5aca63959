"""An aiohttp.web app that shares one ``AsyncVideoGen`` client across all its requests.

The client is created when the app starts and closed when it stops (``cleanup_ctx``), so
every request reuses one connection pool. The task ids live in a ledger
(``videogen_async.Ledger``), so a restart or a deploy loses none: tasks are created through
it, and a background watcher (one per worker process; the workers of one ledger share the
work) waits on every pending task and records its result. Two routes:

* ``POST /videos`` with ``{"prompt": "...", "duration": 5, ...}`` creates a video task and
  answers ``201`` with its ``video_id``, the app's id of it (a ``request_id`` field in the
  body makes the create idempotent: a client that retries after a timeout gets the same
  video, not a second one); ``task_id`` is the service's id, for the record;
* ``GET /videos/{video_id}`` answers the task's status, and its video URL once it has succeeded;
  ``?wait=10`` waits up to 10 seconds for its result, recorded by whichever worker's
  watcher saw it (``Ledger.wait``: pushed by the ledger, no request to the service).

Run as many workers as you like on one ledger; ``--no-watch`` makes a worker only serve (the
other processes of the ledger poll), as in a deployment with a watcher process of its own.

The ledger is ``$VIDEOGEN_LEDGER`` (a file path, or ``postgresql://...`` for workers on many
machines), else ``web_app.ledger.db``; with the local sandbox, a temporary file.

Run it against the service (``VIDEOGEN_BASE_URL`` and ``VIDEOGEN_API_KEY`` set) or, without
them, against a sandbox started inside the app::

    python examples/web_app.py --port 8080
    curl -s -X POST localhost:8080/videos -d '{"prompt": "a paper boat on a lake"}'
    curl -s 'localhost:8080/videos/<video_id>?wait=30'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from aiohttp import web

from videogen_async import (
    AmbiguousCreateError,
    APIConnectionError,
    APIStatusError,
    AsyncVideoGen,
    InsufficientCreditsError,
    InvalidRequestError,
    Ledger,
    LedgerEntry,
    NotFoundError,
    RateLimitError,
    Task,
    VideoGenError,
    WaitTimeoutError,
)
from videogen_async.testing import SandboxServer

CLIENT = web.AppKey("videogen_client", AsyncVideoGen)
SANDBOX = web.AppKey("videogen_sandbox", SandboxServer)
LEDGER = web.AppKey("videogen_ledger", Ledger)
LEDGER_URL = web.AppKey("videogen_ledger_url", str)
WATCH = web.AppKey("videogen_watch", bool)
KEY_PREFIX = "web/"

# The fields of POST /videos passed on to client.tasks.create (the SDK checks their values).
CREATE_FIELDS = frozenset(
    {"model", "function_mode", "ratio", "duration", "image_urls", "audio_urls", "video_urls"}
)
MAX_WAIT = 30.0


def sandbox_context(
    **options: Any,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` step that runs a local sandbox for the app's lifetime."""

    async def run_sandbox(app: web.Application) -> AsyncIterator[None]:
        async with SandboxServer(**options) as server:
            app[SANDBOX] = server
            yield

    return run_sandbox


async def videogen_client(app: web.Application) -> AsyncIterator[None]:
    """The ``cleanup_ctx`` step that owns the app's one client.

    Everything before ``yield`` runs at startup, everything after it at shutdown: the client
    (and its connection pool) lives exactly as long as the app.
    """
    sandbox = app.get(SANDBOX)
    client = sandbox.client() if sandbox is not None else AsyncVideoGen()
    async with client:
        app[CLIENT] = client
        yield


async def videogen_ledger(app: web.Application) -> AsyncIterator[None]:
    """The ``cleanup_ctx`` step that opens the ledger and runs this worker's watcher."""
    scratch = None
    where = app.get(LEDGER_URL) or os.environ.get("VIDEOGEN_LEDGER")
    if where is None and SANDBOX in app:  # the sandbox's tasks end with it: a scratch file
        scratch = await anyio.to_thread.run_sync(tempfile.mkdtemp)
        where = os.path.join(scratch, "web_app.ledger.db")
    try:
        async with Ledger.open(where or "web_app.ledger.db") as ledger:
            app[LEDGER] = ledger

            async def watch() -> None:
                async with ledger.watch(app[CLIENT]) as finished:
                    async for _ in finished:  # each result is in the ledger: the waits hear it
                        pass

            watcher = asyncio.create_task(watch()) if app.get(WATCH, True) else None
            yield
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
    finally:
        if scratch is not None:
            await anyio.to_thread.run_sync(shutil.rmtree, scratch)


def task_json(task: Task) -> dict[str, Any]:
    """The JSON this app answers for a task."""
    return {
        "task_id": task.task_id,
        "status": str(task.status),
        "done": task.is_terminal,
        "video_url": task.video_url,
        "error_message": task.error_message,
        "credits_cost": task.credits_cost,
    }


def error_json(status: int, message: str, **extra: Any) -> web.Response:
    """An error answer of this app."""
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def service_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Turn the SDK's errors into answers of this app (never a bare 500)."""
    try:
        return await handler(request)
    except InvalidRequestError as exc:  # a rule of the service broken: nothing was sent
        return error_json(400, str(exc), field=exc.field)
    except NotFoundError:
        return error_json(404, "no such video")
    except InsufficientCreditsError:
        return error_json(402, "out of video credits")
    except RateLimitError as exc:  # still rate limited after the client's own retries
        retry_after = str(round(exc.retry_after or 1))
        response = error_json(503, "the video service is busy, try again")
        response.headers["Retry-After"] = retry_after
        return response
    except AmbiguousCreateError:  # this request id's earlier create may have taken effect
        return error_json(502, "the video service failed", may_have_been_created=True)
    except (APIConnectionError, APIStatusError) as exc:
        # For a create, the task may exist even though we could not read the answer: say so
        # rather than invite the user to click again and pay twice.
        return error_json(
            502,
            "the video service failed",
            may_have_been_created=exc.request_may_have_taken_effect,
        )
    except VideoGenError:
        return error_json(502, "the video service answered something unexpected")


routes = web.RouteTableDef()


@routes.post("/videos")
async def create_video(request: web.Request) -> web.Response:
    """Create a video task from the JSON body."""
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return error_json(400, "the body must be JSON")
    if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
        return error_json(400, "a JSON object with a 'prompt' string is required")
    unknown = set(body) - CREATE_FIELDS - {"prompt", "request_id"}
    if unknown:
        return error_json(400, f"unknown fields: {', '.join(sorted(unknown))}")
    request_id = body.get("request_id") or uuid.uuid4().hex
    if not isinstance(request_id, str) or "/" in request_id or len(request_id) > 200:
        return error_json(400, "request_id must be a string without '/'")
    options = {name: body[name] for name in CREATE_FIELDS & set(body)}
    entry = await request.app[LEDGER].create_task(
        request.app[CLIENT], body["prompt"], key=KEY_PREFIX + request_id, **options
    )
    location = str(request.app.router["video"].url_for(video_id=request_id))
    return web.json_response(
        {
            "video_id": request_id,
            "task_id": entry.task_id,
            "status": str(entry.task.status) if entry.task is not None else "running",
            "credits_cost": float(entry.credits_cost or 0.0),  # a float, as in task_json
            "url": location,
        },
        status=201,
        headers={"Location": location},
    )


@routes.get("/videos/{video_id}", name="video")
async def get_video(request: web.Request) -> web.Response:
    """Answer a task's status; with ``?wait=SECONDS``, wait for its result first."""
    app = request.app
    key = KEY_PREFIX + request.match_info["video_id"]
    try:
        wait = min(float(request.query.get("wait", 0)), MAX_WAIT)
    except ValueError:
        return error_json(400, "wait must be a number of seconds")
    entry = await app[LEDGER].get(key)
    if entry is None or entry.task_id is None:
        return error_json(404, "no such video")
    if wait > 0 and not entry.is_terminal:
        # Recorded by any worker's watcher, the result reaches every waiting worker; still
        # running at the deadline, the video is answered as it is now.
        with contextlib.suppress(WaitTimeoutError):
            entry = await app[LEDGER].wait(key, timeout=wait)
    return web.json_response(await entry_json(app, entry))


async def entry_json(app: web.Application, entry: LedgerEntry) -> dict[str, Any]:
    """A ledger entry as this app answers it: its recorded result, else the task as it is."""
    video_id = entry.key.removeprefix(KEY_PREFIX)
    if entry.is_terminal and entry.task is not None:
        return {"video_id": video_id, **task_json(entry.task), "recorded": True}
    task = await app[CLIENT].tasks.get(str(entry.task_id))
    return {"video_id": video_id, **task_json(task), "recorded": False}


def make_app(
    *,
    sandbox: dict[str, Any] | None = None,
    ledger: str | os.PathLike[str] | None = None,
    watch: bool = True,
) -> web.Application:
    """Build the app.

    Args:
        sandbox: Options of a local ``SandboxServer`` to run inside the app; ``None`` uses
            the service named by ``VIDEOGEN_BASE_URL`` / ``VIDEOGEN_API_KEY``.
        ledger: The ledger's file path or URL (``None``: ``$VIDEOGEN_LEDGER``, else
            ``web_app.ledger.db``; a temporary file with the local sandbox).
        watch: Run a watcher in this worker (``False``: other processes of the ledger do).

    Returns:
        The application.
    """
    app = web.Application(middlewares=[service_errors])
    app[WATCH] = watch
    if ledger is not None:
        app[LEDGER_URL] = os.fspath(ledger)
    if sandbox is not None:
        app.cleanup_ctx.append(sandbox_context(**sandbox))
    app.cleanup_ctx.append(videogen_client)
    app.cleanup_ctx.append(videogen_ledger)
    app.add_routes(routes)
    return app


def main(argv: list[str] | None = None) -> None:
    """Serve the app until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=0.1,
        help="speed of the local sandbox when VIDEOGEN_BASE_URL is not set (0.1: 10x)",
    )
    parser.add_argument(
        "--no-watch",
        action="store_true",
        help="only serve: the other processes of the ledger poll the pending videos",
    )
    args = parser.parse_args(argv)
    sandbox = None if os.environ.get("VIDEOGEN_BASE_URL") else {"time_scale": args.time_scale}
    app = make_app(sandbox=sandbox, watch=not args.no_watch)
    web.run_app(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
