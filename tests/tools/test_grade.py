"""tools/grade.py: checks found by content or id, checks run where a submission cannot
alter them, bad submissions scored 0 with the reason while the batch goes on, a notebook
saved as nbformat 4.0 without cell ids, the gradebook, and the choice of cells to run."""

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest
from helpers import kernel_losing_the_port_race
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from nbval_kernels import execute_notebook

from tools import grade
from tools import make_student as ms

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "solved" / "01_attention_with_lists.ipynb"

WRONG = "def {name}(row):\n    return [1.0] * len(row)  # exp of it does not sum to 1\n"
LOG_SOFTMAX = (
    "    m = max([s for s in row if s != -math.inf] or [0.0])\n"
    "    total = sum(math.exp(s - m) for s in row)\n"
    "    return [s - m - math.log(total) if total else -math.inf for s in row]\n"
)
RIGHT = "def {name}(row):\n" + LOG_SOFTMAX


def course(tmp_path, n_exercises=1, name="90_tiny.ipynb"):
    """A small course notebook: a set-up cell, then exercise/check pairs on the list
    log-softmax."""
    cells = [
        new_markdown_cell("# tiny"),
        new_code_cell("import math\n\nfrom lib import checks\nfrom lib import lists as L"),
    ]
    for i in range(n_exercises):
        cells.append(
            new_code_cell(
                f"def softmax_{i}(row):\n    ### BEGIN SOLUTION\n"
                + LOG_SOFTMAX
                + "    ### END SOLUTION"
            )
        )
        cells.append(new_code_cell(f"checks.check_log_softmax_list(softmax_{i})"))
    return course_notebook(tmp_path, name, cells)


def course_notebook(tmp_path, name, cells):
    """The course notebook ``name`` made of ``cells``, in tmp_path/src."""
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    nbformat.write(nb, src / name)
    return src / name


def submit(tmp_path, source, student, bodies):
    """The student version of ``source`` with exercise i's cell replaced by bodies[i]."""
    nb, infos = ms.student_notebook(nbformat.read(source, as_version=4), source.name)
    for info, body in zip([i for i in infos if i.is_exercise], bodies, strict=True):
        nb.cells[info.index].source = body
    folder = tmp_path / "submitted" / student
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / source.name)
    return folder / source.name


# --------------------------------------------------------------------------- checks found


def test_checks_found_by_content_or_id_and_deleted_ones_fail(tmp_path):
    student, infos = ms.student_notebook(nbformat.read(NOTEBOOK, as_version=4), NOTEBOOK.name)
    exercises = [i.index for i in infos if i.is_exercise]
    checks = [i.index for i in infos if i.is_check]
    # Solves the sliding-window mask, fakes the log-softmax check (the cell keeps its id),
    # re-types the mask's check in a new cell (new id), deletes the last check.
    student.cells[exercises[1]].source = (
        "def sliding_window_mask(n, window):\n"
        "    return [[i - window < j <= i for j in range(n)] for i in range(n)]"
    )
    student.cells[checks[0]].source = 'print("✓ log_softmax_row: all good")'
    student.cells[checks[1]] = new_code_cell(
        "checks.check_sliding_window_mask_list( sliding_window_mask )"
    )
    del student.cells[checks[2]]
    path = tmp_path / NOTEBOOK.name
    nbformat.write(student, path)

    result = grade.grade_notebook(path, NOTEBOOK, "x")
    assert [c.passed for c in result.checks] == [False, True, False]
    assert [c.found_by for c in result.checks] == ["id", "content", ""]
    assert result.checks[0].check.startswith("checks.check_log_softmax_list(")
    assert "not implemented yet" in result.checks[0].message
    assert result.checks[2].message == "the check cell was deleted"
    text = grade.describe(result)
    assert "[check cell found by id]" in text and "2/3" not in text and "1/3" in text


