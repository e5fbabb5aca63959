"""``videogen doctor``: does the service named here answer as the SDK expects?

It sends only free requests (``DOCTOR_EPILOG``), and the same ones to the sandbox: where the
interface leaves an answer "not shown", the sandbox's answer is the SDK's assumption. Both go
through the SDK's own calls, decoding, error mapping and date readers; wire text is redacted.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import attrs

from .. import (
    APIResponseError,
    APIStatusError,
    AsyncVideoGen,
    AuthenticationError,
    VideoGenError,
)
from .._contract._dates import format_datetime, parse_datetime
from .._contract._redact import redact_text, redact_value
from .._contract._validation import check_id
from .._http._retry import parse_retry_after
from ..testing import SandboxServer
from ._common import EXIT_OK, EXIT_SOME_FAILED, Context

DOCTOR_EPILOG = """\
Sends only requests that cost nothing (the balance, an unknown task id, a status query
without task_id, the balance with a wrong key) and compares each answer the service
interface leaves "not shown" with what the SDK assumes (its sandbox's answer, through the
SDK's own error mapping). The key is never printed.

examples:
  videogen doctor
  videogen doctor --task-id t_123       # also check the dates one of your tasks shows
  videogen --json doctor

exit codes: 0 everything as the SDK expects, 1 something differs (each difference is
listed), 2 usage error, 3 the service could not be reached, 4 the service refused the API
key (the error says where the key came from)"""

_UNKNOWN_TASK = "videogen-doctor-no-such-task-0000"
_RATE_HEADER = re.compile(r"rate-?limit|retry-after", re.IGNORECASE)
_REQUEST = re.compile(r"^[A-Z]+ /\S*: ")
_OFFSET = re.compile(r"(?:[zZ]|[+-]\d\d(?::?\d\d)?)$")
_DATE_FIELDS = ("created_at", "updated_at")


@attrs.frozen
class Answer:
    """One answer, as the SDK's call ended: its status, code, message, and result or error."""

    status: int | None
    code: int | None
    outcome: str
    message: str | None
    headers: Mapping[str, str]
    error: VideoGenError | None = None

    def __str__(self) -> str:
        said = f' "{self.message[:60]}"' if self.message else ""
        return f"HTTP {self.status}, code {self.code}{said} -> {self.outcome}"


@attrs.frozen
class Check:
    """One thing compared: what the service said, what the SDK assumes, and the verdict."""

    check: str
    service: str
    sdk_assumes: str
    handled: bool
    as_expected: bool

    @property
    def verdict(self) -> str:
        if self.as_expected:
            return "as expected"
        return "differs, handled" if self.handled else "differs, NOT handled"


async def _answer(call: Awaitable[Any]) -> Answer:
    try:
        result = await call
    except (APIStatusError, APIResponseError) as exc:
        message = _REQUEST.sub("", exc.message)  # the SDK's "GET /v1/tasks: " before the text
        return Answer(
            exc.status_code,
            exc.code,
            type(exc).__name__,
            message,
            getattr(exc, "headers", None) or {},
            exc,
        )
    info = result._response
    return Answer(info.status_code, 200, type(result).__name__, None, dict(info.headers))


async def _probe(client: AsyncVideoGen, wrong: AsyncVideoGen) -> tuple[dict[str, Answer], float]:
    """Every free request through the SDK's calls; and the balance's round trip, in seconds."""
    started = time.monotonic()
    balance = await _answer(client.credits.get())
    latency = time.monotonic() - started
    return {
        "balance": balance,
        "unknown task id": await _answer(client.tasks.get(_UNKNOWN_TASK)),
        # extra_query's None drops the call's own task_id: the request goes without it.
        "omitted task_id": await _answer(
            client.tasks.get(_UNKNOWN_TASK, extra_query={"task_id": None})
        ),
        "wrong API key": await _answer(wrong.credits.get()),
    }, latency


def _rate_headers(answers: Mapping[str, Answer]) -> dict[str, str]:
    found = {k: v for a in answers.values() for k, v in a.headers.items() if _RATE_HEADER.search(k)}
    return dict(sorted(found.items()))


def _compare(said: Mapping[str, Answer], assumed: Mapping[str, Answer]) -> list[Check]:
    checks = []
    for name, answer in said.items():
        mine = assumed[name]
        handled = answer.outcome == mine.outcome
        checks.append(
            Check(
                name,
                str(answer),
                str(mine),
                handled,
                handled and (answer.status, answer.code) == (mine.status, mine.code),
            )
        )
    seen, usual = _rate_headers(said), _rate_headers(assumed)
    unreadable = [
        v for k, v in seen.items() if k.lower() == "retry-after" and parse_retry_after(v) is None
    ]
    checks.append(
        Check(
            "rate-limit headers",
            ", ".join(f"{k}: {v}" for k, v in seen.items()) or "none",
            (", ".join(usual) or "none") + " (the SDK reads only Retry-After, on a 429)",
            not unreadable,
            not unreadable and {k.lower() for k in seen} == {k.lower() for k in usual},
        )
    )
    return checks


def _date_check(date_header: str | None, texts: Mapping[str, Any]) -> Check:
    shown = [f"Date: {date_header}"] + [f"{k}: {v}" for k, v in texts.items()]
    handled = as_expected = date_header is not None
    try:
        if date_header is not None:
            parsedate_to_datetime(date_header)
        for value in texts.values():
            parse_datetime(value)
            as_expected = as_expected and isinstance(value, str) and bool(_OFFSET.search(value))
    except (TypeError, ValueError, IndexError):
        handled = as_expected = False
    assumes = (
        "an HTTP date; ISO 8601 with an offset, as"
        f" {format_datetime(datetime.now(timezone.utc).replace(microsecond=0))}"
        " (none: read as UTC)"
    )
    if not texts:
        assumes += "; --task-id ID checks a task's dates"
    return Check("date format", "; ".join(shown), assumes, handled, handled and as_expected)


async def _task_dates(options: dict[str, Any], task_id: str | None) -> dict[str, Any]:
    """The dates of a task as the service wrote them (text: its format is what is checked).

    Read through the SDK's own call, on a session whose trace keeps the answer's body.
    """
    if task_id is None:
        return {}
    body: list[bytes] = []
    trace = aiohttp.TraceConfig()

    async def keep(_: Any, __: Any, params: aiohttp.TraceResponseChunkReceivedParams) -> None:
        body.append(params.chunk)

    trace.on_response_chunk_received.append(keep)
    async with (
        aiohttp.ClientSession(trace_configs=[trace]) as session,
        AsyncVideoGen(**options, session=session) as client,
    ):
        await client.tasks.get(task_id)
    data = json.loads(b"".join(body))["data"]  # an object: the SDK has just read it as a Task
    found = {k: data.get(k) for k in _DATE_FIELDS}
    found["finished_at"] = (data.get("result") or {}).get("finished_at")
    return {k: v for k, v in found.items() if v is not None}


def _clock(date_header: str | None, midpoint: float) -> float | None:
    """Service minus machine: ``Date`` (whole seconds, so +0.5) at the round trip's midpoint."""
    try:
        return parsedate_to_datetime(date_header or "").timestamp() + 0.5 - midpoint
    except (TypeError, ValueError, IndexError):
        return None


async def cmd_doctor(ctx: Context) -> int:
    """``videogen doctor``: check the service against the SDK's assumptions, spending nothing."""
    task_id = ctx.args.task_id
    if task_id is not None:
        check_id("task_id", task_id)

    async def work(client: AsyncVideoGen) -> int:
        wrong_key = f"vg-doctor-wrong-{secrets.token_hex(16)}"
        wrong = AsyncVideoGen(**{**ctx.client_options(), "api_key": wrong_key})
        async with wrong, SandboxServer() as sandbox, sandbox.client() as local:
            async with AsyncVideoGen(wrong_key, sandbox.base_url) as local_wrong:
                assumed, _ = await _probe(local, local_wrong)
            before = time.time()
            said, latency = await _probe(client, wrong)
            refused = said["balance"].error
            if isinstance(refused, AuthenticationError):  # the key itself: nothing to compare
                raise refused
            dates = await _task_dates(ctx.client_options(), task_id)
        date_header = next(
            (v for k, v in said["balance"].headers.items() if k.lower() == "date"), None
        )
        checks = [*_compare(said, assumed), _date_check(date_header, dates)]
        report = {
            "base_url": client.base_url,
            "ok": all(c.as_expected for c in checks),
            "checks": [{**attrs.asdict(c), "verdict": c.verdict} for c in checks],
            "latency_ms": round(latency * 1000, 1),
            "clock_offset_seconds": _clock(date_header, before + latency / 2),
            "rate_limit_headers": _rate_headers(said),
        }
        _show(ctx, redact_value(report), checks)
        return EXIT_OK if report["ok"] else EXIT_SOME_FAILED

    return await ctx.with_client(work)


def _show(ctx: Context, report: dict[str, Any], checks: list[Check]) -> None:
    ui = ctx.ui
    if not ui.show(
        report,
        ("check", "the service said", "the SDK assumes", "verdict"),
        [[redact_text(x) for x in (c.check, c.service, c.sdk_assumes, c.verdict)] for c in checks],
        title=f"videogen doctor: {report['base_url']} (nothing was charged)",
    ):
        return
    offset = report["clock_offset_seconds"]
    clock = "unknown (no readable Date header)" if offset is None else f"{offset:+.1f} s"
    ui.print(f"round-trip latency: {report['latency_ms']:g} ms (the balance)")
    ui.print(f"clock difference (service minus this machine, +-0.5 s): {clock}")
    differ = [c.check for c in checks if not c.as_expected]
    ui.note(
        f"differs from what the SDK expects: {', '.join(differ)}"
        if differ
        else "the service answers as the SDK expects"
    )


def add_doctor_parser(command: Callable[..., Any]) -> None:
    """Register ``doctor`` through the parser's ``command`` helper."""
    command(
        "doctor",
        "check the service against what the SDK expects (free)",
        DOCTOR_EPILOG,
        func=cmd_doctor,
    ).add_argument(
        "--task-id",
        metavar="TASK_ID",
        help="one of your tasks, to check the dates it shows (reading it costs nothing)",
    )
