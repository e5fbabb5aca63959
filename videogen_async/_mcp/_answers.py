"""What the tools of ``videogen mcp`` publish and answer (see ``docs/agents.md``).

Their input schemas from the statement's request bodies (each field a keyword parameter whose
JSON schema is the statement's), their answers as models (``MCPServer`` publishes each one's
schema as the tool's ``outputSchema`` and checks every ``structuredContent`` against it), the
refusals with what to do next, the annotations and the descriptions an agent reads.
"""

import functools
import inspect
import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, WithJsonSchema

from .. import LedgerEntry, Task
from .._contract import _exceptions as err
from .._contract._redact import redact_value
from .._contract._schemas import component_schemas, ref
from .._contract._service import PROJECT_REQUEST, TASK_REQUEST

MAX_WAIT = 45.0  # seconds a call waits at most by default: under a host's 60 s request limit
MAX_LIST = 100
_SCHEMAS = component_schemas()
KEY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": 500,
    "description": "Your idempotency"
    " key for this video (e.g. 'fox-intro-v1'). Pass one: the same key never pays twice, in"
    " this session or any other; a retried call returns the entry.",
}
METADATA_SCHEMA = {
    "type": "object",
    "description": "A JSON object kept with the entry (<= 16 KiB).",
}


def _body_schema(name: str) -> dict[str, Any]:
    """A request body of the statement, with ``key`` and ``metadata``.

    Its references to the statement's ``Url`` are replaced by that schema itself (the only
    component a request body refers to; the tests hold the published schemas free of
    ``$ref``), so that an agent reads one self-contained schema.
    """
    schema = json.loads(
        json.dumps(_SCHEMAS[name]).replace(json.dumps(ref("Url")), json.dumps(_SCHEMAS["Url"]))
    )
    schema["properties"] |= {"key": KEY_SCHEMA, "metadata": METADATA_SCHEMA}
    schema["required"].append("key")  # a retried create never pays twice
    return schema  # type: ignore[no-any-return]


VIDEO_FIELDS, PROJECT_FIELDS = _body_schema(TASK_REQUEST.name), _body_schema(PROJECT_REQUEST.name)


def with_fields(fn: Callable[..., Any], schema: dict[str, Any], *names: str) -> Callable[..., Any]:
    """``fn`` with the fields of ``schema`` (or ``names`` of them) as keyword parameters.

    ``fn`` takes them as ``**fields``, its last parameter; each is published with the
    statement's JSON schema (``MCPServer`` reads the signature) and is ``None`` when not given.
    """
    properties = schema["properties"]
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    async def published(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    published.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            *[*signature.parameters.values()][:-1],  # less ``**fields``
            *(
                inspect.Parameter(
                    name,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=Annotated[Any, WithJsonSchema(properties[name])],
                    default=inspect.Parameter.empty if name in schema["required"] else None,
                )
                for name in names or properties
            ),
        ]
    )
    return published


class Cap(BaseModel):
    """The ledger's cap (``None``: no cap), what is spent and reserved under it, what is left."""

    max_credits: float | None = None
    spent: float | None = None
    reserved: float | None = None
    left: float | None = None


class Refusal(Cap):
    """Why nothing (more) was done; a refusal for the cap names its figures."""

    reason: str  # the error's name, Declined or NoConsent
    message: str
    cost: float | None = None  # what this create would cost


class Answer(BaseModel):
    """Every tool's answer: ``refusal`` is set (and the call an error) when it was refused."""

    refusal: Refusal | None = None


class Entry(Answer):
    """A video as the ledger holds it (``done``: terminal; ``false``: call wait_for_video)."""

    key: str | None = None
    state: str | None = None
    task_id: str | None = None
    project_id: str | None = None
    task_status: str | None = None
    credits_cost: float | None = None
    video_url: str | None = None
    error: str | None = None
    prompt: str | None = None
    metadata: dict[str, Any] | None = None
    done: bool | None = None
    next_step: str | None = None