def test_a_notebook_saved_as_nbformat_4_0_without_ids_is_graded(tmp_path):
    """Colab saves new notebooks as nbformat 4.0, whose cells have no ids."""
    data = json.loads(NOTEBOOK.read_text())
    data["nbformat_minor"] = 0
    for cell in data["cells"]:
        cell.pop("id", None)
    path = tmp_path / NOTEBOOK.name
    path.write_text(json.dumps(data))
    result = grade.grade_notebook(path, NOTEBOOK, "colab")
    assert result.status == "graded"
    assert [(c.passed, c.found_by) for c in result.checks] == [(True, "content")] * 3


# --------------------------------------------------------------------------- tampering

TAMPERING = {
    "reassign the check": "checks.check_log_softmax_list = lambda fn: print('✓ softmax')",
    "patch lib.checks' core": (
        "import lib.checks._core as core, lib.checks.nb01_lists as nb01\n"
        "core.close = nb01.close = lambda *a, **k: True\n"
        "core.diagnose = nb01.diagnose = lambda *a, **k: None\n"
        "nb01.CheckFailed = core.CheckFailed = type('CheckFailed', (Exception,), {})\n"
        "core.call = nb01.call = lambda fn, name, *args, **k: [1 / len(args[0])] * len(args[0])"
    ),
    "patch CheckFailed": (
        "import lib.checks\n"
        "class CheckFailed(BaseException):\n    pass\n"
        "lib.checks.CheckFailed = CheckFailed\n"
        "import lib.checks.nb01_lists as nb01\nnb01.CheckFailed = CheckFailed\n"
        "import builtins\nbuiltins.AssertionError = KeyboardInterrupt"
    ),
    "replace sys.modules": (
        "import sys, types\n"
        "fake = types.ModuleType('lib.checks')\n"
        "fake.check_log_softmax_list = lambda fn: None\n"
        "sys.modules['lib.checks'] = fake\nimport lib\nlib.checks = fake\nchecks = fake"
    ),
    "a fake checks name": (
        "class checks:\n    @staticmethod\n    def check_log_softmax_list(fn):\n        print('✓')"
    ),
    "patch numpy and lib's reference": (
        "import numpy as np\nnp.allclose = lambda *a, **k: True\n"
        "np.array_equal = lambda *a, **k: True\n"
        "import lib.lists\nlib.lists.softmax = lambda row: [1.0] * len(row)\n"
        "L.softmax = lib.lists.softmax\n"
        "import lib.checks.nb01_lists as nb01\n"
        "nb01.log_softmax_reference = lambda row: [1.0] * len(row)"
    ),
}


def test_tampering_cannot_make_a_wrong_answer_pass(tmp_path):
    source = course(tmp_path, n_exercises=len(TAMPERING))
    bodies = [
        WRONG.format(name=f"softmax_{i}") + "\n" + code for i, code in enumerate(TAMPERING.values())
    ]
    path = submit(tmp_path, source, "mallory", bodies)

    # In its own kernel, every route works: no check cell raises.
    ran = nbformat.read(path, as_version=4)
    execute_notebook(ran, allow_errors=True, timeout=60)
    for cell in ran.cells:
        if (
            cell.cell_type == "code"
            and "check_log_softmax_list" in cell.source
            and "def " not in cell.source
        ):
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs

    # The grader is not fooled by any of them.
    result = grade.grade_notebook(path, source, "mallory")
    assert result.status == "graded"
    for route, check in zip(TAMPERING, result.checks, strict=True):
        assert not check.passed, route
        assert "should sum to 1, yours sum to 8.155" in check.message, (route, check.message)


def test_a_right_answer_passes_and_student_errors_are_quoted(tmp_path):
    source = course(tmp_path, n_exercises=3)
    bodies = [
        RIGHT.format(name="softmax_0"),
        "def softmax_1(row):\n    return helper(row)\n\n"
        "def helper(row):\n    raise NotImplementedError()",
        "def softmax_2(row):\n    raise KeyError('oops')",
    ]
    result = grade.grade_notebook(submit(tmp_path, source, "amy", bodies), source, "amy")
    assert [c.passed for c in result.checks] == [True, False, False]
    assert "log_softmax_row calls helper, which is not implemented" in result.checks[1].message
    assert "log_softmax_row raised KeyError: 'oops'" in result.checks[2].message


