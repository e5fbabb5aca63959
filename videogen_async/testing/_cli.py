"""Serving the sandbox from the command line: ``python -m videogen_async.testing``.

Once listening it prints and flushes where it serves (:func:`announce`: the URL, then
``VIDEOGEN_BASE_URL=...`` and, for the default key only, ``VIDEOGEN_API_KEY=...``) and serves
until Ctrl-C or SIGTERM; ``--write-openapi PATH`` writes the OpenAPI document and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._contract._argtypes import number_type
from ._config import DEFAULT_API_KEY, Duration
from ._openapi import write_openapi
from ._server import SandboxServer

DEFAULT_PORT = 8765
"""The port the command line serves on unless told otherwise."""

_DEFAULTS = {n: p.default for n, p in inspect.signature(SandboxServer).parameters.items()}


def _duration(text: str) -> Duration:
    """``30`` or ``20-40`` (seconds) as a duration setting."""
    low, sep, high = text.partition("-")
    try:
        return (float(low), float(high)) if sep else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (30) or a range (20-40), got {text!r}"
        ) from None


_time_scale = number_type(float, minimum=0, strict=True, what="real seconds per simulated second")
_port = number_type(int, minimum=0, maximum=65535, what="a port")
_rate = number_type(float, minimum=0, maximum=1)

# Each valued option: its flag, type, default and help.
_OPTIONS = (
    ("--host", str, _DEFAULTS["host"], "interface (default %(default)s)"),
    ("--port", _port, DEFAULT_PORT, "port, 0 for any (default %(default)s)"),
    (
        "--time-scale",
        _time_scale,
        _DEFAULTS["time_scale"],
        "real seconds per simulated second; 0.01 runs 100x faster (default %(default)g)",
    ),
    # A seed is only ever written into the seeds' strings: "1" seeds as 1 does.
    ("--seed", str, None, "seed of every random draw"),
    ("--credits", float, _DEFAULTS["credits"], "starting balance (default %(default)g)"),
    ("--api-key", str, None, f"the key to accept (default {DEFAULT_API_KEY!r})"),
    (
        "--task-duration",
        _duration,
        _DEFAULTS["task_duration"],
        "simulated seconds a task runs: 30 or a range 20-40 (default {:g}-{:g})".format(
            *_DEFAULTS["task_duration"]
        ),
    ),
    (
        "--queue-delay",
        _duration,
        _DEFAULTS["queue_delay"],
        "simulated seconds queued (default %(default)g)",
    ),
    ("--failure-rate", _rate, 0.0, "share of tasks that end failed"),
    ("--error-rate", _rate, 0.0, "share that end error"),
    ("--project-failure-rate", _rate, 0.0, "share of projects that fail"),
)


def add_sandbox_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sandbox's options to a parser (their defaults are ``SandboxServer``'s).

    Args:
        parser: The parser (or sub-command parser) to extend.
    """
    add = parser.add_argument
    for flag, kind, default, text in _OPTIONS:
        add(flag, type=kind, default=default, help=text)
    add(
        "--manual-clock",
        action="store_true",
        help="pause the clock; it moves only through POST /_sandbox/clock/advance",
    )
    add(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="show log records of the videogen_async logger from this level on",
    )


def sandbox_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``SandboxServer`` keyword arguments of options from :func:`add_sandbox_arguments`.

    Every option named as one of ``SandboxServer``'s arguments is one (``--log-level`` and the
    options of a larger command line are not); no ``--api-key`` is the default key.
    """
    return {name: value for name, value in vars(args).items() if name in _DEFAULTS} | {
        "api_key": args.api_key or DEFAULT_API_KEY
    }


def announce(server: SandboxServer, *, show_key: bool, write: Callable[[str], Any]) -> None:
    """Write (with ``write``, one line a call) the three lines that say where it serves.

    ``show_key``: print the key (the default key is no secret; a given one is not echoed).
    """
    write(f"videogen sandbox serving at {server.base_url} (Ctrl-C to stop)")
    write(f"VIDEOGEN_BASE_URL={server.base_url}")
    write(
        f"VIDEOGEN_API_KEY={server.api_key}"
        if show_key
        else "# VIDEOGEN_API_KEY: the key given with --api-key"
    )


async def serve(
    *,
    ready: Callable[[SandboxServer], None] | None = None,
    stop: asyncio.Event | None = None,
    **options: Any,
) -> None:
    """Run a sandbox until ``stop`` is set or the task is cancelled.

    Args:
        ready: Called with the started server (e.g. to print its URL).
        stop: An event that ends serving when set; without it, serve until cancelled.
        **options: ``SandboxServer`` keyword arguments.
    """
    async with SandboxServer(**options) as server:
        if ready is not None:
            ready(server)
        await (stop or asyncio.Event()).wait()


async def _serve_until_signal(options: dict[str, Any], show_key: bool) -> None:
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await serve(
        ready=lambda s: announce(s, show_key=show_key, write=lambda t: print(t, flush=True)),
        stop=stop,
        **options,
    )


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Serve the sandbox from the command line (``argv``: ``sys.argv[1:]`` when omitted).

    Returns:
        0 after Ctrl-C/SIGTERM or ``--write-openapi``, 2 for bad options, 1 when the server
        could not start or the document could not be written.
    """
    parser = argparse.ArgumentParser(
        prog=prog or "python -m videogen_async.testing",
        description="Serve the videogen sandbox: the whole video generation service in"
        " memory, on loopback.",
    )
    add_sandbox_arguments(parser)
    parser.add_argument(
        "--write-openapi", metavar="PATH", help="write the OpenAPI document to PATH and exit"
    )
    args = parser.parse_args(argv)
    if args.write_openapi:
        try:
            write_openapi(args.write_openapi)
        except OSError as exc:  # a full disk, a folder not writable: nothing was written
            print(f"videogen sandbox: writing {args.write_openapi} failed: {exc}", file=sys.stderr)
            return 1
        return 0
    # aiohttp logs a traceback for every malformed HTTP request it answers 400 (fuzzers send
    # many); show those only when asked for logs.
    aiohttp_server = logging.getLogger("aiohttp.server")
    level = aiohttp_server.level
    if args.log_level:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("videogen_async").setLevel(args.log_level.upper())
    else:
        aiohttp_server.setLevel(logging.CRITICAL)
    try:
        asyncio.run(_serve_until_signal(sandbox_options_from_args(args), args.api_key is None))
    except KeyboardInterrupt:
        return 0
    except (OSError, ValueError) as exc:
        print(f"videogen sandbox: cannot start: {exc}", file=sys.stderr)
        return 1
    finally:
        aiohttp_server.setLevel(level)
    return 0
