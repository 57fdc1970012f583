"""Every figure can be read by everyone: it has alt text that says what it shows, and an opaque
background that stays readable in a dark theme.

- Alt text: each cell that draws ends with ``P.show(fig, alt="...")`` (lib/plots.py), which
  stores the text with the PNG (the output's metadata ``image/png.alt``); the website carries it
  into ``<img alt>`` (site/conf.py ``carry_figure_alt``). Here: every stored figure has one, it
  is not short or generic (``tools/figure_alt.py``), no two figures share one, and it is the
  text the cell's code passes now (a figure re-drawn with new alt text must be re-executed).
- One figure per cell: myst-nb sets alt text per cell, so a second figure would get the first
  one's text.
- Opaque: JupyterLab's dark theme and the site's dark mode show a PNG on a dark background; a
  transparent figure would show its dark text and lines on black. Every pixel of a stored PNG
  must be opaque (the figures are drawn on white: dark on light, as they were designed).
"""

import ast
import base64
import io

import nbformat
import pytest
from helpers import ROOT

from tools.figure_alt import alt_text_problem

NOTEBOOKS = sorted((ROOT / "notebooks").glob("**/*.ipynb"))


def figures(nb):
    """(cell index, cell, output) for every image output of the notebook."""
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if any(kind.startswith("image/") for kind in out.get("data", {})):
                yield index, cell, out


def alt_in_code(source: str) -> list[str]:
    """The alt texts the cell's code passes as ``alt=...`` (string constants)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return [
        node.value.value
        for node in ast.walk(ast.parse("\n".join(lines)))
        if isinstance(node, ast.keyword)
        and node.arg == "alt"
        and isinstance(node.value, ast.Constant)
    ]


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
def test_the_rule_refuses_missing_short_or_generic_alt_text(alt):
    assert alt_text_problem(alt)


def test_the_rule_accepts_alt_text_that_says_what_the_figure_shows():
    alt = "Heatmap of head 3's weights: each token attends mostly to the previous one"
    assert alt_text_problem(alt) is None


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_every_figure_has_alt_text_that_says_what_it_shows(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, cell, out in figures(nb):
        kinds = [kind for kind in out["data"] if kind.startswith("image/")]
        if kinds != ["image/png"]:
            problems.append(f"cell {index}: {kinds} (the course stores figures as PNG only)")
            continue
        alt = out.get("metadata", {}).get("image/png", {}).get("alt")
        why = alt_text_problem(alt)
        if why:
            problems.append(f"cell {index}: {why} (end the cell with P.show(fig, alt=...))")
        elif alt not in alt_in_code(cell.source):
            problems.append(f"cell {index}: the stored alt text is not the code's: re-execute")
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_no_two_figures_share_alt_text():
    seen: dict[str, str] = {}
    repeated = []
    for path in NOTEBOOKS:
        if path.parent.name == "solved":
            continue  # the solved copies hold the learner's figures again
        for index, _, out in figures(nbformat.read(path, as_version=4)):
            alt = out.get("metadata", {}).get("image/png", {}).get("alt")
            if alt is None:
                continue  # missing: the test above says so
            if alt in seen:
                repeated.append(f"{path.name} cell {index} repeats {seen[alt]}")
            seen.setdefault(alt, f"{path.name} cell {index}")
    assert not repeated, "; ".join(repeated)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_a_cell_shows_at_most_one_figure(path):
    nb = nbformat.read(path, as_version=4)
    cells = [index for index, _, _ in figures(nb)]
    assert len(cells) == len(set(cells)), f"{path.name}: cells with two figures: {cells}"


def transparent_pixels(png_base64: str) -> int:
    """How many pixels of a base64 PNG are not fully opaque."""
    from matplotlib import image

    pixels = image.imread(io.BytesIO(base64.b64decode(png_base64)), "png")
    return int((pixels[..., 3] < 1.0).sum()) if pixels.shape[-1] == 4 else 0


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_every_stored_figure_is_opaque(path):
    nb = nbformat.read(path, as_version=4)
    problems = [
        f"cell {index}: {clear} pixels not opaque"
        for index, _, out in figures(nb)
        if (clear := transparent_pixels(out["data"]["image/png"]))
    ]
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_a_transparent_figure_is_caught():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, 1])
    for transparent, expected in ((True, True), (False, False)):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", transparent=transparent)
        assert bool(transparent_pixels(base64.b64encode(buffer.getvalue()))) is expected
    plt.close(fig)
