"""Celery jobs that create videos through the ledger, and a dispatcher that enqueues the next job.

* ``videos.create`` (a Celery job) creates the video through the ledger with the job's id as
  its key: a job the broker delivers again (a worker lost mid-job, ``acks_late``) finds its
  entry and sends nothing, so it never pays twice. It returns at once: no worker waits
  for a video.
* ``python celery_videos.py`` runs the dispatcher beside the workers: one watch of the
  ledger polls every video with one adaptive gather, and one ``ledger.dispatch`` enqueues
  ``videos.publish`` with each finished entry, at least once (any number of dispatchers
  share the work).

Run a worker and a dispatcher, then enqueue from anywhere::

    celery -A celery_videos worker --loglevel INFO
    python celery_videos.py
    python -c "import celery_videos as v; v.create_video.delay('a paper boat at dawn')"

``REDIS_URL`` is the broker (``redis://localhost:6379/0``), ``VIDEOGEN_LEDGER`` the ledger (a
file path shared by the processes of one machine, or a PostgreSQL URL;
``celery_videos.ledger.db``); ``VIDEOGEN_BASE_URL`` and ``VIDEOGEN_API_KEY`` the service.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import anyio
from celery import Celery
from celery.utils.log import get_task_logger

from videogen_async import AsyncVideoGen, Ledger, LedgerEntry

LEDGER = os.environ.get("VIDEOGEN_LEDGER", "celery_videos.ledger.db")
KEY_PREFIX = "celery/"

app = Celery("celery_videos", broker=os.environ.get("REDIS_URL", "redis://localhost:6379/0"))
app.conf.update(
    task_acks_late=True,  # a job is acknowledged once done: a lost worker's job comes back
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)
logger = get_task_logger(__name__)


@app.task(bind=True, name="videos.create")
def create_video(self: Any, prompt: str, **fields: Any) -> str:
    """Create the video once per job id; return its ledger key."""
    entry = asyncio.run(_create(KEY_PREFIX + self.request.id, prompt, fields))
    logger.info("created %s: task %s", entry.key, entry.task_id)
    return entry.key


async def _create(key: str, prompt: str, fields: dict[str, Any]) -> LedgerEntry:
    async with AsyncVideoGen() as client, Ledger.open(LEDGER) as ledger:
        return await ledger.create_task(client, prompt, key=key, **fields)


@app.task(name="videos.publish")
def publish_video(data: dict[str, Any]) -> None:
    """The follow-up job, once per finished video (at least once: dedupe on the key)."""
    entry = LedgerEntry.from_dict(data)
    video = entry.task.video_url if entry.task is not None else None
    logger.info("published %s: %s %s", entry.key, entry.state, video)


async def dispatch() -> None:
    """Watch the ledger and enqueue ``videos.publish`` for each finished video, until stopped."""
    async with AsyncVideoGen() as client, Ledger.open(LEDGER) as ledger:

        async def enqueue(entry: LedgerEntry) -> None:
            if entry.key.startswith(KEY_PREFIX):  # the entries of these jobs only
                await anyio.to_thread.run_sync(publish_video.delay, entry.to_dict())

        async def watch() -> None:
            async with ledger.watch(client) as finished:
                async for _entry in finished:
                    pass

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            print("dispatcher ready", flush=True)
            await ledger.dispatch("celery-publish", enqueue)


if __name__ == "__main__":
    asyncio.run(dispatch())
