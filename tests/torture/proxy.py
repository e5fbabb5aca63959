"""The network between the ledger processes and PostgreSQL: a TCP proxy the runner can cut or stall.

The runner starts one :class:`Proxy` on loopback in front of the throwaway cluster and gives the
workload processes a URL with the proxy's port; its own set-up and inspection connections go
to the server directly. Two faults act on every proxied connection at once:

* :meth:`Proxy.cut`: each socket, client side and server side, closed abruptly
  (``SO_LINGER`` 0, then ``transport.abort()``): the peer gets a reset, in the middle of a
  statement if one was on the wire, and the server sees its client vanish (a network that
  broke, not a backend that was terminated: nothing tells either side why);
* :meth:`Proxy.stall` until :meth:`Proxy.resume`: nothing is forwarded in either direction
  (what was read waits in the proxy, the rest in the kernel's buffers). A connection opened
  meanwhile is accepted but not connected to the server until the stall ends, as behind a
  link that drops packets: the client's connect timeout runs, not a refusal.

It is plain asyncio rather than anyio's streams: a cut must be an abort (a reset, no FIN
first), and anyio's ``aclose()`` writes an end of stream before it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from functools import partial

import anyio
import anyio.abc

CHUNK = 1 << 16
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a RST, not a FIN


class Proxy:
    """Forwards loopback connections on :attr:`port` to ``127.0.0.1:upstream``."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        # Every socket open through the proxy, both sides (a client waiting out a stall too).
        self._open: set[asyncio.StreamWriter] = set()

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept and forward until cancelled (then every connection is cut)."""
        server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        try:
            task_status.started(self.port)
            await server.serve_forever()
        finally:
            server.close()
            self.cut()

    def cut(self) -> int:
        """Reset every proxied connection, both sides, at once; return how many sockets."""
        cut = list(self._open)
        self._open.clear()
        for writer in cut:
            _abort(writer)
        return len(cut)

    def stall(self) -> None:
        """Stop forwarding in both directions (and connecting new clients) until resumed."""
        self._flowing.clear()

    @property
    def stalled(self) -> bool:
        """Whether forwarding is stopped (between :meth:`stall` and :meth:`resume`)."""
        return not self._flowing.is_set()

    def resume(self) -> None:
        """Forward again what waited, and connect the clients that came meanwhile."""
        self._flowing.set()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            await self._flowing.wait()
            if writer.transport.is_closing():
                return  # cut while it waited for a stall to end
            try:
                upstream = await asyncio.open_connection("127.0.0.1", self.upstream)
            except OSError:
                return  # the server is down: the client sees its connection closed
            self._open.add(upstream[1])
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._pump, reader, upstream[1])
                    tg.start_soon(self._pump, upstream[0], writer)
            finally:
                self._open.discard(upstream[1])
                upstream[1].transport.abort()
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One direction. An end of stream is passed on as a close, a reset as a reset.

        An end waits out a stall too: a server that crashed during one is heard of by its
        clients when the stall ends, as behind a link that passes nothing.
        """
        end = writer.close
        try:
            while data := await reader.read(CHUNK):
                await self._flowing.wait()
                if writer.transport.is_closing():
                    return  # cut meanwhile: what was read is dropped with the connection
                writer.write(data)
                await writer.drain()
        except OSError:
            end = partial(_abort, writer)
        await self._flowing.wait()
        end()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close at once with a reset (what is buffered is dropped)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    writer.transport.abort()
