"""Unit tests of the student-release transformation (tools/make_student.py) on small
synthetic notebooks: stubs at the marker's indentation, several regions per cell, hidden
tests, cleared outputs, and clear errors for malformed markers."""

import ast

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import make_student as ms


def notebook(*cells):
    nb = new_notebook(cells=list(cells))
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    return nb


NESTED = '''\
class Model:
    def forward(self, x):
        """Doc."""
        y = x + 1
        if y > 0:
            ### BEGIN SOLUTION
            z = y * 2
            return z
            ### END SOLUTION
        return 0

    def backward(self, g):
        ### BEGIN SOLUTION
        return g

        # a blank line and a comment inside the region
        ### END SOLUTION


def helper(a):
    return a'''

NESTED_STUDENT = '''\
class Model:
    def forward(self, x):
        """Doc."""
        y = x + 1
        if y > 0:
            # YOUR CODE HERE
            raise NotImplementedError()
        return 0

    def backward(self, g):
        # YOUR CODE HERE
        raise NotImplementedError()


def helper(a):
    return a'''


def test_stubs_keep_the_marker_indentation_and_stay_valid_python():
    source, regions = ms.split_regions(NESTED, "code", "nb, cell 0")
    assert source == NESTED_STUDENT
    ast.parse(source)
    assert [r.kind for r in regions] == ["solution", "solution"]
    assert regions[0].lines == ["            z = y * 2", "            return z"]
    assert regions[0].indent == " " * 12
    assert regions[1].lines[-1] == "        # a blank line and a comment inside the region"


def test_stub_raises_not_implemented():
    source, _ = ms.split_regions(NESTED, "code", "nb, cell 0")
    namespace = {}
    exec(compile(source, "<student>", "exec"), namespace)
    model = namespace["Model"]()
    for call in (lambda: model.forward(1), lambda: model.backward(1)):
        with pytest.raises(NotImplementedError):
            call()
    assert namespace["helper"](3) == 3  # code outside the regions is untouched


def test_top_level_region_and_hidden_tests():
    source = "\n".join(
        [
            "import math",
            "### BEGIN SOLUTION",
            "answer = math.pi",
            "### END SOLUTION",
            "assert answer > 3",
            "### BEGIN HIDDEN TESTS",
            "assert abs(answer - 3.14159) < 1e-5",
            "    ### END HIDDEN TESTS",
            "print('done')",
        ]
    )
    out, regions = ms.split_regions(source, "code", "nb, cell 0")
    assert out.split("\n") == [
        "import math",
        "# YOUR CODE HERE",
        "raise NotImplementedError()",
        "assert answer > 3",
        "print('done')",
    ]
    assert [(r.kind, r.lines) for r in regions] == [
        ("solution", ["answer = math.pi"]),
        ("hidden", ["assert abs(answer - 3.14159) < 1e-5"]),
    ]


def test_markdown_region_gets_the_text_stub_and_near_markers_in_prose_are_left():
    prose = (
        "Write your answer between `### BEGIN SOLUTION` markers.\n"
        "### BEGIN SOLUTION\nBecause.\n### END SOLUTION"
    )
    out, regions = ms.split_regions(prose, "markdown", "nb, cell 0")
    assert out == "Write your answer between `### BEGIN SOLUTION` markers.\nYOUR ANSWER HERE"
    assert regions[0].lines == ["Because."]


@pytest.mark.parametrize(
    "lines, fragment",
    [
        (["def f():", "    ### BEGIN SOLUTION", "    return 1"], "has no '### END SOLUTION'"),
        (["x = 1", "### END SOLUTION"], "without a matching BEGIN"),
        (["### BEGIN SOLUTION", "### BEGIN SOLUTION", "### END SOLUTION"], "cannot nest"),
        (["### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"], "cannot nest"),
        (["### BEGIN HIDDEN TESTS", "### END SOLUTION"], "without a matching BEGIN"),
        (["### BEGIN HIDDEN TESTS", "assert True"], "has no '### END HIDDEN TESTS'"),
        (["## BEGIN SOLUTION", "x = 1", "### END SOLUTION"], "looks like a marker"),
        (["### Begin Solution", "x = 1", "### END SOLUTION"], "looks like a marker"),
        (["### BEGIN SOLUTION  # tricky", "x = 1", "### END SOLUTION"], "looks like a marker"),
    ],
)
def test_malformed_markers_name_the_notebook_and_cell(lines, fragment):
    nb = notebook(new_markdown_cell("# Title"), new_code_cell("\n".join(lines)))
    with pytest.raises(ms.MarkerError) as info:
        ms.student_notebook(nb, "05_example.ipynb")
    message = str(info.value)
    assert fragment in message, message
    assert "05_example.ipynb, cell 1" in message, message
    assert f"(id {nb.cells[1].id})" in message, message


