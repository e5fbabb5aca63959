"""``videogen batch FILE.jsonl``: create, wait for and download many tasks, resumably.

The input has one direct-task request per line, a JSON object with the fields of
``client.tasks.create`` (``prompt`` required; ``model``, ``function_mode``, ``ratio``,
``duration``, ``image_urls``, ``audio_urls``, ``video_urls``). Blank lines and lines starting
with ``#`` are ignored. Every line is checked on the client first: a bad line is reported with
its number and skipped, and costs nothing.

The run has three phases: create (at most ``--max-concurrency`` creates in flight), wait
(``gather_until_done``), download (``--download DIR``). Each step of each line is recorded in
the journal (see :mod:`._journal`) before the batch moves on, so a rerun with the same journal
picks up exactly where the last run stopped: created lines are waited for, not created again;
finished lines are reported from the journal; lines whose create may or may not have taken
effect are reported as ``unknown`` and not re-sent without ``--retry-unknown``.

The manifest (JSON lines, one per input line, in input order) is rewritten atomically at the
end of every run, including an interrupted or failed one.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import attrs

from .._exceptions import (
    APIConnectionError,
    AuthenticationError,
    BadRequestError,
    InvalidRequestError,
    PermissionDeniedError,
    TaskPollError,
    VideoGenError,
    WaitTimeoutError,
)
from .._models import Task
from .._validation import validate_task_request
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
from ._journal import (
    ATTEMPTED,
    CREATED,
    DONE,
    REFUSED,
    UNKNOWN,
    Journal,
    JournalEntry,
    JournalError,
    request_hash,
)
from ._spending import USUAL_BATCH, check_spend, task_estimate
from ._tasks import wait_for_ids

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


@attrs.frozen
class InputLine:
    """One line of the input file.

    Attributes:
        line_no: The line number, from 1.
        raw: The decoded JSON (or the text, when it is not JSON).
        request: The validated request body; ``None`` for a bad line.
        problem: Why the line is bad.
    """

    line_no: int
    raw: Any
    request: dict[str, Any] | None
    problem: str | None = None


def read_input(text: str) -> list[InputLine]:
    """Parse and check the input file (no I/O).

    Args:
        text: The file's content.

    Returns:
        The request lines (blank and ``#`` lines left out), each valid or with its problem.
    """
    lines: list[InputLine] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        stripped = raw_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            lines.append(InputLine(number, stripped, None, f"not valid JSON: {exc}"))
            continue
        if not isinstance(data, dict):
            lines.append(InputLine(number, data, None, "not a JSON object"))
            continue
        try:
            request = validate_task_request(data)
        except InvalidRequestError as exc:
            lines.append(InputLine(number, data, None, str(exc)))
            continue
        lines.append(InputLine(number, data, request))
    return lines


def default_paths(input_path: Path) -> tuple[Path, Path]:
    """The default journal and manifest beside the input.

    Args:
        input_path: The input file, e.g. ``prompts.jsonl``.

    Returns:
        ``prompts.journal.sqlite`` and ``prompts.results.jsonl`` in the same directory.
    """
    stem = input_path.name.removesuffix(".jsonl").removesuffix(".json")
    return (
        input_path.with_name(f"{stem}.journal.sqlite"),
        input_path.with_name(f"{stem}.results.jsonl"),
    )


class BatchRun:
    """One run of a batch against one journal."""

    def __init__(
        self,
        ctx: Context,
        client: AsyncVideoGen,
        journal: Journal,
        lines: list[InputLine],
        *,
        manifest: Path,
    ) -> None:
        args = ctx.args
        self.ctx = ctx
        self.ui = ctx.ui
        self.client = client
        self.journal = journal
        self.lines = lines
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
        self.entries: dict[int, JournalEntry] = {}
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

    # -- loading ----------------------------------------------------------------------------

    async def load(self) -> None:
        """Read the journal and match it to the input.

        Raises:
            JournalError: The journal does not belong to this input.
        """
        self.entries = await self.journal.entries()
        for line_no, entry in self.entries.items():
            line = self.by_no.get(line_no)
            if line is None or line.request is None:
                raise JournalError(
                    f"the journal has line {line_no}, which is not a valid request line of"
                    " the input now: the input changed since the journal was written"
                )
            if request_hash(line.request) != entry.request_hash:
                raise JournalError(
                    f"line {line_no} of the input differs from the request the journal"
                    " recorded for it: the input changed since the journal was written"
                )
        for line in self.lines:
            if line.problem is not None:
                self._record(line, status=INVALID, error=line.problem)
                continue
            known = self.entries.get(line.line_no)
            if known is None:
                self._record(line)
                continue
            self._record(
                line,
                task_id=known.task_id,
                credits=known.credits,
                video_url=known.video_url,
                path=known.path,
                error=known.error,
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
        if self.max_credits is not None:
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
        with anyio.CancelScope(shield=True):
            await self.journal.mark_attempted(line.line_no, request)
            try:
                created = await self.client.tasks.create(**request)
            except VideoGenError as exc:
                await self._create_failed(line, exc)
                return False
            await self.journal.mark_created(line.line_no, created.task_id, created.credits_cost)
        self.charged += float(created.credits_cost or 0)
        self.unknown_in_a_row = 0
        self._record(
            line,
            task_id=created.task_id,
            status=PENDING,
            credits=created.credits_cost,
            error=None,
        )
        return True

    async def _create_failed(self, line: InputLine, exc: VideoGenError) -> None:
        unknown = exc.request_may_have_taken_effect
        text = describe_error(exc)
        await self.journal.mark_failed_create(line.line_no, unknown=unknown, error=text)
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
            (no, record["task_id"])
            for no, record in sorted(self.records.items())
            if record["status"] == PENDING and record["task_id"]
        ]
        if not waiting:
            return
        line_of = {task_id: no for no, task_id in waiting}

        async def on_result(task_id: str, item: Task | TaskPollError) -> None:
            await self._on_waited(line_of[task_id], item)

        await wait_for_ids(
            self.ctx,
            self.client,
            [task_id for _, task_id in waiting],
            timeout=self.timeout,
            max_concurrency=max(self.max_concurrency, 8),
            on_result=on_result,
        )

    async def _on_waited(self, line_no: int, item: Task | TaskPollError) -> None:
        line = self.by_no[line_no]
        if isinstance(item, Task):
            await self.journal.mark_done(
                line_no,
                status=str(item.status),
                video_url=item.video_url,
                error=item.error_message,
                credits=item.credits_cost,
            )
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
        wanted = [
            record
            for _, record in sorted(self.records.items())
            if record["status"] == "succeeded" and record["task_id"]
        ]
        if not wanted:
            return

        def _existing() -> set[str]:
            found: set[str] = set()
            for record in wanted:
                path = directory / f"{record['task_id']}.mp4"
                if path.is_file():  # files appear only complete (atomic rename)
                    found.add(record["task_id"])
            return found

        present = await anyio.to_thread.run_sync(_existing)
        for record in wanted:
            if record["task_id"] in present:
                path = str(directory / f"{record['task_id']}.mp4")
                if record.get("path") != path:
                    record["path"] = path
                    await self.journal.mark_downloaded(record["line"], path)
        todo = [r for r in wanted if r["task_id"] not in present]
        if present:
            self.ui.note(f"{len(present)} video(s) already downloaded to {directory}")
        if not todo:
            return
        from ._tasks import download_with_progress

        results = await download_with_progress(
            self.ctx,
            self.client,
            [r["task_id"] for r in todo],
            directory,
            max_concurrency=self.max_concurrency,
        )
        for record, result in zip(todo, results, strict=True):
            if result.ok and result.path is not None:
                record["path"] = str(result.path)
                await self.journal.mark_downloaded(record["line"], str(result.path))
            else:
                self.download_failures += 1
                record["download_error"] = describe_error(result.error) if result.error else None
                self.ui.warn(f"line {record['line']}: download failed: {record['download_error']}")

    # -- the end ----------------------------------------------------------------------------

    def ordered_records(self) -> list[dict[str, Any]]:
        """Every input line's record, in input order."""
        return [self.records[no] for no in sorted(self.records)]

    async def write_manifest(self) -> None:
        """Write the manifest atomically (temporary file, then rename), off the event loop."""
        records = self.ordered_records()
        target = self.manifest

        def _write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    for record in records:
                        handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(name, target)
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise

        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_write)

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


