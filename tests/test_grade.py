"""tools/grade.py grades a submission with the source's own checks: an edited check cell is
put back before it runs, and a deleted one counts as failed."""

from pathlib import Path

import nbformat
from helpers import load_tool

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_attention_with_lists.ipynb"


def test_grade_restores_checks_and_reports_each(tmp_path):
    ms, grade = load_tool("make_student"), load_tool("grade")
    student, infos = ms.student_notebook(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.name)
    exercises = [i.index for i in infos if i.is_exercise]
    checks = [i.index for i in infos if i.is_check]
    assert len(exercises) == len(checks) == 3
    # The student solves the causal mask, fakes the softmax check, deletes the last check.
    student.cells[
        exercises[1]
    ].source = "def causal_mask(n):\n    return [[j <= i for j in range(n)] for i in range(n)]"
    student.cells[checks[0]].source = 'print("✓ softmax: all good")'
    del student.cells[checks[2]]
    path = tmp_path / NOTEBOOK.name
    nbformat.write(student, path)

    results = grade.grade(path, NOTEBOOK)
    assert [r.passed for r in results] == [False, True, False]
    assert results[0].source.startswith("checks.check_softmax_list(")
    assert "not implemented yet" in results[0].message
    assert results[2].message == "the check cell was deleted"
