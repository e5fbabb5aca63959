"""The two pure layers under the hostile-server tests: safe body decoding and redaction."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from videogen_async import APIResponseError, APIStatusError, VideoGenError
from videogen_async._contract._redact import (
    REDACTED,
    redact_text,
    redact_url,
    redact_value,
    register_secret,
    scrub_exception,
)
from videogen_async._http._envelope import decode as _decode
from videogen_async._http._jsonbody import MAX_DEPTH, clip, decode_json, excerpt, short_repr

KEY = "vg-redact/UNIT+key=fedcba9876543210"
register_secret(KEY)
register_secret("short")  # below the minimum length: never redacted


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
        b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
        b"9" * 100_000,
        b"NaN",
        b"[Infinity, -Infinity]",
        b"\xff\xfe\xfd",
        b"",
        b'{"code": 200',
    ],
)
def test_decode_never_raises_and_refuses_what_is_not_json(raw: bytes) -> None:
    assert decode_json(raw) == (None, False)


def test_decode_reads_nesting_within_the_limit_and_utf16() -> None:
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert decode_json(nested.encode())[1]
    assert decode_json(b'["[[[[", "{{{{"]' * 1 + b"") == (["[[[[", "{{{{"], True)
    assert decode_json(json.dumps({"code": 500}).encode("utf-16")) == ({"code": 500}, True)


@given(
    st.recursive(
        st.none() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)
    )
)
def test_decode_agrees_with_json_on_ordinary_values(value: object) -> None:
    raw = json.dumps(value).encode()
    assert decode_json(raw) == (json.loads(raw), True)


def _loads_or_not_json(raw: bytes) -> tuple[object, bool]:
    try:
        value = json.loads(raw, parse_constant=lambda name: json.loads("x"))
    except (ValueError, RecursionError):
        return None, False
    return value, True


@given(
    st.dictionaries(st.text(max_size=5), st.none() | st.integers() | st.text(max_size=5)),
    st.sampled_from(["", " ", "\n\t ", "x", "{}", ",", "]", "\x00", '"']),
    st.sampled_from(["utf-8", "utf-16-le", "utf-16", "utf-32-le", "utf-8-sig"]),
)
def test_an_object_body_is_read_as_json_reads_it_whatever_follows(
    value: dict[str, object], tail: str, encoding: str
) -> None:
    # An object body takes a shorter path: what follows the object and the encoding must
    # still be read as ``json.loads`` reads them (trailing data is not JSON).
    raw = (json.dumps(value) + tail).encode(encoding, "surrogatepass")
    assert decode_json(raw) == _loads_or_not_json(raw)


@pytest.mark.parametrize(
    "raw",
    [b'{"a":NaN}', b'{"a":-Infinity}', b'{"a":1', b"{", b'{"a":"\xff"}', b'{"\\ud800":1}',
     b'{"a":1}{"b":2}', b'{"a":' + b"9" * 5000 + b"}", b'{"a":"\x01"}'],
)  # fmt: skip
def test_an_object_body_refused_by_json_is_refused(raw: bytes) -> None:
    assert decode_json(raw) == _loads_or_not_json(raw)


@pytest.mark.parametrize(
    "form",
    [
        KEY,
        f"Bearer {KEY}",
        "%2F".join(KEY.split("/")).replace("+", "%2B").replace("=", "%3d"),
        KEY.replace("/", "\\/"),
        "".join(f"\\u{ord(c):04X}" for c in KEY),
        "".join(f"&#x{ord(c):x};" for c in KEY),
        KEY[:10] + "\r\n\t  " + KEY[10:],
        KEY[:10] + "\\n" + KEY[10:],
    ],
)
def test_every_form_of_the_key_is_redacted(form: str) -> None:
    text = redact_text(f"before {form} after")
    assert text.startswith("before ")
    assert text.endswith(" after")
    assert "UNIT" not in text
    assert "9876543210" not in text
    assert REDACTED in text


def test_short_values_and_plain_text_are_left_alone() -> None:
    assert redact_text("a short message") == "a short message"
    assert redact_text("") == ""


def test_a_cut_never_shows_part_of_the_key() -> None:
    for pad in range(180, 205):
        text = "x" * pad + KEY
        for cut in (clip(text, 200), excerpt(text.encode(), 200)):
            assert "UNIT" not in cut, (pad, cut)
            assert "vg-redact" not in cut, (pad, cut)
            assert len(cut) <= 203


def test_redact_value_copies_only_when_needed_and_survives_depth() -> None:
    clean = {"a": [1, "b", {"c": None}]}
    assert redact_value(clean) is clean
    deep: object = KEY
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    redacted = redact_value({KEY: deep})
    inner = redacted[REDACTED]
    while isinstance(inner, list):
        inner = inner[0]
    assert inner == REDACTED


def test_short_repr_is_bounded_and_never_recurses() -> None:
    deep: object = 1
    for _ in range(sys.getrecursionlimit() * 2):
        deep = {"k": deep}
    text = short_repr(deep, 100)
    assert len(text) <= 103
    assert short_repr({"a": [1, "x", None, True]}) == "{'a': [1, 'x', None, True]}"
    assert short_repr(["y" * 10_000, KEY]).endswith("...")
    assert "UNIT" not in short_repr([KEY])


def test_scrub_exception_redacts_a_chain_in_place() -> None:
    cause = ValueError(f"bad header {KEY}")
    outer = RuntimeError("wrapper")
    outer.__cause__ = cause
    cause.detail = f"Bearer {KEY}"  # type: ignore[attr-defined]
    scrub_exception(outer)
    assert "UNIT" not in str(cause)
    assert "UNIT" not in cause.detail  # type: ignore[attr-defined]


def test_errors_redact_their_text_attributes_and_repr() -> None:
    error = APIStatusError(
        f"echo {KEY}",
        status_code=500,
        trace_id=KEY,
        body={"message": KEY},
        headers={"X-Echo": f"Bearer {KEY}"},
    )
    for text in (str(error), repr(error), repr(error.args), repr(vars(error))):
        assert "UNIT" not in text
    assert "UNIT" not in str(VideoGenError(KEY))


def test_decode_bounds_and_redacts_a_server_message() -> None:
    raw = json.dumps({"code": 500, "message": "m" * 5_000 + KEY, "trace_id": {"x": 1}}).encode()
    with pytest.raises(APIStatusError) as info:
        _decode(500, raw, {}, method="POST", path="/v1/tasks")
    assert len(info.value.message) < 1_100
    assert info.value.trace_id is None  # an object is not a trace id
    assert info.value.request_may_have_taken_effect


def test_a_deep_body_is_named_as_such_and_a_create_may_have_taken_effect() -> None:
    with pytest.raises(APIResponseError) as info:
        _decode(200, b"[" * 100_000, {}, method="POST", path="/v1/tasks")
    assert "nested too deeply" in str(info.value)
    assert info.value.request_may_have_taken_effect
    assert "may have taken effect" in str(info.value)


def test_redacting_a_huge_body_is_bounded() -> None:
    near_miss = (KEY[:-1] + "!") * 200_000  # about 7 MB that the search must try everywhere
    body = {"message": near_miss, "data": [near_miss, {"k": "v"}], "tail": KEY}
    redacted = redact_value(body)
    assert redacted["message"] == REDACTED  # beyond the search budget: not kept
    assert "UNIT" not in repr(redacted)
    assert list(redact_value({"small": "clean"}, max_chars=3).values()) == [REDACTED]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/videos", "postgresql://app:***@db:5432/videos"),
        ("postgresql://app@db/videos?password=s3cret", "postgresql://app@db/videos?password=***"),
        (
            "postgresql://app:a@db/v?sslmode=require&PASSWORD=b&x=1",
            "postgresql://app:***@db/v?sslmode=require&PASSWORD=***&x=1",
        ),
        ("postgresql:///videos?host=/run/postgresql", "postgresql:///videos?host=/run/postgresql"),
        ("/var/lib/videos.db", "/var/lib/videos.db"),
    ],
)
def test_a_database_url_is_shown_without_its_password(url: str, shown: str) -> None:
    # libpq and asyncpg take the password in the user part or as a parameter: neither shows.
    assert redact_url(url) == shown
