"""tools/classroom.py: the GitHub Classroom template repository (the student notebook and a
workflow with one 1-point test per exercise), and the workflow's own commands, run here as
the Actions runner would run them, on a sample student's repository."""

import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml
from test_grade import RIGHT, WRONG, course, submit

from tools import classroom

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ".course/.venv/bin/python"


def test_a_template_per_notebook_with_its_workflow(tmp_path):
    source = course(tmp_path, n_exercises=2)
    (folder,) = classroom.build([source], tmp_path / "out", "someone/course", "v1")
    assert folder.name == "90_tiny"
    student = nbformat.read(folder / "90_tiny.ipynb", as_version=4)
    text = "\n".join(c.source for c in student.cells)
    assert "### BEGIN SOLUTION" not in text and "raise NotImplementedError()" in text
    assert (folder / ".gitignore").read_text().splitlines()[:2] == [".course", ".grades/"]
    flow = yaml.safe_load((folder / classroom.WORKFLOW).read_text())
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    course_checkout = steps[1]["with"]
    assert course_checkout == {"repository": "someone/course", "ref": "v1", "path": ".course"}
    assert steps[3]["run"] == "make -C .course install"
    tests = [s for s in steps if s.get("uses") == classroom.COMMAND_GRADER]
    assert [t["with"]["test-name"] for t in tests] == ["softmax_0", "softmax_1"]
    assert all(t["with"]["max-score"] == 1 for t in tests)
    reporter = steps[-1]
    assert reporter["uses"] == classroom.REPORTER
    ids = [t["id"] for t in tests]
    assert reporter["with"]["runners"] == ",".join(ids)
    assert reporter["env"] == {
        f"{i.upper()}_RESULTS": f"${{{{steps.{i}.outputs.result}}}}" for i in ids
    }


def test_the_workflow_commands_grade_a_students_push(tmp_path):
    """The workflow's commands, from the grading step on, in a student's repository whose
    .course is this checkout (its lib and tools, the tiny course notebook) and whose
    .course/.venv/bin/python is this Python: each exercise step exits 0 exactly when its
    exercise passed and prints the check's sentence."""
    source = course(tmp_path, n_exercises=2)
    (template,) = classroom.build([source], tmp_path / "out", "someone/course", "main")
    flow = yaml.safe_load((template / classroom.WORKFLOW).read_text())
    steps = flow["jobs"]["run-autograding-tests"]["steps"]
    repo = tmp_path / "student-repo"
    repo.mkdir()
    pushed = submit(
        tmp_path, source, "kim", [RIGHT.format(name="softmax_0"), WRONG.format(name="softmax_1")]
    )
    (repo / pushed.name).write_bytes(pushed.read_bytes())
    (repo / "README.md").write_text((template / "README.md").read_text())
    dot_course = repo / ".course"
    (dot_course / "notebooks").mkdir(parents=True)
    for tree in ("lib", "tools", "data"):
        (dot_course / tree).symlink_to(ROOT / tree, target_is_directory=True)
    # the course's solved copies, where the workflow's grader takes the checks from
    (dot_course / "notebooks" / "solved").symlink_to(source.parent, target_is_directory=True)

    def here(command: str) -> str:
        return command.replace(PYTHON, sys.executable)

    grade_step = next(s for s in steps if s.get("name") == "Grade the notebook")
    done = subprocess.run(
        here(grade_step["run"]), shell=True, cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "1 of 2 exercise checks passed" in done.stdout
    outcome = {}
    for step in steps:
        if step.get("uses") != classroom.COMMAND_GRADER:
            continue
        # The command grader runs its command without a shell: one program, its arguments.
        ran = subprocess.run(
            shlex.split(here(step["with"]["command"])), cwd=repo, capture_output=True, text=True
        )
        outcome[step["with"]["test-name"]] = (ran.returncode, ran.stdout.strip(), ran.stderr)
    assert outcome["softmax_0"] == (0, "✓ softmax_0: passed", "")
    code, out, err = outcome["softmax_1"]
    assert code == 1 and out.startswith("✗ softmax_1: ") and "should sum to 1" in out and not err


def test_points_without_results_fails_with_a_sentence(tmp_path):
    code = classroom.main(["points", str(tmp_path / "missing.json"), "softmax_0"])
    assert code == 1


def test_a_pushed_link_to_the_courses_solved_notebook_is_not_graded(tmp_path):
    """The workflow checks the course, solved notebooks included, out into .course/: a
    student's repository holding only a symbolic link to one of them gets no points."""
    source = course(tmp_path, n_exercises=2)
    repo = tmp_path / "student-repo"
    (repo / ".course" / "notebooks").mkdir(parents=True)
    for tree in ("lib", "tools", "data"):
        (repo / ".course" / tree).symlink_to(ROOT / tree, target_is_directory=True)
    solved = repo / ".course" / "notebooks" / "solved"
    solved.symlink_to(source.parent, target_is_directory=True)
    (repo / source.name).symlink_to(Path(".course") / "notebooks" / "solved" / source.name)
    script = repo / ".course" / "tools" / "classroom.py"
    done = subprocess.run(
        [sys.executable, str(script), "grade", source.name],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "a symbolic link is not graded" in done.stdout
    assert "0 of 2" not in done.stdout and "2 of 2" not in done.stdout
