"""A chat-bot-like service: many users at once, each told when their own video is ready.

Users send messages (``/video <prompt>``) to the bot's inbox; the bot answers each user on
their own queue. One ``AsyncVideoGen`` client serves everyone:

* a request is answered at once ("on it"), and its task is created with the other
  requests in flight (at most ``max_creates`` at a time);
* instead of one polling loop per video, the bot collects the new task ids for a short
  moment and waits for each such batch with ``gather_until_done``, which polls all of them
  on one schedule and yields each task as soon as it is finished;
* each finished task is routed back to the user who asked for it.

Here the users are simulated (``--users``, ``--videos``); in a real bot ``inbox`` is fed by
the chat platform's webhook or socket and ``reply`` posts to it::

    python examples/bot.py --users 20 --videos 2

Without ``VIDEOGEN_BASE_URL`` / ``VIDEOGEN_API_KEY`` it runs against a local sandbox.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import attrs
from anyio.abc import TaskGroup

from videogen_async import AsyncVideoGen, Task, TaskPollError, VideoGenError
from videogen_async.testing import SandboxServer


@attrs.frozen
class Message:
    """A message from a user to the bot."""

    user: str
    text: str


@attrs.frozen
class Reply:
    """A message from the bot to a user; ``video_url`` is set when a video is ready."""

    text: str
    task_id: str | None = None
    video_url: str | None = None
    final: bool = False


class VideoBot:
    """Serves ``/video`` requests of many users with one client.

    Args:
        client: The client, shared by every user.
        max_creates: Creates in flight at most.
        batch_window: Seconds during which new task ids are collected into one batch.
        timeout: Seconds a video may take before its user is told to give up on it.
    """

    def __init__(
        self,
        client: AsyncVideoGen,
        *,
        max_creates: int = 8,
        batch_window: float = 0.2,
        timeout: float = 900.0,
    ) -> None:
        self.client = client
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outboxes: dict[str, asyncio.Queue[Reply]] = {}
        self._owners: dict[str, str] = {}  # task id -> user
        self._new_ids: asyncio.Queue[str] = asyncio.Queue()
        self._creates = anyio.CapacityLimiter(max_creates)
        self._batch_window = batch_window
        self._timeout = timeout

    def outbox(self, user: str) -> asyncio.Queue[Reply]:
        """The queue of the bot's replies to ``user``."""
        return self.outboxes.setdefault(user, asyncio.Queue())

    def reply(self, user: str, reply: Reply) -> None:
        """Send a reply to a user (here: put it on their queue)."""
        self.outbox(user).put_nowait(reply)

    async def run(self) -> None:
        """Serve until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_batches, tg)
            while True:
                message = await self.inbox.get()
                tg.start_soon(self._handle, message)

    async def _handle(self, message: Message) -> None:
        command, _, prompt = message.text.strip().partition(" ")
        if command != "/video" or not prompt.strip():
            self.reply(message.user, Reply("send /video <what you want to see>", final=True))
            return
        self.reply(message.user, Reply(f"on it: {prompt.strip()!r}"))
        try:
            async with self._creates:
                created = await self.client.tasks.create(prompt)
        except VideoGenError as exc:
            self.reply(message.user, Reply(f"sorry, that did not work: {exc}", final=True))
            return
        self._owners[created.task_id] = message.user
        self._new_ids.put_nowait(created.task_id)

    async def _watch_batches(self, tg: TaskGroup) -> None:
        """Collect new ids for ``batch_window`` seconds, then watch them as one batch."""
        while True:
            batch = [await self._new_ids.get()]
            with anyio.move_on_after(self._batch_window):
                while True:
                    batch.append(await self._new_ids.get())
            tg.start_soon(self._watch, batch)

    async def _watch(self, task_ids: list[str]) -> None:
        gather = self.client.tasks.gather_until_done(
            task_ids, timeout=self._timeout, return_exceptions=True
        )
        async with gather as results:
            async for item in results:
                self._notify(item)

    def _notify(self, item: Task | TaskPollError) -> None:
        user = self._owners.pop(item.task_id)
        if isinstance(item, TaskPollError):
            text = f"I lost track of your video {item.task_id}, sorry"
            self.reply(user, Reply(text, task_id=item.task_id, final=True))
        elif item.is_succeeded:
            self.reply(
                user,
                Reply(
                    f"your video is ready: {item.video_url}",
                    task_id=item.task_id,
                    video_url=item.video_url,
                    final=True,
                ),
            )
        else:
            reason = item.error_message or str(item.status)
            self.reply(
                user, Reply(f"your video failed: {reason}", task_id=item.task_id, final=True)
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


async def simulate(client: AsyncVideoGen, users: int, videos: int) -> dict[str, list[Reply]]:
    """Run the bot for ``users`` simulated users asking ``videos`` videos each."""
    bot = VideoBot(client)
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
    return parser.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    """Simulate the users and print each final reply."""
    async with open_client(args.time_scale) as client:
        conversations = await simulate(client, args.users, args.videos)
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
