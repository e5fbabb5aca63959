"""Fixtures of the ledger tests: throwaway PostgreSQL clusters, ledger URLs of both engines.

A cluster is started by the suite itself: ``initdb`` and ``pg_ctl`` in a temporary directory,
listening on 127.0.0.1 at a free port. PostgreSQL refuses to run as root, so under root it runs
as the ``postgres`` user (``runuser``). Without the server binaries the PostgreSQL tests are
skipped with a message that says how to enable them; under ``CI`` they fail instead, so that CI
never passes without them. ``postgres_cluster`` is shared by the session; ``fault_cluster`` is
a module's own, which its tests stop, restart and whose backends they terminate (those tests
share an ``xdist_group`` so that one worker runs them, one after the other).

Every test keeps the answers its ledgers could not record in a spool of its own
(``VIDEOGEN_LEDGER_SPOOL``), never in the user's.
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

if TYPE_CHECKING:
    from ._hooks import Receiver

ENABLE_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found: install PostgreSQL"
    " (apt-get install postgresql) or put its bin directory on PATH to run these tests"
)


def find_pg_bin() -> str | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, or under /usr/lib/postgresql."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return os.path.dirname(os.path.realpath(found))
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "pg_ctl")) and os.path.exists(
            os.path.join(candidate, "initdb")
        ):
            return candidate
    return None


def _free_port() -> int:
    """A free port below the ephemeral range, where ``bind(0)`` never looks.

    A cluster crashed and restarted needs its port again: one from the ephemeral range could be
    handed meanwhile to another test's server (``bind(0)``) or outgoing connection.
    """
    with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as ports:
        low = int(ports.read().split()[0])
    for _ in range(200):
        port = random.randrange(10_000, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between 10000 and {low}")


class Cluster:
    """A running throwaway cluster."""

    def __init__(self, bin_dir: str, *, crashes: bool = False) -> None:
        self.bin_dir = bin_dir
        # A crash (an immediate stop) keeps what was committed only if commits wait for the
        # WAL to reach the system (never mind the disk: the machine does not crash).
        self.commit = "on" if crashes else "off"
        self.root = tempfile.mkdtemp(prefix="videogen-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = _free_port()
        self.as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        self.user = "postgres"
        self._stopped: anyio.Event | None = None  # set once the last crash has ended

    def _command(self, *args: str) -> list[str]:
        command = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return command

    def _run(self, *args: str) -> None:
        _run_command(self._command(*args))

    def _start_command(self) -> list[str]:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            f" -c synchronous_commit={self.commit} -c full_page_writes=off"
            " -c max_connections=200"
        )
        log = os.path.join(self.root, "log")
        return self._command("pg_ctl", "-D", self.data, "-o", options, "-l", log, "-w", "start")

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", self.data, "-U", self.user, "--auth=trust", "-E", "UTF8", "-N")
        for attempt in range(3):
            command = self._start_command()
            started = subprocess.run(command, check=False, capture_output=True, text=True)  # noqa: S603
            if started.returncode == 0:
                return
            # The free port found may be taken by another process before the server binds it
            # (the suite starts many servers at once): another port, then the server's log.
            if attempt < 2:
                self.port = _free_port()
        with open(os.path.join(self.root, "log"), encoding="utf-8", errors="replace") as log:
            raise RuntimeError(
                f"pg_ctl start failed: {started.stdout}{started.stderr}\n{log.read()}"
            )

    async def crash(self) -> None:
        """Stop the server at once, as a crash or a failover would (``-m immediate``)."""
        stop = self._command("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        stopped = self._stopped = anyio.Event()
        try:
            await _run_whole(stop)
        finally:
            stopped.set()

    async def restart(self) -> None:
        """Start the stopped server again (it recovers what was committed).

        A test restarts the server as soon as a ledger meets the outage, which may be before the
        crash's ``pg_ctl`` has seen the old server gone: started then, the new server would be
        the one that ``pg_ctl`` waits for (a minute, then it fails). The restart waits for it.
        """
        if self._stopped is not None:  # made in the crash: anyio's oldest need a running loop
            await self._stopped.wait()
        await _run_whole(self._start_command())

    async def terminate_backends(self, database: str) -> int:
        """Kill every connection to ``database`` (as a pooler or an administrator would)."""
        import asyncpg

        admin = await asyncpg.connect(self.url())
        try:
            killed = await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = $1 AND pid <> pg_backend_pid()",
                database,
            )
        finally:
            await admin.close()
        return len(killed)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def new_database(self) -> str:
        """Create an empty database; return its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name)
        return self.url(name)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"


def _run_command(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode:
        raise RuntimeError(f"{command} failed: {result.stdout}\n{result.stderr}")


async def _run_whole(command: list[str]) -> None:
    """Run ``command`` to its end in a worker thread, even if the caller is cancelled meanwhile.

    A test's crash may be made from code the ledger cancels (a delivery whose lease runs out in
    the very outage it causes): the command is still waited for and reaped, the crash whole,
    never a ``pg_ctl`` left running with its pipe to be found unclosed by a later test.
    """
    await anyio.to_thread.run_sync(_run_command, command)


def _cluster(*, crashes: bool = False) -> Iterator[Cluster]:
    pytest.importorskip("asyncpg", reason="pip install 'videogen-async[postgres]'")
    bin_dir = find_pg_bin()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {ENABLE_HINT}")
        pytest.skip(ENABLE_HINT)
    cluster = Cluster(bin_dir, crashes=crashes)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster for the session (skipped, or failed under CI, without)."""
    yield from _cluster()


@pytest.fixture(scope="module")
def fault_cluster() -> Iterator[Cluster]:
    """A module's own cluster, for tests that crash it, restart it, kill its connections."""
    yield from _cluster(crashes=True)


@pytest.fixture
def fault_url(fault_cluster: Cluster) -> Iterator[str]:
    """A fresh database of the module's own cluster (running again after the test)."""
    yield fault_cluster.new_database()
    if subprocess.run(fault_cluster._command("pg_ctl", "-D", fault_cluster.data, "status"),  # noqa: S603
                      capture_output=True, check=False).returncode:  # fmt: skip
        subprocess.run(fault_cluster._start_command(), capture_output=True, check=True)  # noqa: S603


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook receiver checking deliveries with the ``standardwebhooks`` package."""
    pytest.importorskip("standardwebhooks", reason="pip install standardwebhooks (test extra)")
    from ._hooks import serve

    async with serve() as found:
        yield found


@pytest.fixture(autouse=True)
def _own_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The spool of the test's ledgers (inherited by the processes it starts)."""
    spool = tmp_path / "spool"
    monkeypatch.setenv("VIDEOGEN_LEDGER_SPOOL", str(spool))
    return spool


@pytest.fixture
def postgres_url(postgres_cluster: Cluster) -> str:
    """The URL of a fresh, empty database of the cluster."""
    return postgres_cluster.new_database()


@pytest.fixture
def sqlite_url(tmp_path: os.PathLike[str]) -> str:
    """A path for a fresh SQLite ledger."""
    return os.path.join(os.fspath(tmp_path), "ledger.db")


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_url(request: pytest.FixtureRequest) -> str:
    """A fresh ledger URL of each engine."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("postgres_url"))
