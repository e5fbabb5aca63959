"""``videogen mcp``: the MCP server for AI agents (the ``mcp`` extra; see ``docs/agents.md``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import anyio

from .. import AsyncVideoGen, Ledger
from .._contract._argtypes import number_type
from .._http._session import is_loopback
from .._mcp import serve
from ._common import EXIT_OK, Context, UsageError

MCP_EPILOG = """\
The API key is read from VIDEOGEN_API_KEY only.

examples:
  videogen mcp --max-credits 200                 # stdio, for desktop and coding agents
  videogen mcp --http 127.0.0.1:8765 --ledger postgresql://u:p@db:5432/videos"""


def default_ledger() -> Path:
    """The ledger file in the user's data directory (XDG, macOS or Windows)."""
    home = Path.home()
    if sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / "videogen" / "mcp-ledger.sqlite"


def add_mcp_parser(command: Any) -> None:
    """Add ``videogen mcp`` through the parser's ``command`` helper."""
    p = command("mcp", "serve the service to AI agents over the Model Context Protocol",
                MCP_EPILOG)  # fmt: skip
    p.add_argument("--ledger", metavar="URL", help="a file path, sqlite:///PATH or postgresql://"
                   f"... (default: {default_ledger()})")  # fmt: skip
    credits = number_type(float, minimum=0, what="a number of credits")
    p.add_argument("--max-credits", type=credits, metavar="N",
                   help="refuse a create that could take the ledger's spend past N")  # fmt: skip
    p.add_argument("--base-url", dest="cfg_base_url", metavar="URL", default=argparse.SUPPRESS,
                   help="the service's base URL (default: $VIDEOGEN_BASE_URL)")  # fmt: skip
    p.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at /mcp, not stdio")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow --http off loopback (read docs/agents.md first)")  # fmt: skip
    p.set_defaults(func=cmd_mcp)


def parse_http(value: str, allow_remote: bool) -> tuple[str, int]:
    """``HOST:PORT`` of ``--http``, loopback unless ``allow_remote``."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--http: expected HOST:PORT (e.g. 127.0.0.1:8765), got {value!r}")
    if not allow_remote and not is_loopback(host):
        raise UsageError(
            f"--http {value}: {host} is not loopback; anyone reaching it could spend credits up"
            " to the cap. Add --allow-remote behind an authenticating proxy (docs/agents.md)"
        )
    return host, int(port)


async def cmd_mcp(ctx: Context) -> int:
    """``videogen mcp``: serve until the client goes away (or Ctrl-C)."""
    args = ctx.args
    if getattr(args, "cfg_api_key", None) or not os.environ.get("VIDEOGEN_API_KEY", "").strip():
        raise UsageError("videogen mcp reads the API key from VIDEOGEN_API_KEY only: set it")
    http = None if args.http is None else parse_http(args.http, args.allow_remote)
    url = args.ledger or default_ledger()
    if args.ledger is None:
        await anyio.Path(url.parent).mkdir(parents=True, exist_ok=True)

    async def work(client: AsyncVideoGen) -> int:
        async with Ledger.open(url, max_credits=args.max_credits) as ledger:
            if http is not None:
                ctx.ui.note(f"videogen mcp: serving http://{http[0]}:{http[1]}/mcp")
            await serve(ledger, client, http=http)
        return EXIT_OK

    return await ctx.with_client(work)
