"""A chat-bot-like service: many users at once, each told when their own video is ready.

Users send messages (``/video <prompt>``) to the bot's inbox; the bot answers each user on
their own queue. One ``AsyncVideoGen`` client serves everyone:

* each request's task is created through a ledger (``videogen_async.Ledger``), keyed by the
  user and the request's id, its owner in the entry's metadata: the task id and its owner are
  written to the ledger before the user hears "on it", and a request delivered twice is
  created once;
* a watcher of the ledger polls every pending task (one poll schedule for all of them,
  ``gather_until_done``) and records each result in the ledger;
* the request's handler waits for its own video (``Ledger.wait``: the ledger tells it,
  whichever bot process's watcher recorded the result), tells its owner, and notes in the
  entry's metadata that the owner was told.

A restart loses nothing: the owners live in the ledger, not in memory, so the restarted bot
picks up the videos it started and not yet told (``Ledger.entries(metadata=...)``), waits for
them again and tells their owners. Several bot processes can share one ledger
(``--ledger postgresql://...``); each task is then polled by one of them.

Here the users are simulated (``--users``, ``--videos``); in a real bot ``inbox`` is fed by
the chat platform's webhook or socket and ``reply`` posts to it::

    python examples/bot.py --users 20 --videos 2 --ledger bot.ledger.db

The ledger is ``--ledger``, else ``$VIDEOGEN_LEDGER`` (a file path or a PostgreSQL URL), else
``bot.ledger.db``. Without ``VIDEOGEN_BASE_URL`` / ``VIDEOGEN_API_KEY`` it runs against a
local sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import attrs

from videogen_async import (
    AmbiguousCreateError,
    AsyncVideoGen,
    Ledger,
    LedgerEntry,
    LedgerError,
    VideoGenError,
)
from videogen_async.testing import SandboxServer

KEY_PREFIX = "bot/"
"""The ledger keys of the bot: ``bot/USER/REQUEST_ID``."""
BOT = "videobot"
"""The bot's name in the metadata of its entries: ``{"bot": BOT, "user": ..., "told": ...}``."""


@attrs.frozen
class Message:
    """A message from a user to the bot."""

    user: str
    text: str
    request_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)


UNSURE = "I could not tell whether your video was started; please ask again later"


@attrs.frozen
class Reply:
    """A message from the bot to a user; ``video_url`` is set when a video is ready."""

    text: str
    task_id: str | None = None
    video_url: str | None = None
    final: bool = False