# --------------------------------------------------------------------------- bad submissions

# Seconds a cell may run in the tests that make one hang (what the hang costs them): many
# times what a good cell of the tiny course takes, as for test_gradescope's "hung" case
CELL_TIMEOUT = 3


def test_bad_submissions_score_0_with_the_reason_and_the_batch_goes_on(tmp_path):
    source = course(tmp_path, name="90_tiny.ipynb")
    right = [RIGHT.format(name="softmax_0")]
    submit(tmp_path, source, "a_dies", [right[0] + "import os\nos._exit(1)"])
    submit(tmp_path, source, "b_loops", [right[0] + "while True:\n    pass"])
    (tmp_path / "submitted" / "d_not_json").mkdir()
    (tmp_path / "submitted" / "d_not_json" / source.name).write_text("print('hello')")
    (tmp_path / "submitted" / "e_unreadable").mkdir()
    (tmp_path / "submitted" / "e_unreadable" / source.name).write_bytes(b"\xff\xfe{\x00")
    (tmp_path / "submitted" / "f_not_a_notebook").mkdir()
    (tmp_path / "submitted" / "f_not_a_notebook" / source.name).write_text('{"cells": 3}')
    submit(tmp_path, source, "g_good", right)
    out = tmp_path / "grades"
    code = grade.main(
        [
            str(tmp_path / "submitted"),
            "--src",
            str(source.parent),
            "--out",
            str(out),
            "--jobs",
            "2",
            "--cell-timeout",
            str(CELL_TIMEOUT),
            "--quiet",
        ]
    )
    assert code == 0
    rows = {r["student"]: r for r in csv.DictReader(open(out / "gradebook.csv", encoding="utf-8"))}
    assert {s: int(r["total"]) for s, r in rows.items()} == {
        "a_dies": 0,
        "b_loops": 0,
        "d_not_json": 0,
        "e_unreadable": 0,
        "f_not_a_notebook": 0,
        "g_good": 1,
    }
    data = json.loads((out / "gradebook.json").read_text())
    status = {s: (nbs[0]["status"], nbs[0]["reason"]) for s, nbs in data["notebooks"].items()}
    message = {s: nbs[0]["checks"][0]["message"] for s, nbs in data["notebooks"].items()}
    # graded per exercise: the kernel is restarted after a cell that hangs or kills it, and
    # the check of the exercise that did it fails with the reason
    assert status["a_dies"] == ("graded", "the kernel was restarted after: kernel died: "
                                "the kernel died in cell 2")  # fmt: skip
    assert "Not run: cell 2 (kernel died: the kernel died in cell 2)" in message["a_dies"]
    assert status["b_loops"] == ("graded", "the kernel was restarted after: timeout: cell 2 "
                                 f"ran longer than {CELL_TIMEOUT} s")  # fmt: skip
    assert status["d_not_json"][0] == "not a notebook" and "not JSON" in status["d_not_json"][1]
    assert status["e_unreadable"][0] == "unreadable"
    assert status["f_not_a_notebook"][0] == "not a notebook"
    assert status["g_good"] == ("graded", "")
    assert "kernel died" in rows["a_dies"]["failures"]


def test_one_hanging_or_exiting_exercise_costs_only_itself(tmp_path):
    """The policy (finding 7 of the class trial): a function that hangs, or that calls
    os._exit, fails its own check; the kernel is restarted and the right answers after it
    still count (they used to score 0 with the rest of the notebook)."""
    source = course(tmp_path, n_exercises=3)
    right = [RIGHT.format(name=f"softmax_{i}") for i in range(3)]
    hangs = "def softmax_0(row):\n    while True:\n        pass\n"
    exits = "import os\n\n\ndef softmax_1(row):\n    os._exit(3)\n"
    path = submit(tmp_path, source, "ivy", [hangs, exits, right[2]])
    result = grade.grade_notebook(path, source, "ivy", cell_timeout=CELL_TIMEOUT)
    assert result.status == "graded" and result.score == 1
    assert [c.passed for c in result.checks] == [False, False, True]
    assert result.checks[0].message.startswith("timeout: cell 3 (check_log_softmax_list(")
    assert result.checks[1].message.startswith("kernel died: the kernel died in cell 5")
    assert result.reason.count("; ") == 1  # two restarts


