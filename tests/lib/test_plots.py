"""lib/plots.py's ``show``: it stores the alt text with the figure and closes the figure. (The
rule for what an alt text must say is tools/figure_alt.py's, tested with the notebooks.)"""

import subprocess
import sys

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_rgb

from lib import plots


def test_show_stores_the_alt_text_with_the_figure_and_closes_it(monkeypatch):
    shown = []
    monkeypatch.setattr(plots, "display", lambda obj, metadata: shown.append((obj, metadata)))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    alt = "A line falling from 1 at x = 0 to 0 at x = 1"
    plots.show(fig, alt=alt)
    assert shown == [(fig, {"image/png": {"alt": alt}})]
    assert not plt.fignum_exists(fig.number)


@pytest.mark.parametrize("alt", [None, "", "  ", 42, ["six words that say what it shows"]])
def test_show_refuses_a_missing_alt_text(alt):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="needs a sentence saying what the figure shows"):
        plots.show(fig, alt=alt)
    plt.close(fig)


def test_the_course_theme_is_seaborns_without_importing_seaborn():
    code = "import sys, lib.plots; lib.plots.use_course_theme(); print('seaborn' in sys.modules)"
    assert subprocess.check_output([sys.executable, "-c", code], text=True).strip() == "False"
    sns = pytest.importorskip("seaborn")

    def theme_set_by(set_theme):  # the rcParams and the one-letter colour codes, as RGB
        with mpl.rc_context():
            set_theme()
            rc = {key: mpl.rcParams[key] for key in mpl.rcParams if key != "backend"}
            cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
            rc["axes.prop_cycle"] = [to_rgb(colour) for colour in cycle]
        return rc | {code: to_rgb(code) for code in "bgrmyck"}

    rc = {"figure.dpi": plots.FIGURE_DPI, "savefig.dpi": plots.FIGURE_DPI, "axes.titlesize": 10}
    rc["axes.titley"] = 1.0  # a fixed title height: the next test shows it draws the same
    seaborns = theme_set_by(
        lambda: sns.set_theme(style="whitegrid", palette="colorblind", font_scale=0.8, rc=rc)
    )
    ours = theme_set_by(plots.use_course_theme)
    assert {key for key in ours if ours[key] != seaborns[key]} == {"image.cmap", "font.sans-serif"}
    assert ours["image.cmap"] == "viridis"  # matplotlib's: seaborn's "rocket" needs seaborn
    # Seaborn's list goes on after DejaVu Sans, which matplotlib ships: never reached.
    assert ours["font.sans-serif"] == seaborns["font.sans-serif"][:2] == ["Arial", "DejaVu Sans"]


def test_titles_at_a_fixed_height_draw_what_the_automatic_placement_draws():
    weights = np.random.default_rng(0).dirichlet(np.ones(4), size=(3, 4))  # (heads, n, n)

    def pixels(titley):
        with mpl.rc_context():
            plots.use_course_theme()
            mpl.rcParams["axes.titley"] = titley  # None: matplotlib places each title itself
            fig = plots.plot_heads(weights, list("abcd"), ncols=2, title="three heads")
            fig.canvas.draw()
            image = np.asarray(fig.canvas.buffer_rgba()).copy()
            plt.close(fig)
        return image

    assert np.array_equal(pixels(1.0), pixels(None))


def test_the_flow_of_one_head_names_every_step_with_its_shape():
    fig = plots.plot_attention_flow(n=7, d_model=8, d_k=4)
    texts = [t for t in fig.axes[0].texts if t.get_text()]
    labels = sorted(t.get_text().split("\n") for t in texts)  # in any order
    assert labels == sorted(
        [
            ["X", "(7, 8)"],
            ["$\\times\\ W_Q$", "(8, 4)"],
            ["$\\times\\ W_K$", "(8, 4)"],
            ["$\\times\\ W_V$", "(8, 4)"],
            ["Q", "(7, 4)"],
            ["K", "(7, 4)"],
            ["V", "(7, 4)"],
            ["scores", "$QK^\\top / \\sqrt{4}$", "(7, 7)"],
            ["softmax", "of each row"],
            ["weights", "(7, 7)"],
            ["output", "weights V", "(7, 4)"],
        ]
    )
    assert all(t.get_fontsize() >= plots.SMALLEST_FONT_PT for t in texts)
    arrows = [t for t in fig.axes[0].texts if not t.get_text()]
    assert len(arrows) == 12  # X to the three projections, ..., weights and V to the output
    plt.close(fig)


def test_the_head_split_draws_every_matrix_to_scale_with_its_shape():
    fig = plots.plot_head_split(seq=7, d_model=8, n_heads=2)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts if t.get_text()]
    for label in ["x", "Q", "$Q_0$", "$Q_1$", "head$_0$", "head$_1$", "concat", "@ $W_O$"]:
        assert label in texts
    assert texts.count("(seq, d_model)\n= (7, 8)") == 3  # x, Q and the output
    assert texts.count("(seq, d_k) each\n= (7, 4)") == 2  # the heads' queries and outputs
    assert "(seq, heads * d_k)\n= (7, 8)" in texts
    assert all(t.get_fontsize() >= plots.SMALLEST_FONT_PT for t in ax.texts)
    # One coloured column per number: x, Q, 2 x Q_h, 2 x head_h, concat and output.
    columns = [p for p in ax.patches if p.get_width() == 1 and p.get_height() == 7]
    assert len(columns) == 8 + 8 + 2 * 4 + 2 * 4 + 8 + 8
    colour = [tuple(p.get_facecolor()) for p in columns]
    q, concat, output = colour[8:16], colour[32:40], colour[40:48]  # in drawing order
    q_0, head_0, q_1, head_1 = colour[16:20], colour[20:24], colour[24:28], colour[28:32]
    assert q == concat and len(set(q[:4])) == 1 and q[0] != q[4]  # block h is head h's
    assert q_0 == head_0 == q[:4] and q_1 == head_1 == q[4:]
    assert len(set(output)) == 1 and output[0] not in q  # the output: every head mixed
    plt.close(fig)
