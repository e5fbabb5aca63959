"""The argument parser of ``videogen``: every command, option, help text and example."""

from __future__ import annotations

import argparse
import functools
from typing import Any

from .. import AspectRatio, FunctionMode, Model, ProjectMode, Ratio, SpeechLanguage, __version__
from .._contract import _service as service
from .._contract._argtypes import number_type
from .._ledger._entry import STATES as LEDGER_STATES
from ..testing import add_sandbox_arguments
from ._batch import cmd_batch
from ._completion import cmd_completion
from ._doctor import add_doctor_parser
from ._help import EPILOGS
from ._ledger import cmd_ledger_dispatch, cmd_ledger_list, cmd_ledger_summary
from ._mcp import add_mcp_parser
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
from ._spending import SCRIPT_CREDITS
from ._tasks import cmd_create, cmd_credits, cmd_download, cmd_status, cmd_wait

_FMT = argparse.RawDescriptionHelpFormatter


def _task(name: str) -> Any:
    """The service's default of a task field (for the help texts)."""
    return service.TASK_REQUEST.field(name).default


def _project(name: str) -> Any:
    """The service's default of a project field (for the help texts)."""
    return service.PROJECT_REQUEST.field(name).default


_positive_float = number_type(float, minimum=0, strict=True, what="a number of seconds")
_non_negative_int = number_type(int, minimum=0, what="a whole number")
_positive_int = number_type(int, minimum=1, what="a whole number")
_credits = number_type(float, minimum=0, what="a number of credits")


def _spending(parser: argparse.ArgumentParser) -> None:
    """``--max-credits`` and ``--yes``: the spending guard of a creating command."""
    group = parser.add_argument_group("spending (see docs/cli.md)")
    group.add_argument(
        "--max-credits",
        type=_credits,
        metavar="N",
        help="refuse, before sending anything, a request estimated above N credits",
    )
    group.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="go ahead without asking when the estimate is beyond the usual",
    )


