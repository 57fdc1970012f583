"""Stored figures compared with the figures the notebook draws again (``--nbval-figures``).

nbval compares the text a cell prints but skips its images unless nbdime is installed, and
then it compares their base64 text byte for byte, which a new PNG encoder or one antialiased
pixel breaks. Here every PNG of a checked cell (not ``# NBVAL_IGNORE_OUTPUT``) is decoded and
compared pixel by pixel with the one the cell just drew:

- the two must have the same size in pixels (a changed figsize or dpi);
- a pixel *differs* when one of its channels moved by more than ``LEVEL`` of 255: rounding
  in the data (1e-15 of a value mapped to 256 colours) moves a colour by one level at most,
  and antialiasing of a line that moved by a fraction of a pixel by less than ``LEVEL``;
- the figure fails when more than ``MAX_PIXELS`` pixels differ: one changed character of a
  7 pt label alone changes about 30 pixels by far more than ``LEVEL``
  (``tests/notebooks/test_figure_comparison.py`` checks both sides of that line).
"""

from __future__ import annotations

import base64
import io

import numpy as np

LEVEL = 48  # of 255, in one channel
MAX_PIXELS = 10


def decode(png_base64: str) -> np.ndarray:
    """A base64 PNG as an (height, width, channels) array of 0..255 levels."""
    from matplotlib import image

    pixels = image.imread(io.BytesIO(base64.b64decode(png_base64)), format="png")
    return np.rint(pixels * 255).astype(np.int16)


def figure_difference(stored: str, drawn: str) -> str | None:
    """Why two base64 PNGs are not the same figure, or None when they are."""
    if stored == drawn:  # the same bytes: nothing to decode
        return None
    a, b = decode(stored), decode(drawn)
    if a.shape != b.shape:
        return (
            f"the figure is {b.shape[1]}x{b.shape[0]} px, the stored one {a.shape[1]}x{a.shape[0]}"
        )
    differ = (np.abs(a - b) > LEVEL).any(axis=-1)
    if differ.sum() > MAX_PIXELS:
        rows, cols = np.nonzero(differ)
        return (
            f"{differ.sum()} pixels differ from the stored figure by more than {LEVEL}/255 "
            f"(at most {MAX_PIXELS} may), in x {cols.min()}..{cols.max()}, "
            f"y {rows.min()}..{rows.max()}"
        )
    return None


def pngs(outputs) -> list[str]:
    return [out["data"]["image/png"] for out in outputs if "image/png" in out.get("data", {})]


def compare_figures(stored_outputs, drawn_outputs) -> list[str]:
    """Every difference between the figures of a cell's stored and new outputs."""
    stored, drawn = pngs(stored_outputs), pngs(drawn_outputs)
    if len(stored) != len(drawn):
        return [f"the cell drew {len(drawn)} figures, {len(stored)} are stored"]
    problems = []
    for i, (old, new) in enumerate(zip(stored, drawn, strict=True)):
        why = figure_difference(old, new)
        if why:
            problems.append(f"figure {i + 1}: {why}")
    return problems


def install() -> None:
    """Make nbval's output comparison compare figures too (after the text, which it does)."""
    from nbval.plugin import IPyNbCell

    compare_text = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):
        if not compare_text(self, test, ref, skip_compare):
            return False
        problems = compare_figures(ref, test)
        self.comparison_traceback.extend(problems)
        return not problems

    IPyNbCell.compare_outputs = compare_outputs


# As a pytest plugin: tests/conftest.py calls these hooks (`make test` passes the option);
# `python -m pytest -p figures ...` with tests/ on the path loads them alone.
def pytest_addoption(parser):
    parser.addoption(
        "--nbval-figures",
        action="store_true",
        help="with --nbval: compare every stored figure with the one the cell draws again",
    )


def pytest_configure(config):
    if config.getoption("nbval_figures"):
        install()