class Listing(Answer):
    entries: list[Entry] = []
    more: bool = False


class Balance(Answer, Cap):
    """The account's credits, and the ledger's cap with what is spent, reserved and left."""

    available: float | None = None
    total: float | None = None


class Estimate(Answer):
    model: str | None = None
    duration: int | None = None
    credits: float | None = None  # the higher of the two below
    statement_credits: float | None = None
    learned_credits: float | None = None  # the most this ledger was charged for the same


class Consent(BaseModel):
    """Accepting the question is the consent: there is nothing to fill in."""


def cap(max_credits: float | None, spent: float, reserved: float) -> dict[str, Any]:
    """The figures of the cap: the same in a refusal for it and in ``credits_balance``."""
    return {
        "max_credits": max_credits,
        "spent": spent,
        "reserved": reserved,
        "left": None if max_credits is None else max(0.0, max_credits - spent - reserved),
    }


def entry_data(entry: LedgerEntry) -> Entry:
    """What an agent reads of an entry: its state, ids, cost, video or error.

    The fields of the same name read from the entry, the others from its task and request.
    Not redacted here: :func:`dump`, the one way out of every answer, redacts.
    """
    task = entry.task
    return Entry.model_validate(entry, from_attributes=True).model_copy(
        update={
            "task_status": task.status if task else None,
            "error": entry.error or (task.error_message if task else None),
            "prompt": entry.request.get("prompt"),
            "done": entry.is_terminal,
        }
    )


def task_data(task: Task) -> Entry:
    """What an agent reads of a task the ledger does not hold (one read of the service)."""
    return Entry.model_validate(task, from_attributes=True).model_copy(
        update={"task_status": task.status, "error": task.error_message, "done": task.is_terminal}
    )


class Declined(Exception):
    """The user did not consent to a create (declined or cancelled)."""


class NoConsent(Exception):
    """Nobody could consent to a create: no way to ask the user, no cap."""


# What an agent reads for each refusal: the rule broken, then what to do next. The first
# kind an error is an instance of wins (the last, ``Exception``: anything else, e.g. the
# service or the ledger unreachable, or no answer within the bound).
_ADVICE: dict[type[Exception], str] = {
    Declined: "The user did not consent to this create ({}). Nothing was sent; do not call"
    " again unless the user asks.",
    NoConsent: "Nobody could consent to spending: {}. The operator allows creates by starting"
    " `videogen mcp --max-credits N` (a cap) or `--confirm-above none`. Nothing was sent.",
    err.InvalidRequestError: "Invalid argument: {}. Nothing was sent; fix it and call again.",
    err.BudgetExceededError: "Spending cap reached: {} ({left:g} left under the cap). Nothing"
    " was sent. Do not retry: ask the user to raise the server's --max-credits, or wait for"
    " pending videos (a failure is refunded).",
    err.AmbiguousCreateError: "Unsure whether it was created: {}. Do not create it again under"
    " another key; ask the user to check the account.",
    err.InsufficientCreditsError: "The service refused: insufficient credits ({}). Nothing was"
    " charged; ask the user to top up the account, then call again with the same key.",
    err.NotFoundError: "Not found: {}. Check the id; list_videos shows this ledger's keys.",
    err.APIStatusError: "The service refused the request: {}. Nothing was charged; change what"
    " it names (a prompt or media breaking a content rule) and call again.",
    Exception: "Temporarily unavailable: {}. Call again later with the same key (it never pays"
    " twice).",
}
# The errors a tool answers as a refusal (a ``TimeoutError``: no answer within the bound); any
# other is a fault of the server, which MCPServer logs and answers as a plain error.
REFUSALS = (Declined, NoConsent, err.VideoGenError, TimeoutError)


