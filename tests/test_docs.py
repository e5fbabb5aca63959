"""Every code block of the docs (``docs/*.md``) and of ``README.md`` runs.

The fence's info string says what a block is:

* ``python``: a complete program. It runs as ``__main__`` in a fresh namespace, with
  ``VIDEOGEN_BASE_URL`` and ``VIDEOGEN_API_KEY`` naming a sandbox (fast clock) served from a
  background thread, as a reader's environment would name the service. It must finish
  without an exception within ``PROGRAM_TIMEOUT`` seconds and print something. A block
  with a top-level ``await`` is a notebook cell: it runs on an event loop of its own, as
  Jupyter runs a cell. All programs
  run at once, each in a thread of its own, in one temporary working directory, under the
  blocking-call detector.
* ``pytest``: a test module of a user's own suite. All of them are written to one temporary
  directory and run by pytest in a subprocess, with only the installed ``videogen_sandbox``
  plugin and ``asyncio_mode = auto``; every test in them must pass.
* A python-looking fence that includes a file (``--8<--``) shows an example from
  ``examples/``; ``tests/test_examples.py`` runs those.
* Any other python-like info string (``py``, ``python3``, ``pycon``, ``py-fragment``) is an
  error: each block must say which of the above it is, so every block of Python runs. Other
  languages (``bash``, ``text``, ``toml``...) are not code to run.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import importlib
import inspect
import io
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests._blocking import no_blocking_calls
from videogen_async.testing import SandboxServer

# One module fixture runs every block at once: keep the module in one xdist worker.
pytestmark = pytest.mark.xdist_group("docs")

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
PROGRAM_TIMEOUT = 60.0
RUN = "python"
TEST = "pytest"
PYTHON_LIKE = re.compile(r"^(i?py|python|pycon)")
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)(?P<rest>.*)$"
)


@attrs.frozen
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    info: str
    code: str

    def __repr__(self) -> str:
        return f"Block({self.name})"

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, dedented (fences may sit in tabs, notes)."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if opening is None:
            continue
        indent, fence = opening["indent"], opening["fence"]
        start = index
        while index < len(lines):
            closing = lines[index].strip()
            if closing.startswith(fence[0] * len(fence)) and not closing.strip(fence[0]):
                break
            index += 1
        body = "\n".join(line[len(indent) :] for line in lines[start:index])
        found.append(Block(page, start, opening["info"].lower(), textwrap.dedent(body)))
        index += 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def _select(*infos: str) -> list[Any]:
    return [
        pytest.param(block, id=block.name)
        for block in ALL_BLOCKS
        if block.info in infos and "--8<--" not in block.code
    ]


def test_the_docs_have_code_to_run() -> None:
    assert _select(RUN), "no runnable python block found: is the fence parser broken?"
    assert _select(TEST)


def _unclear(blocks: list[Block]) -> list[Block]:
    """The python-looking blocks that would not run: neither ``python`` nor ``pytest``."""
    return [b for b in blocks if PYTHON_LIKE.match(b.info) and b.info not in (RUN, TEST)]


def test_every_python_block_says_what_it_is() -> None:
    unclear = [f"{block.name} ({block.info})" for block in _unclear(ALL_BLOCKS)]
    assert not unclear, f"use ```python or ```pytest (blocks that run), not: {unclear}"


def test_a_block_that_would_not_run_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    fences = ["py-fragment", "py", "python3", "pycon", "ipython", "python", "pytest", "bash"]
    page.write_text("".join(f"```{info}\nx = 1\n```\n" for info in fences), encoding="utf-8")
    refused = [block.info for block in _unclear(blocks_of(page))]
    assert refused == ["py-fragment", "py", "python3", "pycon", "ipython"]


def test_included_files_exist() -> None:
    for block in ALL_BLOCKS:
        for target in re.findall(r'--8<--\s+"([^"]+)"', block.code):
            assert (ROOT / target).is_file(), f"{block.name} includes a missing {target}"


# --------------------------------------------------------------------------------------------
# ```python: complete programs
# --------------------------------------------------------------------------------------------


class ThreadedSandbox:
    """A sandbox served by its own event loop in a background thread.

    The programs under test call ``asyncio.run`` themselves, so the sandbox cannot share
    their loop.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.server: SandboxServer | None = None

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with SandboxServer(**self._options) as server:
            self.server = server
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> SandboxServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the sandbox did not start")
        assert self.server is not None
        return self.server

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@attrs.define
class ProgramRun:
    """One program block running in a thread of its own."""

    block: Block = attrs.field(repr=lambda block: block.name)
    output: io.StringIO = attrs.field(factory=io.StringIO, repr=False)
    error: BaseException | None = None
    thread: threading.Thread | None = attrs.field(default=None, repr=False)

    def start(self) -> None:
        def print_to_output(*args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("file", self.output)
            print(*args, **kwargs)

        namespace = {"__name__": "__main__", "print": print_to_output}

        def target() -> None:
            try:
                # Padded so that a traceback's line numbers are the page's.
                source = "\n" * self.block.line + self.block.code
                flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                code = compile(source, str(self.block.page), "exec", flags=flags)
                if code.co_flags & inspect.CO_COROUTINE:  # a notebook cell
                    asyncio.run(eval(code, namespace))  # noqa: S307
                else:
                    exec(code, namespace)  # noqa: S102
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=target, name=self.block.name, daemon=True)
        self.thread.start()


