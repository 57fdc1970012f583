"""lib/plots.py's alt text: :func:`plots.show` stores it with the figure, and
:func:`plots.alt_text_problem` refuses alt text that does not say what a figure shows."""

import matplotlib.pyplot as plt
import pytest

from lib import plots

GENERIC = [
    None,
    "",
    "   ",
    "figure",
    "A plot.",
    "Heatmap of the weights",
    "<Figure size 640x480 with 1 Axes>",
    "A figure showing the plot of the chart above here",
    "Figure. Plot. Image. Chart. Graph. Diagram.",  # a full stop does not make a word count
]


@pytest.mark.parametrize("alt", GENERIC)
def test_missing_short_or_generic_alt_text_is_refused(alt):
    assert plots.alt_text_problem(alt)


def test_alt_text_that_says_what_the_figure_shows_is_accepted():
    alt = "Heatmap of head 3's weights: each token attends mostly to the previous one"
    assert plots.alt_text_problem(alt) is None


def test_show_stores_the_alt_text_with_the_figure_and_closes_it(monkeypatch):
    shown = []
    monkeypatch.setattr(plots, "display", lambda obj, metadata: shown.append((obj, metadata)))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    alt = "A line falling from 1 at x = 0 to 0 at x = 1"
    plots.show(fig, alt=alt)
    assert shown == [(fig, {"image/png": {"alt": alt}})]
    assert not plt.fignum_exists(fig.number)
    with pytest.raises(ValueError, match="too short"):
        plots.show(fig, alt="a figure")


@pytest.mark.parametrize("alt", [None, 42, ["six words that say what it shows"]])
def test_show_refuses_alt_text_that_is_not_text(alt):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="no alt text"):
        plots.show(fig, alt=alt)
    plt.close(fig)
