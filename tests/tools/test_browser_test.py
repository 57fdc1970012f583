"""The logic of tools/browser_test.py (`make test-browser`) that needs no browser: finding or
installing Chromium, telling local from external addresses, judging how a failed check
showed, and judging the self-checks. What needs the browser is proven by the self-checks that
`make test-browser` itself runs (planted faults that must all be reported)."""

import ast
import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    """tools/ may or may not be a package: import it as one, or load the file by its path."""
    try:
        return importlib.import_module("tools.browser_test")
    except ImportError:
        if "browser_test" not in sys.modules:
            path = ROOT / "tools" / "browser_test.py"
            spec = importlib.util.spec_from_file_location("browser_test", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules["browser_test"] = module
            spec.loader.exec_module(module)
        return sys.modules["browser_test"]


bt = _load()


# --------------------------------------------------------------------------- Chromium


def which_from(paths):
    return lambda name: paths.get(name)


def no_run(command):
    raise AssertionError(f"nothing may be installed here, yet {command} ran")


def test_chromium_on_the_path_is_used_as_it_is():
    which = which_from({"chromium": "/usr/bin/chromium", "apt-get": "/usr/bin/apt-get"})
    assert bt.find_chromium({}, which, is_root=True, run=no_run) == "/usr/bin/chromium"


def test_chromium_named_by_the_environment_wins_and_must_exist():
    which = which_from({"chromium": "/usr/bin/chromium", "/apps/chrome": "/apps/chrome"})
    env = {"CHROMIUM": "/apps/chrome"}
    assert bt.find_chromium(env, which, is_root=False, run=no_run) == "/apps/chrome"
    with pytest.raises(bt.Missing, match=r"CHROMIUM=/nowhere is not an executable browser"):
        bt.find_chromium({"CHROMIUM": "/nowhere"}, which, is_root=True, run=no_run)


@pytest.mark.parametrize(
    ("is_root", "paths", "why"),
    [
        (False, {"apt-get": "/usr/bin/apt-get"}, "not root"),
        (True, {}, "no apt-get here"),
        (False, {}, "no apt-get here"),
    ],
)
def test_missing_chromium_that_cannot_be_installed_is_one_line(is_root, paths, why):
    with pytest.raises(bt.Missing) as info:
        bt.find_chromium({}, which_from(paths), is_root=is_root, run=no_run)
    message = str(info.value)
    assert "\n" not in message
    assert f"({why})" in message
    assert "chromium" in message and "CHROMIUM=" in message


def test_missing_chromium_is_installed_with_apt_get_as_root():
    paths = {"apt-get": "/usr/bin/apt-get"}
    commands = []

    def run(command):
        commands.append(command)
        if command[1:3] == ["install", "-y"]:
            paths["chromium"] = "/usr/bin/chromium"
        return 0

    assert bt.find_chromium({}, which_from(paths), is_root=True, run=run) == "/usr/bin/chromium"
    assert [c[1] for c in commands] == ["update", "install"]
    assert commands[1][-1] == "chromium"


def test_a_failed_install_says_so():
    paths = {"apt-get": "/usr/bin/apt-get"}
    with pytest.raises(bt.Missing, match="apt-get could not install 'chromium'"):
        bt.find_chromium({}, which_from(paths), is_root=True, run=lambda command: 100)


def test_the_command_exits_2_with_one_line_when_the_browser_is_missing():
    env = dict(os.environ, CHROMIUM="/nowhere/chromium")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "browser_test.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "test-browser: CHROMIUM=/nowhere/chromium is not an executable browser"
    ]


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:8888/lab/tree/notebooks/01.ipynb", True),
        ("http://127.0.0.1:8888/api/status", True),
        ("ws://localhost:8888/api/kernels/abc/channels", True),
        ("http://[::1]:8888/lab", True),
        ("data:image/png;base64,iVBORw0KGgo=", True),
        ("blob:http://localhost:8888/0b1c", True),
        ("https://colab.research.google.com/assets/colab-badge.svg", False),
        ("http://localhost.example.org/x.png", False),
        ("https://example.org/picture.png", False),
    ],
)
def test_local_and_external_addresses(url, local):
    assert bt.is_local(url) is local
    # The browser blocks exactly what is_local calls external.
    assert bool(bt.EXTERNAL.search(url)) is (not local)


def test_only_the_colab_badge_is_a_tolerated_external_address():
    assert bt.tolerated_external("https://colab.research.google.com/assets/colab-badge.svg")
    assert not bt.tolerated_external("https://colab.research.google.com/assets/other.svg")
    assert not bt.tolerated_external("https://example.org/colab-badge.svg")


