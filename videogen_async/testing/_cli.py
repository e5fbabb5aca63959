"""Serving the sandbox from the command line: ``python -m videogen_async.testing``.

Once listening it prints, and flushes, three lines that a script can parse::

    videogen sandbox serving at http://127.0.0.1:8765 (Ctrl-C to stop)
    VIDEOGEN_BASE_URL=http://127.0.0.1:8765
    VIDEOGEN_API_KEY=sandbox-key

(the key line is printed only for the default sandbox key; a key given with ``--api-key`` is
not echoed). It serves until Ctrl-C or SIGTERM. ``--port 0`` picks a free port.
``--write-openapi PATH`` writes the OpenAPI document and exits.

:func:`add_sandbox_arguments`, :func:`sandbox_options_from_args`, :func:`serve` and
:func:`main` are reusable by other command lines (the project's ``videogen sandbox``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ._config import DEFAULT_API_KEY, Duration
from ._openapi import write_openapi
from ._server import SandboxServer

__all__ = ["DEFAULT_PORT", "add_sandbox_arguments", "main", "sandbox_options_from_args", "serve"]

DEFAULT_PORT = 8765
"""The port the command line serves on unless told otherwise."""


def _duration(text: str) -> Duration:
    """Parse ``30`` or ``20-40`` (seconds) into a duration setting."""
    low, sep, high = text.partition("-")
    try:
        if sep:
            return (float(low), float(high))
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (30) or a range (20-40), got {text!r}"
        ) from None


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def add_sandbox_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the sandbox's options to a parser.

    Args:
        parser: The parser (or sub-command parser) to extend.
    """
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port, 0 for any (default {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="real seconds per simulated second; 0.01 runs 100x faster (default 1)",
    )
    parser.add_argument("--seed", default=None, help="seed of every random draw")
    parser.add_argument(
        "--credits", type=float, default=10_000, help="starting balance (default 10000)"
    )
    parser.add_argument(
        "--api-key", default=None, help=f"the key to accept (default {DEFAULT_API_KEY!r})"
    )
    parser.add_argument(
        "--task-duration",
        type=_duration,
        default=(20.0, 40.0),
        help="simulated seconds a task runs: 30 or a range 20-40 (default 20-40)",
    )
    parser.add_argument(
        "--queue-delay", type=_duration, default=0.0, help="simulated seconds queued (default 0)"
    )
    parser.add_argument(
        "--failure-rate", type=_rate, default=0.0, help="share of tasks that end failed"
    )
    parser.add_argument("--error-rate", type=_rate, default=0.0, help="share that end error")
    parser.add_argument(
        "--project-failure-rate", type=_rate, default=0.0, help="share of projects that fail"
    )
    parser.add_argument(
        "--manual-clock",
        action="store_true",
        help="pause the clock; it moves only through POST /_sandbox/clock/advance",
    )
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="show log records of the videogen_async logger from this level on",
    )


def sandbox_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Turn parsed arguments into ``SandboxServer`` keyword arguments.

    Args:
        args: The namespace from a parser extended by :func:`add_sandbox_arguments`.

    Returns:
        The keyword arguments.
    """
    seed: int | str | None = args.seed
    if isinstance(seed, str) and seed.lstrip("-").isdigit():
        seed = int(seed)
    return {
        "host": args.host,
        "port": args.port,
        "time_scale": args.time_scale,
        "seed": seed,
        "credits": args.credits,
        "api_key": args.api_key or DEFAULT_API_KEY,
        "task_duration": args.task_duration,
        "queue_delay": args.queue_delay,
        "failure_rate": args.failure_rate,
        "error_rate": args.error_rate,
        "project_failure_rate": args.project_failure_rate,
        "manual_clock": args.manual_clock,
    }


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
    stop = stop or asyncio.Event()
    async with SandboxServer(**options) as server:
        if ready is not None:
            ready(server)
        await stop.wait()


def _announce(server: SandboxServer, *, show_key: bool) -> None:
    print(f"videogen sandbox serving at {server.base_url} (Ctrl-C to stop)", flush=True)
    print(f"VIDEOGEN_BASE_URL={server.base_url}", flush=True)
    if show_key:
        print(f"VIDEOGEN_API_KEY={server.api_key}", flush=True)
    else:
        print("# VIDEOGEN_API_KEY: the key given with --api-key", flush=True)


async def _serve_until_signal(options: dict[str, Any], show_key: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    await serve(ready=lambda s: _announce(s, show_key=show_key), stop=stop, **options)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """Serve the sandbox from the command line.

    Args:
        argv: The arguments (``sys.argv[1:]`` when omitted).
        prog: The program name shown in help.

    Returns:
        The exit status: 0 after Ctrl-C/SIGTERM or ``--write-openapi``, 2 for bad options
        (from argparse), 1 when the server could not start.
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
        write_openapi(args.write_openapi)
        return 0
    if args.log_level:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("videogen_async").setLevel(args.log_level.upper())
    # aiohttp logs a traceback for every malformed HTTP request it answers 400 (fuzzers send
    # many); show those only when asked for logs.
    aiohttp_server = logging.getLogger("aiohttp.server")
    level = aiohttp_server.level
    if not args.log_level:
        aiohttp_server.setLevel(logging.CRITICAL)
    options = sandbox_options_from_args(args)
    try:
        asyncio.run(_serve_until_signal(options, show_key=args.api_key is None))
    except KeyboardInterrupt:
        return 0
    except (OSError, ValueError) as exc:
        print(f"videogen sandbox: cannot start: {exc}", file=sys.stderr)
        return 1
    finally:
        aiohttp_server.setLevel(level)
    return 0
