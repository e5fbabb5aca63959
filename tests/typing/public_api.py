"""Type-checked, not run: the public API used as a user would (``mypy --strict``)."""

from __future__ import annotations

import videogen_async as vg
from videogen_async import AsyncVideoGen


async def main() -> None:
    async with AsyncVideoGen(api_key="k", base_url="https://api.example.com") as client:
        balance: vg.CreditBalance = await client.credits.get()
        available: float = balance.api_available_credits
        created: vg.CreatedTask = await client.tasks.create(
            "a cat surfing",
            model=vg.Model.VIDEOMODEL_2_0_FAST,
            function_mode="omni_reference",
            ratio=vg.Ratio.R9_16,
            duration=6,
            image_urls=["https://cdn.example.com/cat.png"],
        )
        task: vg.Task = await client.tasks.get(created.task_id)
        done: bool = task.is_terminal
        url: str | None = task.video_url
        project: vg.CreatedProject = await client.projects.create(
            "https://cdn.example.com/ad.mp4",
            ["https://cdn.example.com/p.png"],
            mode=vg.ProjectMode.MANUAL,
            speech_language_option=vg.SpeechLanguage.ENGLISH,
            resolution=1080,
            out_number=2,
        )
        full: vg.Project = await client.projects.get(project.project_id)
        billing: vg.Billing = full.billing
        batch: vg.VideoBatch = await client.projects.create_videos(project.project_id, out_number=1)
        ids: tuple[str, ...] = batch.task_ids
        quick = client.with_options(timeout=5.0, max_retries=0)
        again: vg.Task = await quick.tasks.get(ids[0])
        try:
            await client.tasks.create("")
        except vg.InvalidRequestError as exc:
            field: str = exc.field
            print(field)
        except vg.APIStatusError as exc:
            status: int | None = exc.status_code
            trace: str | None = exc.trace_id
            print(status, trace)
        del available, done, url, billing, again
