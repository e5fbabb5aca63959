"""The torture runner's network faults (tests/torture/proxy.py): what a cut and a stall do.

Against a small echo server on loopback for the byte stream, and against a throwaway
PostgreSQL for what the ledger's driver sees: a reset in the middle of a statement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from tests.ledger.conftest import Cluster, _cluster
from tests.torture.proxy import Proxy


class Echo:
    """Echoes each connection's bytes; records whether any arrived while the proxy stalled."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.accepted = 0
        self.while_stalled = False
        self.lost = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        try:
            while data := await reader.read(1024):
                self.while_stalled |= self.proxy.stalled
                writer.write(data)
                await writer.drain()
        except ConnectionResetError:
            self.lost.set()
        finally:
            writer.close()


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    proxy = Proxy(0)
    echo = Echo(proxy)
    server = await asyncio.start_server(echo.handle, "127.0.0.1", 0)
    proxy.upstream = server.sockets[0].getsockname()[1]
    # A task of its own, not a task group held across the yield to the test.
    serving = asyncio.ensure_future(proxy.serve())
    async with server:
        while not proxy.port:
            await asyncio.sleep(0)
        yield echo
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def _turns(count: int = 50) -> None:
    """Let the event loop run (a proxy that forwarded would have done so meanwhile)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_a_cut_resets_both_sides_mid_stream(echo: Echo) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", echo.proxy.port)
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"
    assert echo.proxy.cut() == 2  # the client's socket and the server's
    with pytest.raises(ConnectionResetError):
        await reader.read(1)  # a reset, not an end of stream
    await echo.lost.wait()  # the server's side was reset too
    writer.close()


async def test_a_stall_holds_bytes_and_new_connections_until_it_ends(echo: Echo) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", echo.proxy.port)
    writer.write(b"a")
    assert await reader.readexactly(1) == b"a"
    echo.proxy.stall()
    writer.write(b"held")
    await writer.drain()
    # Accepted by the proxy, not connected to the server until the stall ends.
    late_reader, late_writer = await asyncio.open_connection("127.0.0.1", echo.proxy.port)
    late_writer.write(b"late")
    await _turns()
    assert echo.accepted == 1
    echo.proxy.resume()
    assert await reader.readexactly(4) == b"held"
    assert await late_reader.readexactly(4) == b"late"
    assert echo.accepted == 2
    assert not echo.while_stalled
    for w in (writer, late_writer):
        w.close()


async def test_a_stall_ended_by_a_cut_forwards_nothing_held(echo: Echo) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", echo.proxy.port)
    writer.write(b"a")
    assert await reader.readexactly(1) == b"a"
    echo.proxy.stall()
    writer.write(b"dropped")
    _, waiting = await asyncio.open_connection("127.0.0.1", echo.proxy.port)
    await _turns()
    assert echo.proxy.cut() == 3  # the waiting client's socket too
    echo.proxy.resume()
    with pytest.raises(ConnectionResetError):
        await reader.read(1)
    await echo.lost.wait()
    assert echo.accepted == 1
    assert not echo.while_stalled
    for w in (writer, waiting):
        w.close()


async def test_an_end_of_stream_waits_out_a_stall_too(echo: Echo) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", echo.proxy.port)
    writer.write(b"a")
    assert await reader.readexactly(1) == b"a"
    echo.proxy.stall()
    echo.writers[0].close()  # the server ends the connection during the stall
    await echo.writers[0].wait_closed()
    await _turns()
    assert not reader.at_eof()
    echo.proxy.resume()
    assert await reader.read(1) == b""
    writer.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    yield from _cluster()


async def test_the_driver_sees_a_reset_in_the_middle_of_a_statement(cluster: Cluster) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    proxy = Proxy(cluster.port)
    async with anyio.create_task_group() as tg:
        port = await tg.start(proxy.serve)
        conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres")
        assert await conn.fetchval("SELECT 1") == 1
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        statement = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(60)"))
        # Cut once the server runs the statement (read directly, not through the proxy).
        admin = await asyncpg.connect(cluster.url())
        try:
            while not await admin.fetchval(
                "SELECT state = 'active' FROM pg_stat_activity WHERE pid = $1", pid
            ):
                await asyncio.sleep(0.01)
            proxy.cut()
            with pytest.raises((ConnectionError, asyncpg.ConnectionDoesNotExistError)):
                await statement
        finally:
            await admin.close()
            conn.terminate()
        tg.cancel_scope.cancel()
