"""The learner's notebooks and the student release, from the solved notebooks (`make student`).

    python -m tools.make_student [--src notebooks/solved] [--out build/student]
                                 [--learner notebooks] [--solutions FILE] [--nbgrader DIR]

The course's notebooks exist twice. ``notebooks/solved/`` holds the solved ones, the
instructors' copies and the source of everything else: the authors edit and run them, and
the graders take their checks from them. ``notebooks/`` holds the learner's copies, written
from them by ``--learner`` (``make execute`` does it): what GitHub, JupyterLab, Colab and the
website show a learner, every exercise blank and its check's output the one line a stub gets
("not attempted yet", and how to see the answer), every other output as the solved run
stored it. A test keeps the two in step; strict nbval runs both.

For every notebook in ``--src`` the student release (``--out``, default ``build/student``)
gets a student version:

- in code cells, every region between a line ``### BEGIN SOLUTION`` and a line
  ``### END SOLUTION`` (markers included) becomes nbgrader's stub, indented like the
  ``BEGIN`` marker::

      # YOUR CODE HERE
      raise NotImplementedError()

  (in a markdown cell the region becomes ``YOUR ANSWER HERE``, as in nbgrader);
- every region between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` is removed,
  markers included;
- all outputs, execution counts and execution timestamps are cleared.

Everything else is copied unchanged. A marker is a line whose only content (leading and
trailing spaces aside) is the marker text, exactly as nbgrader reads it. A line that merely
looks like a marker (``## BEGIN SOLUTION``, ``### Begin Solution``, text after the marker),
a missing ``END``, an ``END`` without ``BEGIN``, a nested ``BEGIN`` and a cell that is both an
exercise and a check are errors naming the notebook and the cell, because each of them
would either leak a solution or hand out a broken notebook.

``--nbgrader DIR`` writes copies of the *source* notebooks with the cell metadata that
nbgrader's ``generate_assignment`` needs (exercise cells: autograded answers; check cells:
autograder tests worth one point each). The course's own notebooks carry no nbgrader
metadata; cells that already have some keep it. DIR is usually a folder of an nbgrader
course (``source/<assignment>``) that holds other files too, so only the notebooks named
like the course's are written there and nothing else in DIR is touched or removed; and
``--nbgrader`` alone does not rebuild the student release (give ``--out`` as well for both).

Only the standard library, nbformat and ``lib.checks`` (the line a stub's check prints) are
used. The title cell of each learner and student notebook says in one sentence how the
exercises work (``checks.show_solution``); a student notebook's Colab badge opens the blank
notebook (published on the branch ``student``). The conventions are written down in
docs/instructor_guide.md.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tools import notebook_links

ROOT = Path(__file__).resolve().parents[1]
LEARNER = ROOT / "notebooks"  # what learners open: exercises blank, outputs stored
SOLVED = LEARNER / "solved"  # the instructors' copies, exercises solved: the source of both

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
TEXT_STUB = ("YOUR ANSWER HERE",)

# A check cell calls a check from lib.checks: `checks.check_softmax(softmax)`.
CHECK_CALL = re.compile(r"\bchecks\.(check_\w+)\s*\(\s*(\w+)?")
# Anything that looks like an attempt at a marker, to catch typos that would leak code.
NEAR_MARKER = re.compile(r"(BEGIN|END)\s+(SOLUTION|HIDDEN\s+TESTS?)", re.IGNORECASE)
DEF_NAME = re.compile(r"^\s*def\s+(\w+)\s*\(", re.MULTILINE)
# The title cell's bullet about the exercises (to its next bullet or paragraph), which says
# where they are solved; the student release says instead how to reach the answers.
EXERCISES_BULLET = re.compile(r"^- \*\*Exercises:\*\*.*?(?=\n\n|\n- |\Z)", re.MULTILINE | re.DOTALL)
# The title's one sentence on exercises, in the learner's notebooks and the student release.
STUDENT_BULLET = (
    "- **Exercises:** fill in each function; its check names the mistake it sees, and\n"
    '  `checks.show_solution("{name}")` shows the course\'s answer.'
)
_MARKERS = {
    BEGIN_SOLUTION: ("solution", "begin"),
    END_SOLUTION: ("solution", "end"),
    BEGIN_HIDDEN: ("hidden", "begin"),
    END_HIDDEN: ("hidden", "end"),
}


class MarkerError(ValueError):
    """The markers of a notebook are malformed; the message names notebook, cell and line."""


@dataclass
class Region:
    """One solution or hidden-test region of a cell (markers not included)."""

    kind: str  # "solution" or "hidden"
    lines: list[str]
    indent: str


@dataclass
class CellInfo:
    index: int
    cell_type: str
    regions: list[Region] = field(default_factory=list)
    is_check: bool = False

    @property
    def is_exercise(self) -> bool:
        return any(r.kind == "solution" for r in self.regions)


def _where(notebook: str, index: int, cell, line_no: int | None = None) -> str:
    cell_id = cell.get("id")
    text = f"{notebook}, cell {index}" + (f" (id {cell_id})" if cell_id else "")
    if line_no is not None:
        text += f", line {line_no}"
    return text


def split_regions(source: str, cell_type: str, where: str) -> tuple[str, list[Region]]:
    """Return the student version of one cell's source, and the regions it removed.

    ``where`` names the notebook and cell in error messages.
    """
    stub = CODE_STUB if cell_type == "code" else TEXT_STUB
    out: list[str] = []
    regions: list[Region] = []
    current: Region | None = None
    for line_no, line in enumerate(source.split("\n"), start=1):
        marker = _MARKERS.get(line.strip())
        if marker is None:
            if cell_type == "code" and NEAR_MARKER.search(line):
                raise MarkerError(
                    f"{where}, line {line_no}: {line.strip()!r} looks like a marker but is not "
                    f"exactly one of {list(_MARKERS)} on a line of its own."
                )
            if current is None:
                out.append(line)
            else:
                current.lines.append(line)
            continue
        kind, edge = marker
        if edge == "begin":
            if current is not None:
                raise MarkerError(
                    f"{where}, line {line_no}: {line.strip()!r} inside a {current.kind} region "
                    "that is not closed yet (regions cannot nest)."
                )
            indent = line[: len(line) - len(line.lstrip())]
            current = Region(kind, [], indent)
            if kind == "solution":
                out.extend(indent + s for s in stub)
        else:
            if current is None or current.kind != kind:
                raise MarkerError(
                    f"{where}, line {line_no}: {line.strip()!r} without a matching BEGIN before it."
                )
            regions.append(current)
            current = None
    if current is not None:
        begin = BEGIN_SOLUTION if current.kind == "solution" else BEGIN_HIDDEN
        end = END_SOLUTION if current.kind == "solution" else END_HIDDEN
        raise MarkerError(f"{where}: {begin!r} has no {end!r} after it.")
    return "\n".join(out), regions


def student_notebook(nb, name: str):
    """The student version of a notebook (a new object) and what was found in each cell."""
    nb = copy.deepcopy(nb)
    infos: list[CellInfo] = []
    for index, cell in enumerate(nb.cells):
        info = CellInfo(index, cell.cell_type)
        if cell.cell_type in ("code", "markdown"):
            source, info.regions = split_regions(
                cell.source, cell.cell_type, _where(name, index, cell)
            )
            cell.source = source
        if cell.cell_type == "code":
            info.is_check = CHECK_CALL.search(cell.source) is not None
            if info.is_check and info.is_exercise:
                raise MarkerError(
                    f"{_where(name, index, cell)}: a solution region and a call to a check in "
                    "one cell; put the check in its own cell after the exercise."
                )
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        infos.append(info)
    return nb, infos


def student_title(nb, name: str, repo) -> None:
    """Rewrite the student notebook ``nb``'s title cell: its Colab badge opens the blank
    notebook (``repo``: the course's public address, or None), and its bullet on the
    exercises says how they work (``checks.show_solution``)."""
    title = nb.cells[0] if nb.cells else None
    if title is None or title.cell_type != "markdown" or not title.source.startswith("# "):
        return  # no title cell (the course's notebooks all have one: notebook_links checks)
    title.source = notebook_links.with_badge(
        title.source, notebook_links.badge(repo, name, student=True)
    )
    _set_bullet(nb, name)


def learner_notebook(nb, name: str):
    """The learner's copy of the solved notebook ``nb`` (a new object), as ``notebooks/`` holds
    it: each solution replaced by its stub, each check cell's output by the one line its check
    prints for a stub (``lib.checks``: "not attempted yet", and how to see the answer), the
    title's bullet on exercises saying how they work; every other cell and output as the
    solved notebook stores it (later cells use lib's reference, never an exercise's answer:
    strict nbval on the learner's copy proves it)."""
    from lib.checks._core import not_attempted_line

    learner, infos = student_notebook(nb, name)  # validates the markers, writes the stubs
    for info, cell, solved in zip(infos, learner.cells, nb.cells, strict=True):
        if cell.cell_type != "code":
            continue
        cell.execution_count = solved.execution_count
        if info.is_check:
            lines = [not_attempted_line(m.group(2)) for m in CHECK_CALL.finditer(cell.source)]
            text = "".join(f"{line}\n" for line in lines)
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        elif not info.is_exercise:
            cell.outputs = copy.deepcopy(solved.outputs)
    title = learner.cells[0]  # its Colab badge opens the learner's copy, not the solved one
    repo = notebook_links.repository()
    title.source = notebook_links.with_badge(title.source, notebook_links.badge(repo, name))
    _set_bullet(learner, name)
    return learner


def _set_bullet(nb, name: str) -> None:
    """The title cell's bullet on exercises (of notebook ``name``): how they work, with the
    first exercise's name in its ``checks.show_solution`` call."""
    title = nb.cells[0] if nb.cells else None
    if title is None or title.cell_type != "markdown" or not title.source.startswith("# "):
        return
    first_check = next(
        (m for c in nb.cells if c.cell_type == "code" for m in CHECK_CALL.finditer(c.source)),
        None,
    )
    if first_check is None:
        return
    if not EXERCISES_BULLET.search(title.source):
        raise MarkerError(
            f"{name}: the title cell has exercises but no bullet '- **Exercises:** ...' saying "
            "how they work"
        )
    bullet = STUDENT_BULLET.format(name=first_check.group(2) or first_check.group(1))
    title.source = EXERCISES_BULLET.sub(lambda _: bullet, title.source, count=1)


def build_learner(src: Path, out: Path) -> list[Path]:
    """Write the learner's copy of every solved notebook in ``src`` to ``out`` (normalised as
    the course stores notebooks); returns the files written."""
    from tools.normalize_notebooks import normalized, text_of

    written = []
    for path in _notebooks(src):
        learner = normalized(learner_notebook(nbformat.read(path, as_version=4), path.name))
        nbformat.validate(learner)
        target = out / path.name
        text = text_of(learner)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            written.append(target)
    return written


def _unique(grade_id: str, taken: set[str]) -> str:
    candidate, n = grade_id, 2
    while candidate in taken:
        candidate, n = f"{grade_id}_{n}", n + 1
    taken.add(candidate)
    return candidate


def nbgrader_notebook(nb, name: str):
    """A copy of the *source* notebook with nbgrader metadata on exercise and check cells.

    Exercise cells become "autograded answer" cells, check cells (and any cell with hidden
    tests) "autograder tests" worth one point. Cells that already carry nbgrader metadata
    keep it.
    """
    _, infos = student_notebook(nb, name)  # validates the markers
    nb = copy.deepcopy(nb)
    taken = {
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if "grade_id" in c.metadata.get("nbgrader", {})
    }
    last_exercise = None
    for info, cell in zip(infos, nb.cells, strict=True):
        if info.is_exercise:
            names = DEF_NAME.findall(cell.source)
            last_exercise = names[0] if names else f"cell{info.index}"
        if "nbgrader" in cell.metadata:
            continue
        if info.is_exercise:
            cell.metadata["nbgrader"] = {
                "grade": False,
                "grade_id": _unique(last_exercise, taken),
                "locked": False,
                "schema_version": 3,
                "solution": True,
                "task": False,
            }
        elif info.is_check or any(r.kind == "hidden" for r in info.regions):
            match = CHECK_CALL.search(cell.source)
            target = (match and match.group(2)) or last_exercise or f"cell{info.index}"
            cell.metadata["nbgrader"] = {
                "grade": True,
                "grade_id": _unique(f"check_{target}", taken),
                "locked": True,
                "points": 1,
                "schema_version": 3,
                "solution": False,
                "task": False,
            }
    return nb


def solutions(src: Path) -> list[dict]:
    """Every exercise of the notebooks in ``src`` with its solved cell, for
    ``checks.show_solution``: one entry per function a check cell checks, {"name": the
    function, "notebook": its file, "check": the check's name, "source": the exercise cell
    before the check, markers and hidden tests removed}."""
    found = []
    for path in _notebooks(src):
        nb = nbformat.read(path, as_version=4)
        _, infos = student_notebook(nb, path.name)  # validates the markers
        exercise = None
        for info, cell in zip(infos, nb.cells, strict=True):
            if info.is_exercise:
                exercise = "\n".join(
                    line for line in cell.source.split("\n") if line.strip() not in _MARKERS
                )
            elif info.is_check and exercise is not None:
                for match in CHECK_CALL.finditer(cell.source):
                    found.append(
                        {
                            "name": match.group(2),
                            "notebook": path.name,
                            "check": match.group(1),
                            "source": exercise,
                        }
                    )
    return found


def solutions_text(src: Path) -> str:
    """The packaged solutions file (lib/data/solutions.json) for the notebooks in ``src``."""
    import json

    return json.dumps({"exercises": solutions(src)}, indent=1, ensure_ascii=False) + "\n"


def _notebooks(src: Path) -> list[Path]:
    paths = sorted(src.glob("*.ipynb"))
    if not paths:
        raise SystemExit(f"no notebooks found in {src}")
    return paths


def _clear_old(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.ipynb"):  # a notebook removed from the source must not linger
        old.unlink()


def build(src: Path, out: Path) -> list[tuple[Path, Path]]:
    """Write the student version of every notebook in ``src`` to ``out``."""
    pairs = []
    released = []
    repo = notebook_links.repository()
    for path in _notebooks(src):
        nb = nbformat.read(path, as_version=4)
        student, _ = student_notebook(nb, path.name)
        student_title(student, path.name, repo)
        nbformat.validate(student)
        released.append((path, out / path.name, student))
    _clear_old(out)  # only once every notebook has been transformed without error
    for path, target, student in released:
        nbformat.write(student, target)
        pairs.append((path, target))
    return pairs


def build_nbgrader(src: Path, out: Path) -> list[Path]:
    """Write copies of the source notebooks with nbgrader metadata to ``out``.

    Other files in ``out`` are left alone: nothing is removed, and only the notebooks of
    ``src`` (same file names) are written.
    """
    notebooks = []
    for path in _notebooks(src):
        nb = nbgrader_notebook(nbformat.read(path, as_version=4), path.name)
        nbformat.validate(nb)
        notebooks.append((out / path.name, nb))
    out.mkdir(parents=True, exist_ok=True)  # only once every notebook was transformed
    for target, nb in notebooks:
        nbformat.write(nb, target)
    return [target for target, _ in notebooks]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=SOLVED, help="the solved notebooks")
    parser.add_argument(
        "--out",
        type=Path,
        help="write the student release here (default: build/student, unless --nbgrader or "
        "--learner is given alone)",
    )
    parser.add_argument(
        "--learner",
        type=Path,
        metavar="DIR",
        help="write the learner's copies (exercises blank, outputs kept) to DIR (notebooks/)",
    )
    parser.add_argument(
        "--solutions",
        type=Path,
        metavar="FILE",
        help="also write the solved exercises to FILE (lib/data/solutions.json, which "
        "checks.show_solution reads)",
    )
    parser.add_argument(
        "--nbgrader",
        type=Path,
        metavar="DIR",
        help="write the source notebooks with nbgrader metadata to DIR (other files in DIR "
        "are left alone)",
    )
    args = parser.parse_args(argv)
    if args.out is None and args.nbgrader is None and args.learner is None:
        args.out = ROOT / "build" / "student"
    pairs, learner = [], []
    try:
        if args.out is not None:
            pairs = build(args.src, args.out)
        if args.learner is not None:
            learner = build_learner(args.src, args.learner)
        if args.nbgrader:
            build_nbgrader(args.src, args.nbgrader)
        if args.solutions:
            args.solutions.write_text(solutions_text(args.src), encoding="utf-8")
    except MarkerError as exc:
        print(f"make_student: {exc}", file=sys.stderr)
        return 1
    for target in [t for _, t in pairs] + learner:
        print(f"wrote {target}")
    if args.nbgrader:
        print(f"wrote nbgrader source notebooks to {args.nbgrader}")
    if args.solutions:
        print(f"wrote {args.solutions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
