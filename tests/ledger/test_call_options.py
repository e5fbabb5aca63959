"""Per-call options through the ledger: sent on the wire, priced by, kept for a resend."""

from __future__ import annotations

import pytest

from videogen_async import AmbiguousCreateError, InvalidRequestError, Ledger

from ._service import Service

EXTRA = {"model": "videomodel_2_1", "duration": 8, "seed": 7}


async def test_extra_body_is_sent_priced_and_sent_again_by_a_resend(ledger_url: str) -> None:
    priced: list[tuple[str, int]] = []

    def estimate(model: str, duration: int) -> float:
        priced.append((model, duration))
        return 5.0

    async with Service(create_status=500) as service, service.client() as client:
        async with Ledger.open(ledger_url, max_credits=100, price_estimate=estimate) as ledger:
            with pytest.raises(AmbiguousCreateError):
                await ledger.create_task(
                    client,
                    "a fox",
                    key="fox",
                    duration=5,
                    extra_body=EXTRA,
                    extra_headers={"X-Trace": "t-1"},
                    extra_query={"region": "eu"},
                    timeout=20,
                )
            service.create_status = 200
            entry = await ledger.resend(client, "fox")
    assert service.bodies == [{"prompt": "a fox", **EXTRA}] * 2
    first = service.requests[0]
    assert (first.headers["X-Trace"], first.query["region"]) == ("t-1", "eu")
    assert priced == [("videomodel_2_1", 8)] * 2
    assert (entry.state, entry.model, entry.duration) == ("pending", "videomodel_2_1", 8)
    assert entry.request == {"prompt": "a fox", "duration": 5, "extra_body": EXTRA}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"extra_body": ["model"]}, "extra_body"),
        ({"extra_body": {"duration": "long"}}, "extra_body"),
        ({"extra_headers": {"Authorization": "Bearer x"}}, "extra_headers"),
        ({"timeout": -1}, "timeout"),
    ],
)
async def test_bad_options_are_refused_before_anything_is_written(
    ledger_url: str, options: dict[str, object], field: str
) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        with pytest.raises(InvalidRequestError) as caught:
            await ledger.create_task(client, "a fox", key="fox", **options)
        assert caught.value.field == field
        assert await ledger.get("fox") is None
    assert service.posts == 0
