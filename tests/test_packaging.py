"""The distribution carries its licence: LICENSE matches pyproject, and both the sdist and the
wheel built from it contain the file (built for real with ``python -m build``)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LICENSE = ROOT / "LICENSE"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_license_file_is_the_apache_2_text_pyproject_declares():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = LICENSE.read_text(encoding="utf-8")
    assert "Apache License" in text.splitlines()[1]
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "APPENDIX: How to apply the Apache License to your work." in text


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    # No flags: the sdist first, then the wheel built from that sdist (what pip does with it).
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def test_sdist_carries_the_license(built):
    [sdist] = built.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        assert "LICENSE" in names
        member = next(m for m in archive.getmembers() if m.name.endswith("/LICENSE") and m.name.count("/") == 1)
        assert archive.extractfile(member).read() == LICENSE.read_bytes()


def test_wheel_carries_the_license_and_says_so_in_its_metadata(built):
    [wheel] = built.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        [license_name] = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert archive.read(license_name) == LICENSE.read_bytes()
        [metadata_name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode("utf-8")
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
