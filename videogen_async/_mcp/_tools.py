"""The tools of ``videogen mcp``, every create through the ledger (see ``docs/agents.md``).

Built with ``MCPServer``'s own means only: tools from functions (their input schema from the
signature, their ``outputSchema`` from the return annotation), ``ToolAnnotations``, and the
user's consent asked through a ``Resolve`` dependency that returns ``Elicit``, which the
package carries over either generation of the protocol (a request to the client mid-call, or
an input-required answer the client calls again with).

The create tools publish the statement's request bodies as their input schema: each field of
the statement becomes a keyword parameter whose JSON schema is the statement's, and the
arguments are checked by the SDK's own rules, before anything is written or sent.

Every call answers within ``max_wait`` seconds (hosts end a call after 60 s by default):
a wait answers the entry as it stands, a create whose answer is late goes on in the server's
task group (a cancelled create would be ``unknown``) and answers the entry as it stands.
"""

import functools
import math
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated, Any, Literal

import anyio
import anyio.abc
import attrs
from mcp.server.mcpserver import (
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from mcp.types import CallToolResult
from pydantic import BaseModel, Field, WithJsonSchema

from .. import AsyncVideoGen, Ledger, LedgerEntry
from .._contract import _exceptions as err
from .._contract._checks import check_key
from .._contract._redact import redact_value
from .._contract._service import REFERENCE_PRICES, TASK_REQUEST
from .._contract._validation import check_id, validate_project_request, validate_task_request
from .._ledger._entry import STATES
from ._answers import (
    GO,
    KEY_SCHEMA,
    MAX_LIST,
    MAX_WAIT,
    METADATA_SCHEMA,
    NO_CONSENT,
    PROJECT_FIELDS,
    REFUSALS,
    TASK_ID_SCHEMA,
    TOOLS,
    VIDEO_FIELDS,
    Balance,
    Consent,
    Entry,
    Estimate,
    Listing,
    answer,
    consented,
    entry_data,
    given,
    refusal,
    task_data,
    with_fields,
)


def bounded(tool: Callable[..., Awaitable[BaseModel]]) -> Callable[..., Any]:
    """A tool's method answered within the bound, a refusal as a structured tool error.

    ``MCPServer`` reads the method's own signature (its input and output schemas).
    """

    @functools.wraps(tool)
    async def answered(self: "VideoTools", *args: Any, **kwargs: Any) -> CallToolResult:
        return await self._answer(tool(self, *args, **kwargs), kwargs.get("key"))

    return answered


@attrs.define
class VideoTools:
    """The seven tools over one ledger and one client (see ``docs/agents.md``).

    Args:
        ledger: The ledger every create goes through.
        client: The client that sends.
        group: The server's task group, where a create whose answer is late goes on.
        max_wait: The longest a call waits for the service (seconds).
        confirm_above: Ask the user before a create that costs more (``None``: never ask).
    """

    ledger: Ledger
    client: AsyncVideoGen
    group: anyio.abc.TaskGroup
    max_wait: float = MAX_WAIT
    confirm_above: float | None = 0.0

    def register(self, server: MCPServer[Any]) -> None:
        """Add the tools to ``server``."""
        built = {
            "create_video": self._create(
                VIDEO_FIELDS, partial(self.ledger.create_task, self.client)
            ),
            "create_ad_clone_project": self._create(PROJECT_FIELDS, self._project),
            "estimate_cost": with_fields(self.estimate_cost, VIDEO_FIELDS, "model", "duration"),
        }
        for name, (title, hints, text) in TOOLS.items():
            fn = built.get(name) or getattr(self, name)
            server.add_tool(fn, name, title, text, annotations=hints, structured_output=True)

    async def _answer(self, work: Awaitable[BaseModel], key: Any = None) -> CallToolResult:
        """Run a tool's work within the bound: a refusal, or the entry of ``key`` as it stands."""
        try:
            with anyio.move_on_after(self.max_wait + 0.5):
                return answer(await work)
            late = TimeoutError(f"no answer from the service within {self.max_wait:g} s")
            return answer(entry_data(await self._entry(key)) if key else refusal(late))
        except REFUSALS as exc:
            return answer(refusal(exc))

    # -- the creates -----------------------------------------------------------------------

    def _create(
        self,
        schema: dict[str, Any],
        create: Callable[..., Awaitable[LedgerEntry]],
    ) -> Callable[..., Any]:
        """A create tool of the fields of ``schema``: consent asked, then ``create``."""

        async def consent(ctx: Context[Any, Any], **fields: Any) -> Elicit[Consent] | str:
            return await self._ask(ctx, fields)

        asked = Annotated[ElicitationResult[Consent], Resolve(with_fields(consent, schema))]

        async def create_tool(consent: asked, **fields: Any) -> Entry:
            work = self._detached(consent, lambda: create(**given(fields)))
            return await self._answer(work, fields["key"])  # type: ignore[return-value]

        return with_fields(create_tool, schema)

    async def _detached(self, consent: Any, create: Callable[[], Awaitable[LedgerEntry]]) -> Entry:
        """Run a consented create in the server's task group, and wait for its answer.

        The create is never cancelled (a cancelled create would be ``unknown``): a call that
        stops waiting leaves it running, and the ledger records its answer.
        """
        consented(consent)
        outcome: list[Any] = []
        done = anyio.Event()

        async def run() -> None:
            try:
                outcome.append(await create())
            except Exception as exc:  # handed to the waiting call
                outcome.append(exc)
            done.set()

        self.group.start_soon(run)
        await done.wait()
        if isinstance(outcome[0], Exception):
            raise outcome[0]
        return entry_data(outcome[0])

    async def _project(
        self, reference_video_url: str, product_image_urls: list[str], **fields: Any
    ) -> LedgerEntry:
        return await self.ledger.create_project(
            self.client, reference_video_url, product_image_urls, **fields
        )

    async def _learned(self, model: str, duration: int) -> float | None:
        """The highest price this ledger was charged for a task of this model and duration."""
        costs = [
            entry.credits_cost
            async for entry in self.ledger.entries()
            if entry.kind == "task"
            and entry.credits_cost
            and (entry.model, entry.duration) == (model, duration)
        ]
        return max(costs, default=None)

    async def _ask(self, ctx: Context[Any, Any], fields: dict[str, Any]) -> Elicit[Consent] | str:
        """Whom to ask before a create of ``fields``: nobody (``GO``), the user, or a refusal.

        Nobody when the operator allowed it (``--confirm-above``), when the key is created
        already (it never pays twice), or when the create breaks a rule (it is refused, naming
        the rule); without a way to ask the user, the operator's cap is the consent, and
        without a cap the create is refused.
        """
        try:
            cost = await self._estimate(fields)
            old = await self.ledger.get(fields["key"])
        except err.InvalidRequestError:
            return GO
        line = math.inf if self.confirm_above is None else self.confirm_above
        if (cost.credits or 0.0) <= line or (old is not None and old.state != "refused"):
            return GO  # a refused key is sent again: asked again
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return GO if self.ledger.max_credits is not None else NO_CONSENT
        shown = {**given(fields, "metadata"), **cost.model_dump(exclude_none=True)}
        text = "\n".join(f"{name}: {value}" for name, value in shown.items())
        return Elicit(f"Spend credits on this create?\n{text}", Consent)

    # -- the reads -------------------------------------------------------------------------

    async def _entry(self, key: Any) -> LedgerEntry:
        entry = await self.ledger.get(check_key(key))
        if entry is None:
            rule = "unknown: no video of this key in the ledger (list_videos shows the keys)"
            raise err.InvalidRequestError("key", rule, value=key, has_value=True)
        return entry

    @bounded
    async def get_video(
        self,
        key: Annotated[str | None, WithJsonSchema(KEY_SCHEMA)] = None,
        task_id: Annotated[str | None, WithJsonSchema(TASK_ID_SCHEMA)] = None,
    ) -> Entry:
        if (key is None) == (task_id is None):
            raise err.InvalidRequestError("key", "give either key or task_id")
        if key is not None:
            return entry_data(await self._entry(key))
        task_id = check_id("task_id", task_id)
        async for entry in self.ledger.entries():  # created here: the ledger's, never a request
            if entry.task_id == task_id:
                return entry_data(entry)
        task = await self.client.tasks.get(task_id)  # not created here: one free read
        return Entry(**redact_value(task_data(task)))

    @bounded
    async def wait_for_video(
        self,
        ctx: Context[Any, Any],
        key: Annotated[str, WithJsonSchema(KEY_SCHEMA)],
        timeout: float | None = None,  # noqa: ASYNC109 - the tool's argument, within max_wait
    ) -> Entry:
        # The ledger's own wait (its rule of what never finishes), the entry as it stands at
        # the bound; progress notifications meanwhile.
        entry = await self._entry(key)
        async with anyio.create_task_group() as group:
            group.start_soon(self._progress, ctx, entry)
            try:
                entry = await self.ledger.wait(key, timeout=min(timeout or math.inf, self.max_wait))
            except err.WaitTimeoutError as exc:
                entry = exc.last or entry
            group.cancel_scope.cancel()
        data = entry_data(entry)
        if entry.is_terminal:
            await ctx.report_progress(entry.version, None, entry.state)
        else:
            data.next_step = "Not finished: call wait_for_video again."
        return data

    async def _progress(self, ctx: Context[Any, Any], entry: LedgerEntry) -> None:
        """A progress notification now and at each change of the entry, while a wait lasts.

        Not the terminal one: the wait sends it, so that it is the last (a progress value
        grows with each notification: the entry's version).
        """
        async with self.ledger.changes(keys=[entry.key]) as changes:
            while not entry.is_terminal:
                await ctx.report_progress(entry.version, None, entry.state)
                entry = await anext(changes)

    @bounded
    async def credits_balance(self) -> Balance:
        balance, summary = await self.client.credits.get(), await self.ledger.summary()
        cap, spent, reserved = self.ledger.max_credits, summary["spent"], summary["reserved"]
        return Balance(
            available=balance.api_available_credits,
            total=balance.api_total_credits,
            max_credits=cap,
            spent=spent,
            reserved=reserved,
            left=None if cap is None else max(0.0, cap - spent - reserved),
        )

    @bounded
    async def list_videos(
        self,
        state: Literal[STATES] | None = None,  # type: ignore[valid-type]
        metadata: Annotated[dict[str, Any] | None, WithJsonSchema(METADATA_SCHEMA)] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIST)] = 20,
    ) -> Listing:
        found = [
            entry
            async for entry in self.ledger.entries(metadata=metadata)
            if state is None or entry.state == state
        ]
        found.sort(key=lambda e: e.created_at.timestamp() if e.created_at else -math.inf)
        newest = [entry_data(e) for e in found[::-1][:limit]]
        return Listing(entries=newest, more=len(found) > limit)

    async def estimate_cost(self, **fields: Any) -> Estimate:
        return await self._answer(self._estimate(fields))  # type: ignore[return-value]

    async def _estimate(self, fields: dict[str, Any]) -> Estimate:
        """The cost of a create of ``fields`` (checked; an estimate needs no prompt)."""
        if "reference_video_url" in fields:  # a project: its script at once
            validate_project_request(given(fields, "key", "metadata"))
            return Estimate(credits=REFERENCE_PRICES.script_credits)
        body = validate_task_request({"prompt": "-", **given(fields, "key", "metadata")})
        model = body.get("model") or _DEFAULT_MODEL
        duration = body.get("duration") or _DEFAULT_DURATION
        statement = REFERENCE_PRICES.task_cost(model, duration)
        learned = await self._learned(model, duration)
        return Estimate(
            model=model,
            duration=duration,
            credits=max(statement, learned or 0.0),
            statement_credits=statement,
            learned_credits=learned,
        )


_DEFAULT_MODEL = TASK_REQUEST.field("model").default
_DEFAULT_DURATION = TASK_REQUEST.field("duration").default