def test_exercise_and_check_in_one_cell_is_an_error():
    cell = new_code_cell(
        "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n\n\n"
        "checks.check_f(f)"
    )
    with pytest.raises(ms.MarkerError, match="its own cell"):
        ms.student_notebook(notebook(cell), "x.ipynb")


def test_notebook_outputs_cleared_and_cells_classified():
    exercise = new_code_cell(
        "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION",
        execution_count=3,
        outputs=[new_output("stream", name="stdout", text="hi\n")],
    )
    exercise.metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    exercise.metadata["tags"] = ["keep-me"]
    check = new_code_cell("checks.check_f(f)", execution_count=4)
    other = new_code_cell("print(1)", execution_count=5)
    nb = notebook(new_markdown_cell("text"), exercise, check, other)
    student, infos = ms.student_notebook(nb, "x.ipynb")
    assert nb.cells[1].outputs and "BEGIN SOLUTION" in nb.cells[1].source  # input untouched
    for cell in student.cells[1:]:
        assert cell.outputs == [] and cell.execution_count is None
        assert "execution" not in cell.metadata
    assert student.cells[1].metadata["tags"] == ["keep-me"]
    assert [(i.is_exercise, i.is_check) for i in infos] == [
        (False, False),
        (True, False),
        (False, True),
        (False, False),
    ]
    nbformat.validate(student)


