"""The tools of ``videogen mcp``, every create through the ledger.

Input schemas derived from the statement (by the sandbox's ``_schemas``), arguments checked by
the SDK's own rules before anything is written or sent, every text that leaves redacted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent
from pydantic import ConfigDict

from .. import AsyncVideoGen, Ledger, LedgerEntry
from .._contract import _exceptions as err
from .._contract._redact import redact_text, redact_value
from .._contract._schemas import component_schemas
from .._contract._service import PROJECT_REQUEST, REFERENCE_PRICES, TASK_REQUEST
from .._contract._validation import check_id, validate_project_request, validate_task_request
from .._ledger._creates import check_key
from .._ledger._entry import STATES

MAX_WAIT = 600.0  # the longest wait_for_video (seconds): an agent calls it again to wait longer
MAX_LIST = 100
_SCHEMAS = component_schemas()
_RATE = REFERENCE_PRICES.per_second
_KEY = {"type": "string", "minLength": 1, "maxLength": 500, "description": "Your idempotency"
        " key for this video (e.g. 'fox-intro-v1'). Pass one: the same key never pays twice, in"
        " this session or any other; a retried call returns the entry."}  # fmt: skip
_METADATA = {"type": "object", "description": "A JSON object kept with the entry (<= 16 KiB)."}


def _inline(value: Any) -> Any:
    """A schema with its ``$ref`` to the components replaced by the components themselves."""
    if isinstance(value, dict):
        if "$ref" in value:
            return _inline(_SCHEMAS[value["$ref"].rsplit("/", 1)[-1]])
        return {name: _inline(item) for name, item in value.items()}
    return [_inline(item) for item in value] if isinstance(value, list) else value


def _body_schema(name: str) -> dict[str, Any]:
    """A request body of the statement, as a tool's input schema with ``key`` and metadata."""
    schema = _inline(_SCHEMAS[name])
    schema["properties"] |= {"key": _KEY, "metadata": _METADATA}
    return schema  # type: ignore[no-any-return]


def _object(required: list[str] | None = None, **properties: Any) -> dict[str, Any]:
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    return schema | ({"required": required} if required else {})


