"""The argument parser of ``videogen``: every command, option, help text and example.

The options of a create are made from the service's own statement of its request bodies
(``_contract/_service.py``): their names, types, choices, defaults and bounds are written once.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import Any, NoReturn

from .. import __version__
from .._contract import _service as service
from .._contract._argtypes import number_type
from .._ledger._entry import KINDS as LEDGER_KINDS
from .._ledger._entry import STATES as LEDGER_STATES
from ..testing import add_sandbox_arguments
from ._batch import cmd_batch
from ._common import POSITIONAL_FIELDS, option_of
from ._doctor import add_doctor_parser
from ._help import EPILOGS
from ._ledger import cmd_ledger_dispatch, cmd_ledger_list, cmd_ledger_summary
from ._mcp import add_mcp_parser, credits_number
from ._projects import (
    cmd_project_create,
    cmd_project_download,
    cmd_project_get,
    cmd_project_script,
    cmd_project_videos,
    cmd_project_wait,
    parse_resolution,
)
from ._sandbox import cmd_demo, cmd_sandbox
from ._shell_completion import SCRIPTS, cmd_completion
from ._spending import SCRIPT_CREDITS
from ._tasks import cmd_create, cmd_credits, cmd_download, cmd_status, cmd_wait

_positive_float = number_type(float, minimum=0, strict=True, what="a number of seconds")
_non_negative_int = number_type(int, minimum=0, what="a whole number")
_positive_int = number_type(int, minimum=1, what="a whole number")

_INVALID_CHOICE = re.compile(r"invalid choice: (?P<word>.+?) \(choose from (?P<choices>.+)\)")
_LEDGER_URL = "a file path, sqlite:///PATH or postgresql://..."


class Parser(argparse.ArgumentParser):
    """argparse's parser; a mistyped choice (``videogen creat``) is told the closest one."""

    def error(self, message: str) -> NoReturn:
        """Exit 2 with ``message``, plus a "did you mean" found by :mod:`difflib`."""
        found = _INVALID_CHOICE.search(message)
        if found is not None:
            close = difflib.get_close_matches(
                found["word"].strip("'\""),
                [c.strip(" '\"") for c in found["choices"].split(",")],
                n=1,
            )
            if close:
                message += f"\ndid you mean: {self.prog} {close[0]}"
        elif "unrecognized arguments: " in message and "--timeout" in message:
            message += (
                "\n--timeout of the requests goes before the command (videogen --timeout 30"
                " credits); a command's own --timeout, where it has one, after it"
            )
        super().error(message)


def _shared_options() -> argparse.ArgumentParser:
    """The options accepted before and after the command: output, and the connection.

    Their default is "not given" (``SUPPRESS``), so a value given before the command is kept
    when the command's parser sees none.
    """
    parent = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    output = parent.add_argument_group("output")
    output.add_argument(
        "--json",
        action="store_true",
        help="print results as JSON on stdout (for scripts); notes stay on stderr",
    )
    output.add_argument(
        "--debug", action="store_true", help="show tracebacks with errors, and the SDK's debug log"
    )
    conn = parent.add_argument_group("connection (before or after the command)")
    conn.add_argument(
        "--api-key",
        dest="cfg_api_key",
        metavar="KEY",
        help="the API key (default: $VIDEOGEN_API_KEY; the environment is safer)",
    )
    conn.add_argument(
        "--base-url",
        dest="cfg_base_url",
        metavar="URL",
        help="the service's base URL (default: $VIDEOGEN_BASE_URL)",
    )
    conn.add_argument(
        "--allow-insecure-http",
        dest="cfg_allow_insecure_http",
        action="store_true",
        help="allow a plain http:// base URL to a host that is not this machine (the key then"
        " crosses the network unencrypted; default: $VIDEOGEN_ALLOW_INSECURE_HTTP=1)",
    )
    conn.add_argument(
        "--max-retries",
        dest="cfg_max_retries",
        type=_non_negative_int,
        metavar="N",
        help="retries of a request after a transient failure (default 2; creates are retried"
        " only when they provably did not reach the service)",
    )
    return parent


