"""An exercise left as its stub: in the learner's notebook its check says so in one line and
how to see the answer, and raises nothing (Run all goes on); every grader counts it as failed.

The stub is what the learner's notebooks hold (``raise NotImplementedError()`` in the
function). The course's grader (tools/grade.py) calls the undecorated check; nbgrader runs
the notebook with ``NBGRADER_EXECUTION`` set.
"""

import pytest
from test_show_solution import NAMES

from lib import checks
from lib.checks import _core


def stub_named(name):
    def stub(*args, **kwargs):
        raise NotImplementedError()

    stub.__name__ = stub.__qualname__ = name
    return stub


def check_of(notebook, name):
    """The check the notebook's check cell calls on ``name``."""
    exercise = checks._solutions.solution(name)
    assert exercise["notebook"] == notebook
    return getattr(checks, exercise["check"])


@pytest.mark.parametrize(("notebook", "name"), NAMES, ids=[n for _, n in NAMES])
def test_a_stub_prints_one_line_that_says_how_to_see_the_answer(
    notebook, name, capsys, monkeypatch
):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    check = check_of(notebook, name)
    assert check(stub_named(name)) is None  # raises nothing: the notebook runs on
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f'○ Not attempted yet. Stuck after trying? checks.show_solution("{name}")']
    assert len(lines[0]) <= 100  # one line in JupyterLab
    assert checks._solutions.solution(name)["name"] == name  # the line's call finds it


@pytest.mark.parametrize(("notebook", "name"), NAMES, ids=[n for _, n in NAMES])
def test_graders_count_a_stub_as_failed(notebook, name, monkeypatch, capsys):
    check = check_of(notebook, name)
    with pytest.raises(_core.NotAttempted, match=f"{name} is not implemented yet"):
        check.__wrapped__(stub_named(name))  # tools/grade.py
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(checks.CheckFailed, match="is not implemented yet"):
        check(stub_named(name))  # nbgrader's autograde and validate
    assert capsys.readouterr().out == ""


def test_only_the_stub_itself_counts_as_not_attempted(monkeypatch):
    # An answer that calls a helper still left as its stub is a real failure: it raises.
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)

    def softmax_row(row):
        raise NotImplementedError()

    def log_softmax_row(row):
        return softmax_row(row)

    with pytest.raises(checks.CheckFailed, match="calls softmax_row, which is not implemented"):
        checks.check_log_softmax_list(log_softmax_row)


def test_every_exercise_check_is_decorated():
    names = [n for n in checks.__all__ if n.startswith("check_")]
    assert len(names) == len({name for _, name in NAMES}) == 37
    assert all(hasattr(getattr(checks, n), "__wrapped__") for n in names)