_SCHEMAS_BY_TOOL: dict[str, dict[str, Any]] = {
    "create_video": _body_schema(TASK_REQUEST.name),
    "create_ad_clone_project": _body_schema(PROJECT_REQUEST.name),
    "get_video": _object(
        key=_KEY | {"description": "The key given to create_video."},
        task_id={"type": "string", "minLength": 1},
    ),
    "wait_for_video": _object(
        ["key"],
        key=_KEY | {"description": "The key given to create_video."},
        timeout={"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT, "default": 300},
    ),
    "credits_balance": _object(),
    "list_videos": _object(
        state={"type": "string", "enum": list(STATES)},
        metadata=_METADATA | {"description": "Only entries whose metadata holds these values."},
        limit={"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 20},
    ),
}

_PRICES = ", ".join(f"{model} {rate:g}" for model, rate in _RATE.items())
DESCRIPTIONS = {
    "create_video": "Create a video from a prompt. COSTS CREDITS: about this many per second of"
    f" video ({_PRICES}; the answer's credits_cost is what was charged; a failed video is"
    " refunded). Always pass a `key`: calling again with the same key returns the same entry and"
    " never pays twice. It answers at once with the entry (state pending); then call"
    " wait_for_video with the key instead of polling get_video.",
    "create_ad_clone_project": "Create a viral ad clone project from a reference ad and product"
    " images. COSTS CREDITS: 10 for its script at once, then its videos. Pass a `key`: the same"
    " key never pays twice. Follow it with get_video(key).",
    "get_video": "The current state of a video by its `key` (or `task_id`), as the ledger holds"
    " it (kept current by the server; free, sends nothing for a finished video). To wait for"
    " a video, call wait_for_video instead of calling this repeatedly.",
    "wait_for_video": "Wait until the video of `key` is finished (succeeded: video_url; failed or"
    " error: refunded) or `timeout` seconds pass, with a progress notification at each state"
    " change. Free: one watcher serves every wait. If it answers done=false, call it again.",
    "credits_balance": "The account's credits (available, total), and the credits this server's"
    " ledger spent and reserved under its cap (max_credits; null: no cap). Free.",
    "list_videos": "The videos created through this server's ledger, newest first; filter by"
    " `state` or `metadata`. Free.",
}

_TASK_KINDS = ("task", "project_task")


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def entry_data(entry: LedgerEntry) -> dict[str, Any]:
    """What an agent reads of an entry (redacted): its state, ids, cost, video or error."""
    task, when = entry.task, _iso
    error = entry.error or (task.result.error_message if task and task.result else None)
    data = {"key": entry.key, "state": entry.state, "kind": entry.kind, "task_id": entry.task_id,
            "project_id": entry.project_id, "task_status": task and str(task.status),
            "credits_cost": entry.credits_cost, "video_url": task and task.video_url,
            "error": error, "prompt": entry.request.get("prompt"), "metadata": entry.metadata,
            "created_at": when(entry.created_at), "finished_at": when(entry.finished_at),
            "done": entry.is_terminal}  # fmt: skip
    return redact_value(data)  # type: ignore[no-any-return]


_NOTHING = "Nothing was sent"
_ADVICE: tuple[tuple[type[Exception], str], ...] = (
    (err.InvalidRequestError, f"Invalid argument: {{}}. {_NOTHING}; fix it and call again."),
    (err.BudgetExceededError, f"Spending cap reached: {{}}. {_NOTHING}. Do not retry: ask the user"
     " to raise the server's --max-credits, or wait for pending videos (a failure is refunded)."),
    (err.AmbiguousCreateError, "Unsure whether it was created: {}. Do not create it again under"
     " another key; ask the user to check the account."),
    (err.InsufficientCreditsError, "The service refused: insufficient credits ({}). Nothing was"
     " charged; ask the user to top up the account, then call again with the same key."),
    (err.NotFoundError, "Not found: {}. Check the id; list_videos shows this ledger's keys."),
    (err.APIStatusError, "The service refused the request: {}. Nothing was charged; change what it"
     " names (a prompt or media breaking a content rule) and call again."),
    (Exception, "Temporarily unavailable: {}. Call again later with the same key (it never"
     " pays twice)."),
)  # fmt: skip
_REFUSALS: tuple[type[Exception], ...] = (
    *(kind for kind, _ in _ADVICE[:-1]), err.APIConnectionError, err.LedgerError)  # fmt: skip


def refusal(exc: Exception) -> str:
    """A refusal's text: the rule broken, and what the agent should do next (redacted)."""
    said = redact_text(" ".join(str(exc).split()))
    return next(text for kind, text in _ADVICE if isinstance(exc, kind)).format(said)


class _Arguments(ArgModelBase):
    """The arguments as sent: the tools check them by the service's own rules."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


class VideoTools:
    """The six tools over one ledger and one client (see ``docs/agents.md``)."""

    def __init__(self, ledger: Ledger, client: AsyncVideoGen) -> None:
        self.ledger, self.client = ledger, client

    def tools(self) -> list[Tool]:
        """The tools, for ``MCPServer(tools=...)``."""
        return [self._tool(name) for name in _SCHEMAS_BY_TOOL]

    def _tool(self, name: str) -> Tool:
        call: Callable[..., Awaitable[dict[str, Any]]] = getattr(self, name)
        schema = _SCHEMAS_BY_TOOL[name]

        async def run(arguments: dict[str, Any], ctx: Context[Any, Any]) -> CallToolResult:
            try:
                unknown = sorted(set(arguments) - set(schema["properties"]))
                if unknown:
                    raise err.InvalidRequestError(unknown[0], "is not an argument of this tool")
                data = await call(arguments, ctx)
            except _REFUSALS as exc:
                raise ToolError(refusal(exc)) from None
            text = json.dumps(data, ensure_ascii=False)
            return CallToolResult(content=[TextContent(type="text", text=text)],
                                  structured_content=data)  # fmt: skip

        meta, text = FuncMetadata(arg_model=_Arguments), DESCRIPTIONS[name]
        return Tool(fn=run, name=name, title=None, description=text, parameters=schema,
                    fn_metadata=meta, is_async=True, context_kwarg="ctx",
                    annotations=None)  # fmt: skip

    async def create_video(self, args: dict[str, Any], ctx: Context[Any, Any]) -> dict[str, Any]:
        fields = dict(args)
        key, metadata = fields.pop("key", None), fields.pop("metadata", None)
        body = validate_task_request(fields)  # only the request's fields, none of the options
        return entry_data(
            await self.ledger.create_task(self.client, key=key, metadata=metadata, **body)
        )

    async def create_ad_clone_project(
        self, args: dict[str, Any], ctx: Context[Any, Any]
    ) -> dict[str, Any]:
        fields = dict(args)
        key, metadata = fields.pop("key", None), fields.pop("metadata", None)
        body = validate_project_request(fields)
        video, images = body.pop("reference_video_url"), body.pop("product_image_urls")
        return entry_data(
            await self.ledger.create_project(
                self.client, video, images, key=key, metadata=metadata, **body
            )
        )

    async def _entry(self, key: Any) -> LedgerEntry:
        entry = await self.ledger.get(key)
        if entry is None:
            rule = "unknown: no video of this key in the ledger (list_videos shows the keys)"
            raise err.InvalidRequestError("key", rule, value=key, has_value=True)
        return entry

    async def get_video(self, args: dict[str, Any], ctx: Context[Any, Any]) -> dict[str, Any]:
        if ("key" in args) == ("task_id" in args):
            raise err.InvalidRequestError("key", "give either key or task_id")
        if "key" in args:
            return entry_data(await self._entry(args["key"]))
        task_id = check_id("task_id", args["task_id"])
        async for entry in self.ledger.entries():
            if entry.task_id == task_id:
                return entry_data(entry)
        task = await self.client.tasks.get(task_id)  # not created here: one free read
        data = {"task_id": task.task_id, "task_status": str(task.status), "done": task.is_terminal,
                "video_url": task.video_url, "credits_cost": task.credits_cost}  # fmt: skip
        return redact_value(data)  # type: ignore[no-any-return]

    async def wait_for_video(self, args: dict[str, Any], ctx: Context[Any, Any]) -> dict[str, Any]:
        timeout = _number(args, "timeout", 300, MAX_WAIT)
        key = check_key(args.get("key"))
        async with self.ledger.changes(keys=[key]) as changes:  # before the read: none missed
            entry = await self._entry(key)
            await ctx.report_progress(entry.version, None, entry.state)
            with anyio.move_on_after(timeout):
                while not entry.is_terminal:
                    if entry.kind not in _TASK_KINDS or entry.state in ("unknown", "refused"):
                        rule = f"a {entry.kind} entry in state {entry.state} never finishes"
                        raise err.InvalidRequestError("key", rule + " (get_video shows it)")
                    change = await changes.__anext__()
                    if change.version > entry.version:
                        entry = change
                        await ctx.report_progress(entry.version, None, entry.state)
        return entry_data(entry)

    async def credits_balance(self, args: dict[str, Any], ctx: Context[Any, Any]) -> dict[str, Any]:
        balance, summary = await self.client.credits.get(), await self.ledger.summary()
        cap, used = self.ledger.max_credits, summary["spent"] + summary["reserved"]
        left = None if cap is None else max(0, cap - used)
        return {"available": balance.api_available_credits, "total": balance.api_total_credits,
                "ledger_spent": summary["spent"], "ledger_reserved": summary["reserved"],
                "max_credits": cap, "left_under_cap": left}  # fmt: skip

    async def list_videos(self, args: dict[str, Any], ctx: Context[Any, Any]) -> dict[str, Any]:
        state, limit = args.get("state"), _number(args, "limit", 20, MAX_LIST, int)
        if state is not None and state not in STATES:
            raise err.InvalidRequestError("state", f"must be one of {', '.join(STATES)}")
        found = [
            entry
            async for entry in self.ledger.entries(metadata=args.get("metadata"))
            if state is None or entry.state == state
        ]
        found.sort(key=lambda e: e.created_at.timestamp() if e.created_at else -math.inf)
        newest = found[::-1][:limit]
        return {"entries": [entry_data(e) for e in newest], "more": len(found) > limit}


def _number(args: dict[str, Any], name: str, default: float, top: float, kind: type = float) -> Any:
    """A number argument in ``(0, top]`` (``kind`` ``int``: a whole number)."""
    value = args.get(name, default)
    kinds = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value <= top:
        what = "a whole number" if kind is int else "a number"
        raise err.InvalidRequestError(
            name, f"must be {what} > 0 and <= {top:g}", value=value, has_value=True
        )
    return value
