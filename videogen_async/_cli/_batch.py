"""``videogen batch FILE`` (JSON Lines or CSV): create, wait for and download many tasks.

Lines (:mod:`._batch_state`) live in a ledger (:mod:`._batch_store`): a rerun resumes, and
processes on one PostgreSQL URL share them. A line ``creating`` at start is *in doubt* (being
sent elsewhere, or its sender stopped): it takes no create slot and is waited on until the
ledger settles it (Ctrl-C ends that wait). The manifest is written after every run.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import anyio.lowlevel

from .. import AsyncVideoGen
from .._contract._exceptions import (
    AmbiguousCreateError,
    APIConnectionError,
    AuthenticationError,
    BadRequestError,
    BudgetExceededError,
    LedgerError,
    PermissionDeniedError,
    VideoGenError,
)
from .._contract._redact import redact_url
from .._ledger import Ledger, LedgerEntry
from ._batch_report import download_all, print_summary
from ._batch_state import (
    INVALID,
    NOT_CREATED,
    PENDING,
    REFUSED,
    UNKNOWN,
    BatchState,
    InputLine,
    default_paths,
    read_input,
)
from ._batch_store import input_of, line_key, open_ledger, read_entries
from ._common import Context, UsageError, describe_error, fmt_credits, unwrap_group
from ._spending import USUAL_BATCH, check_spend, task_estimate
from ._ui import Progress

#: Creates in a row whose outcome is unknown after which the batch stops creating.
MAX_UNKNOWN_IN_A_ROW = 3

IN_DOUBT = (
    "in doubt: another process is creating this line, or stopped while creating it; the"
    " ledger has not settled it yet (a rerun looks again)"
)


class BatchRun:
    """One run of a batch against one ledger."""

    def __init__(
        self,
        ctx: Context,
        client: AsyncVideoGen,
        ledger: Ledger,
        lines: list[InputLine],
        state: BatchState,
        keys: dict[int, str],
    ) -> None:
        self.ctx = ctx
        #: The options: --max-concurrency, --retry-unknown, --timeout, --download.
        self.args = ctx.args
        self.ui = ctx.ui
        self.client = client
        self.ledger = ledger
        self.lines = lines
        self.state = state
        self.keys = keys
        self.by_no = {line.line_no: line for line in lines}
        self.stop_creating = False
        self.unknown_in_a_row = 0
        self.resend: set[int] = set()
        # The wait (see _wait_all): each awaited line's number by key, the keys not settled.
        self.line_of: dict[str, int] = {}
        self.remaining: set[str] = set()
        self.finished = 0
        self.bar: Progress

    # -- what the ledger says of a line ----------------------------------------------------

    def _take(self, line: InputLine, entry: LedgerEntry) -> None:
        """Record a line as its ledger entry has it."""
        if entry.state == "creating":
            self.state.in_doubt.add(line.line_no)
            self.state.record(line, status=UNKNOWN, error=IN_DOUBT)
            return
        self.state.in_doubt.discard(line.line_no)
        task = entry.task
        self.state.record(
            line,
            status=entry.state,  # the manifest's statuses are the ledger's states
            task_id=entry.task_id,
            credits=entry.credits_cost,
            video_url=entry.video_url,
            error=(task.error_message if task is not None else None) or entry.error,
        )

    async def load(self) -> None:
        """Match the input to what the ledger holds."""
        entries = await read_entries(self.ledger, list(self.keys.values()))
        for line in self.lines:
            if line.problem is not None:
                self.state.record(line, status=INVALID, error=line.problem)
                continue
            entry = entries.get(self.keys[line.line_no])
            if entry is None:
                self.state.record(line)
            else:
                self._take(line, entry)

    # -- phases -----------------------------------------------------------------------------

    def _todo(self) -> list[InputLine]:
        """The lines to send: never created, refused, or unknown with ``--retry-unknown``."""
        todo = []
        for no, record in sorted(self.state.records.items()):
            if record["status"] in (NOT_CREATED, REFUSED):
                todo.append(self.by_no[no])
            elif record["status"] != UNKNOWN or no in self.state.in_doubt:
                continue
            elif self.args.retry_unknown:
                self.ui.warn(
                    f"line {no}: sending again although the earlier create may have taken"
                    " effect (--retry-unknown)"
                )
                todo.append(self.by_no[no])
                self.resend.add(no)
            else:
                self.ui.warn(
                    f"line {no}: unknown outcome of an earlier create; not sent again"
                    " (pass --retry-unknown to send it anyway)"
                )
        return todo

    async def execute(self) -> None:
        """Create, wait, download."""
        for line in self.lines:
            if line.problem is not None:
                self.ui.warn(f"line {line.line_no}: skipped, {line.problem}")
        todo = self._todo()
        resumed = self.state.created()  # nothing is created yet by this run
        if resumed:
            self.ui.note(
                f"resuming: {resumed} line(s) already created by an earlier run"
                f" ({fmt_credits(self.state.credits())} credits charged then), not created again"
            )
        if self.state.in_doubt:
            self.ui.note(
                f"{len(self.state.in_doubt)} line(s) in doubt: another process is creating"
                " them, or stopped while creating them; they are not sent again, and are"
                " waited for until the ledger settles them"
            )
        await self._create_all(todo)
        if isinstance(
            self.state.fatal, (APIConnectionError, AuthenticationError, PermissionDeniedError)
        ):
            return
        await self._wait_all()
        if self.args.download:
            await download_all(
                self.ctx,
                self.client,
                self.state,
                Path(self.args.download),
                self.args.max_concurrency,
            )

    async def _create_all(self, todo: list[InputLine]) -> None:
        if not todo:
            return
        pending = iter(todo)
        created = failed = 0
        with self.ui.progress("creating", len(todo), "0 created") as bar:

            async def worker() -> None:
                nonlocal created, failed
                for line in pending:
                    if self.stop_creating:
                        return
                    await anyio.lowlevel.checkpoint()  # Ctrl-C stops here, between lines
                    if await self._create_one(line):
                        created += 1
                    else:
                        failed += 1
                    bar.advance(detail=f"{created} created, {failed} not created")

            async with anyio.create_task_group() as tg:
                for _ in range(min(self.args.max_concurrency, len(todo))):
                    tg.start_soon(worker)

    async def _send(self, line: InputLine) -> LedgerEntry:
        key = self.keys[line.line_no]
        if line.line_no in self.resend:
            return await self.ledger.resend(self.client, key)
        # A checked request: its prompt (a field like the others) and the task's fields.
        return await self.ledger.create_task(self.client, key=key, **(line.request or {}))

    async def _create_one(self, line: InputLine) -> bool:
        """Create one line's task; the ledger knows the outcome before this returns.

        Shielded from Ctrl-C: once the entry is written and the request sent, the answer is
        awaited and recorded, so a clean stop never leaves a line ``unknown``.
        """
        with anyio.CancelScope(shield=True):
            try:
                entry = await self._send(line)
            except BudgetExceededError as exc:
                if not self.stop_creating:
                    self.ui.error(
                        f"line {line.line_no} would take the ledger past --max-credits"
                        f" {fmt_credits(exc.max_credits)} ({fmt_credits(exc.spent)} charged"
                        f" through it, about {fmt_credits(exc.estimate)} more): creating no"
                        " more tasks"
                    )
                self.stop_creating = True
                return False
            except LedgerError as exc:
                # Created (perhaps) but not recorded: the ledger logged the id; stop here. An
                # id it answered is the line's, charged by this run (the manifest keeps it).
                self.state.record(
                    line,
                    status=UNKNOWN if exc.created is None else PENDING,
                    error=str(exc),
                    task_id=exc.created,
                    credits=exc.credits_cost,
                )
                if exc.created is not None:
                    self.state.created_now.add(line.line_no)
                self.stop_creating = True
                raise
            except VideoGenError as exc:
                self._create_failed(line, exc)
                return False
        self.unknown_in_a_row = 0
        self.state.created_now.add(line.line_no)
        self._take(line, entry)
        return True

    def _failed(self, line: InputLine, exc: VideoGenError) -> tuple[VideoGenError, bool]:
        """Record a create that failed; the error to report and whether it may have taken effect."""
        if isinstance(exc, AmbiguousCreateError) and isinstance(exc.__cause__, VideoGenError):
            exc = exc.__cause__
        unknown = exc.request_may_have_taken_effect or isinstance(exc, AmbiguousCreateError)
        text = describe_error(exc)
        self.state.record(line, status=UNKNOWN if unknown else REFUSED, error=text)
        self.ui.warn(
            f"line {line.line_no}: create {'may have taken effect' if unknown else 'refused'}:"
            f" {text}"
        )
        return exc, unknown

    def _create_failed(self, line: InputLine, exc: VideoGenError) -> None:
        exc, unknown = self._failed(line, exc)
        if unknown:
            self.unknown_in_a_row += 1
            if self.unknown_in_a_row >= MAX_UNKNOWN_IN_A_ROW:
                self._stop(exc, f"{MAX_UNKNOWN_IN_A_ROW} creates in a row had an unknown outcome")
            return
        self.unknown_in_a_row = 0
        if not isinstance(exc, BadRequestError):
            # Not about this line (credits, key, rate limit, no connection): the next lines
            # would fail the same way.
            self._stop(exc, "the service refused to create tasks")

    def _stop(self, exc: VideoGenError, why: str) -> None:
        if not self.stop_creating:
            said = (
                self.ctx.key_refused(exc)
                if isinstance(exc, AuthenticationError)
                else describe_error(exc)
            )
            self.ui.error(f"{why}; creating no more tasks: {said}")
        self.stop_creating = True
        if self.state.fatal is None:
            self.state.fatal = exc

    async def _wait_all(self) -> None:
        """Wait for the created lines and the lines in doubt, with the ledger's watchers."""
        records, in_doubt = self.state.records, self.state.in_doubt
        self.line_of = {
            self.keys[no]: no
            for no, r in records.items()
            if no in in_doubt or (r["status"] == PENDING and r["task_id"])
        }
        self.remaining = set(self.line_of)
        if not self.remaining:
            return
        with self.ui.progress("waiting", len(self.remaining), self._detail()) as self.bar:
            with anyio.move_on_after(self.args.timeout):  # None: no limit
                async with (
                    self.ledger.watch(
                        self.client,
                        max_concurrency=max(self.args.max_concurrency, 8),
                        claim_interval=0.5,
                    ) as finished,
                    anyio.create_task_group() as tg,
                ):
                    for no in sorted(in_doubt):
                        tg.start_soon(self._wait_in_doubt, self.by_no[no])
                    tg.start_soon(self._look, tg.cancel_scope)
                    async for entry in finished:
                        self._settle(entry)
                        if not self.remaining:
                            tg.cancel_scope.cancel()
                            break
        for key in self.remaining:
            no = self.line_of[key]
            if no not in in_doubt:
                self.state.record(
                    self.by_no[no],
                    error=records[no]["error"] or "still running when --timeout ended",
                )

    def _detail(self) -> str:
        in_doubt = len(self.state.in_doubt)
        return f"{self.finished} finished" + (f", {in_doubt} in doubt" if in_doubt else "")

    def _show(self) -> None:
        self.bar.update(len(self.line_of) - len(self.remaining), detail=self._detail())

    def _settle(self, entry: LedgerEntry) -> None:
        """Take what the ledger says of a line being waited for."""
        if entry.key not in self.remaining:
            return
        self._take(self.by_no[self.line_of[entry.key]], entry)
        if entry.state not in ("creating", "pending"):
            self.remaining.discard(entry.key)
            self.finished += entry.is_terminal
        self._show()

    async def _look(self, scope: anyio.CancelScope) -> None:
        """Take the lines settled or finished by other processes (and their watchers)."""
        while self.remaining:
            for entry in (await read_entries(self.ledger, list(self.remaining))).values():
                self._settle(entry)
            if self.remaining:
                await anyio.sleep(1.0)
        scope.cancel()

    async def _wait_in_doubt(self, line: InputLine) -> None:
        # create_task waits for the other creator's answer (nothing is sent for a key in
        # "creating"); unshielded, so Ctrl-C ends the wait at once.
        try:
            self._settle(await self._send(line))
        except VideoGenError as exc:  # another process's create, not one in a row
            self.state.in_doubt.discard(line.line_no)
            self._failed(line, exc)
            self.remaining.discard(self.keys[line.line_no])
            self._show()