# A kernel that finds one of its ports taken, as when another kernel started meanwhile
# grabbed it (Jupyter picks free ports, the kernel binds them a second later): it holds the
# shell port itself, then starts ipykernel, which dies of "Address already in use". It does
# so the first ``times`` starts, counted in a file.
def kernel_with_ports_taken(tmp_path, monkeypatch, times):
    """Make "python3" a kernel that loses the race for its ports ``times`` times (JUPYTER_PATH),
    run as the tests' own user, and let the grader start it twice, not three times (a start
    that fails costs about 2 s); return the file counting its starts."""
    monkeypatch.setattr(grade, "START_ATTEMPTS", 2)
    jupyter_path, count = kernel_losing_the_port_race(tmp_path, times)
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    monkeypatch.setenv("AUTOGRADER_STUDENT_USER", "")
    return count


def test_a_kernel_that_loses_the_race_for_its_ports_is_started_again(tmp_path, monkeypatch, capfd):
    """Its death is not the submission's doing (none of its code has run): a right answer
    still scores full, and the grader's log says the kernel was started again."""
    count = kernel_with_ports_taken(tmp_path, monkeypatch, times=1)
    source = course(tmp_path, n_exercises=2)
    path = submit(tmp_path, source, "kim", [RIGHT.format(name=f"softmax_{i}") for i in range(2)])
    result = grade.grade_notebook(path, source, "kim")
    assert (result.status, result.score) == ("graded", 2), grade.describe(result)
    assert count.read_text() == str(grade.START_ATTEMPTS)
    log = capfd.readouterr().err
    assert log.count("starting a new one") == grade.START_ATTEMPTS - 1, log
    assert "Address already in use" in log


def test_a_kernel_that_never_starts_scores_0_with_the_reason(tmp_path, monkeypatch):
    count = kernel_with_ports_taken(tmp_path, monkeypatch, times=2)
    source = course(tmp_path, n_exercises=2)
    path = submit(tmp_path, source, "lee", [RIGHT.format(name=f"softmax_{i}") for i in range(2)])
    result = grade.grade_notebook(path, source, "lee")
    assert (result.status, result.score) == ("kernel died", 0)
    assert f"the kernel did not start (tries: {grade.START_ATTEMPTS};" in result.reason
    assert count.read_text() == str(grade.START_ATTEMPTS)


def test_missing_notebooks_are_listed_for_every_student(tmp_path):
    one = course(tmp_path, name="90_tiny.ipynb")
    two = course(tmp_path, name="91_tiny.ipynb")
    submit(tmp_path, one, "ann", ["x = 1"])
    submit(tmp_path, two, "ben", ["x = 1"])
    found = grade.collect([tmp_path / "submitted"], one.parent)
    assert [(s, p.name, p.exists()) for s, p in found] == [
        ("ann", "90_tiny.ipynb", True),
        ("ann", "91_tiny.ipynb", False),
        ("ben", "90_tiny.ipynb", False),
        ("ben", "91_tiny.ipynb", True),
    ]
    result = grade.grade_notebook(found[1][1], two, "ann")
    assert (result.status, result.score, len(result.checks)) == ("missing", 0, 1)


# --------------------------------------------------------------------------- gradebook


def test_gradebook_has_a_row_per_student_a_column_per_exercise_and_the_messages():
    def nb(student, notebook, passed, status="graded", reason=""):
        checks = [
            grade.CheckResult(f"f{i}", f"checks.check_x(f{i})", ok, "" if ok else f"bad f{i}")
            for i, ok in enumerate(passed)
        ]
        return grade.NotebookResult(student, notebook, "", status, reason, checks)

    results = [
        nb("ann", "01_a.ipynb", [True, False]),
        nb("ann", "02_b.ipynb", [True]),
        nb("ben", "01_a.ipynb", [True, True]),
        nb("ben", "02_b.ipynb", [True], status="timeout", reason="too slow"),
    ]
    columns, rows = grade.gradebook(results)
    assert columns == ["student", "01_a:f0", "01_a:f1", "02_b:f0", "total", "max", "failures"]
    assert [
        (r["student"], r["01_a:f0"], r["01_a:f1"], r["02_b:f0"], r["total"], r["max"]) for r in rows
    ] == [
        ("ann", 1, 0, 1, 2, 3),
        ("ben", 1, 1, 0, 2, 3),
    ]
    assert rows[0]["failures"] == ["01_a:f1: bad f1"]
    assert rows[1]["failures"] == ["02_b:f0: timeout: too slow"]