def _resume_command(ctx: Context, journal: Path | None, manifest: Path) -> str:
    args = ctx.args
    parts = ["videogen"]
    if getattr(args, "cfg_base_url", None):
        parts += ["--base-url", args.cfg_base_url]
    parts += ["batch", str(args.file)]
    if journal is not None:
        parts += ["--journal", str(journal)]
    parts += ["--manifest", str(manifest)]
    if args.download:
        parts += ["--download", str(args.download)]
    if args.max_concurrency != 4:
        parts += ["--max-concurrency", str(args.max_concurrency)]
    if args.timeout is not None:
        parts += ["--timeout", f"{args.timeout:g}"]
    if getattr(args, "max_credits", None) is not None:
        parts += ["--max-credits", f"{args.max_credits:g}"]
    if getattr(args, "yes", False):
        parts += ["--yes"]
    return shlex.join(parts)


def _summary(ctx: Context, run: BatchRun, journal: Path | None, code: int) -> None:
    counts = run.counts()
    total_credits = sum(
        float(r["credits"] or 0) for r in run.records.values() if r["task_id"] is not None
    )
    resume = _resume_command(ctx, journal, run.manifest) if journal is not None else None
    if ctx.ui.json_mode:
        ctx.ui.emit_json(
            {
                "manifest": str(run.manifest),
                "journal": str(journal) if journal else None,
                "lines": len(run.records),
                "counts": dict(counts),
                "credits": total_credits,
                "exit_code": code,
                "resume": resume if (run.needs_rerun() or ctx.interrupted) else None,
            }
        )
    else:
        ctx.ui.print(
            f"batch: {len(run.records)} line(s), {fmt_credits(total_credits)} credits charged"
        )
        ctx.ui.table(("status", "lines"), sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        attention = [
            [r["line"], r["status"], r["task_id"], r.get("download_error") or r["error"]]
            for r in run.ordered_records()
            if r["status"] != "succeeded" or r.get("download_error")
        ]
        if attention:
            ctx.ui.table(("line", "status", "task id", "why"), attention[:50], title="Attention")
            if len(attention) > 50:
                ctx.ui.print(f"... and {len(attention) - 50} more (see the manifest)")
        ctx.ui.print(f"manifest: {run.manifest}")
    if counts.get(UNKNOWN):
        ctx.ui.note(
            f"{counts[UNKNOWN]} line(s) have an unknown outcome: their create may have taken"
            " effect (a paid task may exist). They are not sent again unless you pass"
            " --retry-unknown."
        )
    if ctx.interrupted or run.needs_rerun() or run.fatal is not None:
        if resume is not None:
            ctx.ui.note(f"to resume, run:\n  {resume}")
        else:
            created = sum(1 for r in run.records.values() if r["task_id"])
            ctx.ui.note(
                f"no journal was kept (--no-journal): the ids of the {created} task(s) created"
                f" are in {run.manifest}; running the batch again would create every line again"
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
    journal_path: Path | None = None if args.no_journal else Path(args.journal or default_journal)
    manifest = Path(args.manifest) if args.manifest else default_manifest
    client = ctx.make_client()
    try:
        journal = await Journal.open(journal_path, base_url=client.base_url)
    except JournalError as exc:
        ctx.ui.error(str(exc))
        return EXIT_USAGE
    try:
        async with client:
            run = BatchRun(ctx, client, journal, lines, manifest=manifest)
            try:
                await run.load()
            except JournalError as exc:
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
            _summary(ctx, run, journal_path, code)
            return code
    finally:
        await journal.close()