async def cmd_batch(ctx: Context) -> int:
    """``videogen batch FILE``: see the module docstring."""
    args = ctx.args
    path = Path(args.file)
    try:
        text = await anyio.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    csv_format = (args.format or path.suffix.lower().lstrip(".")) == "csv"
    lines = read_input(text, csv_format=csv_format)
    if not lines:
        raise UsageError(f"{path} holds no request lines")
    valid = [line for line in lines if line.request is not None]
    if not valid:
        for line in lines:
            ctx.ui.warn(f"line {line.line_no}: {line.problem}")
        hint = "" if csv_format else " (a CSV file with a header row? pass --format csv)"
        raise UsageError(f"{path} holds no valid request line: nothing was sent{hint}")
    await check_spend(
        ctx,
        f"this batch of {len(lines)} line(s)",
        sum(task_estimate(line.request or {}) for line in valid),
        USUAL_BATCH,
        limit_enforced_later=True,
    )
    default_journal, default_manifest = default_paths(path)
    where = None if args.no_journal else str(args.journal or default_journal)

    state = BatchState(Path(args.manifest) if args.manifest else default_manifest)
    client = AsyncVideoGen(**ctx.client_options())
    base_url = str(client.base_url)
    keys = {
        line.line_no: line_key(path.name, line.line_no, line.request or {}, line.key, base_url)
        for line in valid
    }
    async with client, contextlib.AsyncExitStack() as stack:
        try:
            ledger, imported = await stack.enter_async_context(
                open_ledger(
                    where,
                    base_url=base_url,
                    max_credits=args.max_credits,
                    lines={line.line_no: (keys[line.line_no], line.request) for line in valid},
                )
            )
        except (UsageError, LedgerError) as exc:
            raise UsageError(f"--journal {redact_url(where or '')}: {exc}") from None
        if imported:
            ctx.ui.note(f"imported {imported} line(s) of the journal {where} into a ledger")
        owner = None if args.journal or where is None else await input_of(ledger)
        if owner not in (None, path.name):
            raise UsageError(
                f"{where} holds the batch of {owner}, not of {path.name}: nothing was sent."
                " Two inputs share a ledger and a manifest only when you say so: pass"
                f" --journal PATH --manifest PATH to keep {path.name} apart (or --journal"
                f" {where} to share its ledger and its --max-credits on purpose)"
            )
        run = BatchRun(ctx, client, ledger, lines, state, keys)
        await run.load()
        failure: BaseException | None = None
        try:
            with ctx.cancellable():
                await run.execute()
        except Exception as exc:  # reported after the manifest is written
            failure = unwrap_group(exc)
        await state.write_manifest()
        code = state.exit_code() if failure is None else ctx.fail(failure)
        print_summary(ctx, state, where, code)
        return code
