"""``videogen doctor`` against the sandbox (everything as expected) and against a local service
that answers each "not shown" case differently (each difference reported, exit 1).

Both runs check that nothing was charged (only reads were sent) and that neither the key nor
the deliberately wrong one appears in the output, even where the service echoes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web

from videogen_async._cli import _ui

from .conftest import KEY, Run, ThreadedSandbox

CHECKS = [
    "balance",
    "unknown task id",
    "omitted task_id",
    "wrong API key",
    "rate-limit headers",
    "date format",
]


def _verdicts(run: Run) -> dict[str, str]:
    report = run.json()
    return {c["check"]: c["verdict"] for c in report["checks"]}


def test_against_the_sandbox_everything_is_as_expected_and_nothing_is_charged(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    async def create() -> str:
        async with sandbox.srv.client() as client:
            return (await client.tasks.create("a lighthouse")).task_id

    task_id = sandbox.run(create())
    balance = sandbox.call(lambda: sandbox.srv.credits)
    before = len(sandbox.call(lambda: sandbox.srv.request_log))
    run = cli("--json", "doctor", "--task-id", task_id)
    assert run.code == 0, run
    assert _verdicts(run) == dict.fromkeys(CHECKS, "as expected")
    report = run.json()
    assert report["ok"] is True
    assert "created_at" in report["checks"][-1]["service"]
    assert report["latency_ms"] > 0
    assert report["clock_offset_seconds"] is not None
    assert report["rate_limit_headers"] == {}
    sent = sandbox.call(lambda: sandbox.srv.request_log)[before:]
    assert {r.method for r in sent} == {"GET"}
    assert sandbox.call(lambda: sandbox.srv.credits) == balance
    human = cli("doctor")
    assert human.code == 0, human
    assert human.out.count("as expected") == len(CHECKS)
    assert "answers as the SDK expects" in human.err
    for text in (run.out, run.err, human.out, human.err):
        assert KEY not in text


AHEAD = timedelta(hours=1)


async def _differing(request: web.Request) -> web.StreamResponse:
    """Answers each case its own way, echoing the key it is sent in a header and a message."""
    auth = request.headers.get("Authorization", "")
    headers = {
        "X-RateLimit-Limit": "60",
        "X-RateLimit-Policy": f"per key {auth}",
        "Date": format_datetime(datetime.now(timezone.utc) + AHEAD, usegmt=True),
    }

    def answer(status: int, code: int, message: str | None, data: Any = None) -> web.Response:
        body = {"code": code, "trace_id": "tr-1", "message": message, "data": data}
        return web.json_response(body, status=status, headers=headers)

    if request.path == "/v1/credits":
        if auth != f"Bearer {KEY}":
            return answer(403, 403, f"forbidden: {auth}")
        return answer(200, 200, None, {"api_available_credits": 5, "api_total_credits": 9})
    task_id = request.query.get("task_id")
    if task_id is None:
        return answer(422, 422, "Unprocessable Entity")
    if task_id == "t-mine":
        data = {"task_id": "t-mine", "status": "running", "created_at": "2026-01-02 03:04:05"}
        return answer(200, 200, None, data)
    return answer(200, 404, "no such task")


@pytest.fixture
def differing() -> Iterator[str]:
    """The differing service on loopback, in a thread with its own loop; its base URL."""
    with _serving(_differing) as url:
        yield url


@contextlib.contextmanager
def _serving(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)

    async def start() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def test_against_a_service_that_answers_otherwise_each_difference_is_reported(
    differing: str, cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIDEOGEN_BASE_URL", differing)
    monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
    run = cli("--json", "doctor", "--task-id", "t-mine")
    assert run.code == 1, run
    assert _verdicts(run) == {
        "balance": "as expected",
        "unknown task id": "differs, handled",  # HTTP 200, code 404: still a NotFoundError
        "omitted task_id": "differs, NOT handled",  # 422: not the BadRequestError assumed
        "wrong API key": "differs, NOT handled",  # 403: not the AuthenticationError assumed
        "rate-limit headers": "differs, handled",  # headers the SDK does not read
        "date format": "differs, handled",  # no offset: read as UTC
    }
    report = run.json()
    assert report["ok"] is False
    checks = {c["check"]: c for c in report["checks"]}
    assert "PermissionDeniedError" in checks["wrong API key"]["service"]
    assert "AuthenticationError" in checks["wrong API key"]["sdk_assumes"]
    assert "HTTP 422, code 422" in checks["omitted task_id"]["service"]
    assert "2026-01-02 03:04:05" in checks["date format"]["service"]
    assert report["rate_limit_headers"]["X-RateLimit-Limit"] == "60"
    assert report["rate_limit_headers"]["X-RateLimit-Policy"] == "per key Bearer <redacted>"
    assert 3000 < report["clock_offset_seconds"] < 4200  # the service's clock is an hour ahead
    human = cli("doctor", "--task-id", "t-mine")
    assert human.code == 1, human
    assert "differs from what the SDK expects: unknown task id, omitted task_id" in human.err
    for text in (run.out, run.err, human.out, human.err):
        assert KEY not in text
        assert "vg-doctor-wrong-" not in text  # the wrong key, echoed in the 403's message


def test_the_clock_difference_is_within_half_a_second_and_half_the_round_trip(
    cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    true_offset: list[float] = []  # the service's clock minus this machine's

    async def known_clock(request: web.Request) -> web.StreamResponse:
        now = time.time()
        if not true_offset:  # the balance, answered when the service's clock reads x.75 s:
            true_offset.append(1000.75 - now % 1)  # its Date (whole seconds) is 0.75 s behind
        shown = datetime.fromtimestamp(now + true_offset[0], timezone.utc)
        data = {"api_available_credits": 5, "api_total_credits": 9}
        body = {"code": 200, "trace_id": "tr-1", "message": None, "data": data}
        return web.json_response(body, headers={"Date": format_datetime(shown, usegmt=True)})

    with _serving(known_clock) as url:
        monkeypatch.setenv("VIDEOGEN_BASE_URL", url)
        monkeypatch.setenv("VIDEOGEN_API_KEY", KEY)
        report = cli("--json", "doctor").json()
    # Date was written between the balance's send and its answer: the midpoint of the two is
    # off by at most half the round trip (however slow this machine is), the whole seconds
    # by at most half a second once corrected.
    error = abs(report["clock_offset_seconds"] - true_offset[0])
    assert error <= 0.5 + report["latency_ms"] / 2000 + 0.001, (error, report["latency_ms"])


def test_a_bad_task_id_is_refused_before_anything_is_sent(
    sandbox: ThreadedSandbox, cli: Callable[..., Run]
) -> None:
    before = len(sandbox.call(lambda: sandbox.srv.request_log))
    run = cli("doctor", "--task-id", "../credits")
    assert run.code == 2, run
    assert "TASK_ID: must not contain" in run.err
    assert len(sandbox.call(lambda: sandbox.srv.request_log)) == before


@pytest.mark.parametrize("columns", [80, 100])
def test_the_plain_report_fits_the_terminal(
    sandbox: ThreadedSandbox,
    cli: Callable[..., Run],
    monkeypatch: pytest.MonkeyPatch,
    columns: int,
) -> None:
    # A terminal of that width (as a shell sets $COLUMNS), without rich: the plain table.
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr(_ui, "_is_tty", lambda stream: True)
    monkeypatch.setattr(_ui, "_RICH", False)
    run = cli("doctor")
    assert run.code == 0, run
    lines = run.out.splitlines()
    assert max(map(len, lines)) <= columns, run.out
    assert run.out.count("as expected") == len(CHECKS)  # wrapped, nothing left out
    wide = cli("--json", "doctor").json()["checks"]
    said = " ".join(c["service"] for c in wide)
    assert " ".join(" ".join(lines).split()).count("as expected") == len(CHECKS)
    assert said.split()[0] in run.out
