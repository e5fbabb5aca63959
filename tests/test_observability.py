"""Request ids on results, raw responses, event hooks and OpenTelemetry spans, over real HTTP.

Spans are read with the OpenTelemetry SDK's in-memory exporter, installed on the process's
tracer provider at the first test that reads spans and exporting only during such a test.
"""

from __future__ import annotations

import copy
import logging
import pickle
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import videogen_async as vg
from tests.test_docs import ThreadedSandbox
from videogen_async import PollPolicy
from videogen_async._contract._models import structure
from videogen_async._observe import _otel
from videogen_async.testing import FaultRule, SandboxServer

FAST = PollPolicy(first_delay=0.0, min_interval=0.005, max_interval=0.02)

_EXPORTER = InMemorySpanExporter()


class _Gate(SimpleSpanProcessor):
    """Exports only while a test that reads spans runs (other tests' spans are dropped)."""

    on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            super().on_end(span)


_GATE = _Gate(_EXPORTER)
_INSTALLED: list[bool] = []


def _install() -> None:
    """Install the gate once, on the first use: set the global provider, or join the SDK
    provider a program (a docs example) already set."""
    if _INSTALLED:
        return
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(_GATE)
    _INSTALLED.append(True)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _install()
    _EXPORTER.clear()
    _GATE.on = True
    yield _EXPORTER
    _GATE.on = False
    _EXPORTER.clear()


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    async with SandboxServer(time_scale=0.001, seed=5, task_duration=(20, 30)) as server:
        yield server


# --------------------------------------------------------------------------------------------
# Request ids and raw responses
# --------------------------------------------------------------------------------------------


async def test_every_result_carries_its_answers_trace_id(sandbox: SandboxServer) -> None:
    async with sandbox.client() as client:
        created = await client.tasks.create("a paper boat")
        task = await client.tasks.get(created.task_id)
        balance = await client.credits.get()
        project = await client.projects.create(
            "https://cdn.example.com/ad.mp4", ["https://cdn.example.com/p.png"], mode="manual"
        )
        read = await client.projects.get(project.project_id)
        ready = await client.projects.wait_for_script(project.project_id, poll_policy=FAST)
        batch = await client.projects.create_videos(project.project_id, out_number=1)
    results: list[Any] = [created, task, balance, project, read, ready, batch]
    ids = [r._request_id for r in results]
    assert all(isinstance(i, str) and i for i in ids), ids
    assert len(set(ids)) == len(ids)  # one answer each
    assert set(ids) <= {entry.trace_id for entry in sandbox.request_log}
    info = created._response
    assert info is not None
    assert (info.method, info.status_code, info.attempts) == ("POST", 200, 1)
    assert info.url == sandbox.url("/v1/video/videomodel-2")
    assert info.request_id == info.trace_id == created._request_id
    assert info.headers["content-type"].startswith("application/json")  # case-insensitive
    assert task._response is not None
    assert task._response.url.endswith(f"/v1/tasks?task_id={created.task_id}")
    assert task._response.elapsed > 0


async def test_metadata_leaves_equality_hash_repr_copies_and_pickling_alone(
    sandbox: SandboxServer,
) -> None:
    async with sandbox.client() as client:
        created = await client.tasks.create("a fox")
        task = await client.tasks.get(created.task_id)
    by_hand = vg.Task(
        task_id=task.task_id,
        status=task.status,
        model=task.model,
        created_at=task.created_at,
        updated_at=task.updated_at,
        credits_cost=task.credits_cost,
        result=task.result,
    )
    assert task == by_hand
    assert hash(task) == hash(by_hand)
    assert repr(task) == repr(by_hand)
    assert by_hand._request_id is None
    assert by_hand._response is None
    assert task._request_id is not None
    assert "trace" not in repr(task)
    assert task._request_id not in repr(task)
    assert attrs.asdict(task) == attrs.asdict(by_hand)
    assert [f.name for f in attrs.fields(vg.Task)] == [f.name for f in attrs.fields(type(by_hand))]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        task._response_info = None  # type: ignore[misc]
    # A copy is not the answer of a request: it carries no metadata, and equals the original.
    for other in (
        attrs.evolve(task),
        copy.copy(task),
        copy.deepcopy(task),
        pickle.loads(pickle.dumps(task)),  # noqa: S301 - our own bytes
    ):
        assert other == task
        assert other._request_id is None
    changed = attrs.evolve(task, credits_cost=99.0)
    assert changed != task
    assert changed._response is None
    # The metadata object itself pickles (its headers as a plain dict).
    info = pickle.loads(pickle.dumps(task._response))  # noqa: S301 - our own bytes
    assert info.trace_id == task._request_id
    assert dict(info.headers) == dict(task._response.headers)


