"""What is released: the sdist and the wheel carry the license, and an install finds it.

``python -m build`` makes the sdist and, from it, the wheel (as a release does); the wheel is
installed into a fresh virtual environment, whose Python reads the license text and the
project's metadata through ``importlib.metadata``. The wheel's description (the index's page)
links nowhere relative; the sdist's tests collect from the sdist alone; and the oldest
dependencies pyproject.toml admits install and import on the newest Python it claims.
"""

from __future__ import annotations

import ast
import email
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from tests._services import require, unavailable

ROOT = Path(__file__).resolve().parent.parent
# A link target in Markdown or HTML: `[text](target)`, `[key]: target`, `src=`/`href=`.
LINK = re.compile(r"\]\(([^)\s]+)|^\[[^\]]+\]:\s*(\S+)|(?:src|href)=\"([^\"]+)\"", re.MULTILINE)


def floors() -> dict[str, str]:
    """The lowest version of each runtime dependency that pyproject.toml admits."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    assert block is not None
    return dict(re.findall(r'"([a-z0-9_.-]+)>=([0-9.]+)"', block.group(1)))


def oldest_pins() -> list[str]:
    """``OLDEST`` of noxfile.py: what the oldest-dependencies session installs."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "OLDEST":
            return list(ast.literal_eval(node.value))
    raise AssertionError("noxfile.py has no OLDEST")


def newest_python() -> str:
    """The newest Python that pyproject.toml's classifiers claim, e.g. ``"3.13"``."""
    text = (ROOT / "pyproject.toml").read_text()
    claimed = re.findall(r"Programming Language :: Python :: (3\.\d+)", text)
    return max(claimed, key=lambda version: tuple(map(int, version.split("."))))


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, as ``python -m build`` makes them (the wheel from the sdist)."""
    require("build", "pip install -e '.[test]' (build) to run the packaging test")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(  # noqa: S603
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return out


READ_METADATA = """
import importlib.metadata as m, json
d = m.distribution("videogen-async")
names = d.metadata.get_all("License-File") or []
print(json.dumps({
    "license_files": names,
    "license": d.read_text("licenses/" + names[0]) if names else None,
    "expression": d.metadata["License-Expression"],
    "urls": d.metadata.get_all("Project-URL"),
    "classifiers": d.metadata.get_all("Classifier"),
}))
"""


@pytest.mark.slow
def test_the_built_wheel_installs_with_its_license_and_project_metadata(
    tmp_path: Path, dist: Path
) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "SECURITY.md", "README.md", "CHANGELOG.md"} <= names
    (wheel,) = dist.glob("*.whl")
    env = tmp_path / "fresh"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    subprocess.run(  # noqa: S603
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    found = json.loads(
        subprocess.run(  # noqa: S603
            [str(python), "-c", READ_METADATA], check=True, capture_output=True, text=True
        ).stdout
    )
    assert found["license_files"] == ["LICENSE"]
    assert found["license"] == (ROOT / "LICENSE").read_text()
    assert "videogen-async developers" in found["license"]
    assert found["expression"] == "MIT"
    assert "Framework :: Pytest" in found["classifiers"]
    labels = {url.split(",", 1)[0] for url in found["urls"]}
    assert {"Documentation", "Changelog", "Issues"} <= labels


@pytest.mark.slow
def test_the_wheel_description_links_nowhere_relative(dist: Path) -> None:
    # The description is the index's page of the package: a relative link there is broken.
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    description = metadata.get_payload()
    assert isinstance(description, str)
    assert "## Quickstart" in description
    targets = [next(filter(None, m.groups())) for m in LINK.finditer(description)]
    assert len(targets) > 20
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert relative == []


@pytest.mark.slow
def test_the_sdist_tests_collect_from_the_sdist_alone(tmp_path: Path, dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        # The "data" filter where this Python has it (3.10.12, 3.11.4 and later): our own sdist.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(tmp_path, **safe)  # noqa: S202
    (unpacked,) = tmp_path.iterdir()
    # A run of its own: not a pytest-xdist worker of this one (PYTEST_XDIST_WORKER...).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(unpacked)
    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
        ],
        cwd=unpacked,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert "error" not in collected.stdout.lower().splitlines()[-1]
    assert (unpacked / "examples" / "prompts.csv").is_file()


def test_the_oldest_dependencies_session_installs_exactly_the_floors() -> None:
    def release(version: str) -> tuple[int, ...]:
        parts = [int(part) for part in version.split(".")]
        while parts[-1] == 0:
            parts.pop()
        return tuple(parts)

    pins = dict(pin.split("==") for pin in oldest_pins())
    assert {name: release(v) for name, v in pins.items()} == {
        name: release(v) for name, v in floors().items()
    }
    assert "cattrs" in pins  # 23.2.0 is withdrawn: on Python 3.11 and later it does not import
    assert pins["cattrs"] != "23.2.0"


@pytest.mark.slow
def test_the_floors_install_and_import_on_the_newest_python(tmp_path: Path, dist: Path) -> None:
    newest = newest_python()
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    python = sys.executable if running == newest else shutil.which(f"python{newest}")
    if python is None or subprocess.run([python, "-c", ""], check=False).returncode:  # noqa: S603
        unavailable(f"python{newest} is not on PATH (the newest Python pyproject.toml claims)")
        return
    env = tmp_path / "floors"
    subprocess.run([python, "-m", "venv", str(env)], check=True, capture_output=True)  # noqa: S603
    fresh = str(env / "bin" / "python")
    (wheel,) = dist.glob("*.whl")
    pins = [f"{name}=={version}" for name, version in floors().items()]
    pip = [fresh, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # Wheels only: a floor that needs a compiler on the newest Python is not a floor that works.
    subprocess.run([*pip, "--only-binary", ":all:", *pins], check=True, capture_output=True)  # noqa: S603
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, capture_output=True)  # noqa: S603
    imported = subprocess.run(  # noqa: S603
        [fresh, "-W", "error", "-c", "import videogen_async, videogen_async.testing"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr


def test_the_readmes_links_to_the_repository_name_files_it_has() -> None:
    # The README links absolutely (it is the index's page too): each link into the
    # repository names a file or folder of this checkout.
    text = (ROOT / "README.md").read_text()
    source = re.search(r'^Source = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert source is not None
    targets = [next(filter(None, m.groups())) for m in LINK.finditer(text)]
    inside = [t.split("#")[0] for t in targets if t.startswith(source.group(1) + "/")]
    assert len(inside) > 20
    for target in inside:
        path = re.sub(r"^/(blob|tree)/main/", "", target.removeprefix(source.group(1)))
        assert (ROOT / path).exists(), target


def test_the_index_page_speaks_to_who_installs_from_the_index() -> None:
    # The wheel's description is PACKAGE.md: no command that needs a checkout (".[cli]",
    # an editable install, the test suite); the README keeps the contributor's commands.
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^readme = "PACKAGE.md"', pyproject, re.M)
    page = (ROOT / "PACKAGE.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for checkout_only in ('".[', "pip install -e", "python -m pytest", "nox"):
        assert checkout_only not in page, checkout_only
        assert checkout_only in readme, checkout_only
    assert 'pip install "videogen-async[cli]" && videogen demo' in page
    # Its code is the README's, checked there (tests/test_docs.py, tests/test_docs_types.py).
    code = re.compile(r"```(?:python|pytest)\n.*?```", re.S)
    assert code.findall(page) == code.findall(readme)
