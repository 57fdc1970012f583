"""An exercise comes before the notebook writes out its answer.

The student release blanks an exercise's solution but keeps every other cell, so a cell above
the exercise that computes what it asks (lib's own version, or the case the exercise
generalises) hands the student the answer. For each exercise below, no code cell before its
check may contain the code that answers it. Where a notebook has to show lib's version
earlier (notebook 01's ``L.attention``, notebook 09's ``POS.rope_rotate`` with the other
layout), the check refuses that call while the student's function runs
(``tests/checks/test_checks.py``, ``tests/checks/test_checks_09.py``).
"""

import nbformat
import pytest
from helpers import ROOT

# (notebook, the exercise's function) -> code that answers it.
GIVEAWAYS = {
    # the shared-mask case of exercise 1: our per-sequence mask repeated for every head
    ("08_numpy_to_pytorch", "to_torch_mask"): ("repeat_interleave(",),
    # exercise 2 without the scale: scores of q and k turned with the interleaved layout
    ("09_positions", "rope_scores"): ('layout="interleaved"', "layout='interleaved'"),
    ("09_positions", "sinusoidal_shift"): ("POS.sinusoidal_shift(",),
    ("09_positions", "alibi_bias"): ("POS.alibi_bias(",),
}


@pytest.mark.parametrize(("notebook", "function"), sorted(GIVEAWAYS))
def test_no_cell_before_the_exercise_writes_out_its_answer(notebook, function):
    nb = nbformat.read(ROOT / "notebooks" / "solved" / f"{notebook}.ipynb", as_version=4)
    code = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    check = next(i for i, source in code if "checks.check_" in source and f"({function})" in source)
    solution = next(i for i, source in code if source.startswith(f"def {function}("))
    assert solution < check
    early = [
        (i, pattern)
        for i, source in code
        if i < solution
        for pattern in GIVEAWAYS[notebook, function]
        if pattern in source
    ]
    assert early == [], (
        f"notebook {notebook}: cells {early} (index, code) answer exercise `{function}` before "
        f"its cell {solution}: move the exercise above them"
    )
