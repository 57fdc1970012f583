"""The learner's notebooks (notebooks/) and the solved ones (notebooks/solved/) stay in step.

The solved copies are the source: ``make execute`` runs one and writes its learner's copy
(tools/make_student.py, ``learner_notebook``). Here every learner's copy must be exactly what
its solved copy gives, so that an edit to one and not the other fails; and the learner's copy
must show no solution. That its stored outputs are what it prints when run (a stub's check
line included) is strict nbval's part: it runs both copies.
"""

from collections import Counter

import nbformat
import pytest
from helpers import ROOT

from tools import make_student as ms
from tools.normalize_notebooks import normalized, text_of

LEARNER = sorted((ROOT / "notebooks").glob("*.ipynb"))
SOLVED = sorted((ROOT / "notebooks" / "solved").glob("*.ipynb"))


def test_every_notebook_has_both_copies():
    assert [p.name for p in LEARNER] == [p.name for p in SOLVED]
    assert len(LEARNER) >= 10


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: p.name[:2])
def test_the_learners_copy_is_what_the_solved_one_gives(path):
    solved = nbformat.read(path, as_version=4)
    expected = text_of(normalized(ms.learner_notebook(solved, path.name)))
    stored = (ROOT / "notebooks" / path.name).read_text()
    assert stored == expected, f"run `make execute NB=notebooks/solved/{path.name}`"


def line_counts(cells, inside_regions) -> Counter:
    """How often each stripped, non-blank line occurs in the cells' sources: inside the
    solution regions (``inside_regions=True``) or outside them."""
    counts = Counter()
    for cell in cells:
        inside = False
        for line in cell.source.split("\n"):
            text = line.strip()
            if text in (ms.BEGIN_SOLUTION, ms.END_SOLUTION):
                inside = text == ms.BEGIN_SOLUTION
            elif text and inside == inside_regions:
                counts[text] += 1
    return counts


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: p.name[:2])
def test_the_learners_copy_shows_no_solution(path):
    # A solution's line may also stand, legitimately, in the notebook's own walk-through: it
    # may occur in the learner's copy as often as it does outside the solved copy's regions.
    solved = nbformat.read(path, as_version=4).cells
    secret, visible = line_counts(solved, True), line_counts(solved, False)
    shown = line_counts(nbformat.read(ROOT / "notebooks" / path.name, as_version=4).cells, False)
    assert secret, f"{path.name} has no exercise"
    leaked = {line: shown[line] for line in secret if shown[line] > visible[line]}
    assert not leaked, f"{path.name}: the learner's copy shows solution lines {leaked}"


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: p.name[:2])
def test_titles_say_how_exercises_work(path):
    solved = nbformat.read(path, as_version=4).cells[0].source
    learner = nbformat.read(ROOT / "notebooks" / path.name, as_version=4).cells[0].source
    assert "solved in this copy, for instructors" in solved
    assert "checks.show_solution(" in learner and "solved in this copy" not in learner


def test_a_learners_copy_out_of_step_is_caught(tmp_path):
    path = SOLVED[0]
    solved = nbformat.read(path, as_version=4)
    learner = ms.learner_notebook(solved, path.name)
    checks = [c for c in learner.cells if c.cell_type == "code" and ms.CHECK_CALL.search(c.source)]
    assert checks and all("Not attempted yet" in c.outputs[0].text for c in checks)
    solved.cells[3].source += "\n\nAn edit made in the solved copy only."
    assert (
        text_of(normalized(ms.learner_notebook(solved, path.name)))
        != (ROOT / "notebooks" / path.name).read_text()
    )
