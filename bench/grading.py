"""The grading section of `make bench`: tools/grade.py against nbgrader's `autograde`, on the
same generated submissions, in one run.

Submissions are made from nbgrader's own release of the course (so that autograde accepts
them) and the solution notebooks, with the edits a class brings: per exercise a right answer,
the stub left in place, or a wrong answer (the solution with a realistic slip); a few
notebooks broken (a cell that kills the kernel, a function that never returns, a file that is
not JSON); some saved as nbformat 4.0 without cell ids, as Colab does. Both graders get the
same cell timeout.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 30  # seconds per cell, for both graders

# Realistic slips in a solution: (pattern, replacement); the first that applies is used.
SLIPS = [
    (r"axis=-1", "axis=-2"),
    (r"math\.sqrt\((\w+)\)", r"\1"),
    (r"np\.sqrt\((\w+)\)", r"\1"),
    (r"\.T\b", ""),
    (r" - 1\b", ""),
    (r"<=", "<"),
    (r"\bmax\(", "min("),
    (r"\.max\(", ".min("),
    (r"\(1 - (\w+)\)", "1"),
    (r"return (\w+), (\w+)", r"return \2, \1"),
]


def solution_body(source: str) -> str:
    """A solution cell as a student would write it: the markers' lines dropped."""
    return "\n".join(
        line
        for line in source.split("\n")
        if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def slip(source: str, rng: random.Random) -> str:
    body = solution_body(source)
    for pattern, repl in rng.sample(SLIPS, len(SLIPS)):
        changed = re.sub(pattern, repl, body, count=1)
        if changed != body:
            return changed
    return body.replace("return ", "return 0 * ", 1)


def make_submissions(release: Path, source: Path, out: Path, students: int, seed: int = 0):
    """Write out/<student>/hw/<notebook> for every student; returns what was made."""
    rng = random.Random(seed)
    made = {"right": 0, "stub": 0, "wrong": 0, "broken": 0, "nbformat 4.0": 0}
    notebooks = sorted(release.glob("*.ipynb"))
    for s in range(students):
        student = f"student{s:02d}"
        folder = out / student / "hw"
        folder.mkdir(parents=True)
        for path in notebooks:
            nb = nbformat.read(path, as_version=4)
            solved = nbformat.read(source / path.name, as_version=4)
            by_id = {c.get("id"): c for c in solved.cells}
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader", {})
                if not meta.get("solution") or cell.cell_type != "code":
                    continue
                solution = by_id[cell.get("id")].source
                kind = rng.choices(["right", "stub", "wrong"], [0.6, 0.15, 0.25])[0]
                made[kind] += 1
                if kind == "right":
                    cell.source = solution_body(solution)
                elif kind == "wrong":
                    cell.source = slip(solution, rng)
            target = folder / path.name
            broken = rng.random()
            if broken < 0.01:
                made["broken"] += 1
                target.write_text(nbformat.writes(nb)[:200])  # cut short: not JSON
                continue
            exercises = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
            if broken < 0.02 and exercises:
                made["broken"] += 1
                exercises[-1].source += "\n\nimport os\n\nos._exit(1)\n"
            elif broken < 0.025 and exercises:
                made["broken"] += 1
                exercises[0].source += "\n\nwhile True:\n    pass\n"
            if rng.random() < 0.15:  # saved by Colab: nbformat 4.0, no cell ids
                made["nbformat 4.0"] += 1
                data = json.loads(nbformat.writes(nb))
                data["nbformat_minor"] = 0
                for cell in data["cells"]:
                    cell.pop("id", None)
                target.write_text(json.dumps(data))
            else:
                nbformat.write(nb, target)
    return made


# nbgrader runs `alembic` as a command: the environment's bin folder must be on PATH.
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _run(cmd, cwd, log: Path) -> float:
    start = time.perf_counter()
    with open(log, "a") as f:
        subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, check=False, env=ENV)
    return time.perf_counter() - start


