"""A notebook whose kernel dies before it answers is run by a new one (tests/nbval_kernels.py)."""

import os
import subprocess
import sys

import nbformat
import pytest
from helpers import ROOT, kernel_losing_the_port_race
from nbval_kernels import execute_notebook


def test_a_kernel_that_loses_the_race_for_its_ports_is_started_again(tmp_path):
    # as in test_figure_comparison: `make test-colab`'s environment has no nbval, and says so
    pytest.importorskip("nbval", reason="nbval is not installed (requirements-dev.txt)")
    cell = nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    path = tmp_path / "answer.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), path)
    jupyter_path, starts = kernel_losing_the_port_race(tmp_path, times=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "JUPYTER_PATH": str(jupyter_path)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--disable-plugin-autoload", "-p", "nbval", "-p", "nbval_kernels",
               "--nbval", "--nbval-kernel-name", "python3", str(path)]  # fmt: skip
    # nbval alone fails such a notebook at its first cell, "Kernel died before replying to
    # kernel_info" and no reason, as CI saw; with the plugin a new kernel runs it
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-1000:]
    assert starts.read_text() == "2"  # the first kernel died, the second ran the notebook
    # and a warning says why the first one died
    assert "kernel died before it answered" in run.stdout, run.stdout[-2000:]
    assert "Address already in use" in run.stdout, run.stdout[-2000:]


def test_make_test_runs_the_notebooks_with_the_plugin():
    kernel = pytest.importorskip(
        "nbval.kernel", reason="nbval is not installed (requirements-dev.txt)"
    )
    assert getattr(kernel.start_new_kernel, "starts_again", False)  # tests/conftest.py put it in


def test_a_notebook_run_by_a_test_gets_a_new_kernel_too(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    jupyter_path, starts = kernel_losing_the_port_race(tmp_path, times=1)
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    with pytest.warns(UserWarning, match="died before replying"):
        execute_notebook(nb)
    assert starts.read_text() == "2"  # the first kernel died, the second ran the cell
    assert nb.cells[0].outputs[0]["text"] == "42\n"
