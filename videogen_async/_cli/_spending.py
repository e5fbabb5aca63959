"""The spending guard: an estimate before a create, ``--max-credits`` and ``--yes``.

Prices are not published: estimated from ``REFERENCE_PRICES`` (what the sandbox charges) or a
project's earlier charges. Beyond the usual (:data:`USUAL_PROJECT`, :data:`USUAL_BATCH`) a
terminal is asked and a script refused unless ``--yes`` or ``--max-credits N``; an estimate
above ``N`` is refused. See ``docs/cli.md``.
"""

from __future__ import annotations

import stat
import sys
from typing import Any

import anyio

from .._contract._service import OUT_NUMBER_MAX, REFERENCE_PRICES
from ._common import Context, UsageError, fmt_credits, stdin_mode

SCRIPT_CREDITS = REFERENCE_PRICES.script_credits
"""The one published price: a project's script."""
USUAL_PROJECT = SCRIPT_CREDITS + OUT_NUMBER_MAX * REFERENCE_PRICES.project_video_cost(None, 1080)
"""The most a project within the spec's defaults and common values costs (190)."""
USUAL_BATCH = 2000.0
"""A batch estimated above this many credits asks for a confirmation."""


def task_estimate(request: dict[str, Any]) -> float:
    """The estimated credits of one direct task (its duration is bounded by the spec)."""
    return REFERENCE_PRICES.task_cost(request.get("model"), request.get("duration"))


def project_video_estimate(resolution: int | str | None, per_video: float | None) -> float | None:
    """The estimated credits of one video of a project's batch; ``None`` when not known.

    ``per_video``: what the service charged for one of the project's videos, used instead of
    the reference price (a new project's videos are priced by ``Pricing.project_cost``).
    """
    factor = REFERENCE_PRICES.resolution_factor(resolution)
    if factor is None:
        return None
    if per_video is None:
        return REFERENCE_PRICES.project_video_cost(None, resolution)
    return per_video * factor


async def check_spend(
    ctx: Context,
    what: str,
    estimate: float | None,
    usual: float,
    *,
    why_unknown: str = "",
    limit_enforced_later: bool = False,
) -> None:
    """Let a create (``what``, in words) go ahead, or refuse it before anything is sent.

    ``estimate`` is ``None`` when no estimate is possible (``why_unknown`` says why); above
    ``usual`` a confirmation is needed. With ``limit_enforced_later`` the command keeps within
    ``--max-credits`` itself as it goes (a batch), so a larger estimate is not refused here.

    Raises:
        UsageError: Over ``--max-credits``, or beyond the usual and not confirmed.
    """
    limit = ctx.args.max_credits
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
    if ctx.args.yes:
        ctx.ui.note(f"{said}; going ahead (--yes)")
        return
    if limit is not None and estimate is not None:
        return  # within the limit the user set
    usual_text = f"the usual is up to {fmt_credits(usual)}"
    if await anyio.to_thread.run_sync(
        lambda: stat.S_ISCHR(stdin_mode()) and sys.stdin.isatty() and sys.stderr.isatty()
    ):
        ctx.ui.note(f"{said} ({usual_text}; video prices are estimates, see docs/cli.md).")
        print("go ahead? [y/N] ", end="", file=ctx.ui.err, flush=True)  # stdout may be piped
        answer = await anyio.to_thread.run_sync(sys.stdin.readline)
        if answer.strip().lower() in ("y", "yes"):
            return
        raise UsageError("not confirmed: nothing was sent")
    if estimate is None:
        raise UsageError(f"{said}: nothing was sent. Pass --yes to go ahead without an estimate")
    raise UsageError(
        f"{said}, above the usual ({usual_text}): nothing was sent. Pass --yes to go ahead,"
        " or --max-credits N to go ahead within a limit"
    )
