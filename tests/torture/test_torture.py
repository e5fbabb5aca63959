"""The ledger's promises under faults, checked on both engines (tests/torture, "Torture" in
docs/architecture.md).

Each run is ``python -m tests.torture.runner`` in a process of its own: fixed seeds, plus one
fresh seed per session (its number is in the test's id and in the output; ``--seed N``
replays it). The mutants' test applies each patch of ``mutants/`` to a copy of the package and
checks that the checker reports the defect it injects.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ledger.conftest import find_pg_bin

pytest.importorskip("standardwebhooks", reason="pip install standardwebhooks (test extra)")

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).with_name("mutants")
SECONDS = 15


def _fresh_seed() -> int:
    """One seed per session, the same in every pytest-xdist worker (their collections agree)."""
    if "TORTURE_SEED" in os.environ:
        return int(os.environ["TORTURE_SEED"])
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        return int(hashlib.sha256(run.encode()).hexdigest(), 16) % 10**6
    return random.SystemRandom().randrange(10**6)


SEEDS = [11, _fresh_seed()]  # one fixed, one fresh: a longer search is `nox -s torture`


def _run(engine: str, seed: int, folder: Path, *, package: Path | None = None) -> tuple[int, str]:
    if engine == "postgresql" and find_pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but the PostgreSQL server binaries (initdb, pg_ctl) are missing")
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
    paths = [str(package)] if package is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(ROOT)])}
    command = [
        sys.executable,
        "-m",
        "tests.torture.runner",
        "--seed",
        str(seed),
        "--seconds",
        str(SECONDS),
        "--engine",
        engine,
        "--folder",
        str(folder),
    ]
    # Started from the run's folder: the interpreter puts its working directory first on
    # sys.path, and a mutant's copy of the package must come before the checkout's.
    done = subprocess.run(  # noqa: S603
        command,
        cwd=folder.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=270,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("torture")
@pytest.mark.parametrize("seed", SEEDS, ids=lambda seed: f"seed{seed}")
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_the_ledger_keeps_its_promises_under_faults(engine: str, seed: int, tmp_path: Path) -> None:
    code, output = _run(engine, seed, tmp_path / "run")
    print(output)
    assert code == 0, (
        f"seed {seed} on {engine} (replay: python -m tests.torture.runner --seed {seed} --engine"
        f" {engine} --seconds {SECONDS}):\n{output}"
    )


def _mutant(path: Path) -> dict[str, str]:
    """The ``# name: value`` lines at the top of a mutant's patch."""
    header: dict[str, str] = {}
    name = ""
    for line in path.read_text().splitlines():
        if not line.startswith("# "):
            break
        if line.startswith("#   "):  # a value's next line
            header[name] += " " + line[4:].strip()
            continue
        name, _, value = line[2:].partition(":")
        header[name] = value.strip()
    return header


@pytest.mark.slow
@pytest.mark.xdist_group("torture")
@pytest.mark.parametrize("patch", sorted(MUTANTS.glob("*.diff")), ids=lambda path: path.stem)
def test_the_checker_reports_each_mutant(patch: Path, tmp_path: Path) -> None:
    header = _mutant(patch)
    copy = tmp_path / "package"
    shutil.copytree(ROOT / "videogen_async", copy / "videogen_async")
    applied = subprocess.run(  # noqa: S603
        ["patch", "-p1", "--batch", "--forward", "-d", str(copy), "-i", str(patch.resolve())],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if applied.returncode:
        pytest.fail(
            f"PATCH NO LONGER APPLIES: {patch.name} (intent: {header.get('intent')}); refresh it"
            f" against the package:\n{applied.stdout}{applied.stderr}"
        )
    code, output = _run(header["engine"], int(header["seed"]), tmp_path / "run", package=copy)
    print(output)
    reported = [line for line in output.splitlines() if line.startswith("VIOLATION")]
    assert any(header["expect"] in line for line in reported), (
        f"CHECKER MISSED IT: {patch.name} (intent: {header.get('intent')}) ran, and the checker"
        f" reported no {header['expect']!r} (exit status {code}):\n{output}"
    )
