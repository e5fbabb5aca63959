"""``videogen``: the command line of videogen-async.

:mod:`argparse`, not click or typer, so that the SDK keeps its four runtime dependencies; rich
is the optional ``cli`` extra. :mod:`._parser`: commands and options; :mod:`._common`: what
they share; :mod:`._ui`: the output; one module per area. See ``docs/cli.md``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ._common import EXIT_OK, EXIT_USAGE, Context, logging_to, unwrap_group
from ._help import command_for
from ._parser import build_parser
from ._shell_completion import COMPLETE_ENV, candidates
from ._ui import UI

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``videogen`` with ``argv`` (``sys.argv[1:]`` when ``None``); return the exit code."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    current = os.environ.get(COMPLETE_ENV)
    if current is not None:  # a shell asks what may come next (videogen completion)
        sys.stdout.write("".join(f"{word}\n" for word in candidates(parser, words, current)))
        return EXIT_OK
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # --help, --version, or a usage error (argparse said why)
        command = command_for(words) if exc.code == EXIT_USAGE else None
        if command is not None:  # the SDK's words: `videogen tasks create`
            sys.stderr.write(f"videogen: did you mean `{command}`?\n")
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    debug = getattr(args, "debug", False)  # store_true flags: booleans, or not given at all
    ui = UI(json_mode=getattr(args, "json", False), debug=debug)
    ctx = Context(args, ui)
    # The SDK's records at ERROR are shown even without --debug: they carry what no other
    # channel could (a charged task id that neither the ledger nor its spool could record).
    with logging_to(ui.err, "DEBUG" if debug else "ERROR"):
        try:
            return ctx.run(args.func)
        except Exception as exc:  # one clear line, a traceback only with --debug
            return ctx.fail(unwrap_group(exc))
