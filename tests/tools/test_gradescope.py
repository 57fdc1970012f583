"""tools/gradescope.py: the autograder zip holds what Gradescope's specification asks for,
setup.sh would install exactly `make install`'s pinned environment (dry run; `make
test-gradescope` runs it for real), and run_autograder grades a sample class (right, wrong,
broken, hung, tampered, renamed, nbformat 4.0 without ids, not a notebook, nothing) with a
results.json that follows Gradescope's documented format every time, never a crash. Run as
root (Gradescope runs the autograder as root), the submissions' kernels run as an unprivileged
account: a submission that forges results.json and kills the grader gets its real grade."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_grade import RIGHT, WRONG, course, submit

from tools import gradescope

ROOT = Path(__file__).resolve().parents[2]

# Gradescope's results.json (docs/specs.md of gradescope/autograder_samples, "Output
# format"): field -> allowed types, for the top level and for each test.
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
NUMBER = (int, float)
TOP_FIELDS = {
    "score": NUMBER,
    "execution_time": NUMBER,
    "output": str,
    "visibility": str,
    "stdout_visibility": str,
    "extra_data": dict,
    "tests": list,
    "leaderboard": list,
}
TEST_FIELDS = {
    "score": NUMBER,
    "max_score": NUMBER,
    "name": str,
    "number": str,
    "output": str,
    "tags": list,
    "visibility": str,
    "extra_data": dict,
}


def schema_errors(data) -> list[str]:
    """Where ``data`` breaks Gradescope's format (and the rules this autograder adds: every
    test scored, the total the sum of the tests, scores within 0..max_score)."""
    errors = []

    def fields(obj, allowed, where):
        if not isinstance(obj, dict):
            return [f"{where} is not an object"]
        found = [f"{where}: unknown field {k!r}" for k in obj if k not in allowed]
        for key, kind in allowed.items():
            if key in obj and (not isinstance(obj[key], kind) or isinstance(obj[key], bool)):
                found.append(f"{where}.{key} is {type(obj[key]).__name__}")
        for key in ("visibility", "stdout_visibility"):
            if key in obj and obj[key] not in VISIBILITY:
                found.append(f"{where}.{key} is {obj[key]!r}")
        return found

    errors += fields(data, TOP_FIELDS, "results")
    if errors:
        return errors
    if "score" not in data and "tests" not in data:
        errors.append("results has neither score nor tests")
    for i, test in enumerate(data.get("tests", [])):
        errors += fields(test, TEST_FIELDS, f"tests[{i}]")
        if errors:
            continue
        for key in ("name", "score", "max_score", "output"):
            if key not in test:
                errors.append(f"tests[{i}] has no {key}")
        if "score" in test and "max_score" in test and not 0 <= test["score"] <= test["max_score"]:
            errors.append(f"tests[{i}] scores {test['score']} of {test['max_score']}")
    if not errors and "tests" in data:
        total = sum(t["score"] for t in data["tests"])
        if data.get("score") != total:
            errors.append(f"score {data.get('score')} is not the tests' total {total}")
    return errors


def test_the_schema_validator_catches_what_gradescope_would_reject():
    good = {"score": 1.0, "tests": [{"name": "f", "score": 1.0, "max_score": 1.0, "output": ""}]}
    assert schema_errors(good) == []
    assert schema_errors({**good, "score": 2.0})  # not the total
    assert schema_errors({**good, "visibility": "sometimes"})
    assert schema_errors({**good, "tests": [{"name": "f", "score": "1", "max_score": 1}]})
    assert schema_errors({**good, "tests": [{"name": "f", "score": 2, "max_score": 1}]})
    assert schema_errors({**good, "scores": 1})
    assert schema_errors([])


# --------------------------------------------------------------------------- the zip


def _runs_as(user: str, python: str) -> bool:
    import pwd

    entry = pwd.getpwnam(user)
    try:
        done = subprocess.run(
            [python, "-c", "import ipykernel, numpy, lib"],
            cwd="/",
            capture_output=True,
            user=entry.pw_uid,
            group=entry.pw_gid,
            extra_groups=[],
        )
    except OSError:  # it may not even read the interpreter
        return False
    return done.returncode == 0


@pytest.fixture(scope="module")
def grader_python():
    """(the Python run_autograder runs, why the kernels cannot run unprivileged or ""). As
    root, the kernels run as ``nobody``, which must be able to run that Python: when this
    one lives under a private home, a virtual environment of the system's Python of the
    same version that sees this one's packages stands in for it."""
    import pwd

    user = os.environ.get("AUTOGRADER_STUDENT_USER", "nobody")
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        yield sys.executable, "the tests do not run as root: the grader keeps its own user"
        return
    try:
        pwd.getpwnam(user)
    except KeyError:
        yield sys.executable, f"there is no account {user!r} to run the kernels as"
        return
    if _runs_as(user, sys.executable):
        yield sys.executable, ""
        return
    version = "{}.{}".format(*sys.version_info[:2])
    system = Path(f"/usr/bin/python{version}")
    if not system.exists():
        yield sys.executable, f"{user} cannot run {sys.executable} and there is no {system}"
        return
    folder = Path(tempfile.mkdtemp(prefix="grader-python-"))
    try:
        folder.chmod(0o755)
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(folder)], check=True)
        purelib = sysconfig.get_paths(vars={"base": str(folder), "platbase": str(folder)})
        (Path(purelib["purelib"]) / "_grader.pth").write_text(
            f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
        )
        python = str(folder / "bin" / "python")
        if _runs_as(user, python):
            yield python, ""
        else:
            yield sys.executable, f"{user} can run neither {sys.executable} nor {system}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory, grader_python):
    """A course notebook with two exercises, its autograder zip, and the zip unpacked as
    Gradescope does: /autograder/source, run_autograder copied up. The wheel is a stand-in
    (building the real one takes pip half a minute; `make test-gradescope` installs it):
    here setup.sh only names it and run_autograder does not use it."""
    tmp = tmp_path_factory.mktemp("gradescope")
    source = course(tmp, n_exercises=2)
    wheel = tmp / "dist" / "mha_from_scratch_course-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"a stand-in")
    zip_path = gradescope.build_zip(source, wheel, tmp / "zips")
    unpacked = tmp / "unpacked"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(unpacked)
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
        names = zf.namelist()
    for script in ("setup.sh", "run_autograder"):
        (unpacked / script).chmod(0o755)
    python, why_not_unprivileged = grader_python
    if why_not_unprivileged:
        print(f"\nthe kernels run as the tests' user: {why_not_unprivileged}")
    return {
        "python": python,
        "unprivileged": not why_not_unprivileged,
        "why_not_unprivileged": why_not_unprivileged,
        "tmp": tmp,
        "source": source,
        "wheel": wheel,
        "unpacked": unpacked,
        "names": names,
        "modes": modes,
    }


