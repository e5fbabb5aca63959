"""``videogen batch FILE.jsonl``: create, wait for and download many tasks, resumably.

The input has one direct-task request per line, a JSON object with the fields of
``client.tasks.create`` (``prompt`` required; ``model``, ``function_mode``, ``ratio``,
``duration``, ``image_urls``, ``audio_urls``, ``video_urls``). Blank lines and lines starting
with ``#`` are ignored. Every line is checked on the client first: a bad line is reported with
its number and skipped, and costs nothing.

The run has three phases: create (at most ``--max-concurrency`` creates in flight), wait,
download (``--download DIR``). The lines live in a ledger (``--journal URL``, see
:mod:`._batch_store`): each line has a key, created once by whichever process gets to it
first, so a rerun with the same journal picks up exactly where the last run stopped (created
lines are waited for, not created again; finished lines are reported from the ledger) and
several processes on one PostgreSQL URL share the lines. Lines whose create may or may not
have taken effect are reported as ``unknown`` and not re-sent without ``--retry-unknown``.

The manifest (JSON lines, one per input line, in input order) is rewritten atomically at the
end of every run, including an interrupted or failed one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from .._contract._exceptions import (
    AmbiguousCreateError,
    APIConnectionError,
    AuthenticationError,
    BadRequestError,
    BudgetExceededError,
    LedgerError,
    PermissionDeniedError,
    TaskPollError,
    VideoGenError,
    WaitTimeoutError,
)
from .._contract._models import Task
from ._batch_download import download_all, write_manifest
from ._batch_input import InputLine, default_paths, read_input
from ._batch_report import print_summary, redact_url
from ._batch_store import LineStore, Waiting, line_key, open_store
from ._common import (
    EXIT_API_ERROR,
    EXIT_OK,
    EXIT_SOME_FAILED,
    EXIT_USAGE,
    Context,
    describe_error,
    fmt_credits,
    poll_failure,
    unwrap_group,
)
from ._journal import ATTEMPTED, CREATED, DONE, REFUSED, UNKNOWN, JournalEntry, JournalError
from ._spending import USUAL_BATCH, check_spend, task_estimate

if TYPE_CHECKING:
    from .._client import AsyncVideoGen

__all__ = ["InputLine", "cmd_batch", "default_paths", "read_input"]

#: Creates in a row whose outcome is unknown after which the batch stops creating.
MAX_UNKNOWN_IN_A_ROW = 3

#: Manifest statuses besides the task statuses (succeeded, failed, error).
INVALID = "invalid"
NOT_CREATED = "not_created"
PENDING = "pending"
POLL_ERROR = "poll_error"


class BatchRun:
    """One run of a batch against one journal."""

    def __init__(
        self,
        ctx: Context,
        client: AsyncVideoGen,
        store: LineStore,
        lines: list[InputLine],
        *,
        manifest: Path,
        name: str,
    ) -> None:
        args = ctx.args
        self.ctx = ctx
        self.ui = ctx.ui
        self.client = client
        self.store = store
        self.lines = lines
        self.keys = {
            line.line_no: line_key(name, line.line_no, line.request, line.key, str(client.base_url))
            for line in lines
            if line.request is not None
        }
        self.by_no = {line.line_no: line for line in lines}
        self.manifest = manifest
        self.max_concurrency: int = args.max_concurrency
        self.timeout: float | None = args.timeout
        self.retry_unknown: bool = args.retry_unknown
        self.download_dir: Path | None = Path(args.download) if args.download else None
        self.records: dict[int, dict[str, Any]] = {}
        self.fatal: VideoGenError | None = None
        self.stop_creating = False
        self.unknown_in_a_row = 0
        self.download_failures = 0
        self.entries: dict[int, Any] = {}
        self.max_credits: float | None = getattr(args, "max_credits", None)
        self.charged = 0.0  # credits charged by the creates of this run
        self.reserved = 0.0  # estimates of the creates in flight
        self.over_budget = False

    # -- records ----------------------------------------------------------------------------

    def _record(self, line: InputLine, **fields: Any) -> dict[str, Any]:
        record = self.records.get(line.line_no)
        if record is None:
            record = {
                "line": line.line_no,
                "input": line.raw,
                "task_id": None,
                "status": NOT_CREATED,
                "video_url": None,
                "error": None,
                "credits": None,
                "path": None,
            }
            self.records[line.line_no] = record
        record.update(fields)
        return record

    def _record_entry(self, line: InputLine, entry: JournalEntry, **fields: Any) -> None:
        """Record what the journal or the ledger knows of a line, and ``fields``."""
        self._record(
            line,
            task_id=entry.task_id,
            credits=entry.credits,
            video_url=entry.video_url,
            error=entry.error,
            **fields,
        )

    # -- loading ----------------------------------------------------------------------------

    async def load(self) -> None:
        """Read the journal and match it to the input.

        Raises:
            JournalError: A journal of the earlier format does not belong to this input.
        """
        self.entries = await self.store.load(
            {no: (key, self.by_no[no].request or {}) for no, key in self.keys.items()}
        )
        for line in self.lines:
            if line.problem is not None:
                self._record(line, status=INVALID, error=line.problem)
                continue
            known = self.entries.get(line.line_no)
            if known is None:
                self._record(line)
                continue
            self._record_entry(
                line,
                known,
                path=known.path,
                status={
                    ATTEMPTED: UNKNOWN,
                    UNKNOWN: UNKNOWN,
                    REFUSED: REFUSED,
                    CREATED: PENDING,
                    DONE: known.status,
                }.get(known.state, known.state),
            )
            if known.state == ATTEMPTED:
                self.records[line.line_no]["error"] = (
                    "the previous run stopped after sending this create and before recording"
                    " its answer: the task may exist"
                )

    # -- phases -----------------------------------------------------------------------------

    async def execute(self) -> None:
        """Create, wait, download."""
        invalid = [line for line in self.lines if line.problem is not None]
        for line in invalid:
            self.ui.warn(f"line {line.line_no}: skipped, {line.problem}")
        todo: list[InputLine] = []
        self.resend: set[int] = set()
        for line in self.lines:
            if line.request is None:
                continue
            entry = self.entries.get(line.line_no)
            if entry is None or entry.state == REFUSED:
                todo.append(line)
            elif entry.state in (ATTEMPTED, UNKNOWN):
                if self.retry_unknown:
                    self.ui.warn(
                        f"line {line.line_no}: sending again although the earlier create may"
                        " have taken effect (--retry-unknown)"
                    )
                    todo.append(line)
                    if entry.state == UNKNOWN:
                        self.resend.add(line.line_no)
                else:
                    self.ui.warn(
                        f"line {line.line_no}: unknown outcome of an earlier create; not sent"
                        " again (pass --retry-unknown to send it anyway)"
                    )
        resumed = sum(1 for e in self.entries.values() if e.state in (CREATED, DONE))
        if resumed:
            self.ui.note(f"resuming: {resumed} line(s) already created, not created again")
        await self._create_all(todo)
        if self.fatal is not None and isinstance(
            self.fatal, (APIConnectionError, AuthenticationError, PermissionDeniedError)
        ):
            return
        await self._wait_all()
        if self.download_dir is not None:
            await self._download_all(self.download_dir)

    async def _create_all(self, todo: list[InputLine]) -> None:
        if not todo:
            return
        pending = iter(todo)
        created = failed = 0
        with self.ui.progress("creating", len(todo)) as bar:

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
                for _ in range(min(self.max_concurrency, len(todo))):
                    tg.start_soon(worker)

    async def _create_one(self, line: InputLine) -> bool:
        """Create one line's task; the journal knows the outcome before this returns.

        The whole step is shielded from Ctrl-C: once "attempted" is committed and the request
        sent, the answer is awaited and recorded, so a clean stop never leaves a line
        ``unknown``. (A second Ctrl-C, or a crash, can; that is what ``unknown`` is for.)
        """
        request = line.request
        if request is None:  # pragma: no cover - filtered before
            return False
        if self.max_credits is not None and not self.store.enforces_cap:
            cost = task_estimate(request)
            if self.charged + self.reserved + cost > self.max_credits:
                if not self.stop_creating:
                    self.ui.error(
                        f"line {line.line_no} would take the batch past --max-credits"
                        f" {fmt_credits(self.max_credits)} ({fmt_credits(self.charged)} charged"
                        f" so far, about {fmt_credits(cost)} more): creating no more tasks"
                    )
                self.stop_creating = True
                self.over_budget = True
                return False
            self.reserved += cost
        else:
            cost = 0.0
        try:
            return await self._send_create(line, request)
        finally:
            self.reserved -= cost

    async def _send_create(self, line: InputLine, request: dict[str, Any]) -> bool:
        resend = line.line_no in self.resend
        with anyio.CancelScope(shield=True):
            try:
                created = await self.store.create(
                    self.client, line.line_no, self.keys[line.line_no], request, resend
                )
            except BudgetExceededError as exc:
                if not self.stop_creating:
                    self.ui.error(
                        f"line {line.line_no} would take the ledger past --max-credits"
                        f" {fmt_credits(self.max_credits or 0)} ({fmt_credits(exc.spent)}"
                        f" charged through it, about {fmt_credits(exc.estimate)} more):"
                        " creating no more tasks"
                    )
                self.stop_creating = True
                self.over_budget = True
                return False
            except LedgerError as exc:
                # Created (perhaps) but not recorded: the ledger logged the id; stop here.
                self._record(line, status=UNKNOWN, error=str(exc))
                self.stop_creating = True
                raise
            except VideoGenError as exc:
                await self._create_failed(line, exc)
                return False
        if created.state == DONE:  # finished already (another process of this batch)
            self._record_entry(line, created, status=created.status)
            return True
        self.charged += float(created.credits or 0)
        self.unknown_in_a_row = 0
        self._record(
            line,
            task_id=created.task_id,
            status=PENDING,
            credits=created.credits,
            error=None,
        )
        return True

    async def _create_failed(self, line: InputLine, exc: VideoGenError) -> None:
        unknown = exc.request_may_have_taken_effect or isinstance(exc, AmbiguousCreateError)
        text = describe_error(exc)
        self._record(line, status=UNKNOWN if unknown else REFUSED, error=text)
        self.ui.warn(
            f"line {line.line_no}: "
            + ("create may have taken effect: " if unknown else "create refused: ")
            + text
        )
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
            self.ui.error(f"{why}; creating no more tasks: {describe_error(exc)}")
        self.stop_creating = True
        if self.fatal is None:
            self.fatal = exc

    async def _wait_all(self) -> None:
        waiting = [
            (no, self.keys[no], record["task_id"])
            for no, record in sorted(self.records.items())
            if record["status"] == PENDING and record["task_id"]
        ]
        if not waiting:
            return
        left = await self.store.wait(
            self.ctx,
            self.client,
            Waiting(waiting, self.timeout, max(self.max_concurrency, 8), self._on_waited),
        )
        for no in left:
            self._record(self.by_no[no], status=PENDING, error="still running when --timeout ended")

    async def _on_waited(self, line_no: int, item: Task | TaskPollError) -> None:
        line = self.by_no[line_no]
        if isinstance(item, Task):
            await self.store.finished(line_no, item)
            self._record(
                line,
                status=str(item.status),
                video_url=item.video_url,
                error=item.error_message,
                credits=item.credits_cost,
            )
            return
        if isinstance(item.__cause__, WaitTimeoutError):
            self._record(line, status=PENDING, error="still running when --timeout ended")
        else:
            self._record(line, status=POLL_ERROR, error=poll_failure(item)[1])

    async def _download_all(self, directory: Path) -> None:
        await download_all(self, directory)

    # -- the end ----------------------------------------------------------------------------

    def ordered_records(self) -> list[dict[str, Any]]:
        """Every input line's record, in input order."""
        return [self.records[no] for no in sorted(self.records)]

    async def write_manifest(self) -> None:
        """Write the manifest atomically (temporary file, then rename), off the event loop."""
        await write_manifest(self.manifest, self.ordered_records())

    def counts(self) -> Counter[str]:
        """Lines per manifest status."""
        return Counter(str(r["status"]) for r in self.records.values())

    def exit_code(self) -> int:
        """0 when every line succeeded (and downloaded), 3 after a fatal API error, else 1."""
        if self.fatal is not None:
            return EXIT_API_ERROR
        counts = self.counts()
        if counts.get("succeeded", 0) == len(self.records) and not self.download_failures:
            return EXIT_OK
        return EXIT_SOME_FAILED

    def needs_rerun(self) -> bool:
        """Whether a rerun with the same journal would do more work."""
        statuses = self.counts()
        return any(statuses.get(s) for s in (PENDING, NOT_CREATED, REFUSED, POLL_ERROR)) or bool(
            self.download_failures
        )


