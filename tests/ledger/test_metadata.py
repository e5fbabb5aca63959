"""Metadata on entries: kept, searched by containment, counted per value, merged, bounded.

Both engines answer the same: a filter's keys must each hold an equal JSON value (a number
equals a number of the other kind, ``true`` is not ``1``), ``summary(group_by=...)`` counts
entries and credits per value. Bad metadata is refused before anything is written or sent.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

import anyio
import pytest

from videogen_async import InvalidRequestError, Ledger, LedgerError
from videogen_async.testing import SandboxServer

from ._service import Service


async def test_metadata_is_kept_searched_and_counted(ledger_url: str) -> None:
    async with SandboxServer(time_scale=0.001, seed=3) as server, server.client() as client:
        async with Ledger.open(ledger_url) as ledger:
            tags: dict[str, dict[str, Any] | None] = {
                "a1": {"tenant": "acme", "plan": {"tier": 2, "seats": [1, 2]}, "n": 1},
                "a2": {"tenant": "acme", "flag": True},
                "g1": {"tenant": "globex", "n": 1.0, "flag": 1},
                "x1": None,
            }
            for key, metadata in tags.items():
                entry = await ledger.create_task(client, f"clip {key}", key=key, metadata=metadata)
                assert entry.metadata == (metadata or {})

            async def found(**wanted: Any) -> list[str]:
                return [e.key async for e in ledger.entries(metadata=wanted)]

            assert await found(tenant="acme") == ["a1", "a2"]
            assert await found(tenant="acme", plan={"seats": [1, 2], "tier": 2}) == ["a1"]
            assert await found(plan={"tier": 2}) == []  # nested values are equal whole
            assert await found(n=1) == ["a1", "g1"]  # 1 and 1.0 are one number
            assert await found(flag=True) == ["a2"]  # true is not 1
            assert await found(tenant="initech") == []
            assert len([e async for e in ledger.entries(metadata={})]) == 4
            async with ledger.watch(client, stop_when_idle=True) as finished:
                done = {entry.key: entry async for entry in finished}
            summary = await ledger.summary(group_by="tenant")
    cost = {key: entry.credits_cost or 0.0 for key, entry in done.items()}
    assert summary["groups"] == {
        "acme": {"states": {"succeeded": 2}, "spent": cost["a1"] + cost["a2"]},
        "globex": {"states": {"succeeded": 1}, "spent": cost["g1"]},
        None: {"states": {"succeeded": 1}, "spent": cost["x1"]},
    }
    assert summary["states"] == {"succeeded": 4}
    assert summary["spent"] == sum(cost.values())


async def test_metadata_is_merged_and_each_change_counted(ledger_url: str) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        created = await ledger.create_task(
            client, "a fox", key="fox", metadata={"tenant": "acme", "run": {"token": "t1"}}
        )
        merged = await ledger.update_metadata("fox", {"run": {"token": "t2", "try": 2}})
        removed = await ledger.update_metadata("fox", {"tenant": None})
        same = await ledger.update_metadata("fox", {"run": {"try": 2}})
        with pytest.raises(LedgerError, match="no such entry"):
            await ledger.update_metadata("nobody", {"a": 1})
        held = await ledger.get("fox")
    assert merged.metadata == {"tenant": "acme", "run": {"token": "t2", "try": 2}}
    assert removed.metadata == {"run": {"token": "t2", "try": 2}}
    assert (created.version, merged.version, removed.version) == (1, 2, 3)
    assert same.version == 3  # nothing changed: no new version
    assert held == removed


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("metadata", "rule"),
    [
        (["tenant", "acme"], "must be a JSON object"),
        ("tenant=acme", "must be a JSON object"),
        ({"blob": "x" * 17_000}, "at most 16384 bytes"),
        (_deep(9), "at most 8 levels"),
        ({"when": datetime.datetime(2026, 1, 1)}, "JSON values only"),
        ({"tags": {"a", "b"}}, "JSON values only"),
        ({"ratio": math.nan}, r"\.ratio: must be a finite number"),
        ({"name": "a\x00b"}, "NUL"),
        ({1: "one"}, "string keys"),
    ],
    ids=["list", "text", "too-large", "too-deep", "datetime", "set", "nan", "nul", "int-key"],
)
async def test_bad_metadata_is_refused_before_anything_is_written_or_sent(
    ledger_url: str, metadata: Any, rule: str
) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        with pytest.raises(InvalidRequestError, match=rule) as caught:
            await ledger.create_task(client, "a fox", key="fox", metadata=metadata)
        assert caught.value.field == ("metadata.ratio" if "ratio" in metadata else "metadata")
        with pytest.raises(InvalidRequestError, match=rule):
            await ledger.create_project(
                client, "https://cdn.example.com/r.mp4", [], key="ad", metadata=metadata
            )
        assert [entry async for entry in ledger.entries()] == []
        with pytest.raises(InvalidRequestError, match=rule):
            ledger.entries(metadata=metadata)
        await ledger.create_task(client, "a fox", key="fox", metadata={"ok": 1})
        with pytest.raises(InvalidRequestError, match=rule):
            await ledger.update_metadata("fox", metadata)
        assert (await ledger.get("fox")).metadata == {"ok": 1}  # type: ignore[union-attr]
    assert service.posts == 1  # only the good create


async def test_a_merge_that_makes_metadata_too_large_changes_nothing(ledger_url: str) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        await ledger.create_task(client, "a fox", key="fox", metadata={"a": "x" * 9000})
        with pytest.raises(InvalidRequestError, match="at most 16384 bytes"):
            await ledger.update_metadata("fox", {"b": "y" * 9000})
        held = await ledger.get("fox")
    assert held is not None
    assert (held.metadata, held.version) == ({"a": "x" * 9000}, 1)


async def test_a_patch_of_none_is_refused_naming_metadata(ledger_url: str) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        await ledger.create_task(client, "a fox", key="fox", metadata={"a": 1})
        with pytest.raises(InvalidRequestError, match="JSON object") as caught:
            await ledger.update_metadata("fox", None)  # type: ignore[arg-type]
        held = await ledger.get("fox")
    assert caught.value.field == "metadata"
    assert held is not None
    assert (held.metadata, held.version) == ({"a": 1}, 1)


async def test_group_by_and_filters_are_checked(ledger_url: str) -> None:
    async with Ledger.open(ledger_url) as ledger:
        for bad in ("", 3):
            with pytest.raises(InvalidRequestError, match="group_by"):
                await ledger.summary(group_by=bad)  # type: ignore[arg-type]
        with anyio.fail_after(10):
            summary = await ledger.summary(group_by="tenant")
    assert summary["groups"] == {}


# RFC 7386, Appendix A: (original, patch, result). Metadata is an object, so each row is also
# applied under a key ("doc"), where a null patch removes the key.
RFC_7386_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


async def test_update_metadata_is_exactly_an_rfc_7386_merge_patch(ledger_url: str) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        for n, (original, patch, result) in enumerate(RFC_7386_EXAMPLES):
            await ledger.create_task(client, "a fox", key=f"doc-{n}", metadata={"doc": original})
            nested = await ledger.update_metadata(f"doc-{n}", {"doc": patch})
            assert nested.metadata == ({} if patch is None else {"doc": result}), n
            if isinstance(original, dict) and isinstance(patch, dict):
                await ledger.create_task(client, "a fox", key=f"top-{n}", metadata=original)
                top = await ledger.update_metadata(f"top-{n}", patch)
                assert top.metadata == result, n
                assert (await ledger.get(f"top-{n}")) == top
        # A change of JSON type is a change, though Python finds the values equal.
        await ledger.create_task(client, "a fox", key="typed", metadata={"flag": 1, "n": 2})
        flag = await ledger.update_metadata("typed", {"flag": True})
        floated = await ledger.update_metadata("typed", {"n": 2.0})
    assert json.dumps(flag.metadata) == '{"flag": true, "n": 2}'
    assert json.dumps(floated.metadata) == '{"flag": true, "n": 2.0}'
    assert (flag.version, floated.version) == (2, 3)


# Stored values, each an entry's {"v": value}; then searches and the entries each finds.
STORED: dict[str, Any] = {
    "int": 1,
    "float": 1.0,
    "obj-int": {"x": 1},
    "obj-float": {"x": 1.0},
    "list-int": [1],
    "list-float": [1.0],
    "big": 12345678901234567890,
    "big+1": 12345678901234567891,
    "big-float": 1.2345678901234567e19,
    "past-2**63": 2**63,
    "zero": 0,
    "minus-zero": -0.0,
    "1e308": 1e308,
    "1e20": 1e20,
    "tiny": 5e-324,
    "str-1": "1",
    "str-1.0": "1.0",
    "true": True,
    "false": False,
    "empty-obj": {},
    "empty-list": [],
    "null": None,
    "nested": {"a": [{"b": 1.5, "c": [True, None]}], "d": "x"},
}
SEARCHES: list[tuple[Any, set[str]]] = [
    (1, {"int", "float"}),
    (1.0, {"int", "float"}),
    ({"x": 1}, {"obj-int", "obj-float"}),
    ({"x": 1.0}, {"obj-int", "obj-float"}),
    ([1], {"list-int", "list-float"}),
    ([1.0], {"list-int", "list-float"}),
    ({}, {"empty-obj"}),
    ([], {"empty-list"}),
    (12345678901234567890, {"big"}),
    (12345678901234567891, {"big+1"}),
    (1.2345678901234567e19, {"big-float"}),
    (2**63, {"past-2**63"}),
    (2**63 - 1, set()),
    (0, {"zero", "minus-zero"}),
    (-0.0, {"zero", "minus-zero"}),
    (1e308, {"1e308"}),
    (10**308, {"1e308"}),  # the number 1e+308 writes, not the double nearest it
    (10**20, {"1e20"}),
    (5e-324, {"tiny"}),
    ("1", {"str-1"}),
    ("1.0", {"str-1.0"}),
    (True, {"true"}),
    (False, {"false"}),
    (None, {"null"}),
    ({"x": True}, set()),
    ({"d": "x", "a": [{"c": [True, None], "b": 1.5}]}, {"nested"}),
    ({"a": [{"b": 1.5}], "d": "x"}, set()),  # nested values are equal whole
]


def _read_back(value: Any) -> Any:
    """What the ledger gives back for a stored value: ``-0.0`` is ``0.0``, nothing else."""
    return 0.0 if isinstance(value, float) and value == 0 else value


async def test_both_engines_search_and_read_back_metadata_by_one_rule(ledger_url: str) -> None:
    async with Service() as service, service.client() as client, Ledger.open(ledger_url) as ledger:
        async with ledger.changes() as changes:
            for key, value in STORED.items():
                made = await ledger.create_task(client, "a fox", key=key, metadata={"v": value})
                held = await ledger.get(key)
                assert held is not None
                expected = json.dumps({"v": _read_back(value)})  # 1 is not 1.0, true not 1
                assert json.dumps(made.metadata) == json.dumps(held.metadata) == expected, key
            seen: dict[str, Any] = {}
            async for change in changes:
                seen[change.key] = change.metadata
                if len(seen) == len(STORED):
                    break
        assert {k: json.dumps(v) for k, v in seen.items()} == {
            k: json.dumps({"v": _read_back(v)}) for k, v in STORED.items()
        }
        found: dict[str, set[str]] = {}
        for wanted, _ in SEARCHES:
            found[json.dumps(wanted)] = {
                e.key async for e in ledger.entries(metadata={"v": wanted})
            }
        summary = await ledger.summary(group_by="v")
    assert found == {json.dumps(wanted): keys for wanted, keys in SEARCHES}
    groups = {json.dumps(value): group["states"] for value, group in summary["groups"].items()}
    assert groups['"{\\"x\\":1.0}"'] == groups['"{\\"x\\":1}"'] == {"pending": 1}
    assert groups["12345678901234567890"] == groups["12345678901234567891"] == {"pending": 1}