def test_a_parsed_model_equals_one_built_by_hand_without_metadata() -> None:
    data = {"task_id": "t-1", "status": "running", "credits_cost": 3}
    parsed = structure(data, vg.Task)
    assert parsed == vg.Task(task_id="t-1", status=vg.TaskStatus.RUNNING, credits_cost=3.0)


async def test_with_raw_response_gives_status_headers_and_the_parsed_result(
    sandbox: SandboxServer,
) -> None:
    async with sandbox.client() as client:
        raw = await client.with_raw_response.tasks.create("a lighthouse")
        created = raw.parse()
        assert isinstance(created, vg.CreatedTask)
        assert raw.status_code == 200
        assert raw.trace_id == raw.request_id == created._request_id
        assert raw.http_request == vg.HTTPRequestInfo("POST", sandbox.url("/v1/video/videomodel-2"))
        assert raw.headers["Content-Type"].startswith("application/json")
        assert raw.retries_taken == 0
        assert raw.elapsed > 0
        got = await client.with_raw_response.tasks.get(created.task_id)
        assert got.parse().task_id == created.task_id
        assert got.http_request.method == "GET"
        balance = await client.with_raw_response.credits.get()
        assert isinstance(balance.parse(), vg.CreditBalance)
        assert "RawResponse [200] GET" in repr(balance)
        # A view made with other options has them too, and its retries are counted.
        sandbox.faults.add(
            FaultRule("GET /v1/credits", error_rate=1.0, error_statuses=(503,), times=1)
        )
        retried = await client.with_options(max_retries=2).with_raw_response.credits.get()
        assert retried.retries_taken == 1
        assert retried.parse()._response is not None
        # Errors already carried the trace id; they still do.
        with pytest.raises(vg.NotFoundError) as caught:
            await client.with_raw_response.tasks.get("no-such-task")
        assert caught.value.trace_id


async def test_each_namespace_has_its_with_raw_response_as_the_openai_sdk_writes_it(
    sandbox: SandboxServer,
) -> None:
    async with sandbox.client() as client:
        assert type(client.tasks.with_raw_response) is type(client.with_raw_response.tasks)
        raw = await client.tasks.with_raw_response.create("a lighthouse")
        created = raw.parse()
        got = await client.tasks.with_raw_response.get(created.task_id)
        assert got.parse().task_id == created.task_id
        assert got.trace_id == got.parse()._request_id
        balance = await client.credits.with_raw_response.get()
        assert isinstance(balance.parse(), vg.CreditBalance)
        with pytest.raises(vg.NotFoundError):
            await client.projects.with_raw_response.get("no-such-project")
        view = client.with_options(max_retries=0)
        assert (await view.tasks.with_raw_response.get(created.task_id)).status_code == 200


def test_the_blocking_client_has_each_namespaces_with_raw_response() -> None:
    with ThreadedSandbox(time_scale=0.001) as sandbox:
        with vg.VideoGen(api_key=sandbox.api_key, base_url=sandbox.base_url) as client:
            assert client.tasks.with_raw_response is client.with_raw_response.tasks
            created = client.tasks.with_raw_response.create("a lighthouse").parse()
            got = client.tasks.with_raw_response.get(created.task_id)
            assert (got.status_code, got.parse().task_id) == (200, created.task_id)
            assert client.credits.with_raw_response.get().parse().api_total_credits >= 0
            assert client.with_options(timeout=5).projects.with_raw_response is not None


async def test_every_error_from_an_answer_has_its_request_id(sandbox: SandboxServer) -> None:
    async with (
        sandbox.client() as client,
        vg.AsyncVideoGen(api_key="sk-wrong", base_url=sandbox.base_url) as stranger,
    ):
        for call in (
            lambda: client.tasks.get("no-such-task"),
            lambda: client.projects.get("no-such-project"),
            stranger.credits.get,
        ):
            with pytest.raises(vg.APIStatusError) as caught:
                await call()
            error = caught.value
            assert error.request_id
            assert error.request_id == error.trace_id
            assert error.trace_id in {entry.trace_id for entry in sandbox.request_log}
            again = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
            assert (type(again), again.request_id) == (type(error), error.request_id)
    assert vg.ConfigurationError("no key").request_id is None


