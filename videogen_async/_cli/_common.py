"""What every command shares: exit codes, configuration, the client, Ctrl-C, error lines."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import re
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import IO, Any

import anyio

import videogen_async as package

from .. import (
    APIConnectionError,
    APIResponseError,
    APIStatusError,
    AsyncVideoGen,
    AuthenticationError,
    ConfigurationError,
    InvalidRequestError,
    NotFoundError,
    Task,
    TaskPollError,
    VideoGenError,
    WaitTimeoutError,
)
from .._contract._service import PROJECT_REQUEST, TASK_REQUEST, VIDEOS_REQUEST
from ._ui import UI

# The exit codes (EXIT_CODES_HELP says what each means).
EXIT_OK = 0
EXIT_SOME_FAILED = 1
EXIT_USAGE = 2
EXIT_API_ERROR = 3
EXIT_AUTH = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT

EXIT_CODES_HELP = """\
exit codes:
  0    success (every task asked about succeeded)
  1    some tasks failed, could not be created or downloaded, or were not done in time
  2    usage error: bad options, a bad input file, missing API key or base URL, a spend
       not confirmed, a sandbox port already in use
  3    API or connection error: the service was unreachable or answered with an error
       (an unknown id is "not found")
  4    the service refused the API key (HTTP 401): check VIDEOGEN_API_KEY or --api-key
  130  interrupted (Ctrl-C); a batch prints the command that resumes it"""

#: Why a task could not be read, as shown in the status column and in ``--json``
#: (``"status": null, "problem": ...``); never a task status.
NOT_FOUND = "not found"
UNREACHABLE = "unreachable"
TIMED_OUT = "timed out"
UNREADABLE = "unreadable"

ALLOW_INSECURE_HTTP_ENV = "VIDEOGEN_ALLOW_INSECURE_HTTP"


#: The options of the client the command line takes (``--api-key`` is ``cfg_api_key``).
_CLIENT_OPTIONS = ("api_key", "base_url", "timeout", "max_retries", "allow_insecure_http")


#: What a loop that cannot take a signal handler raises (Windows, not the main thread).
_NO_HANDLER = (NotImplementedError, RuntimeError, ValueError)


class UsageError(Exception):
    """A command line that cannot be run as given (exit 2); its text is advice for the user."""


# Python names in the library's configuration messages, and what a command-line user types.
_ADVICE = (
    (re.compile(r"pass\s+allow_insecure_http=True"), "pass --allow-insecure-http (or set"
     f" {ALLOW_INSECURE_HTTP_ENV}=1)"),
    (re.compile(r"allow_insecure_http(=True)?"), "--allow-insecure-http"),
    (re.compile(r"pass\s+api_key(=\.\.\.)?"), "pass --api-key KEY"),
    (re.compile(r"pass\s+base_url(=\.\.\.)?"), "pass --base-url URL"),
    (re.compile(r"\bapi_key\b"), "the API key (--api-key or VIDEOGEN_API_KEY)"),
    (re.compile(r"\bbase_url\b"), "the base URL (--base-url or VIDEOGEN_BASE_URL)"),
    (re.compile(r"\bmax_retries\b"), "--max-retries"),
    (re.compile(r"\btimeout\b(?= must| should)"), "--timeout"),
)  # fmt: skip


def cli_advice(text: str) -> str:
    """A library's configuration message with the command line's flags for its arguments."""
    for pattern, replacement in _ADVICE:
        text = pattern.sub(replacement, text)
    return text


#: The request fields that are arguments on the command line; the others are options.
POSITIONAL_FIELDS = ("reference_video_url", "project_id", "task_id")
#: The request fields whose option says it shorter than the field's name.
_RENAMED = {"speech_language_option": "speech-language"}
#: A field's name in the library's messages (``image_urls``): words joined by ``_``.
_FIELD = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


def option_of(field: str) -> str:
    """A request field as the command line says it: ``--image-url``, ``REFERENCE_VIDEO_URL``.

    A list of URLs is an option given once per URL, so its name is singular.
    """
    if field in POSITIONAL_FIELDS:
        return field.upper()
    name = _RENAMED.get(field, field.replace("_", "-"))
    return "--" + (name.removesuffix("s") if field.endswith("_urls") else name)


def _as_option(found: re.Match[str]) -> str:
    name = found.group(0)
    known = name in POSITIONAL_FIELDS or any(
        name in body.names for body in (TASK_REQUEST, PROJECT_REQUEST, VIDEOS_REQUEST)
    )
    return option_of(name) if known else name


def describe_error(exc: BaseException, *, command_line_fields: bool = False) -> str:
    """``ClassName: message (trace_id=...)`` on one line (fields as options if asked)."""
    text = " ".join(str(exc).split()) or repr(exc)
    if isinstance(exc, ConfigurationError):
        text = cli_advice(text)
    elif isinstance(exc, InvalidRequestError) and command_line_fields:
        text = _FIELD.sub(_as_option, text)
    if isinstance(exc, UsageError):
        return text
    # The nearest class a user can catch: an internal one (a database that did not answer,
    # on a full disk) is named by its public parent, ``LedgerError``.
    public = next(
        kind
        for kind in type(exc).__mro__
        if not kind.__module__.startswith("videogen_async.") or kind.__name__ in package.__all__
    )
    return f"{public.__name__}: {text}"


def poll_failure(exc: BaseException | None, *, waiting: bool = True) -> tuple[str, str]:
    """Why a task could not be read (``waiting``: during a wait): the problem and a sentence."""
    cause = exc.__cause__ if isinstance(exc, TaskPollError) and exc.__cause__ else exc
    if cause is None:
        return UNREADABLE, "no answer about this task"
    if isinstance(cause, WaitTimeoutError):
        return TIMED_OUT, "still running when the wait's --timeout ended"
    if isinstance(cause, NotFoundError):
        trace = f" (trace_id={cause.trace_id})" if cause.trace_id else ""
        return NOT_FOUND, f"the service has no task with this id{trace}"
    if isinstance(cause, APIConnectionError):
        said = (
            "lost the connection to the service while waiting"
            if waiting
            else "the service could not be reached"
        )
        return UNREACHABLE, f"{said}: {' '.join(str(cause).split())}"
    if isinstance(cause, VideoGenError):
        return UNREADABLE, "the service could not report this task: " + describe_error(cause)
    return UNREADABLE, describe_error(cause)


def exit_code_for(exc: BaseException) -> int:
    """The exit code of an error (see ``EXIT_CODES_HELP``): 2, 3, 4, or else 1."""
    if isinstance(exc, (ConfigurationError, InvalidRequestError, UsageError)):
        return EXIT_USAGE
    if isinstance(exc, AuthenticationError):
        return EXIT_AUTH
    if isinstance(exc, TaskPollError) and isinstance(exc.__cause__, WaitTimeoutError):
        return EXIT_SOME_FAILED
    if isinstance(exc, (APIConnectionError, APIStatusError, APIResponseError, TaskPollError)):
        return EXIT_API_ERROR
    return EXIT_SOME_FAILED


def task_row(task: Task) -> list[Any]:
    """The cells of a task in the status tables."""
    return [
        task.task_id,
        str(task.status),
        fmt_credits(task.credits_cost),
        task.video_url if task.is_succeeded else task.error_message,
    ]


def fmt_credits(value: float | None) -> str:
    """Credits as shown to a user (``12.5``, ``10``; ``-`` for none)."""
    return "-" if value is None else f"{value:g}"


class Context:
    """One run of the command line: the parsed options, the output, and Ctrl-C.

    The first Ctrl-C cancels the command's *work* (:meth:`cancellable` scopes); the clean-up
    (manifest, closing ledger and client) still runs, then exit 130. A second Ctrl-C ends the
    process at once (a ledger stays consistent: each write is one transaction).
    """

    def __init__(self, args: argparse.Namespace, ui: UI) -> None:
        self.args = args
        self.ui = ui
        self.interrupts = 0
        self._scopes: list[anyio.CancelScope] = []
        self._stoppers: list[Callable[[], object]] = []

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C interrupted the work (not a command for which it is the way out)."""
        return self.interrupts > 0 and not self._stoppers

    def stop_on_interrupt(self, callback: Callable[[], object]) -> None:
        """Make Ctrl-C the normal way out: it calls ``callback``, the exit code is kept."""
        self._stoppers.append(callback)

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of ``AsyncVideoGen`` from the options given.

        What is not given the client reads from the environment itself (``VIDEOGEN_API_KEY``,
        ``VIDEOGEN_BASE_URL``); its configuration errors then name the flags (``cli_advice``).
        """
        given = vars(self.args)  # the connection options are cfg_NAME, when given
        options = {
            n: given[f"cfg_{n}"] for n in _CLIENT_OPTIONS if given.get(f"cfg_{n}") is not None
        }
        if options.pop("allow_insecure_http", False) or os.environ.get(
            ALLOW_INSECURE_HTTP_ENV, ""
        ).strip().lower() in ("1", "true", "yes"):
            options["allow_insecure_http"] = True
        return options

    @contextlib.contextmanager
    def cancellable(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that the first Ctrl-C cancels (at once if it came already)."""
        with anyio.CancelScope() as scope:
            if self.interrupts:
                scope.cancel()
            self._scopes.append(scope)
            try:
                yield scope
            finally:
                self._scopes.remove(scope)

    def on_sigint(self) -> None:
        """The SIGINT handler (runs in the event loop)."""
        self.interrupts += 1
        if self.interrupts == 1:
            self.ui.note(
                "\nstopping"
                if self._stoppers
                else "\ninterrupted: stopping cleanly (press Ctrl-C again to abort at once)"
            )
            for stop in self._stoppers or [scope.cancel for scope in self._scopes]:
                stop()
            return
        self.ui.note("aborted")
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)

    def run(self, command: Callable[[Context], Awaitable[int]]) -> int:
        """Run an async command in a fresh event loop, with Ctrl-C handled; its exit code."""

        async def _main() -> int:
            with on_signal(signal.SIGINT, self.on_sigint):
                code = await command(self)
            return EXIT_INTERRUPTED if self.interrupted else code

        try:
            return asyncio.run(_main())
        except KeyboardInterrupt:  # no signal handler (not the main thread, Windows)
            self.ui.note("interrupted")
            return EXIT_INTERRUPTED

    async def with_client(self, work: Callable[[AsyncVideoGen], Awaitable[int]]) -> int:
        """Open the client, run ``work`` under Ctrl-C, close the client; the exit code.

        The client is configured from the options, then the environment: without a key or a
        base URL its ``ConfigurationError`` names the flags (``cli_advice``).
        """
        async with AsyncVideoGen(**self.client_options()) as client:
            code = EXIT_INTERRUPTED
            with self.cancellable():
                code = await work(client)
        return EXIT_INTERRUPTED if self.interrupted else code

    def key_refused(self, exc: AuthenticationError) -> str:
        """What to do when the service refused the key: where it came from, and the answer."""
        source = (
            "--api-key"
            if getattr(self.args, "cfg_api_key", None)
            else "the VIDEOGEN_API_KEY environment variable"
        )
        return (
            f"the service refused the API key (401) given by {source}:"
            f" {describe_error(exc)}. Check that it is a current key of this service, then set"
            " it again: export VIDEOGEN_API_KEY=... (a key from --api-key wins over the"
            " environment)"
        )

    def fail(self, exc: BaseException) -> int:
        """Report an error as one line (and a traceback with ``--debug``); its exit code."""
        if self.ui.debug:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=self.ui.err)
        self.ui.error(
            self.key_refused(exc)
            if isinstance(exc, AuthenticationError)
            # A batch's fields are its input's JSON names, not options.
            else describe_error(exc, command_line_fields=self.args.command != "batch")
        )
        return exit_code_for(exc)


