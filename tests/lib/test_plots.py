"""lib/plots.py's ``show``: it stores the alt text with the figure and closes the figure. (The
rule for what an alt text must say is tools/figure_alt.py's, tested with the notebooks.)"""

import matplotlib.pyplot as plt
import pytest

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