def bench_grading(students: int = 20) -> None:
    print(f"\n== Grading: tools/grade.py vs nbgrader autograde, {students} students ==")
    nbgrader = Path(sys.executable).parent / "nbgrader"
    if not nbgrader.exists():
        print("nbgrader is not installed (make bench installs requirements-bench.txt); skipped")
        return
    work = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    log = work / "log.txt"
    try:
        (work / "nbgrader_config.py").write_text(
            "c = get_config()\n"
            f"c.CourseDirectory.root = {str(work)!r}\n"
            "c.CourseDirectory.course_id = 'course'\n"
            f"c.Execute.timeout = {TIMEOUT}\n"
        )
        py = [sys.executable, "-m"]
        subprocess.run(
            [*py, "tools.make_student", "--nbgrader", str(work / "source" / "hw")],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [str(nbgrader), "generate_assignment", "hw", "--force"],
            cwd=work,
            check=True,
            capture_output=True,
            env=ENV,
        )
        made = make_submissions(
            work / "release" / "hw", ROOT / "notebooks" / "solved", work / "submitted", students
        )
        n_notebooks = sum(1 for _ in (work / "submitted").rglob("*.ipynb"))
        print(
            f"{n_notebooks} notebooks; exercises: {made['right']} right, {made['wrong']} wrong, "
            f"{made['stub']} stubs; {made['broken']} notebooks broken (not JSON, kernel killed, "
            f"endless loop); {made['nbformat 4.0']} saved as nbformat 4.0 without ids; "
            f"cell timeout {TIMEOUT} s for both"
        )
        grade = [
            *py,
            "tools.grade",
            str(work / "submitted"),
            "--quiet",
            "--cell-timeout",
            str(TIMEOUT),
        ]
        times = {}
        times["grade.py --jobs 2"] = _run(
            [*grade, "--jobs", "2", "--out", str(work / "g2")], ROOT, log
        )
        times["nbgrader autograde"] = _run(
            [str(nbgrader), "autograde", "hw", "--create", "--force"], work, log
        )
        times["grade.py --jobs 1"] = _run(
            [*grade, "--jobs", "1", "--out", str(work / "g1")], ROOT, log
        )
        for name, seconds in times.items():
            print(f"  {name:20s} {seconds:7.1f} s  ({n_notebooks / seconds:5.2f} notebooks/s)")
        base = times["nbgrader autograde"]
        for name in ("grade.py --jobs 1", "grade.py --jobs 2"):
            print(f"  throughput {name} / nbgrader autograde: {base / times[name]:5.2f}x")
        _compare(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compare(work: Path) -> None:
    """How often the two graders give a notebook the same score, and where they differ.

    nbgrader's autograde gives up on a student's whole assignment at a notebook that is not
    JSON or kills its kernel: the notebooks after it get 0 without being run. Those are
    counted apart from any other difference, which is listed."""
    try:
        from nbgrader.api import Gradebook
    except ImportError:
        return
    ours = json.loads((work / "g1" / "gradebook.json").read_text())["notebooks"]
    log = (work / "log.txt").read_text() if (work / "log.txt").exists() else ""
    abandoned = set(re.findall(r"error processing assignment '\w+' for student '(\w+)'", log))
    same = total = 0
    in_abandoned, elsewhere = 0, []
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}") as gb:
        for student, notebooks in ours.items():
            for nb in notebooks:
                total += 1
                try:
                    theirs = gb.find_submission_notebook(Path(nb["notebook"]).stem, "hw", student)
                    score = theirs.score
                except Exception:  # noqa: BLE001 - not graded by nbgrader
                    score = None
                if score is not None and int(score) == nb["score"]:
                    same += 1
                elif student in abandoned:
                    in_abandoned += 1
                else:
                    elsewhere.append(f"{student}/{nb['notebook']}: {nb['score']} vs {score}")
    print(f"  same score from both graders: {same} of {total} notebooks")
    if in_abandoned:
        print(
            f"  {in_abandoned} differ in the {len(abandoned)} assignments nbgrader gave up on (a "
            "notebook not JSON or killing its kernel: nbgrader scores the notebooks after it 0 "
            "without running them; grade.py grades each)"
        )
    for line in elsewhere:
        print(f"  differs (grade.py vs nbgrader): {line}")