def with_client(
    command: Callable[[Context, AsyncVideoGen], Awaitable[int]],
) -> Callable[[Context], Awaitable[int]]:
    """A command run with the client open, under Ctrl-C (:meth:`Context.with_client`)."""

    @functools.wraps(command)
    async def run(ctx: Context) -> int:
        return await ctx.with_client(functools.partial(command, ctx))

    return run


@contextlib.contextmanager
def on_signal(signum: int, callback: Callable[[], object]) -> Iterator[None]:
    """Call ``callback`` in the running event loop on ``signum`` for a while.

    Where the loop takes no signal handler (not the main thread, Windows) nothing is installed:
    Ctrl-C is then Python's ``KeyboardInterrupt``.
    """
    loop = asyncio.get_running_loop()
    with contextlib.suppress(*_NO_HANDLER):
        loop.add_signal_handler(signum, callback)
    try:
        yield
    finally:
        with contextlib.suppress(*_NO_HANDLER):
            loop.remove_signal_handler(signum)


def stdin_mode() -> int:
    """The ``st_mode`` of stdin (0 when it is closed or not a file); ``stat.S_ISFIFO`` it."""
    try:
        return os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return 0


@contextlib.contextmanager
def logging_to(stream: IO[str] | None, level: str | int = logging.DEBUG) -> Iterator[None]:
    """Show the SDK's log records from ``level`` on ``stream`` for a while.

    ``None`` shows none: the command line says what happened in its own words, and without a
    handler Python's last-resort one would print the library's internal warnings.
    """
    logger = logging.getLogger("videogen_async")
    old_level = logger.level
    handler = logging.NullHandler() if stream is None else logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)  # VIDEOGEN_LOG may lower the logger's level: not this handler's
    if stream is not None:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def unwrap_group(exc: BaseException) -> BaseException:
    """The one error inside (nested) exception groups of one error, else ``exc`` itself."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and len(inner) == 1 and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc
