"""Exact wire cases: statuses, envelopes, odd bodies, headers, dropped connections, retries."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import aiohttp
import pytest
from aioresponses import aioresponses
from yarl import URL

import videogen_async as vg
from videogen_async import AsyncVideoGen

from .helpers import BASE, KEY, TASKS_RE, created_task, envelope, task_data

CREATE_URL = f"{BASE}/v1/video/videomodel-2"
CREDITS_URL = f"{BASE}/v1/credits"


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record retry delays instead of sleeping them."""
    slept: list[float] = []

    async def fake_sleep(delay: float, *args: Any, **kwargs: Any) -> None:
        slept.append(delay)

    monkeypatch.setattr("videogen_async._http._transport.asyncio.sleep", fake_sleep)
    return slept


def calls(mock: aioresponses, method: str, url: str) -> int:
    return sum(
        len(v) for (m, u), v in mock.requests.items() if m == method and str(u).startswith(url)
    )


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, 400, vg.BadRequestError),
        (401, 401, vg.AuthenticationError),
        (403, 403, vg.PermissionDeniedError),
        (404, 404, vg.NotFoundError),
        (409, 409, vg.ConflictError),
        (409, 300111, vg.InsufficientCreditsError),
        (409, 100099, vg.MediaStorageError),
        (429, 429, vg.RateLimitError),
        (500, 500, vg.ServerError),
        (503, 503, vg.ServerError),
        (418, 418, vg.APIStatusError),
        # failures under HTTP 200: the envelope code decides
        (200, 400, vg.BadRequestError),
        (200, 404, vg.NotFoundError),
        (200, 300111, vg.InsufficientCreditsError),
        (200, 100099, vg.MediaStorageError),
        (200, 123456, vg.APIStatusError),
    ],
)
async def test_status_and_code_map_to_class(
    status: int, code: int, cls: type[vg.APIStatusError]
) -> None:
    with aioresponses() as mock:
        mock.post(CREATE_URL, status=status, payload=envelope(None, code=code, message="it failed"))
        async with AsyncVideoGen(KEY, BASE, max_retries=0) as client:
            with pytest.raises(vg.APIStatusError) as info:
                await client.tasks.create("a cat")
    err = info.value
    assert type(err) is cls
    assert err.status_code == status
    assert err.code == code
    assert err.trace_id == "trace-123"
    assert "it failed" in err.message
    assert "trace_id=trace-123" in str(err)


async def test_error_message_business_codes_keep_message() -> None:
    with aioresponses() as mock:
        mock.post(
            f"{BASE}/v1/video/viral-ads-clone",
            status=409,
            payload=envelope(code=300111, message="Insufficient API credits"),
        )
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(vg.InsufficientCreditsError, match="Insufficient API credits"):
                await client.projects.create("https://a.example/v.mp4", ["https://a.example/i.png"])
        assert calls(mock, "POST", f"{BASE}/v1/video/viral-ads-clone") == 1


async def test_html_502_on_read_is_server_error_with_excerpt(no_sleep: list[float]) -> None:
    page = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    with aioresponses() as mock:
        mock.get(CREDITS_URL, status=502, body=page, content_type="text/html", repeat=True)
        async with AsyncVideoGen(KEY, BASE, max_retries=2) as client:
            with pytest.raises(vg.ServerError) as info:
                await client.credits.get()
        assert calls(mock, "GET", CREDITS_URL) == 3
    assert info.value.status_code == 502
    assert info.value.code is None
    assert "502 Bad Gateway" in str(info.value)
    assert "non-JSON" in str(info.value)
    assert len(no_sleep) == 2


