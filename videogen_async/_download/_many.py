"""What many downloads answer, one per item: :class:`DownloadResult`."""

from __future__ import annotations

from pathlib import Path

import attrs

from .._contract._exceptions import VideoGenError


@attrs.frozen(eq=False)
class DownloadResult:
    """The outcome of one item of :meth:`AsyncVideoGen.download_many`.

    Attributes:
        source: The item as given: a task id or a URL (for a ``Task``, its id).
        path: Where the video was written; ``None`` when it failed.
        url: The video's URL, once known (``None`` when the task could not be resolved).
        task_id: The task's id, when the item was a task or a task id.
        size: Bytes written.
        error: Why it failed (``None`` on success).
    """

    source: str
    path: Path | None = None
    url: str | None = None
    task_id: str | None = None
    size: int = 0
    error: VideoGenError | None = None

    @property
    def ok(self) -> bool:
        """Whether the video was downloaded."""
        return self.error is None
