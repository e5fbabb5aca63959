"""The docs site builds, strict and offline, and its reference reads as a user calls the SDK.

``mkdocs build --strict`` (the ``docs`` extra, which the ``test`` extra includes) writes the
site into a temporary directory; the rendered page of the client is read as text: the
blocking client's signature is the one a user calls, defaults are values, and no private
name of the package shows.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._services import require

ROOT = Path(__file__).resolve().parent.parent


def section(page: str, anchor: str, next_anchor: str) -> str:
    """The text of the reference from the heading ``anchor`` to ``next_anchor``, untagged."""
    start, end = page.index(f'id="{anchor}"'), page.index(f'id="{next_anchor}"')
    text = html.unescape(re.sub(r"<[^>]+>", "", page[start:end]))
    return re.sub(r"\n\s*\n+", "\n", text)


@pytest.mark.slow
def test_the_reference_shows_the_blocking_client_as_it_is_called(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "black"):
        require(module, "pip install -e '.[test]' (the docs extra) to build the docs site")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    built = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    page = (site / "reference" / "client" / "index.html").read_text()
    client = section(page, "videogen_async.VideoGen", "videogen_async._blocking.BlockingGather")
    # The signature of AsyncVideoGen but `session`, formatted one parameter a line.
    assert "VideoGen(\n    api_key: str | None = None,\n    base_url:" in client
    assert "session" not in client.split(")", 1)[0]
    assert "connection_limit: int = 100" in client
    assert "Timeout(" in client
    # The calls are methods with their signatures and their docs, returning plain results.
    assert "download(\n" in client
    assert "download_many(\n" in client
    assert re.search(r"with_options\(\n.*\) -> VideoGen", client, re.DOTALL)
    assert "Download a finished video to a file" in client
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for private in ("*args", "**kwargs", "DEFAULT_TIMEOUT", "DEFAULT_CONNECTION_LIMIT",
                    "DEFAULT_MAX_BODY", "_Namespace", "DownloadCalls", "AsyncClosing"):  # fmt: skip
        assert private not in text, private
