"""checks.show_solution: every exercise of every notebook has its reference answer, shown
only after a warning; an unknown name lists the names there are; the packaged solutions are
the notebooks' current ones."""

import json
import re

import nbformat
import pytest
from helpers import ROOT

from lib import checks
from lib.checks import _solutions
from tools import make_student as ms

NOTEBOOKS = sorted((ROOT / "notebooks" / "solved").glob("*.ipynb"))


def exercise_names():
    """(notebook, the function each check cell passes to its check), from the notebooks."""
    found = []
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                found += [(path.name, m.group(2)) for m in ms.CHECK_CALL.finditer(cell.source)]
    return found


NAMES = exercise_names()


def test_the_packaged_solutions_are_the_notebooks_current_ones():
    """lib/data/solutions.json is written by `make student`; run it after editing an
    exercise."""
    packaged = _solutions.SOLUTIONS.read_text(encoding="utf-8")
    assert packaged == ms.solutions_text(ms.SOLVED), "run `make execute` or `make student`"


def test_the_wheel_ships_them():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'lib = \[.*"data/\*\.json"', text)  # solutions.json is in lib/data/


@pytest.mark.parametrize("notebook, name", NAMES, ids=[f"{nb[:2]}-{n}" for nb, n in NAMES])
def test_every_exercise_name_resolves(notebook, name, capsys):
    checks.show_solution(name)
    out = capsys.readouterr().out
    assert out.startswith("Try first:") and f"notebook {notebook[:2]}" in out
    assert f"def {name}(" in out  # the solved cell defines the function
    assert "BEGIN SOLUTION" not in out and "END SOLUTION" not in out


def test_names_are_unique_and_checks_names_work_too(capsys):
    exercises = json.loads(_solutions.SOLUTIONS.read_text())["exercises"]
    names = [e["name"] for e in exercises]
    assert len(names) == len(set(names)) == len(NAMES)
    checks.show_solution("check_sinusoidal_shift")
    assert "def sinusoidal_shift(" in capsys.readouterr().out


def test_an_unknown_name_lists_the_names():
    with pytest.raises(checks.UnknownExercise) as info:
        checks.show_solution("sinusoidal_shfit")
    message = str(info.value)
    assert "no exercise named 'sinusoidal_shfit'" in message
    assert "09: sinusoidal_shift, rope_scores, alibi_bias" in message
    assert all(name in message for _, name in NAMES)
    assert info.value._render_traceback_() == [f"UnknownExercise: {message}"]


def test_the_function_itself_is_understood_as_its_name(capsys):
    """As the check cell passes it: show_solution(softmax), or the check itself."""

    def sliding_window_mask(n, window):
        raise NotImplementedError

    checks.show_solution(sliding_window_mask)
    checks.show_solution(checks.check_sliding_window_mask_list)
    out = capsys.readouterr().out
    assert out.count("reference answer for sliding_window_mask (notebook 01)") == 2
