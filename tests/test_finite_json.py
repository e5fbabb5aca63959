"""Nothing the SDK sends or writes contains NaN or Infinity (JSON has neither).

Every JSON text the package produces goes through one encoder: a number that is not finite is
an ``InvalidRequestError`` naming its path (``extra_body.x``), raised before anything is sent
or written, and a ``ValueError`` naming the field for ``to_json()``.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import pytest

import videogen_async as vg
from videogen_async import InvalidRequestError, Ledger, LedgerEntry
from videogen_async._cli._batch_store import request_hash
from videogen_async._cli._ui import UI
from videogen_async._contract._validation import json_text

from .hostile._server import HostileServer, serve

NAN, INF = math.nan, math.inf
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()


@pytest.fixture
async def hostile() -> AsyncIterator[HostileServer]:
    async for server in serve():
        yield server


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"x": NAN}, "extra_body.x"),
        ({"x": [1, {"y": -INF}]}, "extra_body.x[1].y"),
        ({"x": (1.0, INF)}, "extra_body.x[1]"),
    ],
)
def test_the_encoder_names_the_path_of_a_number_json_cannot_hold(
    value: dict[str, object], path: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        json_text(value, "extra_body")
    assert caught.value.field == path
    assert "finite" in caught.value.rule
    assert json_text({"x": 1e308, "y": [0.5]}, "") == '{"x": 1e+308, "y": [0.5]}'


def test_each_set_of_options_writes_as_json_dumps_does() -> None:
    # Encoders are made once per set of options: each set keeps its own, in any order of use.
    value = {"b": [1, 2.5], "a": {"é": None}, "c": ("x", True)}
    sets: list[dict[str, object]] = [
        {},
        {"sort_keys": True},
        {"separators": (",", ":"), "ensure_ascii": False},
        {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False},
        {"indent": 2, "ensure_ascii": False, "default": str},
    ]
    for options in [*sets, *reversed(sets)]:
        assert json_text(value, "", **options) == json.dumps(value, **options)
    assert json_text({"when": Path("/x")}, "", default=str) == '{"when": "/x"}'


@pytest.mark.parametrize("how", ["task", "videos"])
async def test_extra_body_with_nan_is_refused_before_sending(
    hostile: HostileServer, how: str
) -> None:
    async with vg.AsyncVideoGen(api_key="test-key", base_url=hostile.base_url) as client:
        call: Awaitable[object]
        if how == "task":
            call = client.tasks.create("a fox", extra_body={"x": NAN})
        else:
            call = client.projects.create_videos("p-1", extra_body={"x": {"y": [INF]}})
        with pytest.raises(InvalidRequestError) as caught:
            await call
    assert caught.value.field == ("extra_body.x" if how == "task" else "extra_body.x.y[0]")
    assert hostile.seen == []


@pytest.mark.parametrize(
    "model",
    [
        vg.Task("t-1", "running", credits_cost=NAN),
        vg.CreditBalance(INF, 10.0),
        LedgerEntry("k", "succeeded", credits_cost=INF),
        vg.GatherProgress(total=1, elapsed=NAN),
    ],
    ids=lambda m: type(m).__name__,
)
def test_to_json_refuses_what_json_cannot_hold_naming_the_field(model: vg.Task) -> None:
    with pytest.raises(ValueError, match=r"^\w+\.\w+: must be a finite number") as caught:
        model.to_json()
    assert not isinstance(caught.value, InvalidRequestError)  # nothing was being sent


async def test_a_webhook_payload_with_infinity_is_refused_before_sending(
    hostile: HostileServer,
) -> None:
    deliver = vg.webhook(hostile.base_url + "/hook", SECRET)
    with pytest.raises(InvalidRequestError) as caught:
        await deliver(LedgerEntry("k", "succeeded", credits_cost=INF))
    assert caught.value.field == "data.credits_cost"
    assert hostile.seen == []


async def test_ledger_rows_never_hold_nan(hostile: HostileServer, tmp_path: Path) -> None:
    async with (
        vg.AsyncVideoGen(api_key="test-key", base_url=hostile.base_url) as client,
        Ledger.open(str(tmp_path / "ledger.db")) as ledger,
    ):
        with pytest.raises(InvalidRequestError) as caught:
            await ledger.create_task(client, "a fox", metadata={"a": [1, NAN]})
        assert caught.value.field == "metadata.a[1]"
        with pytest.raises(InvalidRequestError) as caught:
            await ledger.create_task(client, "a fox", extra_body={"x": INF})
        assert caught.value.field == "extra_body.x"
        with pytest.raises(InvalidRequestError) as caught:
            await ledger.create_project(client, "https://x/r.mp4", ["https://x/p"], resolution=NAN)
        assert caught.value.field == "resolution"
        assert [entry async for entry in ledger.entries()] == []  # nothing written
    assert hostile.seen == []  # nothing sent


def test_the_cli_never_prints_nan_as_json() -> None:
    out = io.StringIO()
    with pytest.raises(InvalidRequestError) as caught:
        UI(json_mode=True, stdout=out).emit_json({"balance": {"available": NAN}})
    assert caught.value.field == "balance.available"
    assert out.getvalue() == ""
    with pytest.raises(InvalidRequestError):
        request_hash({"prompt": "a fox", "duration": INF})
