"""``videogen sandbox``: serve the sandbox (the whole service, in memory) on a port."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
from typing import Any

from ..testing import DEFAULT_API_KEY, sandbox_options_from_args, serve
from ..testing._cli import announce
from ._common import EXIT_OK, Context, UsageError

__all__ = ["cmd_sandbox"]


async def cmd_sandbox(ctx: Context) -> int:
    """Serve until Ctrl-C or SIGTERM, through the sandbox's own ``serve`` function."""
    if not ctx.args.time_scale > 0:
        raise UsageError(
            f"--time-scale must be a positive number of real seconds per simulated second,"
            f" got {ctx.args.time_scale:g} (0.01 runs 100x faster)"
        )
    if not 0 <= ctx.args.port <= 65535:
        raise UsageError(f"--port must be from 0 to 65535, got {ctx.args.port}")
    try:
        options: dict[str, Any] = sandbox_options_from_args(ctx.args)
    except ValueError as exc:
        raise UsageError(f"bad sandbox option: {exc}") from None
    show_key = ctx.args.api_key is None or options.get("api_key") == DEFAULT_API_KEY
    stop = asyncio.Event()
    ctx.stop_on_interrupt(stop.set)
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)

    def ready(server: Any) -> None:
        announce(server, show_key=show_key, write=ctx.ui.print)
        ctx.ui.note("try: videogen credits   (with the two variables above exported)")
        ctx.ui.note(f"console: {server.url('/_sandbox/console')}   (open it in a browser)")

    logger = logging.getLogger("videogen_async")
    level = logger.level
    handler: logging.Handler | None = None
    wanted = getattr(ctx.args, "log_level", None)
    if wanted and not ctx.ui.debug:  # --debug already logs everything to stderr
        handler = logging.StreamHandler(ctx.ui.err)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(str(wanted).upper())
    try:
        await serve(ready=ready, stop=stop, **options)
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise UsageError(
                f"cannot listen on {ctx.args.host}:{ctx.args.port}: {exc.strerror or exc}."
                " Choose another --port (--port 0 picks a free one)"
            ) from None
        raise
    except ValueError as exc:
        raise UsageError(f"bad sandbox option: {exc}") from None
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(level)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.remove_signal_handler(signal.SIGTERM)
    return EXIT_OK
