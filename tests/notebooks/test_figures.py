"""Figures are legible where they are shown: every stored PNG and the code that draws it.

At 100 % zoom JupyterLab shows a PNG at its pixel size, so a figure drawn at
``lib.plots.FIGURE_DPI`` (100) with no text under ``lib.plots.SMALLEST_FONT_PT`` (7 pt)
has no label shorter than ~9.7 px. The PNGs say the dpi they were drawn at (their pHYs
chunk); the code cells say the font sizes they ask for.
"""

import ast
import base64
import re
import struct

import nbformat
import pytest
from helpers import ROOT

from lib import plots

NOTEBOOKS = sorted((ROOT / "notebooks").glob("**/*.ipynb"))
MAX_WIDTH_PX = 1200  # JupyterLab's notebook column at 100 % zoom on a laptop screen
MAX_HEIGHT_PX = 1000
MAX_TOTAL_MB = 5.0  # the solved notebooks together, outputs included (docs/testing.md)
TEXT_SIZES = {"fontsize", "labelsize", "size", "title_fontsize"}
SIZE_ARG = re.compile(r"\b(?:fontsize|labelsize|size|title_fontsize)\s*=\s*(\d+(?:\.\d+)?)")
TOO_SMALL_NAMES = re.compile(r"""["'](?:xx?-small)["']""")


def pngs(nb):
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data:
                yield index, base64.b64decode(data["image/png"])


def png_size_and_dpi(png: bytes) -> tuple[int, int, float | None]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    offset, dpi = 8, None
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset : offset + 8])
        if kind == b"pHYs":
            per_metre_x, _, unit = struct.unpack(">IIB", png[offset + 8 : offset + 17])
            dpi = per_metre_x * 0.0254 if unit == 1 else None
        offset += 12 + length
    return width, height, dpi


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_every_stored_figure_is_drawn_at_the_course_resolution(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, png in pngs(nb):
        width, height, dpi = png_size_and_dpi(png)
        if dpi is None or dpi < plots.FIGURE_DPI - 1:
            problems.append(f"cell {index}: drawn at {dpi} dpi, not {plots.FIGURE_DPI}")
        if width > MAX_WIDTH_PX or height > MAX_HEIGHT_PX:
            problems.append(f"cell {index}: {width}x{height} px is larger than the page")
    assert not problems, f"{path.name}: " + "; ".join(problems)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_no_code_asks_for_text_smaller_than_the_minimum(path):
    nb = nbformat.read(path, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for match in SIZE_ARG.finditer(cell.source):
            if "size=" in match.group(0) and "fontsize" not in match.group(0):
                continue  # marker and figure sizes are not text (scatter s=, size=)
            if float(match.group(1)) < plots.SMALLEST_FONT_PT:
                problems.append(f"cell {index}: {match.group(0)}")
        if TOO_SMALL_NAMES.search(cell.source):
            problems.append(f"cell {index}: x-small text")
        if "figure.dpi" in cell.source:
            problems.append(f"cell {index}: sets figure.dpi (use P.use_course_theme())")
    assert not problems, f"{path.name}: " + "; ".join(problems)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_notebooks_that_draw_use_the_course_theme(path):
    nb = nbformat.read(path, as_version=4)
    if any(True for _ in pngs(nb)):
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "P.use_course_theme()" in code


def test_lib_plots_asks_for_no_text_smaller_than_the_minimum():
    """Every size lib.plots passes to matplotlib as a number, by keyword or in a dict of
    keywords (a parameter's default, such as plot_heads' panel size in inches, is not one)."""
    tree = ast.parse((ROOT / "lib" / "plots.py").read_text())
    sizes = [(kw.arg, kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
             for kw in node.keywords]  # fmt: skip
    sizes += [(key.value, value) for node in ast.walk(tree) if isinstance(node, ast.Dict)
              for key, value in zip(node.keys, node.values, strict=True)
              if isinstance(key, ast.Constant)]  # fmt: skip
    numbers = [(name, value.value) for name, value in sizes
               if name in TEXT_SIZES and isinstance(value, ast.Constant)]  # fmt: skip
    assert len(numbers) >= 3  # fontsize=9 and fontsize=10 are asked for by number
    for name, size in numbers:
        assert size >= plots.SMALLEST_FONT_PT, f"{name}={size}"


def test_the_theme_makes_every_default_text_size_legible():
    import matplotlib as mpl
    from matplotlib.font_manager import FontProperties

    with mpl.rc_context():
        plots.use_course_theme()
        assert mpl.rcParams["figure.dpi"] == plots.FIGURE_DPI
        for key in (
            "font.size",
            "axes.titlesize",
            "axes.labelsize",
            "xtick.labelsize",
            "ytick.labelsize",
            "legend.fontsize",
            "figure.titlesize",
        ):
            size = FontProperties(size=mpl.rcParams[key]).get_size_in_points()
            assert size >= plots.SMALLEST_FONT_PT, (key, size)


def test_the_notebooks_total_size_stays_sensible():
    # The solved copies: the learner's hold the same figures (and their checks print less).
    total = sum(path.stat().st_size for path in NOTEBOOKS if path.parent.name == "solved") / 1e6
    assert total <= MAX_TOTAL_MB, f"notebooks take {total:.1f} MB"
