"""``videogen mcp``: the MCP server for AI agents (the ``mcp`` extra; see ``docs/agents.md``)."""

from __future__ import annotations

import argparse
import math
import os
import socket
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
The API key is read from VIDEOGEN_API_KEY only; over --http off loopback, callers need the bearer
token in VIDEOGEN_MCP_TOKEN.

examples:
  videogen mcp --max-credits 200                 # stdio, for desktop and coding agents
  videogen mcp --http 127.0.0.1:8787 --ledger postgresql://u:p@db:5432/videos"""


def default_ledger() -> Path:
    """The ledger file in the user's data directory (XDG, macOS or Windows)."""
    home = Path.home()
    if sys.platform == "darwin":
        base = home / "Library/Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData/Local")
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
    return base / "videogen/mcp-ledger.sqlite"


def _confirm_above(text: str) -> float:
    """``--confirm-above``: credits, or ``none`` (never ask: no create costs more than inf)."""
    return math.inf if text == "none" else credits_number(text)


#: A number of credits (``--max-credits``), as every command takes it.
credits_number = number_type(float, minimum=0, what="a number of credits")


def add_mcp_parser(command: Any) -> None:
    """Add ``videogen mcp`` through the parser's ``command`` helper."""
    p = command(
        "mcp",
        "serve the service to AI agents over the Model Context Protocol",
        MCP_EPILOG,
        func=cmd_mcp,
    )
    p.add_argument(
        "--ledger",
        metavar="URL",
        help=f"a file path, sqlite:///PATH or postgresql://... (default: {default_ledger()})",
    )
    p.add_argument(
        "--max-credits",
        type=credits_number,
        metavar="N",
        help="refuse a create that could take the ledger's spend past N (the operator's consent"
        " to spend up to N, for clients that cannot ask the user)",
    )
    p.add_argument(
        "--confirm-above",
        type=_confirm_above,
        default=0.0,
        metavar="CREDITS",
        help="ask the user (elicitation) before a create costing more (default 0: every create;"
        " none: never ask)",
    )
    p.add_argument(
        "--max-wait",
        type=number_type(float, minimum=1, maximum=600, what="seconds"),
        default=45.0,
        metavar="SECONDS",
        help="the longest a tool call waits (default 45: under hosts' 60 s limit)",
    )
    p.add_argument(
        "--base-url",
        dest="cfg_base_url",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="the service's base URL (default: $VIDEOGEN_BASE_URL)",
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at /mcp, not stdio (e.g. 127.0.0.1:8787, not the sandbox's"
        " 8765)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --http listen off loopback (callers then need the bearer token of"
        " VIDEOGEN_MCP_TOKEN)",
    )


def listen(value: str, token: str, *, remote: bool = False) -> socket.socket:
    """The socket of ``--http HOST:PORT``, or one line saying what to do instead.

    Off loopback, ``--allow-remote`` (``remote``) and a token are required: anyone reaching the
    port could spend credits, so both the operator's intent and the callers' secret are asked.
    """
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not (host and port.isdigit() and 0 < int(port) < 65536):
        raise UsageError(f"--http: expected HOST:PORT (e.g. 127.0.0.1:8787), got {value!r}")
    if not (remote and token) and not is_loopback(host):
        raise UsageError(
            f"--http {value}: {host} is not loopback; anyone reaching it could spend credits."
            " Serving other machines needs --allow-remote and VIDEOGEN_MCP_TOKEN set to a secret"
            " the callers send as a bearer token"
        )
    try:
        return socket.create_server(
            (host, int(port)), family=socket.AF_INET6 if ":" in host else socket.AF_INET
        )
    except OSError as exc:
        raise UsageError(
            f"--http {value}: cannot listen there ({exc.strerror}): another server holds the"
            " port, or the address is not this machine's; stop it or choose another port"
        ) from None


async def cmd_mcp(ctx: Context) -> int:
    """``videogen mcp``: serve until the client goes away (or Ctrl-C)."""
    args = ctx.args
    if getattr(args, "cfg_api_key", None) or not os.environ.get("VIDEOGEN_API_KEY", "").strip():
        raise UsageError("videogen mcp reads the API key from VIDEOGEN_API_KEY only: set it")
    token = os.environ.get("VIDEOGEN_MCP_TOKEN", "").strip()
    sock = None if args.http is None else listen(args.http, token, remote=args.allow_remote)
    url = args.ledger or default_ledger()
    if args.ledger is None:
        await anyio.Path(url.parent).mkdir(parents=True, exist_ok=True)

    async def work(client: AsyncVideoGen) -> int:
        async with Ledger.open(url, max_credits=args.max_credits) as ledger:
            if sock is not None:
                ctx.ui.note(f"videogen mcp: serving http://{args.http}/mcp")
            await serve(
                ledger,
                client,
                http=sock,
                token=token,
                max_wait=args.max_wait,
                confirm_above=args.confirm_above,
            )
        return EXIT_OK

    return await ctx.with_client(work)