@pytest.mark.parametrize("suffix", ["/v1", "/v1/"])
async def test_a_base_url_with_the_version_works(
    sandbox: SandboxServer, suffix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="videogen_async")
    base = sandbox.base_url.rstrip("/") + suffix
    async with vg.AsyncVideoGen(api_key=sandbox.api_key, base_url=base) as client:
        assert client.base_url == sandbox.base_url.rstrip("/")
        balance = await client.credits.get()
        assert balance.api_total_credits >= 0
        assert (await client.tasks.get((await client.tasks.create("a boat")).task_id)).task_id
    assert any("/v1" in r.getMessage() for r in caplog.records)
    async with vg.AsyncVideoGen(api_key="k", base_url="https://v1/") as named:  # a host: kept
        assert named.base_url == "https://v1"


# --------------------------------------------------------------------------------------------
# Event hooks
# --------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def hooks(self, *, async_: bool = False) -> dict[str, list[Any]]:
        def sync_hook(event: Any) -> None:
            self.events.append(event)

        async def async_hook(event: Any) -> None:
            self.events.append(event)

        hook = async_hook if async_ else sync_hook
        return {name: [hook] for name in ("request", "response", "retry", "poll")}

    def of(self, cls: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
async def test_hooks_see_requests_responses_retries_and_polls(
    sandbox: SandboxServer, async_: bool
) -> None:
    seen = Recorder()
    sandbox.faults.add(FaultRule("GET /v1/credits", error_rate=1.0, error_statuses=(502,), times=1))
    async with sandbox.client(event_hooks=seen.hooks(async_=async_), max_retries=2) as client:
        await client.credits.get()
        created = await client.tasks.create("a boat")
        task = await client.tasks.wait(created.task_id, poll_policy=FAST)
    requests, responses = seen.of(vg.RequestEvent), seen.of(vg.ResponseEvent)
    retries, polls = seen.of(vg.RetryEvent), seen.of(vg.PollEvent)
    assert [(r.method, r.path, r.attempt) for r in requests[:3]] == [
        ("GET", "/v1/credits", 1),
        ("GET", "/v1/credits", 2),
        ("POST", "/v1/video/videomodel-2", 1),
    ]
    assert [(r.status_code, r.error) for r in responses[:3]] == [
        (502, "ServerError"),
        (200, None),
        (200, None),
    ]
    assert all(r.trace_id and r.elapsed >= 0 for r in responses[1:])
    assert responses[2].trace_id == created._request_id
    assert len(retries) == 1
    retry = retries[0]
    assert (retry.method, retry.path, retry.attempt, retry.status_code) == (
        "GET",
        "/v1/credits",
        1,
        502,
    )
    assert retry.delay >= 0
    assert retry.error == "ServerError"
    assert "ServerError" in retry.reason
    assert polls
    assert all(p.kind == "task" and p.id == created.task_id for p in polls)
    assert polls[-1].is_terminal
    assert polls[-1].status == str(task.status)
    assert not any(p.is_terminal for p in polls[:-1])


async def test_hooks_follow_with_options_views_and_gathers(sandbox: SandboxServer) -> None:
    seen = Recorder()
    async with sandbox.client(event_hooks=seen.hooks()) as client:
        ids = [(await client.tasks.create(f"clip {i}")).task_id for i in range(3)]
        view = client.with_options(max_retries=0)
        await view.credits.get()
        async with view.tasks.gather_until_done(ids, poll_policy=FAST) as results:
            done = [task async for task in results]
    assert {t.task_id for t in done} == set(ids)
    terminal = {p.id for p in seen.of(vg.PollEvent) if p.is_terminal}
    assert terminal == set(ids)
    assert any(r.path == "/v1/credits" for r in seen.of(vg.RequestEvent))


async def test_a_hook_that_raises_is_logged_and_the_client_goes_on(
    sandbox: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(event: Any) -> None:
        calls.append(type(event).__name__)
        raise RuntimeError("observer bug")

    async def broken_async(event: Any) -> None:
        raise ValueError("async observer bug")

    hooks = {name: [broken, broken_async] for name in ("request", "response", "poll")}
    caplog.set_level(logging.ERROR, logger="videogen_async")
    async with sandbox.client(event_hooks=hooks) as client:
        created = await client.tasks.create("still created")
        task = await client.tasks.wait(created.task_id, poll_policy=FAST)
    assert task.is_terminal
    assert created.task_id
    assert {"RequestEvent", "ResponseEvent", "PollEvent"} <= set(calls)
    texts = [r.getMessage() for r in caplog.records]
    assert any("broken" in t and "raised" in t for t in texts)
    assert any(r.exc_info and isinstance(r.exc_info[1], ValueError) for r in caplog.records)


@pytest.mark.parametrize(
    "hooks",
    [{"sent": []}, {"request": print}, {"request": [42]}, {"request": "print"}],
    ids=["unknown-event", "not-a-list", "not-callable", "a-string"],
)
def test_bad_hooks_are_refused_before_any_request(hooks: Any) -> None:
    with pytest.raises(vg.ConfigurationError, match="event_hooks"):
        vg.AsyncVideoGen("key-123456789", "http://127.0.0.1:9", event_hooks=hooks)


# --------------------------------------------------------------------------------------------
# OpenTelemetry
# --------------------------------------------------------------------------------------------


async def test_one_client_span_per_attempt_following_the_http_conventions(
    sandbox: SandboxServer, spans: InMemorySpanExporter
) -> None:
    sandbox.faults.add(FaultRule("GET /v1/credits", error_rate=1.0, error_statuses=(503,), times=1))
    async with sandbox.client(max_retries=2) as client:
        balance = await client.credits.get()
        with pytest.raises(vg.NotFoundError):
            await client.with_options(max_retries=0).tasks.get("missing")
    http = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert [s.name for s in http] == ["GET", "GET", "GET"]
    first, second, missing = (dict(s.attributes or {}) for s in http)
    assert first["http.request.method"] == "GET"
    assert first["server.address"] == "127.0.0.1"
    assert first["server.port"] == sandbox.port
    assert first["url.full"] == sandbox.url("/v1/credits")
    assert first["http.response.status_code"] == 503
    assert first["error.type"] == "503"
    assert "http.request.resend_count" not in first
    assert second["http.request.resend_count"] == 1
    assert second["http.response.status_code"] == 200
    assert "error.type" not in second
    assert second["videogen.trace_id"] == balance._request_id
    assert missing["http.response.status_code"] == 404
    assert missing["error.type"] == "404"
    key = sandbox.api_key
    for s in http:
        assert all(key not in str(v) for v in (s.attributes or {}).values())
        assert all(key not in str(e.attributes) for e in s.events)


async def test_a_connection_failure_is_an_error_type_without_a_status(
    spans: InMemorySpanExporter,
) -> None:
    async with vg.AsyncVideoGen("key-123456789", "http://127.0.0.1:9", max_retries=0) as client:
        with pytest.raises(vg.APIConnectionError):
            await client.credits.get()
    (span,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.CLIENT]
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "APIConnectionError"
    assert "http.response.status_code" not in attributes
    assert span.status.status_code == trace.StatusCode.ERROR


async def test_a_wait_span_holds_its_polls_with_credits_and_outcome(
    sandbox: SandboxServer, spans: InMemorySpanExporter
) -> None:
    async with sandbox.client() as client:
        created = await client.tasks.create("a boat")
        spans.clear()
        task = await client.tasks.wait(created.task_id, poll_policy=FAST)
        frozen = await client.tasks.create("another boat")
        with pytest.raises(vg.WaitTimeoutError):
            await client.tasks.wait(frozen.task_id, timeout=0.0, poll_policy=FAST)
    finished = spans.get_finished_spans()
    waits = [s for s in finished if s.name == "videogen.wait task"]
    assert len(waits) == 2
    done, timed_out = (dict(s.attributes or {}) for s in waits)
    assert done["videogen.ids.count"] == 1
    assert done["videogen.id"] == created.task_id
    assert done["videogen.outcome"] == str(task.status)
    assert done["videogen.credits_charged"] == task.credits_cost
    assert timed_out["videogen.outcome"] == "timeout"
    polls = [s for s in finished if s.kind == SpanKind.CLIENT and s.parent is not None]
    wait_ids = {waits[0].context.span_id}
    assert sum(1 for s in polls if s.parent is not None and s.parent.span_id in wait_ids) >= 1


async def test_a_gather_span_counts_ids_credits_and_outcome(
    sandbox: SandboxServer, spans: InMemorySpanExporter
) -> None:
    async with sandbox.client() as client:
        ids = [(await client.tasks.create(f"clip {i}")).task_id for i in range(4)]
        spans.clear()
        results = [t async for t in client.tasks.gather_until_done(ids, poll_policy=FAST)]
    (gather,) = [s for s in spans.get_finished_spans() if s.name == "videogen.gather"]
    attributes = dict(gather.attributes or {})
    assert attributes["videogen.ids.count"] == 4
    assert attributes["videogen.credits_charged"] == sum(t.credits_cost for t in results)
    assert attributes["videogen.succeeded"] + attributes["videogen.failed"] == 4
    assert attributes["videogen.outcome"] == "completed"
    children = [
        s
        for s in spans.get_finished_spans()
        if s.parent is not None and s.parent.span_id == gather.context.span_id
    ]
    assert len(children) >= 4
    assert all(s.kind == SpanKind.CLIENT for s in children)


async def test_projects_waits_have_spans(
    sandbox: SandboxServer, spans: InMemorySpanExporter
) -> None:
    async with sandbox.client() as client:
        created = await client.projects.create(
            "https://cdn.example.com/ad.mp4", ["https://cdn.example.com/p.png"]
        )
        await client.projects.wait_for_script(created.project_id, poll_policy=FAST)
        final = await client.projects.wait(created.project_id, poll_policy=FAST)
    names = [s.name for s in spans.get_finished_spans()]
    assert "videogen.wait script" in names
    assert "videogen.wait project" in names
    (project_span,) = [s for s in spans.get_finished_spans() if s.name == "videogen.wait project"]
    attributes = dict(project_span.attributes or {})
    assert attributes["videogen.credits_charged"] == final.billing.total_credits_cost
    assert attributes["videogen.outcome"] == str(final.status)


def _run_ok(program: str) -> None:
    """Run ``program`` in a fresh interpreter; it must succeed and print ``ok``."""
    out = subprocess.run(  # noqa: S603 - our own program
        [sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_without_opentelemetry_nothing_is_traced_or_observed() -> None:
    """With ``opentelemetry`` not importable, the client has no observer and imports fine."""
    program = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import videogen_async as vg\n"
        "from videogen_async._observe import _otel\n"
        "assert _otel.ENABLED is False\n"
        "c = vg.AsyncVideoGen('key-123456789', 'http://127.0.0.1:9')\n"
        "assert c._transport._observer is None\n"
        "h = vg.AsyncVideoGen('key-123456789', 'http://127.0.0.1:9',"
        " event_hooks={'request': [print]})\n"
        "assert h._transport._observer is not None\n"
        "assert 'opentelemetry' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n"
        "print('ok')\n"
    )
    _run_ok(program)
    assert _otel.ENABLED  # in this process the extra is installed


def test_with_no_tracer_provider_set_no_span_is_started() -> None:
    """With the extra installed but no provider set (the API's no-op default), requests, waits
    and gathers start no span; once the application sets one, the next call is traced."""
    program = (
        "import asyncio\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import"
        " InMemorySpanExporter\n"
        "from videogen_async._observe import _otel\n"
        "from videogen_async.testing import SandboxServer\n"
        "started = []\n"
        "real = _otel.span\n"
        "def counting(*args, **kwargs):\n"
        "    started.append(args[0])\n"
        "    return real(*args, **kwargs)\n"
        "_otel.span = counting\n"
        "async def main():\n"
        "    async with SandboxServer(time_scale=0.001) as box, box.client() as client:\n"
        "        assert not _otel.recording()\n"
        "        task = await client.tasks.create('a fox')\n"
        "        await client.tasks.wait(task.task_id)\n"
        "        async for _ in client.tasks.gather_until_done([task.task_id]):\n"
        "            pass\n"
        "        assert started == [], started\n"
        "        exporter = InMemorySpanExporter()\n"
        "        provider = TracerProvider()\n"
        "        provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "        trace.set_tracer_provider(provider)\n"
        "        assert _otel.recording()\n"
        "        await client.tasks.get(task.task_id)\n"
        "        assert [s.name for s in exporter.get_finished_spans()] == ['GET'], started\n"
        "asyncio.run(main())\n"
        "print('ok')\n"
    )
    _run_ok(program)
