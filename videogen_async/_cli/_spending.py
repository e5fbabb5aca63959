"""The spending guard: an estimate before a create, ``--max-credits`` and ``--yes``.

The service publishes one price: 10 credits for a project's script. The price of a video is
not published, so the command line estimates it with reference rates (those of the sandbox,
see ``docs/cli.md``): 2 credits per second of video (1 with ``videomodel_2_0_fast``) and, for
a project's videos, times the resolution over 720 (1.5 at 1080). Where a project already has
videos, their real ``credits_cost`` is used instead. A resolution that is not a number of
lines (``4k``) cannot be estimated: the guard says so.

A request is *usual* when its estimate stays within what the spec's bounds and defaults
allow: a direct task (4 to 15 s) always is; a project up to 4 videos of 15 s at 1080
(190 credits); a batch up to :data:`USUAL_BATCH` credits. Beyond that, the command asks for
a confirmation on a terminal, and refuses elsewhere unless ``--yes`` or ``--max-credits N``
is given. ``--max-credits N`` refuses (exit 2, nothing sent) any estimate above ``N``.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

import anyio

from ._common import Context, UsageError, fmt_credits

__all__ = [
    "SCRIPT_CREDITS",
    "USUAL_BATCH",
    "USUAL_PROJECT",
    "check_spend",
    "project_video_estimate",
    "task_estimate",
]

SCRIPT_CREDITS = 10.0
"""The one published price: a project's script."""
TASK_RATE = {"videomodel_2_0": 2.0, "videomodel_2_0_fast": 1.0}
"""Reference credits per second of a direct task's video, by model."""
PROJECT_VIDEO_RATE = 2.0
"""Reference credits per second of a project's video at 720."""
USUAL_DURATION = 15
"""A project's default duration (seconds)."""
USUAL_PROJECT = SCRIPT_CREDITS + 4 * USUAL_DURATION * PROJECT_VIDEO_RATE * 1.5
"""The most a project within the spec's defaults and common values costs (190)."""
USUAL_BATCH = 2000.0
"""A batch estimated above this many credits asks for a confirmation."""


def task_estimate(request: dict[str, Any]) -> float:
    """The estimated credits of one direct task (its duration is bounded by the spec)."""
    rate = TASK_RATE.get(str(request.get("model") or "videomodel_2_0"), 2.0)
    return rate * float(request.get("duration") or 5)


def resolution_factor(resolution: int | str | None) -> float | None:
    """The price factor of a project resolution (720: 1, 1080: 1.5); ``None``: unknown."""
    if resolution is None:
        return 1.0
    text = str(resolution).strip().lower().removesuffix("p")
    if not text.isdigit() or int(text) <= 0:
        return None
    return max(1.0, int(text) / 720)


def project_video_estimate(
    duration: int | None, resolution: int | str | None, per_video: float | None = None
) -> float | None:
    """The estimated credits of one project video; ``None`` when it cannot be estimated.

    Args:
        duration: The project's duration (the default 15 s when ``None``).
        resolution: The resolution.
        per_video: A price the service already charged for one of the project's videos (at
            its resolution), used instead of the reference rate.
    """
    factor = resolution_factor(resolution)
    if factor is None:
        return None
    if per_video is not None:
        return per_video * factor
    return PROJECT_VIDEO_RATE * float(duration or USUAL_DURATION) * factor


def _interactive() -> bool:
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
        return sys.stdin.isatty() and sys.stderr.isatty() and stat.S_ISCHR(mode)
    except (AttributeError, OSError, ValueError):
        return False


async def check_spend(
    ctx: Context,
    what: str,
    estimate: float | None,
    usual: float,
    *,
    why_unknown: str = "",
    limit_enforced_later: bool = False,
) -> None:
    """Let a create go ahead, or refuse it before anything is sent.

    Args:
        ctx: The run (``--max-credits`` and ``--yes`` are read from its options).
        what: The request, in words ("this project").
        estimate: Its estimated credits; ``None`` when no estimate is possible.
        usual: The estimate above which a confirmation is needed.
        why_unknown: Why no estimate is possible (shown when ``estimate`` is ``None``).
        limit_enforced_later: The command keeps within ``--max-credits`` itself as it goes
            (a batch stops creating lines), so an estimate above it is not refused here.

    Raises:
        UsageError: Over ``--max-credits``, or beyond the usual and not confirmed.
    """
    limit: float | None = getattr(ctx.args, "max_credits", None)
    yes = bool(getattr(ctx.args, "yes", False))
    said = (
        f"{what} is estimated at about {fmt_credits(estimate)} credits"
        if estimate is not None
        else f"the credits of {what} cannot be estimated ({why_unknown})"
    )
    if limit is not None and estimate is not None and estimate > limit and not limit_enforced_later:
        raise UsageError(
            f"{said}, more than --max-credits {fmt_credits(limit)}: nothing was sent"
            " (raise --max-credits to go ahead)"
        )
    if estimate is not None and estimate <= usual:
        return
    if yes:
        ctx.ui.note(f"{said}; going ahead (--yes)")
        return
    if limit is not None and estimate is not None:
        return  # within the limit the user set
    usual_text = f"the usual is up to {fmt_credits(usual)}"
    if await anyio.to_thread.run_sync(_interactive):
        ctx.ui.note(f"{said} ({usual_text}; video prices are estimates, see docs/cli.md).")
        ctx.ui.err.write("go ahead? [y/N] ")  # on stderr: stdout may be piped
        ctx.ui.err.flush()
        answer: str = await anyio.to_thread.run_sync(sys.stdin.readline)
        if answer.strip().lower() in ("y", "yes"):
            return
        raise UsageError("not confirmed: nothing was sent")
    if estimate is None:
        raise UsageError(f"{said}: nothing was sent. Pass --yes to go ahead without an estimate")
    raise UsageError(
        f"{said}, above the usual ({usual_text}): nothing was sent. Pass --yes to go ahead,"
        " or --max-credits N to go ahead within a limit"
    )
