"""Fixtures of the ledger tests: a throwaway PostgreSQL cluster, ledger URLs of both engines.

The cluster is started by the suite itself: ``initdb`` and ``pg_ctl`` in a temporary directory,
listening on 127.0.0.1 at a free port, stopped at the end of the session. PostgreSQL refuses to
run as root, so under root it runs as the ``postgres`` user (``runuser``). Without the server
binaries the PostgreSQL tests are skipped with a message that says how to enable them; under
``CI`` they fail instead, so that CI never passes without them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator

import pytest

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """A running throwaway cluster."""

    def __init__(self, bin_dir: str) -> None:
        self.bin_dir = bin_dir
        self.root = tempfile.mkdtemp(prefix="videogen-pg-")
        self.data = os.path.join(self.root, "data")
        self.port = _free_port()
        self.as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        self.user = "postgres"

    def _run(self, *args: str) -> None:
        command = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode:
            raise RuntimeError(f"{args[0]} failed: {result.stdout}\n{result.stderr}")

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", self.data, "-U", self.user, "--auth=trust", "-E", "UTF8", "-N")
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            "pg_ctl",
            "-D",
            self.data,
            "-o",
            options,
            "-l",
            os.path.join(self.root, "log"),
            "-w",
            "start",
        )

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


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster for the session (skipped, or failed under CI, without)."""
    pytest.importorskip("asyncpg", reason="pip install 'videogen-async[postgres]'")
    bin_dir = find_pg_bin()
    if bin_dir is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {ENABLE_HINT}")
        pytest.skip(ENABLE_HINT)
    cluster = Cluster(bin_dir)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


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
