"""Projects through the ledger: the project id and every task id of its batches are kept."""

from __future__ import annotations

from videogen_async import Ledger
from videogen_async.testing import SandboxServer

REFERENCE = "https://cdn.example.com/ref.mp4"
PRODUCTS = ["https://cdn.example.com/p1.png"]


async def test_project_and_its_batch_are_recorded_and_watched(ledger_url: str) -> None:
    async with SandboxServer(time_scale=0.001, seed=9) as server, server.client() as client:
        async with Ledger.open(ledger_url, max_credits=1000) as ledger:
            project = await ledger.create_project(
                client, REFERENCE, PRODUCTS, key="ad-1", mode="manual"
            )
            assert project.kind == "project"
            assert project.project_id == server.project_ids[0]
            again = await ledger.create_project(
                client, REFERENCE, PRODUCTS, key="ad-1", mode="manual"
            )
            assert again.project_id == project.project_id
            assert len(server.project_ids) == 1

            await client.projects.wait_for_script(project.project_id, timeout=30)
            tasks = await ledger.create_videos(client, "ad-1", out_number=2)
            assert len(tasks) == 2
            assert {t.task_id for t in tasks} <= set(server.task_ids)
            assert all(t.kind == "project_task" and t.state == "pending" for t in tasks)
            assert all(t.project_id == project.project_id for t in tasks)
            # Recording the same ids again keeps them as they are.
            assert (
                await ledger.record_project_tasks(
                    "ad-1", project.project_id, [t.task_id for t in tasks]
                )
                == tasks
            )

            async with ledger.watch(client, claim_interval=0.05) as finished:
                done = []
                async for entry in finished:
                    done.append(entry)
                    if len(done) == 2:
                        break
            assert sorted(e.key for e in done) == sorted(t.key for t in tasks)
            assert all(e.is_terminal for e in done)
            summary = await ledger.summary()
            assert summary["reserved"] == 0
