"""The one entry point for tests, lint, types, docs and benchmarks.

``nox`` runs every gate; ``nox -s bench`` runs the benchmarks (not a gate).
"""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "tests_oldest", "lint", "types", "docs"]

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
# The oldest versions of the runtime dependencies we claim to support (pyproject's floors).
OLDEST = ["aiohttp==3.10.0", "attrs==23.1.0", "cattrs==23.2.1", "anyio==4.3.0"]
CI = bool(os.environ.get("CI"))


@nox.session(python=["3.13", "3.10"] if CI else PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite on the newest dependencies, with coverage and asyncio debug."""
    session.install("-e", ".[test,cli]")
    session.env["PYTHONASYNCIODEBUG"] = "1"
    session.run("coverage", "erase")
    session.run("coverage", "run", "-m", "pytest", *session.posargs)
    session.run("coverage", "combine", success_codes=[0, 1])
    session.run("coverage", "report")


@nox.session(python="3.10")
def tests_oldest(session: nox.Session) -> None:
    """Run the test suite on the oldest runtime dependencies we claim to support."""
    session.install("-e", ".[test,cli]", *OLDEST)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *session.posargs)


@nox.session(python="3.12")
def lint(session: nox.Session) -> None:
    """Ruff lint (with the async rules) and the format check."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python="3.12")
def types(session: nox.Session) -> None:
    """mypy --strict on the package, and on the typing test file that uses the public API."""
    session.install("-e", ".[test,cli]", "mypy>=1.11")
    session.run("mypy", "--strict", "videogen_async")
    session.run("mypy", "--strict", "tests/typing/public_api.py")


@nox.session(python="3.12")
def docs(session: nox.Session) -> None:
    """Build the docs site, strict (offline)."""
    session.install("-e", ".[docs,cli]")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session(python="3.12")
def bench(session: nox.Session) -> None:
    """Run the benchmarks against the sandbox (loopback only) and print their tables."""
    session.install("-e", ".[cli]")
    for script in sorted(os.listdir("bench")):
        if script.endswith(".py") and not script.startswith("_"):
            session.run("python", f"bench/{script}", *session.posargs)