def _output_options() -> argparse.ArgumentParser:
    """``--json`` and ``--debug``, accepted before and after the command."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("output")
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print results as JSON on stdout (for scripts); notes stay on stderr",
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show tracebacks with errors, and the SDK's debug log",
    )
    return parent


def _wait_timeout(parser: argparse.ArgumentParser, what: str, extra: str = "") -> None:
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help=f"stop waiting for {what} after this long (default: no limit){extra}",
    )


def _downloads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="downloads at once (default %(default)s)",
    )
    parser.add_argument(
        "--no-overwrite",
        action="store_true",
        help="keep files that already exist (an existing file is always complete)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``videogen`` parser; each command's namespace carries ``func``, the command."""
    output = _output_options()
    parser = argparse.ArgumentParser(
        prog="videogen",
        description="videogen: the command line of the video generation service.\n"
        "Create videos, follow them, download them, run resumable batches, or try\n"
        "everything offline with the built-in sandbox (videogen demo).",
        epilog=EPILOGS["main"],
        formatter_class=_FMT,
        parents=[output],
    )
    parser.add_argument("--version", action="version", version=f"videogen-async {__version__}")
    conn = parser.add_argument_group("connection (before the command)")
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
        "--timeout",
        dest="cfg_timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="limit of each HTTP request (default: 10 s to connect, 60 s per read)",
    )
    conn.add_argument(
        "--max-retries",
        dest="cfg_max_retries",
        type=_non_negative_int,
        metavar="N",
        help="retries of a request after a transient failure (default 2; creates are retried"
        " only when they provably did not reach the service)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    commands.required = True

    def command(
        name: str, help_text: str, epilog: str | None = None, *, group: Any = commands
    ) -> Any:
        return group.add_parser(
            name,
            help=help_text,
            description=help_text[:1].upper() + help_text[1:] + ".",
            epilog=epilog,
            formatter_class=_FMT,
            parents=[output],
        )

    # credits
    p = command(
        "credits",
        "show the API credit balance",
        "examples:\n  videogen credits\n  videogen --json credits",
    )
    p.set_defaults(func=cmd_credits)

    # create
    p = command("create", "create a direct video task from a prompt", EPILOGS["create"])
    p.add_argument(
        "prompt",
        nargs="?",
        help="the text prompt; - (or no prompt, with stdin a pipe or a file) reads it from stdin",
    )
    p.add_argument("--model", choices=Model.values(), help=f"default {_task('model')}")
    p.add_argument(
        "--function-mode", choices=FunctionMode.values(), help=f"default {_task('function_mode')}"
    )
    p.add_argument(
        "--ratio", choices=Ratio.values(), help=f"aspect ratio (default {_task('ratio')})"
    )
    p.add_argument(
        "--duration",
        type=int,
        metavar="SECONDS",
        help=f"{service.DURATION_MIN} to {service.DURATION_MAX} seconds"
        f" (default {_task('duration')})",
    )
    p.add_argument(
        "--image-url",
        dest="image_urls",
        action="append",
        metavar="URL",
        help=f"a reference image (repeat for more; up to {service.MAX_IMAGE_URLS}, or"
        f" {service.FIRST_LAST_FRAMES_MAX_IMAGES} with first_last_frames)",
    )
    p.add_argument(
        "--audio-url",
        dest="audio_urls",
        action="append",
        metavar="URL",
        help=f"a reference audio (repeat; up to {service.MAX_AUDIO_URLS}; needs an image or"
        " video beside it)",
    )
    p.add_argument(
        "--video-url",
        dest="video_urls",
        action="append",
        metavar="URL",
        help=f"a reference video (repeat; up to {service.MAX_VIDEO_URLS})",
    )
    p.add_argument("--wait", action="store_true", help="wait for the task and print the result")
    _wait_timeout(p, "the task (with --wait)")
    p.add_argument(
        "--download",
        metavar="DIR",
        help="wait for the task, then save its video into DIR (implies --wait)",
    )
    _spending(p)
    p.set_defaults(func=cmd_create)

    # status
    p = command(
        "status",
        "show the current state of tasks",
        "examples:\n  videogen status t_123\n  videogen --json status t_123 t_456",
    )
    p.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="task ids")
    p.set_defaults(func=cmd_status)

    # wait
    p = command("wait", "wait until tasks finish, with a progress bar", EPILOGS["wait"])
    p.add_argument("task_ids", nargs="+", metavar="TASK_ID", help="task ids")
    _wait_timeout(p, "the tasks")
    p.set_defaults(func=cmd_wait)

    # download
    p = command("download", "download finished videos", EPILOGS["download"])
    p.add_argument("sources", nargs="+", metavar="TASK_ID_OR_URL", help="task ids (or video URLs)")
    p.add_argument(
        "--to", required=True, metavar="DIR", help="directory to save into (created if missing)"
    )
    _downloads(p)
    p.set_defaults(func=cmd_download)

    # batch
    p = command("batch", "create, wait for and download many tasks, resumably", EPILOGS["batch"])
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
    _wait_timeout(p, "the tasks", "; a rerun waits for them again")
    p.add_argument(
        "--retry-unknown",
        action="store_true",
        help="send again the lines whose earlier create may have taken effect (may pay twice)",
    )
    _spending(p)
    p.set_defaults(func=cmd_batch)

    # ledger
    ledger = command(
        "ledger",
        "show what a ledger holds: pending, unknown, finished tasks, credits spent",
        "examples:\n  videogen ledger summary prompts.journal.sqlite\n"
        "  videogen ledger list prompts.journal.sqlite --state unknown\n"
        "  videogen --json ledger list postgresql://u:p@db:5432/videos --state pending\n"
        "  videogen ledger summary videos.db --group-by tenant\n"
        "  APP_HOOK_SECRET=whsec_... videogen ledger dispatch videos.db \\\n"
        "      --webhook https://app.example/hooks/video --secret-env APP_HOOK_SECRET\n"
        "list and summary only read the ledger: no API key needed, nothing sent or written.",
    )
    ledger_actions = ledger.add_subparsers(dest="action", metavar="ACTION", title="actions")
    ledger_actions.required = True
    p = ledger_actions.add_parser(
        "list", help="list the entries", formatter_class=_FMT, parents=[output]
    )
    p.add_argument("url", metavar="URL", help="a file path, sqlite:///PATH or postgresql://...")
    p.add_argument(
        "--state",
        action="append",
        choices=LEDGER_STATES,
        help="only entries in this state (repeat for more)",
    )
    p.add_argument("--kind", choices=("task", "project", "project_task"), help="only this kind")
    p.add_argument("--limit", type=_positive_int, metavar="N", help="at most N entries")
    p.set_defaults(func=cmd_ledger_list)
    p = ledger_actions.add_parser(
        "summary",
        help="entries per state, credits spent and reserved",
        formatter_class=_FMT,
        parents=[output],
    )
    p.add_argument("url", metavar="URL", help="a file path, sqlite:///PATH or postgresql://...")
    p.add_argument("--group-by", metavar="KEY", help="also count per value of this metadata key")
    p.set_defaults(func=cmd_ledger_summary)
    p = ledger_actions.add_parser(
        "dispatch",
        help="deliver each terminal entry to a signed webhook (Standard Webhooks)",
        formatter_class=_FMT,
        parents=[output],
    )
    p.add_argument("url", metavar="URL", help="a file path, sqlite:///PATH or postgresql://...")
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
    p.set_defaults(func=cmd_ledger_dispatch)

    # project
    project = command("project", "viral ad clone projects: script, then videos", EPILOGS["project"])
    actions = project.add_subparsers(dest="action", metavar="ACTION", title="actions")
    actions.required = True

    def action(name: str, help_text: str) -> Any:
        return command(name, help_text, EPILOGS["project"], group=actions)

    p = action("create", f"create a project (charges {SCRIPT_CREDITS:g} credits for the script)")
    p.add_argument("reference_video_url", metavar="REFERENCE_VIDEO_URL", help="the reference ad")
    p.add_argument(
        "--product-image-url",
        dest="product_image_urls",
        action="append",
        required=True,
        metavar="URL",
        help="a product image (required; repeat for more)",
    )
    p.add_argument("--avatar-image-url", metavar="URL", help="a person or avatar image")
    p.add_argument("--prompt", help="selling points, style, restrictions, language preference")
    p.add_argument(
        "--aspect-ratio", choices=AspectRatio.values(), help=f"default {_project('aspect_ratio')}"
    )
    p.add_argument(
        "--speech-language",
        dest="speech_language_option",
        choices=[v for v in SpeechLanguage.values() if v],
        help="language of the generated speech (default: that of the reference video)",
    )
    p.add_argument(
        "--duration",
        type=int,
        metavar="SECONDS",
        help=f"target duration (default {_project('duration')})",
    )
    p.add_argument(
        "--resolution",
        type=parse_resolution,
        metavar="RES",
        help=f"e.g. 720 or 1080 (default {_project('resolution')})",
    )
    p.add_argument(
        "--out-number",
        type=int,
        metavar="N",
        help=f"videos per batch, {service.OUT_NUMBER_MIN} to {service.OUT_NUMBER_MAX} (default"
        f" {_project('out_number')})",
    )
    p.add_argument("--mode", choices=ProjectMode.values(), help=f"default {_project('mode')}")
    p.add_argument("--wait", action="store_true", help="wait until the project is done")
    _wait_timeout(p, "the project (with --wait)")
    _spending(p)
    p.set_defaults(func=cmd_project_create)

    p = action("get", "show a project: status, billing, tasks")
    p.add_argument("project_id", metavar="PROJECT_ID")
    p.add_argument("--script", action="store_true", help="also print the script")
    p.set_defaults(func=cmd_project_get)

    p = action("script", "wait for a project's script and print it")
    p.add_argument("project_id", metavar="PROJECT_ID")
    p.add_argument("--no-wait", action="store_true", help="fail at once if it is not ready")
    _wait_timeout(p, "the script")
    p.set_defaults(func=cmd_project_script)

    p = action("videos", "create a new batch of videos from a project's script")
    p.add_argument("project_id", metavar="PROJECT_ID")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--script", help="a script for this batch only (the project's is kept)")
    source.add_argument("--script-file", metavar="PATH", help="read the batch's script from a file")
    p.add_argument(
        "--out-number",
        type=int,
        metavar="N",
        help=f"{service.OUT_NUMBER_MIN} to {service.OUT_NUMBER_MAX} videos",
    )
    p.add_argument("--resolution", type=parse_resolution, metavar="RES", help="e.g. 720 or 1080")
    p.add_argument("--aspect-ratio", choices=AspectRatio.values())
    p.add_argument("--wait", action="store_true", help="wait for the videos")
    _wait_timeout(p, "the videos (with --wait)")
    _spending(p)
    p.set_defaults(func=cmd_project_videos)

    p = action("wait", "wait until a project and all its videos are done")
    p.add_argument("project_id", metavar="PROJECT_ID")
    _wait_timeout(p, "the project")
    p.add_argument("--download", metavar="DIR", help="then save its finished videos into DIR")
    p.set_defaults(func=cmd_project_wait)

    p = action("download", "save the finished videos of a project into a directory")
    p.add_argument("project_id", metavar="PROJECT_ID")
    p.add_argument("directory", metavar="DIR", help="where to save (created if missing)")
    _downloads(p)
    p.set_defaults(func=cmd_project_download)

    # download, sandbox, demo
    p = command("sandbox", "serve the sandbox (the whole service, in memory) on a port",
                EPILOGS["sandbox"])  # fmt: skip
    add_sandbox_arguments(p)
    p.set_defaults(func=cmd_sandbox)

    p = command("demo", "run the whole service end to end against a built-in sandbox",
                EPILOGS["demo"])  # fmt: skip
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
    p.set_defaults(func=cmd_demo)

    add_doctor_parser(command)
    add_mcp_parser(command)

    p = command("completion", "print a shell completion script", EPILOGS["completion"])
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell")
    p.set_defaults(func=functools.partial(cmd_completion, parser=parser))
    return parser