# --------------------------------------------------------------------------- which cells run


def test_only_the_cells_the_checked_functions_need_are_run():
    sources = [
        "import numpy as np\nimport time",  # 0: needed (np)
        "big = np.ones(10**9)",  # 1: not needed (nothing reads big)
        "def helper(x):\n    return np.exp(x)",  # 2: needed by f
        "def f(x):\n    return helper(x) / SCALE",  # 3: an older f, replaced by 5
        "SCALE = 2\nt = time.time()",  # 4: needed (SCALE), and it reads time: cell 0
        "def f(x):\n    return helper(x) / SCALE",  # 5: needed
        None,  # 6: the check
        "%timeit f(1)",  # 7: after the check
    ]
    assert grade.needed_cells(sources, {6: {"f"}}) == {0, 2, 4, 5}
    assert grade.needed_cells(["def f(:", "x = 1"], {2: {"f"}}) == {0}  # unparsable: run
    # a parameter or a local named like a top-level variable is the function's own: the cell
    # that builds that variable (here a costly one) is not run for it
    sources = [
        "import numpy as np",
        "repeated = np.ones(10**9)",
        "def g(ids, repeated):\n    kept = [r for r in repeated if r]\n    return np.sum(kept)",
        None,
    ]
    assert grade.needed_cells(sources, {3: {"g"}}) == {0, 2}
    # ...but what a function reads beside such names still counts: r after the comprehension,
    # a default value, and the first iterable of a comprehension are read from outside
    sources = ["r = 1", "d = 2", "xs = [3]", "def h(a=d):\n    return [r for r in xs], r"]
    assert grade.needed_cells(sources, {4: {"h"}}) == {0, 1, 2, 3}
    # a star import may define any name the function reads: always run
    assert grade.needed_cells(["from math import *", "y = 2", "def f(x):\n    return exp(x)"],
                              {3: {"f"}}) == {0, 2}  # fmt: skip


def test_a_star_import_the_answer_needs_is_run(tmp_path):
    """`from math import *` in its own cell, and a right answer that uses exp and log from
    it: graded right (it used to fail with NameError, the star import never run)."""
    source = course(tmp_path)
    body = (
        "def softmax_0(row):\n"
        "    m = max([s for s in row if s != -inf] or [0.0])\n"
        "    total = sum(exp(s - m) for s in row)\n"
        "    return [s - m - log(total) if total else -inf for s in row]\n"
    )
    path = submit(tmp_path, source, "sam", [body])
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(2, new_code_cell("from math import *"))
    nbformat.write(nb, path)
    result = grade.grade_notebook(path, source, "sam")
    assert [(c.passed, c.message) for c in result.checks] == [(True, "")]


# --------------------------------------------------------------------------- MHAParams answers

FROM_TORCH_BODY = (  # written out: the check refuses lib's own TB.from_torch_mha
    "    d = module.embed_dim\n"
    "    W = module.in_proj_weight.detach().numpy()  # (3d, d): q, k, v blocks, (out, in)\n"
    "    W_o = module.out_proj.weight.detach().numpy().T\n"
    "    b = [None] * 4\n"
    "    if module.in_proj_bias is not None:\n"
    "        b = [*module.in_proj_bias.detach().numpy().reshape(3, d)]\n"
    "        b.append(module.out_proj.bias.detach().numpy())\n"
)
FROM_TORCH_RIGHT = (
    "def from_torch_0(module):\n"
    + FROM_TORCH_BODY
    + ("    return A.MHAParams(W[:d].T, W[d : 2 * d].T, W[2 * d :].T, W_o, module.num_heads, *b)\n")
)
FROM_TORCH_WRONG = (
    "def from_torch_1(module):\n"
    + FROM_TORCH_BODY
    + (
        # the in-projection blocks not transposed back
        "    return A.MHAParams(W[:d], W[d : 2 * d], W[2 * d :], W_o, module.num_heads, *b)\n"
    )
)


