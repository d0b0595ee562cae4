"""Run openai-v2's own test suite with agentguard_openai and the guard switched on, in both orders.

::

    python scripts/openai_v2_suite/run.py [--venv DIR] [--report FILE]

The suite (its tests and VCR cassettes) ships in openai-v2's source
distribution: it is downloaded from PyPI at run time, never kept in this
repository, and run in a virtual environment of its own with the versions its
``requirements.latest.txt`` pins, next to this checkout installed editable.
It runs three times: without the guard (the baseline), with ours instrumented
before openai-v2 and with ours instrumented after it (see
``agentguard_plugin.py``). Prints passed/failed/errors/skipped per run and every
test whose outcome differs from the baseline; writes the same as JSON with
``--report``.

Exit status: 0 when both orders pass exactly what the baseline passes (and the
guard was switched on in each), 1 when not, 3 when the suite cannot be obtained from the registry (nothing was run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

PACKAGE = "opentelemetry-instrumentation-openai-v2"
VERSION = "2.4b0"
# openai-v2 2.4b0 imports a module that only util-genai 1.1b0 has.
COMPANIONS = ("opentelemetry-util-genai==1.1b0",)
ORDERS = ("off", "ours-first", "ours-last")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CANNOT_OBTAIN = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=REPO / ".venv-openai-v2-suite")
    parser.add_argument("--report", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)

    python = _ensure_venv(args.venv)
    suite = args.venv / "suite" / f"{PACKAGE}-{VERSION}"
    if not (suite / "tests").is_dir():
        sdist = _download_sdist(python, args.venv / "downloads")
        if sdist is None:
            return CANNOT_OBTAIN
        _extract(sdist, suite)
    if not _install(python, args.venv, suite):
        return CANNOT_OBTAIN

    runs = {order: _run(python, suite, order) for order in ORDERS}
    report = _report({order: outcomes for order, (outcomes, _) in runs.items()})
    report["guard_setups"] = {order: setups for order, (_, setups) in runs.items()}
    _print(report)
    if args.report:
        args.report.write_text(json.dumps(report, indent=2, sort_keys=True))
    active = all(report["guard_setups"][order] > 0 for order in ORDERS[1:])  # type: ignore[index]
    return 0 if active and all(not report["regressions"][order] for order in ORDERS[1:]) else 1


def _ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return python


def _download_sdist(python: Path, into: Path) -> Path | None:
    into.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(python), "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--no-binary", ":all:", f"{PACKAGE}=={VERSION}", "-d", str(into)],
        capture_output=True, text=True, check=False,
    )
    found = sorted(into.glob("*.tar.gz"))
    if done.returncode != 0 or not found:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"SKIP: cannot download the {PACKAGE}=={VERSION} source distribution from the registry: {last}")
        return None
    return found[0]


def _extract(sdist: Path, suite: Path) -> None:
    suite.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if len(parts) > 2 and parts[1] == "tests" and ".." not in parts and (member.isfile() or member.isdir()):
                member.name = str(Path(*parts[1:]))
                archive.extract(member, suite)


def _requirements(suite: Path) -> list[str]:
    """The suite's pinned test requirements, with openai-v2 itself from PyPI instead of a checkout."""
    pinned = []
    for line in (suite / "tests" / "requirements.latest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            pinned.append(line)
    return [*pinned, f"{PACKAGE}=={VERSION}", *COMPANIONS]


def _install(python: Path, venv: Path, suite: Path) -> bool:
    requirements = _requirements(suite)
    stamp = venv / ".installed"
    digest = hashlib.sha256("\n".join([*requirements, (REPO / "pyproject.toml").read_text()]).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return True
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements,
         "-e", str(REPO)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"SKIP: cannot install the suite's pinned requirements from the registry: {last}")
        return False
    stamp.write_text(digest)
    return True


def _run(python: Path, suite: Path, order: str) -> tuple[dict[str, str], int]:
    """Each test's outcome (passed, failed, error, skipped) in one run of the suite, and how
    many times the plugin switched the guard on."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        count_file = Path(scratch) / "setups"
        env = {**os.environ, "AGENTGUARD_SUITE_ORDER": order, "PYTHONPATH": str(HERE),
               "AGENTGUARD_SUITE_COUNT_FILE": str(count_file)}
        for name in list(env):
            if name.startswith(("OTEL_", "OPENAI_")):
                del env[name]  # the suite sets what it needs; ours must not leak in
        # Its own (empty) configuration: not the settings of a repository it may sit in.
        config = suite / "pytest.ini"
        config.write_text("[pytest]\n")
        subprocess.run(
            [str(python), "-m", "pytest", "tests", "-c", str(config), "--rootdir", str(suite),
             "-p", "agentguard_plugin", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"],
            cwd=suite, env=env, capture_output=True, text=True, check=False,
        )
        setups = int(count_file.read_text()) if count_file.exists() else 0
        return (_outcomes(junit) if junit.exists() else {}), setups


def _outcomes(junit: Path) -> dict[str, str]:
    outcomes = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "failed" if child.tag == "failure" else child.tag
                break
        outcomes[name] = outcome
    return outcomes


def _report(results: dict[str, dict[str, str]]) -> dict[str, object]:
    baseline = results["off"]
    counts = {
        order: {kind: sum(1 for o in outcomes.values() if o == kind) for kind in ("passed", "failed", "error", "skipped")}
        for order, outcomes in results.items()
    }
    regressions = {
        order: sorted(name for name, outcome in outcomes.items()
                      if outcome in ("failed", "error") and baseline.get(name) == "passed")
        for order, outcomes in results.items()
    }
    return {"package": f"{PACKAGE}=={VERSION}", "counts": counts, "regressions": regressions}


def _print(report: dict[str, object]) -> None:
    print(f"{report['package']} test suite, agentguard_openai and the guard processor active:")
    print(f"{'run':<12}{'passed':>8}{'failed':>8}{'error':>8}{'skipped':>9}{'guard on':>10}")
    for order, count in report["counts"].items():  # type: ignore[union-attr]
        setups = report["guard_setups"][order]  # type: ignore[index]
        print(f"{order:<12}{count['passed']:>8}{count['failed']:>8}{count['error']:>8}{count['skipped']:>9}"
              f"{setups:>10}")
    for order, names in report["regressions"].items():  # type: ignore[union-attr]
        for name in names:
            print(f"REGRESSION ({order}): {name}")


if __name__ == "__main__":
    sys.exit(main())
