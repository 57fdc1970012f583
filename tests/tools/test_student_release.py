"""The student release of the real notebooks (what `make student` writes) is safe to hand
out and still works:

(a) no solution code is left in it;
(b) every exercise cell is valid Python with one stub per solution region;
(c) its cells are the learner's copy's (notebooks/), which strict nbval runs with the stubs
    in place: each stub's check prints its "not attempted" line, every other cell runs.

(a) and (b) read the regions with their own small parser rather than the tool's, so a bug in
the tool cannot hide itself.
"""

import ast
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest

from tools import make_student as ms

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks" / "solved"
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
def test_student_notebook_is_the_learners_copy_without_its_outputs(path, release):
    """The release's cells are those of the learner's copy in notebooks/ (its Colab line
    aside), which strict nbval runs with the stubs in place: there every stub's check prints
    the line only a stub gets (it raised NotImplementedError when the check called it), and
    every other cell its stored output, so the rest of the notebook runs on lib's reference."""
    student = nbformat.read(release / path.name, as_version=4)
    learner = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
    title = [ms.notebook_links.BADGE_LINE.sub("", nb.cells[0].source) for nb in (student, learner)]
    assert title[0] == title[1]
    assert [c.source for c in student.cells[1:]] == [c.source for c in learner.cells[1:]]
    checks = [c for c in learner.cells if c.cell_type == "code" and ms.CHECK_CALL.search(c.source)]
    assert checks and all("Not attempted yet" in out.text for c in checks for out in c.outputs), (
        f"{path.name}: a check cell of the learner's copy stores something else"
    )