def _field_help(field: service.Field, *, defaults: bool) -> str | None:
    """A request field's help: its bounds, how to repeat it, its default (the service's)."""
    said = [field.doc.rstrip(".")] if field.doc else []
    if field.minimum is not None and field.maximum is not None:
        said.append(f"{field.minimum} to {field.maximum} {field.unit}".rstrip())
    if field.type == "urls":
        said.append("repeat for more" + (f", up to {field.max_items}" if field.max_items else ""))
    if field.required:
        said.append("required")
    elif defaults and field.default not in (None, ""):
        said.append(f"default {field.default}")
    return "; ".join(said) or None


def _fields(
    p: Any, body: service.Body, *, defaults: bool = True, skip: tuple[str, ...] = ()
) -> None:
    """One option (or argument) per field of a request ``body``, named by :func:`option_of`."""
    for field in body.fields:
        if field.name in skip:
            continue
        options: dict[str, Any] = {"help": _field_help(field, defaults=defaults)}
        if field.choices is not None:
            options["choices"] = [v for v in field.choices.values() if v]
        if field.type == "integer":
            options.update(type=int, metavar="N")
        elif field.type == "resolution":
            options.update(type=parse_resolution, metavar="RES")
        elif field.type in ("url", "urls"):
            options["metavar"] = "URL"
        if field.type == "urls":
            options.update(action="append", required=field.required)
        if field.name in POSITIONAL_FIELDS:
            p.add_argument(field.name, **{**options, "metavar": option_of(field.name)})
        else:
            p.add_argument(option_of(field.name), dest=field.name, **options)


def _spending(p: argparse.ArgumentParser) -> None:
    """``--max-credits`` and ``--yes``: the spending guard of a creating command."""
    group = p.add_argument_group("spending (see docs/cli.md)")
    group.add_argument(
        "--max-credits",
        type=credits_number,
        metavar="N",
        help="refuse, before sending anything, a request estimated above N credits",
    )
    group.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="go ahead without asking when the estimate is beyond the usual",
    )


def _wait(p: argparse.ArgumentParser, what: str, flag: str | None = "--wait") -> None:
    """``--wait`` (unless ``flag`` is ``None``) and the ``--timeout`` of the wait."""
    if flag is not None:
        p.add_argument(flag, action="store_true", help=f"wait for {what}")
    p.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help=f"stop waiting for {what} after this long (default: no limit)",
    )


def _downloads(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="downloads at once (default %(default)s)",
    )
    p.add_argument(
        "--no-overwrite",
        action="store_true",
        help="keep files that already exist (an existing file is always complete)",
    )


def _task_commands(command: Any) -> None:
    command("credits", "show the API credit balance", func=cmd_credits)

    p = command("create", "create a direct video task from a prompt", func=cmd_create)
    p.add_argument(
        "prompt",
        nargs="?",
        help="the text prompt; - (or no prompt, with stdin a pipe or a file) reads it from stdin",
    )
    _fields(p, service.TASK_REQUEST, skip=("prompt",))
    _wait(p, "the task and print the result")
    p.add_argument(
        "--download",
        metavar="DIR",
        help="wait for the task, then save its video into DIR (implies --wait)",
    )
    _spending(p)

    p = command("status", "show the current state of tasks", func=cmd_status)
    p.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="task ids")

    p = command("wait", "wait until tasks finish, with a progress bar", func=cmd_wait)
    p.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="task ids")
    _wait(p, "the tasks", flag=None)

    p = command("download", "download finished videos", func=cmd_download)
    p.add_argument("sources", nargs="+", metavar="TASK_ID_OR_URL", help="task ids (or video URLs)")
    p.add_argument(
        "--to", required=True, metavar="DIR", help="directory to save into (created if missing)"
    )
    _downloads(p)