@pytest.mark.parametrize(
    ("body", "expect"),
    [
        ("", "<empty body>"),
        ('{"code": 200, "data": {"api_avail', "non-JSON"),
        ('["not", "an", "envelope"]', "not the service's envelope"),
        ('{"data": {"api_available_credits": 1}}', "not the service's envelope"),
        ("<html>hello</html>", "<html>hello</html>"),
    ],
)
async def test_odd_bodies_under_200_are_response_errors(body: str, expect: str) -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, status=200, body=body)
        async with AsyncVideoGen(KEY, BASE, max_retries=0) as client:
            with pytest.raises(vg.APIResponseError) as info:
                await client.credits.get()
    assert expect in str(info.value)
    assert info.value.status_code == 200
    assert not isinstance(info.value, (KeyError, ValueError))


async def test_garbled_read_is_retried_then_succeeds(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, status=200, body='{"code": 2')
        mock.get(
            CREDITS_URL,
            payload=envelope({"api_available_credits": 5, "api_total_credits": 9}),
        )
        async with AsyncVideoGen(KEY, BASE) as client:
            balance = await client.credits.get()
    assert balance == vg.CreditBalance(5.0, 9.0)


async def test_unparseable_data_is_response_error() -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, payload=envelope({"api_total_credits": "lots"}))
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(vg.APIResponseError) as info:
                await client.credits.get()
    text = str(info.value)
    assert "CreditBalance" in text
    assert "api_total_credits" in text
    assert "api_available_credits" in text


async def test_created_task_id_survives_an_unreadable_field() -> None:
    # Never a substitute (created_at None, credits_cost 0): an error that keeps the id.
    data = {**created_task("t-keep"), "created_at": "yesterday-ish", "credits_cost": "n/a"}
    with aioresponses() as mock:
        mock.post(CREATE_URL, payload=envelope(data))
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(vg.APIResponseError) as info:
                await client.tasks.create("a cat")
    assert info.value.task_id == "t-keep"
    assert info.value.request_may_have_taken_effect
    assert "CreatedTask.created_at: " in info.value.message
    assert "CreatedTask.credits_cost: expected a number, got str 'n/a'" in info.value.message


async def test_created_without_task_id_says_it_may_have_taken_effect() -> None:
    with aioresponses() as mock:
        mock.post(CREATE_URL, payload=envelope({"status": "running"}))
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(vg.APIResponseError) as info:
                await client.tasks.create("a cat")
    assert info.value.request_may_have_taken_effect
    assert "may have taken effect" in str(info.value)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_post_not_retried_on_5xx(status: int, no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.post(CREATE_URL, status=status, payload=envelope(code=status, message="boom"))
        async with AsyncVideoGen(KEY, BASE, max_retries=5) as client:
            with pytest.raises(vg.ServerError) as info:
                await client.tasks.create("a cat")
        assert calls(mock, "POST", CREATE_URL) == 1
    assert info.value.request_may_have_taken_effect
    assert "may have taken effect" in str(info.value)
    assert no_sleep == []


@pytest.mark.parametrize(
    "exc",
    [
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientOSError(104, "Connection reset by peer"),
        aiohttp.ClientPayloadError("truncated"),
    ],
)
async def test_post_not_retried_on_dropped_connection(
    exc: Exception, no_sleep: list[float]
) -> None:
    with aioresponses() as mock:
        mock.post(CREATE_URL, exception=exc)
        async with AsyncVideoGen(KEY, BASE, max_retries=5) as client:
            with pytest.raises(vg.APIConnectionError) as info:
                await client.tasks.create("a cat")
        assert calls(mock, "POST", CREATE_URL) == 1
    assert info.value.request_may_have_taken_effect
    assert "may have taken effect" in str(info.value)


async def test_post_read_timeout_is_timeout_that_may_have_taken_effect() -> None:
    with aioresponses() as mock:
        mock.post(CREATE_URL, exception=aiohttp.SocketTimeoutError("read"))
        async with AsyncVideoGen(KEY, BASE, max_retries=5) as client:
            with pytest.raises(vg.APITimeoutError) as info:
                await client.tasks.create("a cat")
        assert calls(mock, "POST", CREATE_URL) == 1
    assert isinstance(info.value, TimeoutError)
    assert info.value.request_may_have_taken_effect


async def test_post_retried_when_connection_could_not_be_opened(no_sleep: list[float]) -> None:
    refused = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("api.videogen.test", 443, True, None, None, None, None),
        ConnectionRefusedError(111, "Connection refused"),
    )
    with aioresponses() as mock:
        mock.post(CREATE_URL, exception=refused)
        mock.post(CREATE_URL, payload=envelope(created_task("t-9")))
        async with AsyncVideoGen(KEY, BASE, max_retries=2) as client:
            created = await client.tasks.create("a cat")
        assert calls(mock, "POST", CREATE_URL) == 2
    assert created.task_id == "t-9"
    assert len(no_sleep) == 1


async def test_post_connect_failure_exhausted_did_not_take_effect(no_sleep: list[float]) -> None:
    refused = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("api.videogen.test", 443, True, None, None, None, None),
        ConnectionRefusedError(111, "Connection refused"),
    )
    with aioresponses() as mock:
        mock.post(CREATE_URL, exception=refused, repeat=True)
        async with AsyncVideoGen(KEY, BASE, max_retries=1) as client:
            with pytest.raises(vg.APIConnectionError) as info:
                await client.tasks.create("a cat")
    assert not info.value.request_may_have_taken_effect
    assert "could not connect" in str(info.value)


async def test_post_retried_on_429_honouring_retry_after(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.post(
            CREATE_URL,
            status=429,
            payload=envelope(code=429, message="slow down"),
            headers={"Retry-After": "3"},
        )
        mock.post(CREATE_URL, payload=envelope(created_task("t-2")))
        async with AsyncVideoGen(KEY, BASE) as client:
            created = await client.tasks.create("a cat")
        assert calls(mock, "POST", CREATE_URL) == 2
    assert created.task_id == "t-2"
    assert no_sleep == [3.0]


async def test_retry_after_http_date(no_sleep: list[float]) -> None:
    when = datetime.now(timezone.utc) + timedelta(seconds=30)
    with aioresponses() as mock:
        mock.get(
            CREDITS_URL,
            status=503,
            body="busy",
            headers={"Retry-After": format_datetime(when, usegmt=True)},
        )
        mock.get(
            CREDITS_URL, payload=envelope({"api_available_credits": 1, "api_total_credits": 1})
        )
        async with AsyncVideoGen(KEY, BASE) as client:
            await client.credits.get()
    assert len(no_sleep) == 1
    assert 25 <= no_sleep[0] <= 30


async def test_retry_after_beyond_cap_is_raised_not_slept(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, status=429, body="", headers={"Retry-After": "3600"})
        async with AsyncVideoGen(KEY, BASE) as client:
            with pytest.raises(vg.RateLimitError) as info:
                await client.credits.get()
    assert info.value.retry_after == 3600
    assert no_sleep == []


async def test_get_retried_on_503_then_success(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(TASKS_RE, status=503, payload=envelope(code=503, message="busy"))
        mock.get(TASKS_RE, exception=aiohttp.ServerDisconnectedError())
        mock.get(TASKS_RE, payload=envelope(task_data("t-1", "succeeded")))
        async with AsyncVideoGen(KEY, BASE, max_retries=2) as client:
            task = await client.tasks.get("t-1")
    assert task.status == vg.TaskStatus.SUCCEEDED
    assert len(no_sleep) == 2
    assert all(0 <= d <= 8 for d in no_sleep)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 501])