@attrs.frozen
class DocsRun:
    """What running the docs' code gave: each program's run, and pytest's on the modules."""

    programs: dict[str, ProgramRun] = attrs.field(repr=False)
    pytest_status: int
    pytest_output: str = attrs.field(repr=False)
    expected_tests: int


def _write_user_suite(directory: Path, blocks: list[Block]) -> int:
    """Write the ``pytest`` blocks as test modules; return how many tests they hold."""
    for block in blocks:
        stem = re.sub(r"\W", "_", block.name.removesuffix(".md").split(":")[0])
        (directory / f"test_{stem}_{block.line}.py").write_text(block.code, encoding="utf-8")
    (directory / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n",
        encoding="utf-8",
    )
    return sum(len(re.findall(r"^(?:async )?def test_", b.code, re.MULTILINE)) for b in blocks)


@pytest.fixture(scope="module")
def docs_run(tmp_path_factory: pytest.TempPathFactory) -> DocsRun:
    """Run every program and the users' test modules, all at once.

    Most of their time is spent waiting for simulated videos, so they run concurrently: the
    programs each in a thread (under the blocking-call detector), the test modules in one
    pytest subprocess.
    """
    suite = tmp_path_factory.mktemp("user-suite")
    expected = _write_user_suite(suite, [param.values[0] for param in _select(TEST)])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIDEOGEN_"))}
    pytest_run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=suite,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        runs = _run_programs(tmp_path_factory.mktemp("programs"))
        output, _ = pytest_run.communicate(timeout=120)
    finally:
        if pytest_run.poll() is None:
            pytest_run.kill()
            pytest_run.communicate()
    return DocsRun(runs, pytest_run.returncode, output, expected)


def _import_first(blocks: list[Block]) -> None:
    """Import what the programs import, once, in this thread, before they start.

    Two threads importing one module for the first time can see it half made (an
    ``ImportError``), and pytest's rewriting of a plugin's module (``aiohttp.test_utils``)
    calls ``ast.parse``, which is not safe to run in two threads at once on Python 3.11.
    """
    for block in blocks:
        for node in ast.walk(ast.parse(block.code)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                with contextlib.suppress(ImportError):  # the program itself will say
                    importlib.import_module(name)


def _run_programs(workdir: Path) -> dict[str, ProgramRun]:
    runs = {param.id: ProgramRun(param.values[0]) for param in _select(RUN)}
    _import_first([run.block for run in runs.values()])
    # 200 times faster than real: a 20-40 s generation takes 0.1-0.2 s.
    with ThreadedSandbox(time_scale=0.005, seed=11) as service, pytest.MonkeyPatch.context() as mp:
        mp.setenv("VIDEOGEN_BASE_URL", service.base_url)
        mp.setenv("VIDEOGEN_API_KEY", service.api_key)
        mp.chdir(workdir)
        with no_blocking_calls():
            for run in runs.values():
                run.start()
            deadline = time.monotonic() + PROGRAM_TIMEOUT
            for run in runs.values():
                assert run.thread is not None
                run.thread.join(max(0.0, deadline - time.monotonic()))
    return runs


@pytest.mark.parametrize("block", _select(RUN))
def test_program_runs(block: Block, docs_run: DocsRun) -> None:
    run = docs_run.programs[block.name]
    assert run.thread is not None
    if run.thread.is_alive():
        pytest.fail(f"{block.name} did not finish within {PROGRAM_TIMEOUT:g} s")
    if run.error is not None:
        raise run.error
    assert run.output.getvalue().strip(), f"{block.name} printed nothing"
    # What a reader sees is what the types say: an enum prints as its value, not its repr.
    assert not re.search(r"<\w+\.\w+: '", run.output.getvalue()), run.output.getvalue()


# --------------------------------------------------------------------------------------------
# ```pytest: users' test modules
# --------------------------------------------------------------------------------------------


def test_user_test_modules_pass(docs_run: DocsRun) -> None:
    summary = (docs_run.pytest_output.strip().splitlines() or ["(no output)"])[-1]
    assert docs_run.pytest_status == 0, docs_run.pytest_output
    assert re.match(rf"{docs_run.expected_tests} passed in ", summary), summary