def refusal(exc: Exception) -> Answer:
    """A refusal: the rule broken, what the agent should do next, a cap's figures."""
    text = next(text for kind, text in _ADVICE.items() if isinstance(exc, kind))
    figures = (
        cap(exc.max_credits, exc.spent, exc.reserved) | {"cost": exc.estimate}
        if isinstance(exc, err.BudgetExceededError)
        else {}
    )
    return Answer(
        refusal=Refusal(
            reason=type(exc).__name__,
            # The cap's text names its figures.
            message=text.format(" ".join(str(exc).split()), **figures),
            **figures,
        )
    )


def dump(data: BaseModel) -> Any:
    """An answer as JSON data, every text in it redacted (the API key never leaves)."""
    return redact_value(data.model_dump(mode="json", exclude_none=True))


def answer(data: BaseModel) -> CallToolResult:
    """A tool's answer: structured, and the same JSON as text for hosts that read only text."""
    structured = dump(data)
    refused = structured.get("refusal")
    return CallToolResult(
        content=[
            TextContent(
                text=refused["message"] if refused else json.dumps(structured, ensure_ascii=False)
            )
        ],
        structured_content=structured,
        is_error=bool(refused),
    )


# A read leaves open_world_hint unset: its default (true) fits, get_video and credits_balance
# may read the service.
_READ = ToolAnnotations(read_only_hint=True)
_SPEND = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True
)
# A tool's title, description and annotations (one literal each: the prices are not repeated
# here, estimate_cost and the consent asked read them from the statement).
TOOLS = {
    "create_video": (
        "Create a video",
        "Create a video from a prompt. COSTS CREDITS, per second of video by model"
        " (estimate_cost tells how many; the answer's credits_cost is what was charged; a failed"
        " video is refunded). The user may be asked to confirm the cost. Always pass a `key`:"
        " calling again with the same key returns the same entry and never pays twice. It"
        " answers with the entry (state pending); then call wait_for_video with the key instead"
        " of polling get_video. It answers within the server's wait bound: if the service is"
        " slow to answer, the entry comes back as it stands (done=false) and the server goes on"
        " creating it; wait_for_video follows it.",
        _SPEND,
    ),
    "create_ad_clone_project": (
        "Create an ad clone project",
        "Create a viral ad clone project from a reference ad and product images. COSTS CREDITS:"
        " its script at once, then its videos. The user may be asked to confirm. Pass a `key`:"
        " the same key never pays twice. Follow it with get_video(key). It answers within the"
        " server's wait bound: if the service is slow to answer, the entry comes back as it"
        " stands (done=false) and the server goes on creating it.",
        _SPEND,
    ),
    "get_video": (
        "Get a video",
        "The current state of a video by its `key`, as the ledger holds it (kept current by"
        " the server; free, sends nothing for a finished video), or by `task_id` (one free read"
        " of the service for a task this ledger did not create). To wait for a video, call"
        " wait_for_video instead of calling this repeatedly.",
        _READ,
    ),
    "wait_for_video": (
        "Wait for a video",
        "Wait until the video of `key` is finished (succeeded: video_url; failed or"
        " error: refunded), at most `timeout` seconds and never longer than the server's bound"
        " (45 s by default, under hosts' time limits), with a progress notification at each state"
        " change. Free: one watcher serves every wait. If it answers done=false, call it again.",
        _READ,
    ),
    "credits_balance": (
        "Credits and spending cap",
        "The account's credits (available, total), and this server's spending cap"
        " (max_credits; absent: no cap) with what its ledger spent, reserved and has left. Free.",
        _READ,
    ),
    "list_videos": (
        "List videos",
        "The videos created through this server's ledger, newest first; filter by"
        " `state` or `metadata`. Free.",
        _READ,
    ),
    "estimate_cost": (
        "Estimate a video's cost",
        "What create_video would cost for a model and a duration: the statement's"
        " price and the highest price this ledger was charged for the same. Free, sends nothing.",
        _READ,
    ),
}


def given(fields: dict[str, Any], *leave: str) -> dict[str, Any]:
    """The fields given (``None``: not given), less ``leave``."""
    return {
        name: value for name, value in fields.items() if value is not None and name not in leave
    }