async def cmd_batch(ctx: Context) -> int:
    """``videogen batch FILE``: see the module docstring."""
    args = ctx.args
    path = Path(args.file)
    try:
        text = await anyio.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        ctx.ui.error(f"cannot read {path}: {exc}")
        return EXIT_USAGE
    lines = read_input(text)
    if not lines:
        ctx.ui.error(f"{path} holds no request lines")
        return EXIT_USAGE
    if all(line.request is None for line in lines):
        for line in lines:
            ctx.ui.warn(f"line {line.line_no}: {line.problem}")
        ctx.ui.error(f"{path} holds no valid request line: nothing was sent")
        return EXIT_USAGE
    estimate = sum(task_estimate(line.request) for line in lines if line.request is not None)
    await check_spend(
        ctx,
        f"this batch of {len(lines)} line(s)",
        estimate,
        USUAL_BATCH,
        limit_enforced_later=True,
    )
    default_journal, default_manifest = default_paths(path)
    where: str | None = None if args.no_journal else str(args.journal or default_journal)
    manifest = Path(args.manifest) if args.manifest else default_manifest
    client = ctx.make_client()
    try:
        store = await open_store(
            where, base_url=client.base_url, max_credits=getattr(args, "max_credits", None)
        )
    except (JournalError, LedgerError) as exc:
        ctx.ui.error(f"--journal {redact_url(where or '')}: {exc}")
        return EXIT_USAGE
    try:
        async with client:
            run = BatchRun(ctx, client, store, lines, manifest=manifest, name=path.name)
            try:
                await run.load()
            except (JournalError, LedgerError) as exc:
                ctx.ui.error(str(exc))
                return EXIT_USAGE
            failure: BaseException | None = None
            try:
                with ctx.cancellable():
                    await run.execute()
            except Exception as exc:  # reported after the manifest is written
                failure = unwrap_group(exc)
            await run.write_manifest()
            code = run.exit_code()
            if failure is not None:
                code = ctx.fail(failure)
            print_summary(ctx, run, where, code)
            return code
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()