def test_the_zip_holds_setup_run_autograder_and_the_course(built):
    names = built["names"]
    assert {"setup.sh", "run_autograder"} <= set(names)  # at the root, as the spec asks
    for script in ("setup.sh", "run_autograder"):
        assert built["modes"][script] & 0o111, script
    assert f"course/dist/{built['wheel'].name}" in names
    assert f"course/notebooks/{built['source'].name}" in names
    assert len([n for n in names if n.startswith("course/notebooks/")]) == 1
    assert "course/tools/grade.py" in names and "course/lib/checks/_core.py" in names
    assert not [n for n in names if "__pycache__" in n]
    assert (built["unpacked"] / "course" / "ASSIGNMENT").read_text() == "90_tiny.ipynb\n"


def test_setup_sh_installs_exactly_what_make_install_does(built, tmp_path):
    """DRY_RUN=1: the commands setup.sh would run are `make install`'s, from the same
    pinned files, and nothing is fetched but from pip's index."""
    course_dir = built["unpacked"] / "course"
    for name in gradescope.PINNED:
        assert (course_dir / name).read_bytes() == (ROOT / name).read_bytes(), name
    env = dict(
        os.environ, DRY_RUN="1", AUTOGRADER_ROOT=str(tmp_path), AUTOGRADER_SETUP_PYTHON="python3"
    )
    done = subprocess.run(
        ["bash", str(built["unpacked"] / "setup.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    venv = tmp_path / "venv"
    makefile = (ROOT / "Makefile").read_text()
    pip_options = re.search(r"^PIP := \$\(BIN\)/python (.*)$", makefile, re.M).group(1)
    recipe = re.search(r"^\$\(STAMP\):.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    make_installs = re.findall(r"^\t\$\(PIP\) (install .*)$", recipe, re.M)
    wheel = f"dist/{built['wheel'].name}"
    expected = [f"python3 -m venv {venv}"] + [
        f"{venv}/bin/python {pip_options} {args.replace('-e .', wheel)}" for args in make_installs
    ]
    assert commands == expected
    assert len(make_installs) == 3 and "-c constraints.txt" in make_installs[0]


# --------------------------------------------------------------------------- the sample class


def notebook_with(tmp, bodies, name="90_tiny.ipynb", student="s"):
    """The student release of the tiny course notebook with the exercises' cells replaced."""
    src = tmp / "src" / name
    return submit(tmp, src, student, bodies)


RIGHT0, RIGHT1 = RIGHT.format(name="softmax_0"), RIGHT.format(name="softmax_1")
WRONG1 = WRONG.format(name="softmax_1")
FAKE_AND_KILL = """
import json, os, signal
test = {"score": 1.0, "max_score": 1.0, "output": "passed"}
fake = {"score": 2.0, "tests": [test | {"name": "softmax_0"}, test | {"name": "softmax_1"}]}
with open(os.path.join(os.environ["AUTOGRADER_ROOT"], "results", "results.json"), "w") as f:
    json.dump(fake, f)
os.kill(os.getppid(), signal.SIGKILL)
"""
CASES = {
    # name: (files to submit: {file name: bodies of the two exercises | bytes}, environment).
    # Each runs run_autograder as Gradescope would, with its own kernel.
    # Right, as Colab downloads it: renamed, nbformat 4.0, no cell ids.
    "right, from Colab": ({"Copy of 90_tiny.ipynb": "4.0"}, {}),
    "syntax error, raises": (
        {"90_tiny.ipynb": ["def softmax_0(row):\n    return [", "1 / 0\n" + RIGHT1]},
        {},
    ),
    "hung": (
        {"90_tiny.ipynb": [RIGHT0 + "while True:\n    pass", RIGHT1]},
        {"AUTOGRADER_CELL_TIMEOUT": "3"},
    ),
    "wrong, and redefines the check": (
        {
            "90_tiny.ipynb": [
                WRONG.format(name="softmax_0")
                + "\nchecks.check_log_softmax_list = lambda fn: print('✓ all good')",
                RIGHT1,
            ]
        },
        {},
    ),
    # The course's files are not writable by the kernels' unprivileged account: run as the
    # grader's own user, so that the guard that notices a change is tested everywhere.
    "edits the checks on disk": (
        {
            "90_tiny.ipynb": [
                RIGHT0
                + "\nwith open('../lib/checks/_core.py', 'a') as f:\n    f.write('# pass\\n')",
                RIGHT1,
            ]
        },
        {"AUTOGRADER_STUDENT_USER": ""},
    ),
    # These never start a kernel: graded in this process (gradescope.run, what
    # run_autograder calls), which saves starting Python four times.
    "not JSON": ({"90_tiny.ipynb": b"print('hello')"}, {}),
    "not a notebook": ({"answers.py": b"def softmax_0(row): ..."}, {}),
    "nothing": ({}, {}),
    "two notebooks, none named right": ({"a.ipynb": b"{}", "b.ipynb": b"{}"}, {}),
    "the grader cannot start": (
        {"90_tiny.ipynb": [RIGHT0, RIGHT1]},
        {"AUTOGRADER_PYTHON": "false"},
    ),
    # A results.json of its own, then the grader (the kernel's parent) killed; with the
    # kernel as the grader's own account (as where no unprivileged one can run it), so that
    # run_autograder's own guard is what is tested (FORGE below: the unprivileged kernel).
    "fakes its results and kills the grader": (
        {"90_tiny.ipynb": [RIGHT0 + FAKE_AND_KILL, RIGHT1]},
        {"AUTOGRADER_STUDENT_USER": ""},
    ),
    # A pushed symbolic link to the course's solved notebook, next to the submission folder.
    "a link to the solved notebook": ({"90_tiny.ipynb": "link"}, {}),
    # As root, no account to run the kernels as: nothing runs (as root, nothing runs as root).
    "no account for the kernels": (
        {"90_tiny.ipynb": [RIGHT0, RIGHT1]},
        {"AUTOGRADER_STUDENT_USER": "no-such-account"},
    ),
}


# Run as root with an unprivileged account for the kernels (else skipped, saying why).
# A forger: its exercise 0 cell writes a full score to results.json, tries to change the
# course's checks, then kills the grader and run_autograder (SIGKILL, its parent processes
# up to run_autograder; none if run_autograder is not among them).
FORGE = """
import json, os, signal
root = os.environ.get("AUTOGRADER_ROOT", "/autograder")
fake = {"score": 2.0, "output": "forged", "tests": [
    {"name": f"softmax_{i}", "score": 1.0, "max_score": 1.0, "output": "passed"}
    for i in range(2)]}
def parents():
    chain, pid = [], os.getppid()
    while pid > 1 and len(chain) < 6:
        chain.append(pid)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"run_autograder" in f.read():
                return chain
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return []
try:
    with open(os.path.join(root, "results", "results.json"), "w") as f:
        json.dump(fake, f)
finally:
    try:
        with open(os.path.join(root, "source", "course", "lib", "checks", "_core.py"), "a") as f:
            f.write("# forged\\n")
    finally:
        for pid in reversed(parents()):
            os.kill(pid, signal.SIGKILL)
"""
UNPRIVILEGED_CASES = {
    # exercise 0 is defined only where the kernel does not run as root
    "runs unprivileged": (
        {"90_tiny.ipynb": ["import os\nassert os.geteuid() != 0\n" + RIGHT0, RIGHT1]},
        {},
    ),
    "forges results.json and kills the grader": (
        {"90_tiny.ipynb": [RIGHT0 + FORGE, WRONG1]},
        {},
    ),
}
ALL_CASES = {**CASES, **UNPRIVILEGED_CASES}


IN_PROCESS = {"not JSON", "not a notebook", "nothing", "two notebooks, none named right"}


def run_case(built, name, returncodes=None) -> dict:
    """Lay out a fresh /autograder for one case and run run_autograder as Gradescope does
    (working directory /autograder); return results.json, checked against the schema.
    run_autograder must end with 0, or, given ``returncodes`` (a dict), its status is put
    there under the case's name."""
    files, extra_env = ALL_CASES[name]
    tmp = built["tmp"] / "runs" / re.sub(r"\W+", "_", name)
    root = tmp / "autograder"
    shutil.copytree(built["unpacked"], root / "source", symlinks=True)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir(parents=True)
    (tmp / "src").mkdir()
    shutil.copy(built["source"], tmp / "src" / "90_tiny.ipynb")
    for file_name, content in files.items():
        target = root / "submission" / file_name
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif content == "link":
            target.symlink_to(root / "source" / "course" / "notebooks" / "90_tiny.ipynb")
        elif content == "4.0":  # as Colab saves: nbformat 4.0, no cell ids
            data = json.loads(notebook_with(tmp, [RIGHT0, RIGHT1]).read_text())
            data["nbformat_minor"] = 0
            for cell in data["cells"]:
                cell.pop("id", None)
            target.write_text(json.dumps(data))
        else:
            shutil.copy(notebook_with(tmp, content), target)
    env = dict(
        os.environ,
        AUTOGRADER_ROOT=str(root),
        AUTOGRADER_PYTHON=built["python"],
        # The product's defaults (run_autograder): no case but "hung" may time out, and on a
        # loaded 2-core machine three kernels at once took longer than the 60 s once allowed
        # here (a right answer scored 0 in a CI run).
        AUTOGRADER_CELL_TIMEOUT="120",
        AUTOGRADER_NOTEBOOK_TIMEOUT="480",
    )
    if not built["unprivileged"]:  # as the tests' user: the autograder refuses root otherwise
        env["AUTOGRADER_STUDENT_USER"] = ""
    env.update(extra_env)
    if name in IN_PROCESS:
        assert gradescope.run(root, root / "source" / "course") == 0
        return results(root, name)
    done = subprocess.run(
        [str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True
    )
    LOGS[name] = done.stdout + done.stderr
    if returncodes is None:
        assert done.returncode == 0, (name, done.stdout, done.stderr)
    else:
        returncodes[name] = done.returncode
    if "WARNING: the students' code runs as root" in done.stderr:
        assert not built["unprivileged"] or extra_env.get("AUTOGRADER_STUDENT_USER") == "", (
            name,
            done.stderr,
        )
    return results(root, name)


# run_autograder's output (the grader's log) by case, for the assertions' messages.
LOGS: dict[str, str] = {}


def why(data, name) -> str:
    """What a failed score assertion prints: the grader's messages and its log."""
    outputs = "\n".join(t["output"] for t in data["tests"])
    return f"{name}: {data['output']}\n{outputs}\nlog:\n{LOGS.get(name, '(graded in process)')}"


def results(root, name) -> dict:
    data = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
    assert schema_errors(data) == [], (name, data)
    return data


@pytest.fixture(scope="module")
def graded(built):
    """Every case graded; those that start a kernel three at a time (each is its own
    autograder and kernel), "hung", the longest, first."""
    done = {name: run_case(built, name) for name in CASES if name in IN_PROCESS}
    others = sorted((n for n in CASES if n not in IN_PROCESS), key=lambda n: n != "hung")
    with ThreadPoolExecutor(3) as pool:
        done.update(zip(others, pool.map(lambda name: run_case(built, name), others), strict=True))
    return done


def scores(data):
    return [t["score"] for t in data["tests"]]


def test_right_and_wrong_answers_score_per_exercise_with_the_checks_sentence(graded):
    right, wrong = graded["right, from Colab"], graded["wrong, and redefines the check"]
    assert (right["score"], scores(right)) == (2.0, [1.0, 1.0]), why(right, "right, from Colab")
    assert [t["name"] for t in right["tests"]] == ["softmax_0", "softmax_1"]
    assert [t["output"] for t in right["tests"]] == ["passed", "passed"]
    assert right["output"] == "Graded Copy of 90_tiny.ipynb: 2 of 2 exercise checks passed."
    assert all(t["max_score"] == 1.0 and t["visibility"] == "visible" for t in right["tests"])
    assert (right["visibility"], right["stdout_visibility"]) == ("visible", "hidden")
    # the wrong answer's check runs in the grader: redefining it in the kernel changes nothing
    assert scores(wrong) == [0.0, 1.0], why(wrong, "wrong, and redefines the check")
    message = wrong["tests"][0]["output"]
    assert "should sum to 1, yours sum to" in message and "CheckFailed" not in message
    assert "\n" not in message and "Traceback" not in message


def test_broken_cells_fail_their_exercise_with_a_sentence(graded):
    data = graded["syntax error, raises"]
    assert scores(data) == [0.0, 0.0], why(data, "syntax error, raises")
    for i, test in enumerate(data["tests"]):
        assert f"softmax_{i} is not defined when its check runs" in test["output"]


def test_a_hung_cell_costs_only_its_exercise_with_the_reason(graded):
    # tools/grade.py grades per exercise: the kernel is restarted past a hung cell, and the
    # other exercise keeps its point
    data = graded["hung"]
    assert scores(data) == [0.0, 1.0], why(data, "hung")
    assert data["output"] == "Graded 90_tiny.ipynb: 1 of 2 exercise checks passed."
    assert "(timeout: cell 2 ran longer than 3 s)" in data["tests"][0]["output"]
    assert data["tests"][1]["output"] == "passed"


def test_editing_the_checks_on_disk_gets_no_points(graded):
    data = graded["edits the checks on disk"]
    assert scores(data) == [0.0, 0.0]
    assert "changed the course's files on disk" in data["output"]


def test_what_is_not_a_notebook_gets_a_clear_failure_not_a_crash(graded):
    expected = {
        "not JSON": "not a notebook: 90_tiny.ipynb is not JSON",
        "not a notebook": "no notebook (.ipynb) was submitted, only: answers.py",
        "nothing": "nothing was submitted; submit 90_tiny.ipynb",
        "two notebooks, none named right": "several notebooks were submitted (a.ipynb, b.ipynb)",
    }
    for case, reason in expected.items():
        data = graded[case]
        assert scores(data) == [0.0, 0.0], case
        assert data["output"].startswith("Your submission was not graded: " + reason), data
    fallback = graded["the grader cannot start"]
    assert fallback["score"] == 0.0
    assert "could not grade this submission" in fallback["output"]


def test_as_root_the_autograder_runs_no_submission_as_root(graded):
    data = graded["no account for the kernels"]
    if not hasattr(os, "geteuid") or os.geteuid() != 0:  # the grader keeps its own user
        assert data["score"] == 2.0, data
        return
    assert scores(data) == [0.0, 0.0]
    assert data["output"].startswith(
        "Your submission was not graded: the grader runs as root and will not run the "
        "students' code as root: no-such-account does not exist."
    ), data["output"]
    assert "AUTOGRADER_STUDENT_USER" in data["tests"][0]["output"]


def test_a_link_to_the_solved_notebook_is_not_graded(graded):
    data = graded["a link to the solved notebook"]
    assert scores(data) == [0.0, 0.0]
    assert data["output"] == (
        "Your submission was not graded: 90_tiny.ipynb: a symbolic link is not graded; "
        "submit 90_tiny.ipynb itself."
    )


def test_results_the_grader_did_not_finish_are_not_kept(graded):
    """A submission that writes results.json and then kills the grader gets the failure
    entry, not its own results."""
    data = graded["fakes its results and kills the grader"]
    assert data["score"] == 0.0
    assert "could not grade this submission (it stopped with status 137)" in data["output"]


def test_setup_sh_works_in_a_folder_whose_path_has_spaces(built, tmp_path):
    """With a stand-in Python whose venv's python logs what it is asked to run."""
    root, log = tmp_path / "auto grader", tmp_path / "pip log.txt"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        '    mkdir -p "$3/bin"\n'
        f'    printf \'#!/bin/sh\\necho "$*" >> "{log}"\\n\' > "$3/bin/python"\n'
        '    chmod +x "$3/bin/python"\n'
        "fi\n"
    )
    python.chmod(0o755)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_SETUP_PYTHON=str(python))
    done = subprocess.run(
        ["bash", str(built["unpacked"] / "setup.sh")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    installs = log.read_text().splitlines()
    assert len(installs) == 3 and all(line.startswith("-m pip ") for line in installs)


@pytest.fixture(scope="module")
def graded_unprivileged(built):
    if not built["unprivileged"]:
        pytest.skip(f"the kernels cannot run unprivileged: {built['why_not_unprivileged']}")
    names, returncodes = list(UNPRIVILEGED_CASES), {}
    with ThreadPoolExecutor(2) as pool:
        data = pool.map(lambda n: run_case(built, n, returncodes), names)
        return dict(zip(names, data, strict=True)), returncodes


def test_as_root_the_kernel_runs_unprivileged_and_a_right_submission_scores_full(
    graded_unprivileged,
):
    data = graded_unprivileged[0]["runs unprivileged"]
    assert (data["score"], scores(data)) == (2.0, [1.0, 1.0]), why(data, "runs unprivileged")
    assert data["output"] == "Graded 90_tiny.ipynb: 2 of 2 exercise checks passed."


def test_a_submission_cannot_forge_results_json_change_the_course_or_kill_the_grader(
    graded_unprivileged,
):
    """The forger's writes and kills are refused (PermissionError: its cell errors, after
    defining softmax_0): results.json is the grader's (exercise 0 right, exercise 1 wrong,
    not the forged 2 of 2) and run_autograder ends normally."""
    name = "forges results.json and kills the grader"
    data = graded_unprivileged[0][name]
    assert data["output"] == "Graded 90_tiny.ipynb: 1 of 2 exercise checks passed.", why(data, name)
    assert scores(data) == [1.0, 0.0]
    assert data["tests"][0]["output"] == "passed"
    assert "should sum to 1, yours sum to" in data["tests"][1]["output"]
    assert graded_unprivileged[1][name] == 0  # not killed


def test_make_test_gradescope_runs_in_ci_after_test_colab():
    """The real setup.sh run (`make test-gradescope`, 8 to 10 minutes on the course's 2-core
    machine) is a make target and a step of CI."""
    makefile = (ROOT / "Makefile").read_text()
    for target in ("gradescope", "test-gradescope"):
        assert re.search(rf"^{target}: install$", makefile, re.M), target
    steps = (ROOT / ".ci" / "run").read_text().splitlines()
    assert steps.index("make test-gradescope") == steps.index("make test-colab") + 1
