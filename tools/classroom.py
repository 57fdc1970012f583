"""GitHub Classroom template repositories for the course's notebooks (`make classroom`).

    python -m tools.classroom build [--src notebooks] [--out build/classroom]
                                    [--course-repo OWNER/NAME] [--course-ref REF] [NOTEBOOK...]
    python tools/classroom.py grade NOTEBOOK [--course .course] [--out .grades/results.json]
    python tools/classroom.py points RESULTS EXERCISE

``build`` writes one template repository per notebook with exercises,
``build/classroom/<notebook stem>/``: the student notebook (as ``make student`` writes it),
a short README.md, a .gitignore and ``.github/workflows/classroom.yml``. Make it a GitHub Classroom
assignment's template repository: on every push, the workflow

1. checks out the student's repository and, into ``.course/``, the course repository at
   ``--course-ref`` (the solved notebooks and the grader never enter the student's
   repository);
2. installs the course's pinned environment there (``make -C .course install``);
3. grades the student's notebook once, with tools/grade.py, as the Gradescope autograder does
   (``grade``: the notebook named like the assignment, else the only one pushed), writing
   Gradescope's results.json format to ``.grades/results.json``;
4. has one GitHub Classroom test per exercise (``classroom-resources/autograding-command-grader``,
   1 point each) whose command, ``points``, prints the exercise's one-sentence result and
   exits 0 if it passed;
5. sends the points to GitHub Classroom (``classroom-resources/autograding-grading-reporter``).

The command grader runs its command without a shell, so each command is one program with
its arguments, run from the student's repository; this file runs as a script there
(``.course/.venv/bin/python .course/tools/classroom.py ...``). The course repository comes
from ``--course-repo``, else pyproject.toml's ``[project.urls] Repository``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ".github/workflows/classroom.yml"
RESULTS = ".grades/results.json"
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"


# --------------------------------------------------------------------------- build


def course_repository() -> str | None:
    """OWNER/NAME of the course's public repository, from pyproject.toml, if it has one."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    url = data["project"].get("urls", {}).get("Repository", "")
    match = re.match(r"https://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?/?$", url)
    return match.group(1) if match else None


def step_id(exercise: str) -> str:
    return "ex-" + re.sub(r"[^a-z0-9]+", "-", exercise.lower()).strip("-")


def workflow(notebook: str, exercises: list[str], course_repo: str, course_ref: str) -> str:
    """The workflow's YAML (written by hand: no YAML library needed to build it)."""
    python = ".course/.venv/bin/python"
    lines = [
        f"# GitHub Classroom autograding for {notebook}, written by tools/classroom.py.",
        "# One test per exercise, 1 point each; see the course's docs/instructor_guide.md.",
        "name: Autograding Tests",
        "'on':",
        "  - push",
        "  - workflow_dispatch",
        "  - repository_dispatch",
        "permissions:",
        "  checks: write",
        "  actions: read",
        "  contents: read",
        "jobs:",
        "  run-autograding-tests:",
        "    runs-on: ubuntu-latest",
        "    if: github.actor != 'github-classroom[bot]'",
        "    timeout-minutes: 30",
        "    steps:",
        "      - name: Check out the submission",
        "        uses: actions/checkout@v4",
        "      - name: Check out the course",
        "        uses: actions/checkout@v4",
        "        with:",
        f"          repository: {course_repo}",
        f"          ref: {course_ref}",
        "          path: .course",
        "      - uses: actions/setup-python@v5",
        "        with:",
        "          python-version: '3.12'",
        "          cache: pip",
        "          cache-dependency-path: .course/constraints.txt",
        "      - name: Install the course's pinned environment",
        "        run: make -C .course install",
        "      - name: Grade the notebook",
        f"        run: {python} .course/tools/classroom.py grade {notebook} --out {RESULTS}",
    ]
    ids = []
    for exercise in exercises:
        ids.append(step_id(exercise))
        lines += [
            f"      - name: {exercise}",
            f"        id: {ids[-1]}",
            f"        uses: {COMMAND_GRADER}",
            "        with:",
            f"          test-name: {exercise}",
            f"          command: {python} .course/tools/classroom.py points {RESULTS} {exercise}",
            "          timeout: 1",
            "          max-score: 1",
        ]
    lines += [
        "      - name: Autograding Reporter",
        f"        uses: {REPORTER}",
        "        env:",
        *[f'          {i.upper()}_RESULTS: "${{{{steps.{i}.outputs.result}}}}"' for i in ids],
        "        with:",
        f"          runners: {','.join(ids)}",
    ]
    return "\n".join(lines) + "\n"


