"""The recipes of ``docs/sync.md``, the blocking client's guide, hold what the page says.

``tests/test_docs.py`` runs every block of the page as it is; these tests take a recipe's code
from the page and check its claims with real threads and a real fork: the web app's accessor
gives every request thread of a process the one client, and a forked worker a client of its
own.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.test_docs import ROOT, ThreadedSandbox, blocks_of
from videogen_async import VideoGen
from videogen_async.testing import SandboxServer

PAGE = ROOT / "docs" / "sync.md"


def _recipe(containing: str, monkeypatch: pytest.MonkeyPatch, server: SandboxServer) -> Any:
    """Run the page's block that contains ``containing``, as the page's reader would."""
    (code,) = [b.code for b in blocks_of(PAGE) if b.info == "python" and containing in b.code]
    monkeypatch.setenv("VIDEOGEN_BASE_URL", server.base_url)
    monkeypatch.setenv("VIDEOGEN_API_KEY", server.api_key)
    namespace: dict[str, Any] = {"__name__": "sync_recipe", "print": lambda *_: None}
    exec(compile(code, str(PAGE), "exec"), namespace)  # noqa: S102
    return namespace


@pytest.fixture(scope="module")
def service() -> Iterator[SandboxServer]:
    with ThreadedSandbox(time_scale=0.002, seed=3) as server:
        yield server


@pytest.mark.parametrize("recipe", ["def start_video", "def render_video"])
def test_one_client_per_process_shared_by_its_threads_and_made_anew_after_a_fork(
    service: SandboxServer, monkeypatch: pytest.MonkeyPatch, recipe: str
) -> None:
    before = set(threading.enumerate())
    page = _recipe(recipe, monkeypatch, service)
    videogen = page["videogen"]
    together = threading.Barrier(10)

    def first_use(_: int) -> VideoGen:
        together.wait(10)  # ten request threads ask for the client at once
        client: VideoGen = videogen()
        return client

    with ThreadPoolExecutor(10) as threads:
        clients = set(threads.map(first_use, range(10)))
    (client,) = clients
    assert set(threading.enumerate()) == before  # the client runs in its callers' threads

    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # a worker forked after the parent used its client
        report: dict[str, Any] = {}
        try:
            mine = videogen()
            report = {
                "own": mine is not client,
                "credits": mine.credits.get().api_total_credits,
            }
            mine.close()
        except BaseException as exc:
            report = {"error": repr(exc)}
        finally:
            os.write(write, json.dumps(report).encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert report == {"own": True, "credits": 10_000}
    assert videogen() is client
    client.close()
