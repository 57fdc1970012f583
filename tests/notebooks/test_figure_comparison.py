"""The figure comparison of ``make test`` (tests/figures.py): it accepts a figure drawn again
from data that differs by rounding, and rejects one whose text, data or size changed."""

import base64
import io
import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from figures import compare_figures, figure_difference  # noqa: E402
from helpers import ROOT  # noqa: E402
from nbval_kernels import execute_notebook  # noqa: E402

from lib import plots  # noqa: E402


def draw(title="Attention weights, head 0", shift=0.0, noise=0.0, figsize=(6, 3)) -> str:
    """A line plot and a heatmap, as a notebook draws them, in base64 PNG."""
    plots.use_course_theme()
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(8), size=8)
    weights *= 1 + noise * rng.standard_normal(weights.shape)
    x = np.arange(20)
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=figsize)
    ax_l.plot(x, np.sin(x / 3) * (1 + noise) + shift)
    ax_l.set_title(title)
    image = ax_r.imshow(weights, cmap="viridis", vmin=0, vmax=weights.max())
    fig.colorbar(image, ax=ax_r, label="weight")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=plots.FIGURE_DPI)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_figure_drawn_again_from_rounded_data_is_the_same():
    stored = draw()
    assert figure_difference(stored, draw()) is None
    # 1e-12 relative: far more than rounding moves a notebook's data between BLAS kernels
    assert figure_difference(stored, draw(noise=1e-12)) is None


def test_a_changed_character_a_moved_line_or_a_new_size_fails():
    stored = draw()
    assert "pixels differ" in figure_difference(stored, draw(title="Attention weights, head 1"))
    assert "pixels differ" in figure_difference(stored, draw(shift=0.05))
    assert "pixels differ" in figure_difference(stored, draw(noise=0.05))
    assert "px, the stored one" in figure_difference(stored, draw(figsize=(6, 3.2)))


def test_a_missing_figure_is_reported():
    one = [{"output_type": "display_data", "data": {"image/png": draw()}}]
    assert compare_figures(one, []) == ["the cell drew 0 figures, 1 are stored"]
    assert compare_figures(one, one) == []


def test_nbval_with_the_option_fails_on_a_changed_stored_figure(tmp_path):
    # nbval is a development tool (requirements-dev.txt): `make test` has it, the Colab-like
    # environment of `make test-colab` (Colab's packages) does not, and says so in its summary
    pytest.importorskip("nbval", reason="nbval is not installed (requirements-dev.txt)")
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(3, 2), dpi=100)\n"
        "plt.plot([0, 1, 2], [0, 1, 0])\n"
        "plt.title('a tent')\n"
        "plt.show()"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    path = tmp_path / "figure.ipynb"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "tests"),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    # nbval and the course's plugins only: loading every installed plugin took a second a run
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--disable-plugin-autoload", "-p", "nbval", "-p", "figures", "-p", "nbval_kernels",
               "--nbval", "--nbval-current-env", "--nbval-figures", str(path)]  # fmt: skip

    # the outputs the cell gives, with another figure in place of the one it draws
    execute_notebook(nb)
    nb.cells[0].outputs[0]["data"]["image/png"] = draw()
    nbformat.write(nb, path)
    wrong = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert wrong.returncode == 1, wrong.stdout[-2000:] + wrong.stderr[-1000:]
    assert "px, the stored one" in wrong.stdout, wrong.stdout[-2000:] + wrong.stderr[-1000:]
    # without the option nbval passes it: figures are not compared (make test passes it)
    command.remove("--nbval-figures")
    blind = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert blind.returncode == 0, blind.stdout[-2000:] + blind.stderr[-1000:]