# --------------------------------------------------------------------------- the one-line check


def check_run(printed, error_text, outputs=None):
    error = {"mime": "application/vnd.jupyter.stderr", "text": error_text}
    first = {"index": 1, "outputs": [{"mime": "text/plain", "text": printed}] if printed else []}
    second = {"index": 2, "outputs": outputs if outputs is not None else [error]}
    return bt.NotebookRun("one-line check", cells=[first, second])


SENTENCE = "softmax: you normalised over axis 0; normalise over the last axis (axis=-1)."


def test_one_line_that_carries_the_sentence_passes():
    problems, line = bt.check_shows_one_line(check_run(SENTENCE, f"CheckFailed: {SENTENCE}\n"))
    assert problems == []
    assert line == f"CheckFailed: {SENTENCE}"


def test_a_traceback_fails():
    traceback = "\n".join(
        ["-" * 75, "CheckFailed    Traceback (most recent call last)", "Cell In[2], line 1"]
        + [f"  frame {i}" for i in range(25)]
        + [f"CheckFailed: {SENTENCE}"]
    )
    problems, _ = bt.check_shows_one_line(check_run(SENTENCE, traceback))
    assert len(problems) == 1 and "showed as 29 lines, not one" in problems[0]


def test_one_line_without_the_sentence_fails():
    problems, _ = bt.check_shows_one_line(check_run(SENTENCE, "CheckFailed\n"))
    assert len(problems) == 1 and "lacks its sentence" in problems[0]


def test_a_check_that_accepts_the_wrong_answer_fails():
    problems, _ = bt.check_shows_one_line(check_run("", "", outputs=[]))
    assert problems == ["check_softmax accepted a wrong answer (no CheckFailed), so nothing showed"]


def test_a_check_shown_as_two_outputs_fails():
    outputs = [
        {"mime": "application/vnd.jupyter.stdout", "text": "hello"},
        {"mime": "application/vnd.jupyter.stderr", "text": f"CheckFailed: {SENTENCE}"},
    ]
    problems, _ = bt.check_shows_one_line(check_run(SENTENCE, "", outputs=outputs))
    assert problems == ["the failed check showed 2 outputs, not one error"]


def test_the_check_cells_are_python_that_calls_a_check():
    for kind, source in bt.CHECK_CELLS:
        assert kind == "code"
        ast.parse(source)
    assert "checks.check_softmax(softmax)" in bt.CHECK_CELLS[1][1]


# --------------------------------------------------------------------------- self-checks


def test_scratch_notebooks_are_valid(tmp_path):
    for name, (cells, *_) in bt.SELF_CHECKS.items():
        nb = nbformat.read(bt.scratch_notebook(tmp_path / name, cells), as_version=4)
        nbformat.validate(nb)
        assert [c.cell_type for c in nb.cells] == [k for k, _ in cells if k != "metadata"]
        assert nb.metadata.kernelspec.name == "python3"
        assert nb.metadata.language_info.name == "python"


def test_a_self_check_fails_when_a_planted_fault_is_missed_or_extra():
    name = "selfcheck_error.ipynb"
    complete = [
        "cell 2: error or stderr output:\n      RuntimeError: self-check: this error must be "
        "reported",
        "cell 3 did not run ([ ]:)",
        "JupyterLab marked the notebook modified as soon as it opened it: saving it ...",
        "saving the notebook unchanged in JupyterLab changed the file (first at line 36): ...",
    ]
    assert bt.self_check_problems(name, bt.NotebookRun(name, problems=complete)) == []
    without_cell_3 = [complete[0], *complete[2:]]
    missed = bt.self_check_problems(name, bt.NotebookRun(name, problems=without_cell_3))
    assert missed == ["not reported: /^cell 3 did not run/"]
    extra = bt.self_check_problems(
        name, bt.NotebookRun(name, problems=[*complete, "browser console error: boom"])
    )
    assert extra == ["reported unexpectedly: browser console error: boom"]


def test_a_self_check_fails_when_an_expected_tolerance_is_missing():
    name = "selfcheck_external.ipynb"
    _, problems, tolerated = bt.SELF_CHECKS[name]
    run = bt.NotebookRun(name, problems=[], tolerated=[])
    found = bt.self_check_problems(name, run)
    assert len(found) == len(problems) + len(tolerated)
    assert sum(f.startswith("not tolerated: ") for f in found) == len(tolerated)