def _batch_command(command: Any) -> None:
    p = command("batch", "create, wait for and download many tasks, resumably", func=cmd_batch)
    p.add_argument("file", metavar="FILE", help="JSON Lines, or CSV with a header row of fields")
    p.add_argument("--format", choices=("jsonl", "csv"), help="default: csv for *.csv, else jsonl")
    p.add_argument(
        "--journal",
        metavar="URL",
        help="the ledger that makes the batch resumable and shareable: a file path,"
        " sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DBNAME (default: FILE's"
        " name + .journal.sqlite, beside it; a journal of the earlier format is imported)",
    )
    p.add_argument(
        "--no-journal",
        action="store_true",
        help="keep no journal: a crash then loses the created ids (not recommended)",
    )
    p.add_argument(
        "--manifest",
        metavar="PATH",
        help="where to write the results (default: FILE's name + .results.jsonl)",
    )
    p.add_argument("--download", metavar="DIR", help="download the finished videos into DIR")
    p.add_argument(
        "--max-concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="creates (and downloads) in flight at once (default 4)",
    )
    _wait(p, "the tasks (a rerun waits for them again)", flag=None)
    p.add_argument(
        "--retry-unknown",
        action="store_true",
        help="send again the lines whose earlier create may have taken effect (may pay twice)",
    )
    _spending(p)


def _ledger_commands(command: Any) -> None:
    actions = command(
        "ledger", "show what a ledger holds: pending, unknown, finished tasks, credits spent"
    ).add_subparsers(dest="action", metavar="ACTION", title="actions", required=True)

    def action(name: str, help_text: str, func: Any) -> Any:
        """A ledger action's parser: its first argument is the ledger's URL."""
        p = command(name, help_text, group=actions, prefix="ledger ", func=func)
        p.add_argument("url", metavar="URL", help=_LEDGER_URL)
        return p

    p = action("list", "list the entries of a ledger", func=cmd_ledger_list)
    p.add_argument(
        "--state",
        action="append",
        choices=LEDGER_STATES,
        help="only entries in this state (repeat for more)",
    )
    p.add_argument("--kind", choices=LEDGER_KINDS, help="only entries of this kind")
    p.add_argument("--limit", type=_positive_int, metavar="N", help="at most N entries")

    p = action(
        "summary",
        "count a ledger's entries per state, and the credits spent and reserved",
        func=cmd_ledger_summary,
    )
    p.add_argument("--group-by", metavar="KEY", help="also count per value of this metadata key")

    p = action(
        "dispatch",
        "deliver each terminal entry to a signed webhook (Standard Webhooks)",
        func=cmd_ledger_dispatch,
    )
    p.add_argument("--webhook", required=True, metavar="URL", help="the receiver, http(s)://")
    p.add_argument(
        "--secret-env",
        required=True,
        metavar="NAME",
        help="the environment variable holding the destination's whsec_... secret",
    )
    p.add_argument("--name", default="webhook", help="the destination's name (default: webhook)")
    p.add_argument(
        "--backlog", action="store_true", help="also deliver what was terminal before its first use"
    )
    p.add_argument(
        "--stop-when-idle",
        action="store_true",
        help="stop once nothing is left to deliver and no entry may still finish",
    )


