"""The distribution as users get it: ``python -m build`` makes one pure ``py3-none-any`` wheel and an
sdist, both carrying the licence; the wheel installs into a fresh venv on the oldest and the newest
Python here and judges an agent there; a fresh install names a missing extra in one line."""

from __future__ import annotations

import os
import shutil
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


def test_one_pure_wheel_and_an_sdist_with_python_sources_only(built):
    [wheel] = built.glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert [n for n in names if n.endswith((".so", ".pyd", ".c", ".h", ".pyi"))] == []
    assert "otel_agentguard/py.typed" in names
    [sdist] = built.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        sources = [name for name in archive.getnames() if name.endswith((".c", ".h", "setup.py"))]
    assert sources == []


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


# --- the wheel on the oldest and the newest Python here -----------------------------------------


def _interpreters() -> list[Path]:
    """Every CPython 3.10 or newer this machine has (on PATH, or installed by pyenv), one per version."""
    found: dict[str, Path] = {}
    candidates = [Path(p) for name in ("python3.10", "python3.11", "python3.12", "python3.13", "python3.14")
                  if (p := shutil.which(name))]
    candidates += sorted(Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob("versions/3.1*/bin/python"))
    for candidate in candidates:
        done = subprocess.run([str(candidate), "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=60, check=False)
        version = done.stdout.strip()
        if done.returncode == 0 and tuple(map(int, version.split("."))) >= (3, 10):
            found.setdefault(version, candidate)
    return [found[version] for version in sorted(found, key=lambda v: tuple(map(int, v.split("."))))]


_PYTHONS = _interpreters()
_OLDEST_AND_NEWEST = sorted({_PYTHONS[0], _PYTHONS[-1]}) if _PYTHONS else []


@pytest.mark.parametrize("python", _OLDEST_AND_NEWEST, ids=lambda path: path.parent.parent.name or str(path))
def test_the_wheel_judges_an_agent_on_the_oldest_and_newest_python(built, tmp_path, python):
    assert _PYTHONS[0].name, "no Python 3.10 or newer found"
    venv = tmp_path / "venv"
    subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=300)
    [wheel] = built.glob("*.whl")
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           str(wheel)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PYTHON"))}
    env["OTEL_AGENTGUARD_FINGERPRINT_KEY"] = "wheel-test"
    done = subprocess.run([str(venv / "bin" / "python"), str(Path(__file__).parent / "wheel_smoke.py"),
                           str(Path(__file__).parent / "data" / "foreign" / "traceloop-loop.jsonl")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "tool_loop tool_loop", done.stdout
