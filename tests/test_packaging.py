"""The distribution carries its licence: LICENSE matches pyproject, and both the sdist and the
wheel built from it contain the file (built for real with ``python -m build``); the sdist carries
the compiled check's source, the wheel its module."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("module", ["otel_agentguard/_plain_check", "otel_agentguard/replay/_typed_attributes",
                                    "otel_agentguard/_step_reader", "otel_agentguard/_judge_pass",
                                    "otel_agentguard/_span_paths", "otel_agentguard/_payload_memory"])
def test_sdist_carries_a_compiled_modules_source_and_the_wheel_its_module_only(built, module):
    [sdist] = built.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"setup.py", f"{module}.c", f"{module}.pyi", "otel_agentguard/_slots.h",
            "otel_agentguard/_json_text_form.h", "otel_agentguard/_keyed_hash.h"} <= names
    [wheel] = built.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = [n for n in archive.namelist() if n.startswith(module)]
    assert f"{module}.pyi" in packaged
    assert f"{module}.c" not in packaged
    modules = [n for n in packaged if n.endswith((".so", ".pyd"))]
    if os.environ.get("AGENTGUARD_TEST_REQUIRE_COMPILED") == "1":  # a C compiler was at hand
        assert len(modules) == 1, packaged


# --- a fresh install, as a new user makes it ------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_install(built, tmp_path_factory) -> Path:
    """A new virtual environment with only ``pip install otel-agentguard`` (the built wheel)."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    [wheel] = built.glob("*.whl")
    _pip_install(venv, str(wheel))
    return venv


def _pip_install(venv: Path, *requirements: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
         "--disable-pip-version-check", *requirements],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def _agentguard(venv: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PYTHON"))}
    return subprocess.run([str(venv / "bin" / "agentguard"), *argv], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env, check=False)


def test_demo_without_its_extra_names_the_extra_in_one_line(fresh_install, tmp_path):
    done = _agentguard(fresh_install, tmp_path, "demo")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("agentguard: the demo needs openai, opentelemetry-distro, PyYAML: "
                           "pip install 'otel-agentguard[demo]'\n")
    assert not (tmp_path / "agentguard-demo").exists()


def test_check_of_the_bundled_yaml_examples_without_yaml_names_the_extra_in_one_line(fresh_install, tmp_path):
    examples = next((fresh_install / "lib").glob("python3*/site-packages/otel_agentguard/examples"))
    done = _agentguard(fresh_install, tmp_path, "check", str(examples / "support_sessions.yaml"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.rstrip().endswith("reading YAML needs PyYAML: pip install 'otel-agentguard[yaml]'")


def test_demo_runs_once_its_extra_is_installed(fresh_install, built, tmp_path):
    [wheel] = built.glob("*.whl")
    _pip_install(fresh_install, f"otel-agentguard[demo] @ {wheel.as_uri()}")
    done = _agentguard(fresh_install, tmp_path, "demo")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "8 labelled sessions, 0 misses" in done.stdout
    assert (tmp_path / "agentguard-demo" / "trace.jsonl").exists()