class VideoBot:
    """Serves ``/video`` requests of many users with one client and one ledger.

    Args:
        client: The client, shared by every user.
        ledger: Where the task ids and their owners live (shared with other bot processes).
        max_creates: Creates in flight at most.
    """

    def __init__(self, client: AsyncVideoGen, ledger: Ledger, *, max_creates: int = 8) -> None:
        self.client = client
        self.ledger = ledger
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outboxes: dict[str, asyncio.Queue[Reply]] = {}
        self._creates = anyio.CapacityLimiter(max_creates)
        self._waiting: set[str] = set()

    def outbox(self, user: str) -> asyncio.Queue[Reply]:
        """The queue of the bot's replies to ``user``."""
        return self.outboxes.setdefault(user, asyncio.Queue())

    def reply(self, user: str, reply: Reply) -> None:
        """Send a reply to a user (here: put it on their queue)."""
        self.outbox(user).put_nowait(reply)

    async def run(self) -> None:
        """Serve until cancelled: answer the inbox, and tell owners of finished tasks."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            # Videos this bot started before a restart, their owners not told yet.
            async for entry in self.ledger.entries(metadata={"bot": BOT, "told": False}):
                tg.start_soon(self._tell, entry)
            while True:
                message = await self.inbox.get()
                tg.start_soon(self._handle, message)

    async def _handle(self, message: Message) -> None:
        command, _, prompt = message.text.strip().partition(" ")
        if command != "/video" or not prompt.strip():
            self.reply(message.user, Reply("send /video <what you want to see>", final=True))
            return
        key = f"{KEY_PREFIX}{message.user}/{message.request_id}"
        metadata = {"bot": BOT, "user": message.user, "told": False}
        try:
            async with self._creates:
                entry = await self.ledger.create_task(
                    self.client, prompt, key=key, metadata=metadata
                )
        except AmbiguousCreateError:
            self.reply(message.user, Reply(UNSURE, final=True))
            return
        except VideoGenError as exc:
            self.reply(message.user, Reply(f"sorry, that did not work: {exc}", final=True))
            return
        self.reply(message.user, Reply(f"on it: {prompt.strip()!r}", task_id=entry.task_id))
        await self._tell(entry)

    async def _tell(self, entry: LedgerEntry) -> None:
        """Wait for a video, whichever process records it; tell its owner, once."""
        user = entry.metadata.get("user")
        if not isinstance(user, str) or entry.key in self._waiting or entry.metadata.get("told"):
            return  # not the bot's, waited for already, or told already
        self._waiting.add(entry.key)
        try:
            entry = await self.ledger.wait(entry.key)
        except AmbiguousCreateError:
            self.reply(user, Reply(UNSURE, final=True))
        except LedgerError:
            pass  # its create was refused: its owner was told then
        else:
            self._notify(user, entry)
        finally:
            self._waiting.discard(entry.key)
        await self.ledger.update_metadata(entry.key, {"told": True})

    async def _watch(self) -> None:
        """Poll every pending task of the ledger (with the other bots): the waits hear."""
        async with self.ledger.watch(self.client) as finished:
            async for _ in finished:
                pass

    def _notify(self, user: str, entry: LedgerEntry) -> None:
        task = entry.task
        if task is None:
            return
        if task.is_succeeded:
            self.reply(
                user,
                Reply(
                    f"your video is ready: {task.video_url}",
                    task_id=task.task_id,
                    video_url=task.video_url,
                    final=True,
                ),
            )
        else:
            reason = task.error_message or str(task.status)
            self.reply(
                user, Reply(f"your video failed: {reason}", task_id=task.task_id, final=True)
            )


async def simulated_user(bot: VideoBot, user: str, prompts: list[str]) -> list[Reply]:
    """Send ``prompts`` to the bot and wait until each has had its final reply."""
    outbox = bot.outbox(user)
    for prompt in prompts:
        bot.inbox.put_nowait(Message(user, f"/video {prompt}"))
    replies: list[Reply] = []
    finals = 0
    while finals < len(prompts):
        reply = await outbox.get()
        replies.append(reply)
        finals += reply.final
    return replies


@asynccontextmanager
async def open_client(time_scale: float) -> AsyncIterator[AsyncVideoGen]:
    """The service's client from the environment, or a local sandbox's."""
    if os.environ.get("VIDEOGEN_BASE_URL"):
        async with AsyncVideoGen() as client:
            yield client
        return
    async with SandboxServer(time_scale=time_scale) as server, server.client() as client:
        yield client


async def simulate(
    client: AsyncVideoGen, ledger: Ledger, users: int, videos: int
) -> dict[str, list[Reply]]:
    """Run the bot for ``users`` simulated users asking ``videos`` videos each."""
    bot = VideoBot(client, ledger)
    conversations: dict[str, list[Reply]] = {}

    async def converse(user: str) -> None:
        prompts = [f"{user}'s video #{n + 1}: a kite over the sea" for n in range(videos)]
        conversations[user] = await simulated_user(bot, user, prompts)

    async with anyio.create_task_group() as bot_group:
        bot_group.start_soon(bot.run)
        async with anyio.create_task_group() as users_group:
            for n in range(users):
                users_group.start_soon(converse, f"user{n + 1:03d}")
        bot_group.cancel_scope.cancel()  # every user has their answers: stop the bot
    return conversations


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--videos", type=int, default=2, help="videos per user")
    parser.add_argument("--time-scale", type=float, default=0.05, help="local sandbox speed")
    parser.add_argument(
        "--ledger",
        default=os.environ.get("VIDEOGEN_LEDGER"),
        help="a file path or postgresql:// URL (default: $VIDEOGEN_LEDGER, else bot.ledger.db;"
        " a temporary one with the local sandbox)",
    )
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    """Simulate the users and print each final reply."""
    scratch = await anyio.to_thread.run_sync(tempfile.mkdtemp)
    try:
        where = args.ledger or (
            "bot.ledger.db"
            if os.environ.get("VIDEOGEN_BASE_URL")
            else os.path.join(scratch, "bot.ledger.db")  # the sandbox's tasks end with it
        )
        async with open_client(args.time_scale) as client, Ledger.open(where) as ledger:
            conversations = await simulate(client, ledger, args.users, args.videos)
    finally:
        await anyio.to_thread.run_sync(shutil.rmtree, scratch)
    ready = 0
    for user, replies in sorted(conversations.items()):
        for reply in replies:
            if reply.final:
                print(f"{user}: {reply.text}")
                ready += reply.video_url is not None
    print(f"{ready} of {args.users * args.videos} videos ready")
    return 0 if ready == args.users * args.videos else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
