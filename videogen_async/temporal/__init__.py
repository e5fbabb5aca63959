"""Temporal workflows that generate videos, waiting without holding a worker slot.

In a workflow, ``task = await generate_video(prompt)``; on the worker, the activities of
:class:`VideoActivities` and :func:`run_completions`. See the docs page "Temporal".
"""

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - tested in a subprocess without temporalio
    raise ImportError(
        'videogen_async.temporal needs temporalio: pip install "videogen-async[temporal]"'
    ) from exc

from ._activities import VideoActivities
from ._completer import DESTINATION, ActivityCompleter, run_completions
from ._workflow import (
    AWAIT_ENTRY,
    CREATE_PROJECT,
    CREATE_TASK,
    CREATE_VIDEOS,
    ProjectRequest,
    VideoRequest,
    VideosRequest,
    create_project,
    generate_project_videos,
    generate_video,
)

__all__ = [
    "AWAIT_ENTRY",
    "CREATE_PROJECT",
    "CREATE_TASK",
    "CREATE_VIDEOS",
    "DESTINATION",
    "ActivityCompleter",
    "ProjectRequest",
    "VideoActivities",
    "VideoRequest",
    "VideosRequest",
    "create_project",
    "generate_project_videos",
    "generate_video",
    "run_completions",
]
