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
from operator import attrgetter
from typing import Annotated, Any, Literal

import anyio
import anyio.abc
import attrs
from mcp.server.mcpserver import (
    AcceptedElicitation,
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
from .._contract._service import REFERENCE_PRICES, TASK_REQUEST
from .._contract._validation import validate_project_request, validate_task_request
from .._ledger._entry import STATES
from .._ledger._plans import learned_price
from ._answers import (
    KEY_SCHEMA,
    MAX_LIST,
    MAX_WAIT,
    METADATA_SCHEMA,
    PROJECT_FIELDS,
    REFUSALS,
    TOOLS,
    VIDEO_FIELDS,
    Balance,
    Consent,
    Declined,
    Entry,
    Estimate,
    Listing,
    NoConsent,
    answer,
    cap,
    entry_data,
    given,
    refusal,
    task_data,
    with_fields,
)

UNREAD = "Not known yet (the ledger did not answer in time): call get_video with this key."
NOT_DONE = "Not finished: call wait_for_video again."


def as_it_stands(entry: LedgerEntry) -> Entry:
    """An entry answered at a bound: not finished, it says what to call next."""
    data = entry_data(entry)
    if not entry.is_terminal:
        data.next_step = NOT_DONE
    return data


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
        group: The server's task group, where every call's work runs (a create whose answer
            is late goes on there).
        max_wait: The longest a call waits for the service (seconds).
        confirm_above: Ask the user before a create that costs more (``math.inf``: never ask).
    """

    ledger: Ledger
    client: AsyncVideoGen
    group: anyio.abc.TaskGroup
    max_wait: float = MAX_WAIT
    confirm_above: float = 0.0

    def register(self, server: MCPServer[Any]) -> None:
        """Add the tools to ``server``."""
        built = {
            "create_video": self._create(VIDEO_FIELDS, self.ledger.create_task),
            "create_ad_clone_project": self._create(PROJECT_FIELDS, self.ledger.create_project),
            "estimate_cost": with_fields(self.estimate_cost, VIDEO_FIELDS, "model", "duration"),
        }
        for name, described in TOOLS.items():  # its title, description and annotations
            server.add_tool(built.get(name) or getattr(self, name), name, *described)

    async def _answer(self, work: Awaitable[BaseModel], key: Any = None) -> CallToolResult:
        """A tool's work, run in the server's task group, answered within the bound.

        The work is never cancelled by the bound (a cancelled create would be ``unknown``):
        a call that stops waiting leaves it running, and the ledger records a create's answer.
        At the bound the call answers the entry of ``key`` as it stands, or a refusal. That
        read of the ledger is bounded too (a ledger that does not answer must not hold the
        call past ``max_wait`` + 1 s, under the host's limit): late, the call answers what it
        knows, the key and that it is not done, with the next step.
        """
        outcome: list[Any] = [TimeoutError("no answer within the bound of the server's calls")]
        done = anyio.Event()
        deadline = anyio.current_time() + self.max_wait + 1

        async def run() -> None:
            try:
                outcome.append(await work)
            except Exception as exc:  # handed to the waiting call
                outcome.append(exc)
            done.set()

        self.group.start_soon(run)
        with anyio.move_on_at(deadline - 0.5):  # the last half second for the ledger's read
            await done.wait()
        try:
            if not done.is_set() and key:
                outcome.append(Entry(key=key, done=False, next_step=UNREAD))
                with anyio.move_on_at(deadline):
                    outcome.append(as_it_stands(await self._entry(key)))
            if isinstance(outcome[-1], Exception):
                raise outcome[-1]
        except REFUSALS as exc:
            return answer(refusal(exc))
        return answer(outcome[-1])

    # -- the creates -----------------------------------------------------------------------

    def _create(
        self, schema: dict[str, Any], create: Callable[..., Awaitable[LedgerEntry]]
    ) -> Callable[..., Any]:
        """A create tool of the fields of ``schema``: consent asked, then ``create``."""
        asked = Annotated[ElicitationResult[Consent], Resolve(with_fields(self._ask, schema))]

        async def create_tool(consent: asked, **fields: Any) -> Entry:
            async def created() -> Entry:
                if not isinstance(consent, AcceptedElicitation):  # declined or cancelled
                    raise Declined(consent.action)
                if isinstance(consent.data, Exception):  # nobody could be asked (see _ask)
                    raise consent.data
                return entry_data(await create(self.client, **given(fields)))

            return await self._answer(created(), fields["key"])  # type: ignore[return-value]

        return with_fields(create_tool, schema)

    async def _ask(
        self, ctx: Context[Any, Any], **fields: Any
    ) -> Elicit[Consent] | NoConsent | None:
        """Whom to ask before a create of ``fields``: nobody (``None``), the user, or a refusal.

        Nobody when the operator allowed it (``--confirm-above``), when the key is created
        already (it never pays twice), or when the create breaks a rule (it is refused, naming
        the rule); without a way to ask the user, the operator's cap is the consent, and
        without a cap the create is refused (a :class:`NoConsent`, the resolver's value).
        """
        try:
            cost = await self._estimate(fields)
            old = await self.ledger.get(fields["key"])
        except err.InvalidRequestError:
            return None
        known = math.inf if cost.credits is None else cost.credits  # no price known: asked
        if known <= self.confirm_above or (old and old.state != "refused"):
            return None  # a refused key is sent again: asked again
        if getattr(ctx.client_capabilities, "elicitation", None) is None:  # it cannot ask
            if self.ledger.max_credits is None:
                return NoConsent("this client cannot ask the user and the server has no cap")
            return None
        shown = {**given(fields, "metadata"), **cost.model_dump(exclude_none=True)}
        return Elicit(
            "Spend credits on this create?\n"
            + "\n".join(f"{name}: {value}" for name, value in shown.items()),
            Consent,
        )

    # -- the reads -------------------------------------------------------------------------

    async def _entry(self, key: Any) -> LedgerEntry:
        entry = await self.ledger.get(key)  # the key checked there
        if entry is None:
            raise err.InvalidRequestError(
                "key",
                "unknown: no video of this key in the ledger (list_videos shows the keys)",
                value=key,
                has_value=True,
            )
        return entry

    @bounded
    async def get_video(
        self,
        key: Annotated[str | None, WithJsonSchema(KEY_SCHEMA)] = None,
        task_id: Annotated[
            str | None,
            Field(min_length=1, description="A task's id, for a video this ledger did not create"),
        ] = None,
    ) -> Entry:
        if (key is None) == (task_id is None):
            raise err.InvalidRequestError("key", "give either key or task_id")
        if key is not None:
            return entry_data(await self._entry(key))
        async for entry in self.ledger.entries():  # created here: the ledger's, never a request
            if entry.task_id == task_id:
                return entry_data(entry)
        # Not created here: one free read (the client checks the id).
        return task_data(await self.client.tasks.get(task_id))  # type: ignore[arg-type]

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
                entry = await self.ledger.wait(
                    key, timeout=min(math.inf if timeout is None else timeout, self.max_wait)
                )
            except err.WaitTimeoutError as exc:
                entry = exc.last or entry
            group.cancel_scope.cancel()
        if entry.is_terminal:
            await ctx.report_progress(entry.version, None, entry.state)
        return as_it_stands(entry)

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
        return Balance(
            available=balance.api_available_credits,
            total=balance.api_total_credits,
            **cap(self.ledger.max_credits, summary["spent"], summary["reserved"]),
        )

    @bounded
    async def list_videos(
        self,
        state: Literal[STATES] | None = None,  # type: ignore[valid-type]
        metadata: Annotated[dict[str, Any] | None, WithJsonSchema(METADATA_SCHEMA)] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIST)] = 20,
    ) -> Listing:
        found = [
            e async for e in self.ledger.entries(metadata=metadata) if state in (None, e.state)
        ]
        found.sort(key=attrgetter("created_at"), reverse=True)  # a stored entry has one
        return Listing(entries=[entry_data(e) for e in found[:limit]], more=len(found) > limit)

    @bounded
    async def estimate_cost(self, **fields: Any) -> Estimate:
        return await self._estimate(fields)

    async def _estimate(self, fields: dict[str, Any]) -> Estimate:
        """The cost of a create of ``fields`` (checked; an estimate needs no prompt)."""
        body = given(fields, "key", "metadata")
        if "reference_video_url" in fields:  # a project: its script, in auto mode its videos
            validate_project_request(body)
            cost = REFERENCE_PRICES.project_cost(body)
            return Estimate(credits=cost, statement_credits=cost)
        body = validate_task_request({"prompt": "-", **body})
        model = body.get("model") or TASK_REQUEST.field("model").default
        duration = body.get("duration") or TASK_REQUEST.field("duration").default
        statement = REFERENCE_PRICES.task_cost(model, duration)
        # What this ledger was charged for the same model and duration: the figure its cap
        # reserves, one row (not a read of every entry).
        learned = await self.ledger.store.read(learned_price, model, duration)
        return Estimate(
            model=model,
            duration=duration,
            credits=max(statement, learned or 0.0),
            statement_credits=statement,
            learned_credits=learned,
        )