def test_an_mhaparams_answer_is_rebuilt_by_the_grader(tmp_path):
    """Notebook 08's exercise 2 returns lib's MHAParams: it travels as arrays, is rebuilt
    (and checked again) by lib in the grader, and the check judges it like any answer."""
    cells = [
        new_code_cell(
            "from lib import attention as A\nfrom lib import checks\n"
            "from lib import torch_bridge as TB"
        )
    ]
    for i in range(2):
        cells.append(
            new_code_cell(
                f"def from_torch_{i}(module):\n    ### BEGIN SOLUTION\n"
                + FROM_TORCH_RIGHT.split("\n", 1)[1]
                + "    ### END SOLUTION"
            )
        )
        cells.append(new_code_cell(f"checks.check_from_torch(from_torch_{i})"))
    source = course_notebook(tmp_path, "98_torch.ipynb", cells)
    path = submit(tmp_path, source, "amy", [FROM_TORCH_RIGHT, FROM_TORCH_WRONG])
    result = grade.grade_notebook(path, source, "amy")
    assert [c.passed for c in result.checks] == [True, False], result.checks
    assert "transpose each block of in_proj_weight" in result.checks[1].message


ATTENTION_RIGHT = (
    "def attention_1(Q, K, V, mask=None):\n"
    "    scale = 1 / math.sqrt(len(Q[0]))\n"
    "    scores = [[s * scale for s in row] for row in L.matmul(Q, L.transpose(K))]\n"
    "    if mask is not None:\n"
    "        scores = [\n"
    "            [s if ok else -math.inf for s, ok in zip(r, m)] for r, m in zip(scores, mask)\n"
    "        ]\n"
    "    weights = [L.softmax(row) for row in scores]\n"
    "    return L.matmul(weights, V), weights\n"
)


def test_lib_s_own_answer_is_refused_in_the_kernel_too(tmp_path):
    """Notebook 01's exercise 3 returning L.attention(...) fails under the grader as in the
    notebook: the grader has the kernel refuse lib's attention while the answer runs there."""
    cells = [new_code_cell("import math\n\nfrom lib import checks\nfrom lib import lists as L")]
    for i in range(2):
        cells.append(
            new_code_cell(
                f"def attention_{i}(Q, K, V, mask=None):\n    ### BEGIN SOLUTION\n"
                "    return L.attention(Q, K, V, mask)\n    ### END SOLUTION"
            )
        )
        cells.append(new_code_cell(f"checks.check_attention_list(attention_{i})"))
    source = course_notebook(tmp_path, "97_lists.ipynb", cells)
    lib_call = "def attention_0(Q, K, V, mask=None):\n    return L.attention(Q, K, V, mask)\n"
    path = submit(tmp_path, source, "bob", [lib_call, ATTENTION_RIGHT])
    result = grade.grade_notebook(path, source, "bob")
    assert [c.passed for c in result.checks] == [False, True], result.checks
    assert result.checks[0].message == (
        "CheckFailed: attention: this exercise asks you to write it yourself, not to call "
        "lib.lists.attention."
    )


def test_the_kernels_answer_files_are_read_only_if_plain(tmp_path):
    """The kernel (an unprivileged account, when the grader is root) owns the folder of its
    answers: a link to another file, or a FIFO that would block the grader, is refused."""
    plain = tmp_path / "result.json"
    plain.write_text('{"kind": "value"}')
    with grade._open_answer(plain) as f:
        assert json.load(f) == {"kind": "value"}
    link = tmp_path / "link.json"
    link.symlink_to(plain)
    with pytest.raises(OSError):
        grade._open_answer(link)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a plain file"):
        grade._open_answer(fifo)