README = """# {stem}

Open `{notebook}` (in JupyterLab or Colab), complete each exercise, run its check, and push.
Every push is graded: the Actions tab shows one line per exercise (1 point each) and
GitHub Classroom records the points. Keep the notebook's name; the checks' cells may stay
as they are (the grader runs its own copy of each check).
"""


def build(notebooks: list[Path], out: Path, course_repo: str, course_ref: str) -> list[Path]:
    import nbformat

    from tools import make_student
    from tools.gradescope import exercise_checks

    written = []
    for notebook in notebooks:
        exercises = exercise_checks(notebook)
        if not exercises:
            continue
        folder = out / notebook.stem
        (folder / ".github" / "workflows").mkdir(parents=True, exist_ok=True)
        student, _ = make_student.student_notebook(
            nbformat.read(notebook, as_version=4), notebook.name
        )
        nbformat.write(student, folder / notebook.name)
        (folder / WORKFLOW).write_text(
            workflow(notebook.name, exercises, course_repo, course_ref), encoding="utf-8"
        )
        (folder / "README.md").write_text(
            README.format(stem=notebook.stem, notebook=notebook.name), encoding="utf-8"
        )
        # The workflow's course checkout and results (or a local trial's) stay out of git.
        (folder / ".gitignore").write_text(".course\n.grades/\n.ipynb_checkpoints/\n")
        written.append(folder)
    return written


# --------------------------------------------------------------------------- in the workflow


def grade(notebook: str, course: Path, out: Path, cell_timeout: float, nb_timeout: float) -> int:
    """Grade the student's notebook (in the current folder) once; write results.json."""
    sys.path.insert(0, str(course))  # run as a script: the course's tools and lib
    from tools import gradescope

    solved = course / "notebooks" / "solved" / notebook  # the checks come from the solved copy
    if not solved.exists():
        print(f"the course has no notebook {notebook}", file=sys.stderr)
        return 2
    data = gradescope.grade_submission(Path.cwd(), solved, course, cell_timeout, nb_timeout)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(data["output"])
    return 0


def points(results: Path, exercise: str) -> int:
    """Print the exercise's result; exit status 0 if it passed (the command grader's point)."""
    try:
        data = json.loads(results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{exercise}: not graded (no results: {exc})")
        return 1
    test = next((t for t in data.get("tests", []) if t.get("name") == exercise), None)
    if test is None:
        print(f"{exercise}: not graded ({data.get('output', 'no result for this exercise')})")
        return 1
    passed = test["score"] >= test["max_score"] > 0
    print(f"{'✓' if passed else '✗'} {exercise}: {test['output']}")
    return 0 if passed else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="one template repository per notebook with exercises")
    b.add_argument("notebooks", type=Path, nargs="*", help="default: every notebook of --src")
    b.add_argument("--src", type=Path, default=ROOT / "notebooks" / "solved")
    b.add_argument("--out", type=Path, default=ROOT / "build" / "classroom")
    b.add_argument("--course-repo", default=None, help="OWNER/NAME; default: pyproject.toml's")
    b.add_argument("--course-ref", default="main", help="branch, tag or commit to grade with")
    g = sub.add_parser("grade", help="grade the student's notebook (in the workflow)")
    g.add_argument("notebook", help="the assignment's notebook name")
    g.add_argument("--course", type=Path, default=Path(".course"))
    g.add_argument("--out", type=Path, default=Path(RESULTS))
    g.add_argument("--cell-timeout", type=float, default=120.0)
    g.add_argument("--notebook-timeout", type=float, default=900.0)
    p = sub.add_parser("points", help="one exercise's result; exit 0 if it passed")
    p.add_argument("results", type=Path)
    p.add_argument("exercise")
    return parser


def main(argv: list[str] | None = None) -> int:
    sys.modules.setdefault("rfc3987_syntax", None)  # as tools.gradescope.skip_slow_imports
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "points":
        return points(args.results, args.exercise)
    if args.command == "grade":
        return grade(args.notebook, args.course, args.out, args.cell_timeout, args.notebook_timeout)
    repo = args.course_repo or course_repository()
    if not repo:
        parser.error(
            "the course has no public repository yet: give --course-repo OWNER/NAME "
            "(or set [project.urls] Repository in pyproject.toml)"
        )
    notebooks = args.notebooks or sorted(args.src.glob("*.ipynb"))
    for folder in build(notebooks, args.out, repo, args.course_ref):
        print(f"wrote {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
