"""The student release of the real notebooks (what `make student` writes) is safe to hand
out and still works:

(a) no solution code is left in it;
(b) every stub raises NotImplementedError, seen through the check that follows it;
(c) with the stubs in place, each notebook runs top to bottom, and only the exercise cells
    and the checks of stubbed exercises fail;
(d) the solution notebooks themselves pass strict nbval (that is the `--nbval` part of
    `make test`, not this file).

(a) and (b) read the regions with their own small parser rather than the tool's, so a bug in
the tool cannot hide itself.
"""

import ast
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tools import make_student as ms

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
SOURCES = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
BEGIN = {"### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"}
END = {"### END SOLUTION", "### END HIDDEN TESTS"}
STUB_LINES = {"# YOUR CODE HERE", "raise NotImplementedError()"}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    ms.build(NOTEBOOK_DIR, out)
    return out


def read_pair(path, release):
    return nbformat.read(path, as_version=4), nbformat.read(release / path.name, as_version=4)


def line_counts(nb):
    """(lines inside solution/hidden regions, lines outside them), stripped, blank lines
    dropped, counted over every cell of the notebook (prose included)."""
    inside, outside = Counter(), Counter()
    for cell in nb.cells:
        in_region = False
        for line in cell.source.split("\n"):
            text = line.strip()
            if text in BEGIN or text in END:
                in_region = text in BEGIN
            elif text:
                (inside if in_region else outside)[text] += 1
    return inside, outside


def test_every_notebook_is_released_and_has_exercises(release):
    assert SOURCES, "no notebooks found"
    assert sorted(p.name for p in release.glob("*.ipynb")) == [p.name for p in SOURCES]
    for path in SOURCES:
        inside, _ = line_counts(nbformat.read(path, as_version=4))
        assert inside, f"{path.name} has no solution region: nothing to check"


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_no_solution_code_left(path, release):
    """Every line of every solution (and hidden-test) region must be gone.

    Comparing line by line needs care: a short line such as `return out` or
    `weights = A.softmax(scores)` may also appear, legitimately, in the notebook's own
    walk-through, before the exercise. So the comparison counts: a region line may appear
    in the release at most as many times as it appears *outside* every region in the
    source. The release is the source with the regions cut out and stubs put in, so any
    extra copy is leaked solution code, whatever cell it landed in.
    """
    source, student = read_pair(path, release)
    secret, visible = line_counts(source)
    released = Counter(
        line.strip() for cell in student.cells for line in cell.source.split("\n") if line.strip()
    )
    leaked = {line: released[line] for line in secret if released[line] > visible[line]}
    assert not leaked, f"{path.name}: solution lines left in the student release: {leaked}"

    # The release keeps every cell (same ids and types) and nothing of what was run.
    assert [(c.id, c.cell_type) for c in student.cells] == [
        (c.id, c.cell_type) for c in source.cells
    ]
    for cell in student.cells:
        assert not re.search(r"(BEGIN|END) (SOLUTION|HIDDEN TESTS)", cell.source), cell.source
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source

    # Cells without regions are copied unchanged, but for the title cell's Colab line and
    # its bullet on the exercises, which make student rewrites.
    def without_rewritten(title):
        return ms.EXERCISES_BULLET.sub("", ms.notebook_links.BADGE_LINE.sub("", title))

    assert "show_solution" in student.cells[0].source
    assert without_rewritten(student.cells[0].source) == without_rewritten(source.cells[0].source)
    for before, after in zip(source.cells[1:], student.cells[1:], strict=True):
        if not any(line.strip() in BEGIN for line in before.source.split("\n")):
            assert after.source == before.source


def stubbed_top_level_names(source: str) -> list[str]:
    """Top-level functions and classes of a cell with a stub inside them."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if any(
                isinstance(sub, ast.Raise)
                and isinstance(sub.exc, ast.Call)
                and getattr(sub.exc.func, "id", None) == "NotImplementedError"
                for sub in ast.walk(node)
            ):
                names.append(node.name)
    return names


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_exercise_cells_are_valid_python_with_one_stub_per_region(path, release):
    source, student = read_pair(path, release)
    for index, (before, after) in enumerate(zip(source.cells, student.cells, strict=True)):
        regions = sum(line.strip() == "### BEGIN SOLUTION" for line in before.source.split("\n"))
        if before.cell_type != "code" or not regions:
            continue
        ast.parse(after.source)  # a stub inside a function body must leave valid Python
        stubs = [line.strip() for line in after.source.split("\n") if line.strip() in STUB_LINES]
        assert stubs == ["# YOUR CODE HERE", "raise NotImplementedError()"] * regions, (
            f"{path.name}, cell {index}"
        )


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_student_notebook_runs_with_stubs(path, release):
    """One execution of the student notebook from a fresh kernel, in the directory nbval
    runs the solution notebook in (so relative paths resolve the same way).

    - cells that are neither exercises nor checks must not raise;
    - an exercise cell may raise only NotImplementedError (a stub at the cell's top level);
    - a check cell that receives a stubbed function must raise CheckFailed saying
      "not implemented yet": that proves the stub raised NotImplementedError when the check
      called it, and that the check reports it instead of crashing;
    - every stubbed function must reach such a check.
    """
    source, student = read_pair(path, release)
    _, infos = ms.student_notebook(source, path.name)
    client = NotebookClient(
        student,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()

    stubbed: dict[str, int] = {}  # stubbed function -> its exercise cell
    reported: set[str] = set()
    top_level_stub = False  # a stub outside any function raised when its cell ran
    problems = []
    for info, cell in zip(infos, student.cells, strict=True):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        error = (errors[0].ename, errors[0].evalue) if errors else None
        where = f"cell {info.index} ({cell.source.splitlines()[0][:60]!r})"
        if info.is_exercise:
            stubbed.update(dict.fromkeys(stubbed_top_level_names(cell.source), info.index))
            if error and error[0] != "NotImplementedError":
                problems.append(f"exercise {where} raised {error[0]}: {error[1]}")
            top_level_stub |= error is not None
            continue
        targets = [n for n in stubbed if re.search(rf"\b{re.escape(n)}\b", cell.source)]
        if info.is_check and targets:
            if error is None:
                problems.append(f"check {where} passed although {targets} are stubs")
            elif error[0] != "CheckFailed" or "not implemented yet" not in error[1]:
                problems.append(f"check {where} raised {error[0]}: {error[1]}")
            else:
                reported.update(targets)
        elif error and not (info.is_check and top_level_stub):
            problems.append(f"{where} raised {error[0]}: {error[1]}")
    assert stubbed or top_level_stub, f"{path.name}: no stubbed exercise found"
    missing = sorted(set(stubbed) - reported)
    if missing:
        problems.append(f"stubbed functions no check reported as not implemented: {missing}")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)
