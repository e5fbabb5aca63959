"""The sandbox console: a read-only web page of what the sandbox has seen (``docs/sandbox.md``).

``GET /_sandbox/console``: one self-contained page (works offline); ``?part=live`` is the part
its inline script reloads every second. Values are HTML-escaped (they come from users) and a
CSP nonce allows no other script. No key asked (a browser cannot send the Bearer header), no
secret shown; it reads only the public truth (:class:`~._truth.ServerTruth`).
"""

from __future__ import annotations

import html
import secrets
import string
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiohttp import web

from .._contract._validation import json_text
from ._truth import ServerTruth

CONSOLE_PATH = "/_sandbox/console"
_SHOWN_TASKS = 200
_SHOWN_PROJECTS = 100
_SHOWN_REQUESTS = 100
_PROMPT_LIMIT = 300
_TASK_COLUMNS = ("task id", "state", "cost", "prompt", "project", "")
_PROJECT_COLUMNS = ("project id", "mode", "state", "step", "cost", "tasks")
_REQUEST_COLUMNS = ("time", "method", "path", "status", "code", "trace id", "fault", "ms")
_PAGE = string.Template(Path(__file__).with_name("_console.html").read_text(encoding="utf-8"))
"""The page around the live part: its style and script, a template of ``$nonce`` and ``$live``
(a file beside this module, read once at import)."""


def add_console(app: web.Application, source: ServerTruth) -> None:
    """Serve the console of ``source`` at ``/_sandbox/console`` on ``app``."""

    async def console(request: web.Request) -> web.StreamResponse:
        nonce = secrets.token_urlsafe(12)
        live = _live(source)
        return web.Response(
            text=live
            if request.query.get("part") == "live"
            else _PAGE.substitute(live=live, nonce=nonce),
            content_type="text/html",
            headers={
                "Cache-Control": "no-store",
                "Content-Security-Policy": (
                    f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}';"
                    " media-src 'self'; connect-src 'self'; img-src 'self' data:"
                ),
                "X-Content-Type-Options": "nosniff",
            },
        )

    app.router.add_get(CONSOLE_PATH, console)


# -- Rendering -------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return "—" if value is None else html.escape(str(value), quote=True)


def _table(caption: str, headers: Iterable[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f"<h2>{_e(caption)}</h2><p class='empty'>{_e(empty)}</p>"
    return (
        f"<h2>{_e(caption)}</h2><table id='{_e(caption.lower().split()[0])}'><thead><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in headers)
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
        + "</tbody></table>"
    )


def _state(value: Any) -> str:
    return f"<span class='state {_e(value)}'>{_e(value)}</span>"


def _code(value: Any) -> str:
    return f"<code>{_e(value)}</code>"


def _media(task: dict[str, Any]) -> str | None:
    """A succeeded task's video on this sandbox (the path of its video URL)."""
    return f"/media/{task['task_id']}.mp4" if task["status"] == "succeeded" else None


def _live(source: ServerTruth) -> str:
    balance = source.credits()
    # Newest first; describe_* give every key, for a project's task too (prompt None).
    tasks = [source.describe_task(t) for t in reversed(source.task_ids[-_SHOWN_TASKS:])]
    latest = next((t for t in tasks if _media(t)), None)
    rules = [json_text(rule.to_dict(), "fault", sort_keys=True) for rule in source.faults.rules]
    parts = [
        f"<p id='balance' class='balance'>Credits: <strong>{_e(balance['api_available_credits'])}"
        f"</strong> available of {_e(balance['api_total_credits'])}</p>",
        f"<p class='meta'>{len(source.task_ids)} tasks, {len(source.project_ids)} projects;"
        f" updated {_e(time.strftime('%H:%M:%S'))}</p>",
        _table(
            "Tasks",
            _TASK_COLUMNS,
            [
                [
                    _code(t["task_id"]),
                    _state(t["status"]),
                    _e(t["credits_cost"]) + (" <small>(refunded)</small>" if t["refunded"] else ""),
                    f"<span class='prompt'>"
                    f"{_e(t['prompt'] and t['prompt'][:_PROMPT_LIMIT])}</span>",
                    _e(t["project_id"]),
                    f"<a href='{_e(_media(t))}'>video</a>" if _media(t) else "",
                ]
                for t in tasks
            ],
            "No task yet.",
        ),
        _table(
            "Projects",
            _PROJECT_COLUMNS,
            [
                [
                    _code(p["project_id"]),
                    _e(p["mode"]),
                    _state(p["status"]),
                    _e(p["current_step"]),
                    _e(p["billing"]["total_credits_cost"]),
                    _e(len(p["task_ids"])),
                ]
                for p in map(
                    source.describe_project, reversed(source.project_ids[-_SHOWN_PROJECTS:])
                )
            ],
            "No project yet.",
        ),
        _table(
            "Requests (newest first)",
            _REQUEST_COLUMNS,
            [
                [
                    _e(time.strftime("%H:%M:%S", time.localtime(r.started_at))),
                    _e(r.method),
                    _code(r.path),
                    _e("dropped" if r.status is None else r.status),
                    _e(r.code),
                    _code(r.trace_id),
                    f"<span class='fault'>{_e(r.fault)}</span>" if r.fault else "",
                    _e(f"{r.duration * 1000:.1f}"),
                ]
                for r in reversed(source.request_log[-_SHOWN_REQUESTS:])
            ],
            "No request yet.",
        ),
        _table(
            "Faults fired",
            ["kind", "count"],
            [
                [_e(kind), _e(count)]
                for kind, count in sorted(source.stats().faults.items())
                if count
            ],
            "No fault fired.",
        ),
    ]
    if rules:
        parts.append(
            "<p class='meta'>Fault rules: "
            + "; ".join(f"<code>{_e(rule)}</code>" for rule in rules)
            + "</p>"
        )
    video_attr = "" if latest is None else f"{_e(_media(latest))}|{_e(latest['task_id'])}"
    parts.append(f"<div id='latest-video' hidden data-video='{video_attr}'></div>")
    return "<div id='live'>" + "".join(parts) + "</div>"
