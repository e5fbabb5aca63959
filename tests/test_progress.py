"""Progress on single waits: ``on_update`` of ``tasks.wait`` and of the project waits.

The sandbox's clock is manual and moves one simulated second after each poll (a ``poll``
event hook advances it), so every step of a project, which lasts at least a second, is seen
by some poll: the sequences below are exact, and no test sleeps.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

import videogen_async as vg
from videogen_async import PollPolicy
from videogen_async.testing import SandboxServer

FAST = PollPolicy(first_delay=0.0, min_interval=0.001, max_interval=0.002, growth=0.0)
AD = "https://cdn.example.com/ad.mp4"
IMAGES = ["https://cdn.example.com/product.png"]


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(
        manual_clock=True, seed=8, task_duration=(20, 30), credits=1e6
    ) as server:
        yield server


def ticking(sandbox: SandboxServer, seconds: float = 1.0) -> dict[str, list[Any]]:
    """Event hooks that move the sandbox's clock by ``seconds`` after every poll."""

    def tick(event: vg.PollEvent) -> None:
        sandbox.clock.advance(seconds)

    return {"poll": [tick]}


class Bot:
    """A chat bot's status message, edited as the project moves through its steps."""

    def __init__(self) -> None:
        self.edits: list[str] = []

    async def edit_message(self, text: str) -> None:
        self.edits.append(text)

    async def on_update(self, project: vg.Project) -> None:
        done = sum(1 for t in project.tasks if t.is_terminal)
        videos = f", videos {done}/{len(project.tasks)}" if project.tasks else ""
        await self.edit_message(f"{project.status}: {project.current_step}{videos}")


async def test_a_bot_edits_its_message_as_the_project_moves_through_its_steps(
    sandbox: SandboxServer,
) -> None:
    bot = Bot()
    async with sandbox.client(event_hooks=ticking(sandbox)) as client:
        created = await client.projects.create(AD, IMAGES, mode="manual")
        ready = await client.projects.wait_for_script(
            created.project_id, poll_policy=FAST, on_update=bot.on_update
        )
        assert ready.has_script
        assert bot.edits == [
            "draft: preparing_media",
            "running: analyzing",
            "running: generating_script",
            "succeeded: script_ready",
        ]
        await client.projects.create_videos(created.project_id, out_number=2)
        bot.edits.clear()
        final = await client.projects.wait(
            created.project_id, poll_policy=FAST, on_update=bot.on_update
        )
    assert final.is_terminal
    assert bot.edits[0] == "running: generating_video, videos 0/2"
    assert bot.edits[-1] == f"{final.status}: {final.current_step}, videos 2/2"
    assert len(bot.edits) == len(set(bot.edits))  # an edit only when something changed


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_tasks_wait_reports_each_distinct_state_once(
    sandbox: SandboxServer, kind: str
) -> None:
    seen: list[vg.Task] = []
    polls: list[vg.PollEvent] = []

    def on_update(task: vg.Task) -> None:
        seen.append(task)

    async def on_update_async(task: vg.Task) -> None:
        seen.append(task)

    hooks = ticking(sandbox)
    hooks["poll"].append(polls.append)
    async with sandbox.client(event_hooks=hooks) as client:
        created = await client.tasks.create("a paper boat", duration=5)
        task = await client.tasks.wait(
            created.task_id,
            poll_policy=FAST,
            on_update=on_update if kind == "sync" else on_update_async,
        )
    assert len(polls) > len(seen) >= 2  # many polls, few changes
    assert seen[-1] == task
    assert task.is_terminal
    assert not any(t.is_terminal for t in seen[:-1])
    assert all(a != b for a, b in itertools.pairwise(seen))
    assert seen[0].status in (vg.TaskStatus.QUEUED, vg.TaskStatus.RUNNING)


async def test_an_update_of_a_task_already_done_is_its_final_state(
    sandbox: SandboxServer,
) -> None:
    seen: list[vg.Task] = []
    async with sandbox.client() as client:
        created = await client.tasks.create("a fox")
        sandbox.clock.advance(100)
        task = await client.tasks.wait(created.task_id, poll_policy=FAST, on_update=seen.append)
    assert seen == [task]


async def test_an_exception_in_on_update_ends_the_wait_with_it(sandbox: SandboxServer) -> None:
    class Stop(Exception):
        pass

    def stop(value: object) -> None:
        raise Stop

    async with sandbox.client(event_hooks=ticking(sandbox)) as client:
        created = await client.tasks.create("a boat")
        with pytest.raises(Stop):
            await client.tasks.wait(created.task_id, poll_policy=FAST, on_update=stop)
        project = await client.projects.create(AD, IMAGES)
        with pytest.raises(Stop):
            await client.projects.wait_for_script(
                project.project_id, poll_policy=FAST, on_update=stop
            )
        with pytest.raises(Stop):
            await client.projects.wait(project.project_id, poll_policy=FAST, on_update=stop)


async def test_a_timed_out_wait_has_reported_what_it_saw(sandbox: SandboxServer) -> None:
    seen: list[vg.Task] = []
    async with sandbox.client() as client:  # the clock stands still: the task never ends
        created = await client.tasks.create("a lighthouse")
        with pytest.raises(vg.WaitTimeoutError) as caught:
            await client.tasks.wait(
                created.task_id, timeout=0.05, poll_policy=FAST, on_update=seen.append
            )
    assert seen == [caught.value.last]


async def test_watch_yields_each_distinct_state_and_ends_at_the_terminal_one(
    sandbox: SandboxServer,
) -> None:
    polls: list[vg.PollEvent] = []
    hooks = ticking(sandbox)
    hooks["poll"].append(polls.append)
    async with sandbox.client(event_hooks=hooks, poll_policy=FAST) as client:
        created = await client.tasks.create("a boat", duration=5)
        states = [task async for task in client.tasks.watch(created.task_id)]
        final = await client.tasks.get(created.task_id)
    assert states[-1] == final
    assert final.is_terminal
    assert not any(t.is_terminal for t in states[:-1])
    assert all(a != b for a, b in itertools.pairwise(states))
    assert len(polls) > len(states)


async def test_watch_polls_only_between_iterations_and_honours_its_deadline(
    sandbox: SandboxServer,
) -> None:
    polls: list[vg.PollEvent] = []
    async with sandbox.client(event_hooks={"poll": [polls.append]}, poll_policy=FAST) as client:
        created = await client.tasks.create("a lighthouse")  # the clock stands still
        watch = client.tasks.watch(created.task_id, timeout=0.05)
        first = await anext(watch)
        before = len(polls)
        # While the body runs, nothing polls.
        assert len(polls) == before
        with pytest.raises(vg.WaitTimeoutError) as caught:
            await anext(watch)
        assert caught.value.last == first
        assert len(polls) > before