def _project_commands(command: Any) -> None:
    actions = command("project", "viral ad clone projects: script, then videos").add_subparsers(
        dest="action", metavar="ACTION", title="actions", required=True
    )

    def action(name: str, help_text: str, func: Any, *, project_id: bool = True) -> Any:
        """A project action's parser: its first argument is the project's id (but create's)."""
        p = command(name, help_text, group=actions, epilog=EPILOGS["project"], func=func)
        if project_id:
            p.add_argument("project_id", metavar="PROJECT_ID")
        return p

    p = action(
        "create",
        f"create a project (charges {SCRIPT_CREDITS:g} credits for the script)",
        func=cmd_project_create,
        project_id=False,
    )
    _fields(p, service.PROJECT_REQUEST)
    _wait(p, "the project to be done")
    _spending(p)

    p = action("get", "show a project: status, billing, tasks", func=cmd_project_get)
    p.add_argument("--script", action="store_true", help="also print the script")

    p = action("script", "wait for a project's script and print it", func=cmd_project_script)
    p.add_argument("--no-wait", action="store_true", help="fail at once if it is not ready")
    _wait(p, "the script", flag=None)

    p = action(
        "videos", "create a new batch of videos from a project's script", func=cmd_project_videos
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--script", help="a script for this batch only (the project's is kept)")
    source.add_argument("--script-file", metavar="PATH", help="read the batch's script from a file")
    _fields(p, service.VIDEOS_REQUEST, defaults=False, skip=("script",))
    _wait(p, "the videos")
    _spending(p)

    p = action("wait", "wait until a project and all its videos are done", func=cmd_project_wait)
    _wait(p, "the project", flag=None)
    p.add_argument("--download", metavar="DIR", help="then save its finished videos into DIR")

    p = action(
        "download",
        "save the finished videos of a project into a directory",
        func=cmd_project_download,
    )
    p.add_argument("directory", metavar="DIR", help="where to save (created if missing)")
    _downloads(p)


def _local_commands(command: Any) -> None:
    p = command(
        "sandbox", "serve the sandbox (the whole service, in memory) on a port", func=cmd_sandbox
    )
    add_sandbox_arguments(p)

    p = command(
        "demo", "run the whole service end to end against a built-in sandbox", func=cmd_demo
    )
    p.add_argument("--to", metavar="DIR", help="save the videos here (default: a new temp dir)")
    p.add_argument(
        "--tasks", type=_positive_int, default=8, metavar="N", help="direct tasks (default 8)"
    )
    p.add_argument(
        "--time-scale",
        type=_positive_float,
        default=0.02,
        metavar="X",
        help="real seconds per simulated second (default 0.02: 50x faster)",
    )
    p.add_argument("--seed", type=int, default=7, help="seed of the sandbox (default 7)")


def build_parser() -> argparse.ArgumentParser:
    """The ``videogen`` parser; each command's namespace carries ``func``, the command."""
    parser = Parser(
        prog="videogen",
        description="videogen: the command line of the video generation service.\n"
        "Create videos, follow them, download them, run resumable batches, or try\n"
        "everything offline with the built-in sandbox (videogen demo).",
        epilog=EPILOGS["main"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[_shared_options()],
    )
    parser.add_argument("--version", action="version", version=f"videogen-async {__version__}")
    parser.add_argument(
        "--timeout",
        dest="cfg_timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="limit of each HTTP request, before the command (default: 10 s to connect, 60 s"
        " per read)",
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", title="commands", required=True
    )

    def command(
        name: str,
        help_text: str,
        epilog: str | None = None,
        *,
        group: Any = commands,
        prefix: str = "",
        func: Any = None,
    ) -> Any:
        """A command's parser: its help, a description, its examples, the shared options.

        ``func`` is the command (``args.func``); a command with actions has none of its own.
        """
        parser = group.add_parser(
            name,
            help=help_text,
            description=help_text[:1].upper() + help_text[1:] + ".",
            epilog=epilog or EPILOGS[prefix + name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
            # Options of their own for each command: one may redefine a shared option (mcp's
            # --base-url, the sandbox's --api-key), which "resolve" takes out of the shared one.
            parents=[_shared_options()],
            conflict_handler="resolve",
        )
        if func is not None:  # a parent's default must not shadow its action's
            parser.set_defaults(func=func)
        return parser

    _task_commands(command)
    _batch_command(command)
    _ledger_commands(command)
    _project_commands(command)
    _local_commands(command)
    add_doctor_parser(command)
    add_mcp_parser(command)
    command("completion", "print a shell completion script", func=cmd_completion).add_argument(
        "shell", choices=tuple(SCRIPTS), help="the shell"
    )
    return parser
