"""The course's rule for a figure's alt text: it says what the figure shows. Applied to every
stored figure (tests/notebooks/test_figure_alt.py) and to every figure of the website
(tools/site_test.py); lib/plots.py ``show`` stores the text with the figure."""

from __future__ import annotations

import re

ALT_MIN_WORDS = 6
"""An alt text says what the figure shows, in at least this many words."""

_GENERIC_WORDS = frozenset(
    "a an the this that of in for and with above below here figure plot image chart graph "
    "picture diagram heatmap output result results shows shown showing".split()
)


def alt_text_problem(alt) -> str | None:
    """Why ``alt`` is no alt text for a course figure (missing, short, generic), or None."""
    if not isinstance(alt, str) or not alt.strip():
        return "no alt text"
    if alt.lstrip().startswith("<Figure"):
        return f"alt text {alt!r} is matplotlib's name of the figure: say what it shows"
    # words, numbers (0.94), d_k, log-log; not the punctuation after them ("plot." is "plot")
    words = re.findall(r"\w+(?:['.\-]\w+)*", alt)
    if len(words) < ALT_MIN_WORDS:
        return f"alt text {alt!r} is too short: say what the figure shows"
    if len([w for w in words if w.lower() not in _GENERIC_WORDS]) < ALT_MIN_WORDS - 2:
        return f"alt text {alt!r} is generic: say what the figure shows"
    return None
