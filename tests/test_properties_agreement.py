"""Property tests: the client's validation and the sandbox's agree, over real HTTP.

Every creating call (and every id a read puts into a path or a query) is generated field by
field from valid values, boundary values and wrong types, and driven through the SDK to an
in-process sandbox. For each example:

* the client rejected it (``InvalidRequestError``): then **nothing was sent** (the sandbox's
  request log did not grow) and the sandbox, sent the same arguments as raw JSON, rejects them
  too with 400 (the client never rejects what the service accepts);
* the client sent it: then exactly one request reached the sandbox and it was accepted, or
  refused only for a reason of state (404 for an unknown id, 409 for a project media URL
  under ``.invalid``), never with 400: the client never sends what the service would reject.

Any other outcome (a ``TypeError`` from the client, a 400, two requests) fails the property.
Each property runs every suspect value once (hypothesis's explicit examples) and then a bounded
number of random examples (``max_examples``) against one sandbox on a paused clock with an
ample balance.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import videogen_async as vg
from videogen_async import AsyncVideoGen, InvalidRequestError
from videogen_async._contract._validation import validate_task_request, validate_videos_request
from videogen_async.testing import SandboxServer

EXAMPLES = 150
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # One sandbox serves every example of a property: that is the point (its request log is
    # compared before and after each example), not an accident.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

OMIT: Any = None  # an argument left out (the SDK's default; ``None`` counts as omitted)

# --- values -----------------------------------------------------------------------------------
#
# A request is drawn as a valid one (each field omitted or drawn from its valid values,
# boundaries included) in which zero, one or two fields are then replaced by a suspect value:
# the other side of a boundary, an integral or fractional float, a numeric string, a boolean,
# a blank or padded string, a near miss of an enum, a bare URL instead of a list, a wrong type.
# Most suspects are invalid; some are valid in disguise (``4.0``, a padded prompt, a tuple),
# and both sides must say the same of each.

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
wrong_types = st.one_of(
    st.booleans(),
    st.integers(min_value=-5, max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(json_scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), json_scalars, max_size=2),
)
spaces = st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000", max_size=3)
texts = st.one_of(
    st.text(min_size=1, max_size=30),
    st.builds(lambda a, b, c: a + b + c, spaces, st.text(min_size=1, max_size=8), spaces),
).filter(str.strip)
good_urls = st.sampled_from(
    [
        "https://cdn.example.com/a.png",
        "http://media.example.org/clip.mp4?sig=abc#t=1",
        "HTTPS://EXAMPLE.COM/x",
        "https://u:p@h.example:8443/p",
        "https://b\u00fccher.example/a.png",
        "http://[::1]:80/x",
        "https://cdn.invalid/unreachable.png",
    ]
)


BAD_URLS = [
    "",
    "   ",
    "ftp://cdn.example.com/a.png",
    "cdn.example.com/a.png",
    "https://",
    "https:///path",
    "https://cdn.example.com/a b.png",
    "https://cdn.example.com/a.png ",
    "http://[::1/x",
    "mailto:a@example.com",
    "javascript:alert(1)",
]
BLANKS = ["", " ", "\t\n", "\xa0", "\u3000 \x85"]
WRONG_TYPES = [True, 7, 1.5, [], {}, ["x"], {"a": 1}]
OK_URL = "https://cdn.example.com/ok.png"


class Field:
    """How one field of a request is drawn.

    Attributes:
        valid: Its valid values (``OMIT`` among them when it is optional).
        suspects: Boundary values, near misses and wrong types: each is tried once in a valid
            request (hypothesis's explicit examples), and drawn at random too.
    """

    def __init__(self, valid: st.SearchStrategy[Any], suspects: list[Any]) -> None:
        self.valid = valid
        self.suspects = [*suspects, *WRONG_TYPES]
        self.suspect = st.one_of(st.sampled_from(self.suspects), wrong_types)


def choice(values: tuple[str, ...], enum: type[Any]) -> Field:
    """An enum field: omitted, each value or member; near misses."""
    return Field(
        st.one_of(st.just(OMIT), st.sampled_from(values), st.sampled_from(list(enum))),
        [values[0].upper(), f" {values[-1]}", f"{values[0]}\n", "", "auto ", "1:2"],
    )


def integer(low: int, high: int | None) -> Field:
    """An integer field: in range; the bounds and both their neighbours as integers and as
    integral floats, fractional floats, numeric strings, booleans."""
    edges = [low - 1, low, low + 1, 0, -1] + ([high - 1, high, high + 1] if high else [2**63])
    return Field(
        st.one_of(st.just(OMIT), st.integers(low, high if high else 10**6)),
        [*edges, *(float(e) for e in edges), low + 0.5, -0.0, 1e300, str(low), False],
    )


def url_list(most: int, *, least: int = 0) -> Field:
    """A list of URLs: any size within bounds, as a list or a tuple; one too many, one too
    few, a bad URL among good ones, a bare URL instead of a list, a mapping."""
    valid = st.lists(good_urls, min_size=least, max_size=most)
    return Field(
        st.one_of(*([st.just(OMIT)] if not least else []), valid, valid.map(tuple)),
        [
            [OK_URL] * (most + 1),
            [OK_URL] * most,
            [OK_URL] * max(least - 1, 0),
            *([OK_URL, bad] for bad in BAD_URLS),
            [OK_URL, None],
            [OK_URL, 5],
            OK_URL,
            {OK_URL: OK_URL},
        ],
    )


def url(*, optional: bool) -> Field:
    return Field(
        st.one_of(good_urls, *([st.just(OMIT)] if optional else [])),
        [*BAD_URLS, *([] if optional else [None])],
    )


def text(*, required: bool = False) -> Field:
    return Field(
        st.one_of(texts, *([] if required else [st.just(OMIT)])),
        [*BLANKS, "  padded  ", *([None] if required else [])],
    )


def resolution() -> Field:
    numbers = integer(1, None)
    return Field(
        st.one_of(numbers.valid, texts, st.sampled_from(["720", "1080p", "4k"])),
        [v for v in numbers.suspects if not isinstance(v, str)] + BLANKS,
    )


class Request:
    """The fields of one kind of request, and a minimal valid one to put suspects into."""

    def __init__(self, base: dict[str, Any], fields: dict[str, Field]) -> None:
        self.base = base
        self.fields = fields

    def explicit(self) -> list[dict[str, Any]]:
        """The minimal valid request, then each suspect of each field in it, one at a time."""
        return [dict(self.base)] + [
            {**self.base, name: value}
            for name, field in self.fields.items()
            for value in field.suspects
        ]

    def strategy(self) -> st.SearchStrategy[dict[str, Any]]:
        """A valid request in which zero, one or two fields are replaced by suspects."""

        @st.composite
        def draw_one(draw: st.DrawFn) -> dict[str, Any]:
            arguments = {name: draw(f.valid) for name, f in self.fields.items()}
            count = draw(st.integers(0, 2))
            names = draw(st.lists(st.sampled_from(sorted(self.fields)), max_size=count))
            for name in names:
                arguments[name] = draw(self.fields[name].suspect)
            return arguments

        return draw_one()


TASKS = Request(
    {"prompt": "a paper boat on a lake"},
    {
        "prompt": text(required=True),
        "model": choice(vg.Model.values(), vg.Model),
        "function_mode": choice(vg.FunctionMode.values(), vg.FunctionMode),
        "ratio": choice(vg.Ratio.values(), vg.Ratio),
        "duration": integer(4, 15),
        "image_urls": url_list(9),
        "audio_urls": url_list(3),
        "video_urls": url_list(3),
    },
)
PROJECTS = Request(
    {"reference_video_url": OK_URL, "product_image_urls": [OK_URL]},
    {
        "reference_video_url": url(optional=False),
        "product_image_urls": url_list(12, least=1),
        "avatar_image_url": url(optional=True),
        "prompt": Field(st.one_of(st.just(OMIT), texts, spaces), [None, ""]),
        "aspect_ratio": choice(vg.AspectRatio.values(), vg.AspectRatio),
        "speech_language_option": choice(vg.SpeechLanguage.values(), vg.SpeechLanguage),
        "duration": integer(1, None),
        "resolution": resolution(),
        "out_number": integer(1, 4),
        "mode": choice(vg.ProjectMode.values(), vg.ProjectMode),
    },
)
VIDEOS = Request(
    {},
    {
        "script": text(),
        "out_number": integer(1, 4),
        "resolution": resolution(),
        "aspect_ratio": choice(vg.AspectRatio.values(), vg.AspectRatio),
    },
)
IDS = st.one_of(
    texts,
    st.sampled_from(["a/b", "..", "%2F", "?x=1", "#", "id with space", "\u00e9", "a\x00b"]),
    spaces,
    wrong_types,
)


# --- the harness ------------------------------------------------------------------------------


class Harness:
    """One sandbox, one client and a raw aiohttp session, shared by every example."""

    def __init__(self, server: SandboxServer, client: AsyncVideoGen, raw: aiohttp.ClientSession):
        self.server = server
        self.client = client
        self.raw = raw
        self.sent = 0
        self.rejected = 0

    def seen(self) -> int:
        return len(self.server.request_log)

    async def raw_status(self, method: str, path: str, body: Any = None, **kwargs: Any) -> int:
        """Send a request as an independent client would, without the SDK; return the status."""
        headers = {"Authorization": f"Bearer {self.server.api_key}"}
        data = None
        if body is not None:
            data = json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        async with self.raw.request(
            method, self.server.url(path), headers=headers, data=data, **kwargs
        ) as response:
            await response.read()
            return response.status

    async def check(
        self,
        call: Callable[[], Awaitable[Any]],
        raw: Callable[[], Awaitable[int]],
        arguments: Any,
        *,
        accepted: tuple[int, ...] = (),
        refused: tuple[int, ...] = (400,),
    ) -> None:
        """Drive one example through the client and check the property for its outcome.

        Args:
            call: The SDK call.
            raw: The same request sent without the SDK; returns the sandbox's status.
            arguments: The example, for the failure message.
            accepted: Error statuses that are a verdict on the *state*, not on the request
                (404 for an unknown id).
            refused: The statuses in which the sandbox refuses what the client refused.
        """
        before = self.seen()
        refusal: InvalidRequestError | None = None
        answer: vg.APIStatusError | None = None
        try:
            await call()
        except InvalidRequestError as exc:
            refusal = exc
        except vg.APIStatusError as exc:
            answer = exc
        if refusal is not None:
            # Nothing was sent...
            assert self.seen() == before, ("the client sent a request it rejected", arguments)
            # ...and the sandbox rejects the same arguments too.
            status = await raw()
            assert status in refused, (
                "the client rejected what the sandbox accepts",
                arguments,
                str(refusal),
                status,
            )
            self.rejected += 1
            return
        if answer is not None:
            assert answer.status_code in accepted, (
                "the client sent what the sandbox rejects",
                arguments,
                str(answer),
            )
        assert self.seen() == before + 1, ("one call, one request", arguments)
        self.sent += 1

    async def run(
        self,
        strategy: st.SearchStrategy[Any],
        example: Callable[[Any], Awaitable[None]],
        explicit: list[Any] = (),  # type: ignore[assignment]
    ) -> None:
        """Run ``example`` for each explicit value, then for generated ones, on this loop.

        Hypothesis drives the examples from a worker thread; each one runs as a coroutine on
        the test's loop (where the client and the sandbox live), and the loop stays free.
        """
        loop = asyncio.get_running_loop()

        def agree(value: Any) -> None:
            asyncio.run_coroutine_threadsafe(example(value), loop).result(timeout=60)

        test = given(strategy)(agree)
        for value in explicit:
            test = hypothesis.example(value)(test)
        test = SETTINGS(test)

        await asyncio.to_thread(test)
        # The generators are useful only if they reach both sides of the rules.
        assert self.sent >= EXAMPLES // 10, (self.sent, self.rejected)
        assert self.rejected >= EXAMPLES // 10, (self.sent, self.rejected)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    async with SandboxServer(manual_clock=True, seed=3, credits=1e15) as server:
        async with (
            server.client(max_retries=0) as client,
            aiohttp.ClientSession() as raw,
        ):
            yield Harness(server, client, raw)


# --- the properties ---------------------------------------------------------------------------


async def test_task_creation_agrees(harness: Harness) -> None:
    async def example(arguments: dict[str, Any]) -> None:
        arguments = dict(arguments)
        prompt = arguments.pop("prompt")
        await harness.check(
            lambda: harness.client.tasks.create(prompt, **arguments),
            lambda: harness.raw_status(
                "POST", "/v1/video/videomodel-2", {"prompt": prompt, **arguments}
            ),
            (prompt, arguments),
        )

    await harness.run(TASKS.strategy(), example, TASKS.explicit())


async def test_project_creation_agrees(harness: Harness) -> None:
    async def example(arguments: dict[str, Any]) -> None:
        arguments = dict(arguments)
        reference = arguments.pop("reference_video_url")
        images = arguments.pop("product_image_urls")
        await harness.check(
            lambda: harness.client.projects.create(reference, images, **arguments),
            lambda: harness.raw_status(
                "POST",
                "/v1/video/viral-ads-clone",
                {"reference_video_url": reference, "product_image_urls": images, **arguments},
            ),
            (reference, images, arguments),
            accepted=(409,),  # a media URL under .invalid cannot be stored: a verdict on media
        )

    await harness.run(PROJECTS.strategy(), example, PROJECTS.explicit())


async def test_video_batch_creation_agrees(harness: Harness) -> None:
    created = await harness.client.projects.create(OK_URL, [OK_URL], mode="manual")
    project_id = created.project_id
    harness.server.schedule_project(project_id, script_ready_in=0)

    async def example(arguments: dict[str, Any]) -> None:
        await harness.check(
            lambda: harness.client.projects.create_videos(project_id, **arguments),
            lambda: harness.raw_status(
                "POST", f"/v1/video/viral-ads-clone/{project_id}/videos", dict(arguments)
            ),
            arguments,
        )

    await harness.run(VIDEOS.strategy(), example, VIDEOS.explicit())


async def test_ids_agree(harness: Harness) -> None:
    """An id the client refuses is refused by the sandbox too; one it sends is looked up."""
    real = await harness.client.tasks.create("a red fox in the snow")

    async def example(task_id: Any) -> None:
        if not isinstance(task_id, str):
            # A query or a path carries text only: the type cannot reach the wire.
            before = harness.seen()
            with pytest.raises(InvalidRequestError):
                await harness.client.tasks.get(task_id)
            with pytest.raises(InvalidRequestError):
                await harness.client.projects.get(task_id)
            assert harness.seen() == before
            harness.rejected += 1
            return
        await harness.check(
            lambda: harness.client.tasks.get(task_id),
            lambda: harness.raw_status("GET", "/v1/tasks", params={"task_id": task_id}),
            task_id,
            accepted=(404,),
        )
        await harness.check(
            lambda: harness.client.projects.get(task_id),
            lambda: harness.raw_status(
                "GET", f"/v1/video/viral-ads-clone/{quote(task_id, safe='')}"
            ),
            task_id,
            accepted=(404,),
            # An empty or dot segment does not even reach the project route (404 there):
            # the path is normalised on the way.
            refused=(400, 404) if task_id in ("", ".", "..") else (400,),
        )

    explicit = [real.task_id, *BLANKS, *WRONG_TYPES, "a/b", "..", "%2F", "?x=1", "#", "\x00"]
    await harness.run(IDS, example, explicit)


# --- what the properties found, pinned -------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "body", "sent"),
    [
        (validate_task_request, {"prompt": "x", "duration": 5.0}, {"prompt": "x", "duration": 5}),
        (validate_videos_request, {"out_number": 2.0, "resolution": 720.0}, None),
    ],
)
def test_an_integral_float_is_taken_and_sent_as_an_integer(
    rule: Callable[[dict[str, Any]], dict[str, Any]], body: dict[str, Any], sent: Any
) -> None:
    """The sandbox (JSON has one number type) takes ``5.0`` for 5: so does the client, which
    sends ``5`` (a service stricter than the sandbox gets an integer)."""
    out = rule(body)
    assert out == (sent or {"out_number": 2, "resolution": 720})
    assert all(type(v) is int for k, v in out.items() if k != "prompt")
    with pytest.raises(InvalidRequestError):
        rule({**body, "prompt": "x", "duration": 4.5} if "prompt" in body else {"out_number": 2.5})


@pytest.mark.parametrize("value", [7, True, 1.5, {OK_URL: OK_URL}, object()])
async def test_a_url_list_of_a_wrong_type_is_an_invalid_request(
    harness: Harness, value: Any
) -> None:
    """Not a ``TypeError`` from ``list(7)``, nor a dict's keys sent as URLs."""
    with pytest.raises(InvalidRequestError, match="image_urls"):
        await harness.client.tasks.create("x", image_urls=value)
    with pytest.raises(InvalidRequestError, match="product_image_urls"):
        await harness.client.projects.create(OK_URL, value)
    assert harness.seen() == 0
