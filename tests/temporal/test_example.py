"""The docs' complete workflow and worker (``examples/temporal_videos.py``), run as a user would.

The worker (with its companions in the same process) and the starter are real processes of
the example's own command line, against a Temporal dev server and a sandbox named by the
environment; the worker stops on Ctrl-C (SIGINT).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from tests._services import Lines
from videogen_async.testing import SandboxServer

pytestmark = pytest.mark.xdist_group("temporal")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "temporal_videos.py"


async def test_the_example_worker_runs_the_workflows_started_by_its_starter(
    temporal_address: str, tmp_path: Path
) -> None:
    async with SandboxServer(time_scale=0.01, seed=7) as sandbox:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEOGEN_")}
        env |= {"VIDEOGEN_BASE_URL": sandbox.base_url, "VIDEOGEN_API_KEY": sandbox.api_key}
        options = ["--temporal", temporal_address, "--ledger", str(tmp_path / "videos.db")]
        worker = Lines(
            await anyio.open_process(
                [sys.executable, str(EXAMPLE), *options, "worker"], env=env, stderr=-2
            )
        )
        try:
            with anyio.fail_after(60):
                await worker.until("worker ready")
            prompts = ["a paper boat at dawn", "a red fox in the snow"]
            starter = Lines(
                await anyio.open_process(
                    [sys.executable, str(EXAMPLE), *options, "start", *prompts],
                    env=env,
                    stderr=-2,
                )
            )
            with anyio.fail_after(120):
                done = [await starter.until(rf"^'{p}': http\S+/media/\S+$") for p in prompts]
                assert await starter.finish() == 0
            await starter.process.aclose()
            assert len(done) == 2
            assert len(sandbox.task_ids) == 2
        finally:
            with anyio.CancelScope(shield=True):
                worker.process.send_signal(signal.SIGINT)
                with anyio.fail_after(30):
                    code = await worker.finish()
                await worker.process.aclose()
        assert code == 0, "\n".join(worker.lines[-30:])
