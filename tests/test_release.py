"""What is released: the sdist and the wheel carry the license, and an install finds it.

``python -m build`` makes the sdist and, from it, the wheel (as a release does); the wheel is
installed into a fresh virtual environment, whose Python reads the license text and the
project's metadata through ``importlib.metadata``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import pytest

from tests._services import require

ROOT = Path(__file__).resolve().parent.parent

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
def test_the_built_wheel_installs_with_its_license_and_project_metadata(tmp_path: Path) -> None:
    require("build", "pip install -e '.[test]' (build) to run the packaging test")
    dist = tmp_path / "dist"
    subprocess.run(  # noqa: S603
        [sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
    )
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