async def test_get_not_retried_on_permanent_status(status: int, no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(TASKS_RE, status=status, payload=envelope(code=status, message="no"))
        async with AsyncVideoGen(KEY, BASE, max_retries=3) as client:
            with pytest.raises(vg.APIStatusError):
                await client.tasks.get("t-1")
    assert no_sleep == []


async def test_max_retries_zero_means_one_attempt(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(TASKS_RE, status=503, body="busy", repeat=True)
        async with AsyncVideoGen(KEY, BASE, max_retries=0) as client:
            with pytest.raises(vg.ServerError):
                await client.tasks.get("t-1")
        assert calls(mock, "GET", f"{BASE}/v1/tasks") == 1
    assert no_sleep == []


async def test_with_options_overrides_retries_per_call(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(TASKS_RE, status=503, body="busy", repeat=True)
        async with AsyncVideoGen(KEY, BASE, max_retries=4) as client:
            with pytest.raises(vg.ServerError):
                await client.with_options(max_retries=1).tasks.get("t-1")
            assert client.max_retries == 4
        assert calls(mock, "GET", f"{BASE}/v1/tasks") == 2


async def test_get_timeout_retried_then_raised(no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, exception=TimeoutError(), repeat=True)
        async with AsyncVideoGen(KEY, BASE, max_retries=2) as client:
            with pytest.raises(vg.APITimeoutError) as info:
                await client.credits.get()
        assert calls(mock, "GET", CREDITS_URL) == 3
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value, vg.APIConnectionError)
    assert not info.value.request_may_have_taken_effect


async def test_headers_auth_user_agent_and_json_body() -> None:
    with aioresponses() as mock:
        mock.post(CREATE_URL, payload=envelope(created_task()))
        async with AsyncVideoGen(KEY, BASE, default_headers={"X-App": "shop"}) as client:
            await client.tasks.create("a cat", model=vg.Model.VIDEOMODEL_2_0_FAST, duration=6)
        (request,) = mock.requests[("POST", URL(CREATE_URL))]
    headers = request.kwargs["headers"]
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["User-Agent"].startswith(f"videogen-async/{vg.__version__} ")
    assert headers["Content-Type"] == "application/json"
    assert headers["X-App"] == "shop"
    import json

    assert json.loads(request.kwargs["data"]) == {
        "prompt": "a cat",
        "model": "videomodel_2_0_fast",
        "duration": 6,
    }


async def test_task_query_parameter_and_project_path_are_encoded() -> None:
    # Ids that are one path segment but need encoding (ids that are not one segment, such
    # as "a b" or "p/1", are refused before sending: tests/sandbox/test_ids.py).
    with aioresponses() as mock:
        mock.get(TASKS_RE, payload=envelope(task_data("a&b=c+d")))
        mock.get(
            f"{BASE}/v1/video/viral-ads-clone/p%3F1%23x",
            payload=envelope({"project_id": "p?1#x", "status": "draft"}),
        )
        async with AsyncVideoGen(KEY, BASE) as client:
            await client.tasks.get("a&b=c+d")
            project = await client.projects.get("p?1#x")
        urls = [str(u) for (_m, u) in mock.requests]
    assert any("task_id=a%26b%3Dc%2Bd" in u for u in urls), urls
    assert project.project_id == "p?1#x"


async def test_body_size_is_bounded() -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, body="x" * 5000)
        async with AsyncVideoGen(KEY, BASE, max_body_size=1000, max_retries=0) as client:
            with pytest.raises(vg.APIResponseError, match="limit"):
                await client.credits.get()


async def test_request_and_retry_logged_without_key(caplog: Any, no_sleep: list[float]) -> None:
    with aioresponses() as mock:
        mock.get(CREDITS_URL, status=503, body="busy")
        mock.get(
            CREDITS_URL, payload=envelope({"api_available_credits": 1, "api_total_credits": 2})
        )
        async with AsyncVideoGen(KEY, BASE) as client:
            with caplog.at_level(logging.DEBUG, logger="videogen_async"):
                await client.credits.get()
    text = caplog.text
    assert "GET /v1/credits failed" in text
    assert "retrying in" in text
    assert "GET /v1/credits -> 200" in text
    assert "attempt 2" in text
    assert "trace_id=trace-123" in text
    assert KEY not in text