def test_build_writes_every_notebook_and_removes_stale_ones(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    (out / "99_removed.ipynb").write_text("{}")
    for name in ("01_a.ipynb", "02_b.ipynb"):
        nbformat.write(
            notebook(new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")), src / name
        )
    pairs = ms.build(src, out)
    assert sorted(p.name for p in out.iterdir()) == ["01_a.ipynb", "02_b.ipynb"]
    assert [s.name for s, _ in pairs] == ["01_a.ipynb", "02_b.ipynb"]
    assert "x = 1" not in (out / "01_a.ipynb").read_text()


def test_build_fails_before_writing_anything(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    nbformat.write(notebook(new_code_cell("x = 1")), src / "01_ok.ipynb")
    nbformat.write(notebook(new_code_cell("### BEGIN SOLUTION\nx = 1")), src / "02_bad.ipynb")
    assert ms.main(["--src", str(src), "--out", str(out)]) == 1
    assert not out.exists() or not list(out.glob("*.ipynb"))


def test_nbgrader_metadata_is_added_to_exercise_and_check_cells_only():
    exercise = new_code_cell(
        "def softmax(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION"
    )
    check = new_code_cell("checks.check_softmax(softmax)")
    hidden = new_code_cell("### BEGIN HIDDEN TESTS\nassert True\n### END HIDDEN TESTS")
    tagged = new_code_cell("checks.check_other(other)")
    tagged.metadata["nbgrader"] = {"grade": True, "grade_id": "mine", "points": 3}
    nb = notebook(new_markdown_cell("x"), exercise, check, hidden, tagged, new_code_cell("1 + 1"))
    out = ms.nbgrader_notebook(nb, "x.ipynb")
    meta = [c.metadata.get("nbgrader") for c in out.cells]
    assert meta[0] is None and meta[5] is None
    assert meta[1]["solution"] is True and meta[1]["grade"] is False
    assert meta[1]["grade_id"] == "softmax"
    assert meta[2]["grade"] is True and meta[2]["points"] == 1 and meta[2]["locked"] is True
    assert meta[2]["grade_id"] == "check_softmax"
    assert meta[3]["grade_id"] == "check_softmax_2"  # unique, named after the last exercise
    assert meta[4] == {"grade": True, "grade_id": "mine", "points": 3}  # left as it was
    assert "return x" in out.cells[1].source  # the source keeps its solution
    assert "nbgrader" not in nb.cells[1].metadata  # the input is not modified


def test_nbgrader_dir_keeps_other_files_and_student_release_is_not_rebuilt(tmp_path, monkeypatch):
    """`--nbgrader DIR` writes the course's notebooks into DIR and nothing else: an
    instructor's own notebooks and files there stay, and build/student is not rewritten."""
    src, course = tmp_path / "src", tmp_path / "source" / "homework1"
    src.mkdir()
    course.mkdir(parents=True)
    nbformat.write(
        notebook(new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")), src / "01_a.ipynb"
    )
    (course / "99_mine.ipynb").write_text("{}")
    (course / "notes.txt").write_text("keep me")
    (course / "01_a.ipynb").write_text("{}")  # an older copy of ours is replaced

    def no_release(*args, **kwargs):
        raise AssertionError("the student release was rebuilt")

    monkeypatch.setattr(ms, "build", no_release)
    assert ms.main(["--src", str(src), "--nbgrader", str(course)]) == 0
    assert sorted(p.name for p in course.iterdir()) == ["01_a.ipynb", "99_mine.ipynb", "notes.txt"]
    assert (course / "99_mine.ipynb").read_text() == "{}"
    assert (course / "notes.txt").read_text() == "keep me"
    written = nbformat.read(course / "01_a.ipynb", as_version=4)
    assert written.cells[0].metadata["nbgrader"]["solution"] is True


def test_nbgrader_and_out_together_write_both(tmp_path):
    src, course, out = tmp_path / "src", tmp_path / "course", tmp_path / "out"
    src.mkdir()
    nbformat.write(
        notebook(new_code_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")), src / "01_a.ipynb"
    )
    assert ms.main(["--src", str(src), "--nbgrader", str(course), "--out", str(out)]) == 0
    assert "x = 1" not in (out / "01_a.ipynb").read_text()
    assert "x = 1" in (course / "01_a.ipynb").read_text()


SOLVED_TITLE = """\
# 01 · A title

*Run in Colab:* not yet.

- **Needs:** nothing.
- **Exercises:** solved here; `make lab-student` opens the blank student release
  (`build/student/`, copied once to `homework/`) in JupyterLab.

The introduction."""


def titled(title=SOLVED_TITLE):
    return notebook(
        new_markdown_cell(title),
        new_code_cell(
            "def softmax(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION"
        ),
        new_code_cell("checks.check_softmax(softmax)"),
    )


def test_student_title_points_to_show_solution_instead_of_the_solutions():
    nb, _ = ms.student_notebook(titled(), "01_a.ipynb")
    ms.student_title(nb, "01_a.ipynb", None)
    title = nb.cells[0].source
    assert "solved here" not in title
    assert '`checks.show_solution("softmax")`' in title  # the first exercise's name
    assert "*Run in Colab:* not yet" in title  # no public address: no badge
    assert title.endswith("shows the course's answer.\n\nThe introduction.")  # the rest kept


def test_student_badge_opens_the_blank_notebook_and_links_the_solved_one():
    repo = ms.notebook_links.Repository("someone", "course")
    nb, _ = ms.student_notebook(titled(), "01_a.ipynb")
    ms.student_title(nb, "01_a.ipynb", repo)
    title = nb.cells[0].source
    student = "https://colab.research.google.com/github/someone/course/blob/student/01_a.ipynb"
    solved = "https://colab.research.google.com/github/someone/course/blob/main/notebooks/solved/01_a.ipynb"
    assert f"]({student})" in title and f"[the solved notebook]({solved})" in title
    assert ms.notebook_links.STUDENT_BRANCH == "student"


def test_a_title_without_the_exercises_bullet_is_an_error():
    nb, _ = ms.student_notebook(titled(SOLVED_TITLE.replace("**Exercises:**", "**Tasks:**")), "x")
    with pytest.raises(ms.MarkerError, match=r"Exercises:"):
        ms.student_title(nb, "01_a.ipynb", None)


def test_the_student_release_workflow_publishes_what_the_badges_open():
    workflow = (ms.notebook_links.ROOT / ".github" / "workflows" / "student.yml").read_text()
    assert "make student" in workflow
    assert "build/student" in workflow
    assert f"HEAD:{ms.notebook_links.STUDENT_BRANCH}" in workflow
