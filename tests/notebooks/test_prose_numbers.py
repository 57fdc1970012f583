"""Every number in a notebook's prose is printed next to it.

The rule, applied to each sentence of a markdown cell: a decimal such as 0.94, a power of ten
such as 1e-12, a percentage or a ratio such as 1.2x must appear in the text output of a code
cell of the same section (between two ``##`` headings) whose output nbval checks, or in the
code of one (a tolerance, a parameter). A sentence that names another notebook ("notebook
04") may quote that notebook's printed numbers. Numbers from cells marked
``# NBVAL_IGNORE_OUTPUT`` (timings) may not be quoted: they change from run to run, and a
measured time or ratio is never typed into prose (test_learner_prose.py). The few numbers
that are neither measured nor parameters (constants, arithmetic, a paper's figures) are
listed below, each with its reason, so that adding one is a decision.
"""

import re
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks" / "solved").glob("*.ipynb"))
NUMBER = re.compile(
    r"(?<![\w.^{-])"  # not inside a word, a longer number or a LaTeX exponent
    r"(\d+\.\d+|\d+(?:\.\d+)?e-\d+|\d+(?:\.\d+)?(?=\s?%)|\d+(?:\.\d+)?(?=x\b))"
)
IGNORED = ("# NBVAL_IGNORE_OUTPUT",)

# (notebook number, number as written) -> why it may stand in the prose unprinted.
ALLOWED: dict[tuple[str, str], str] = {
    # e.g. ("02", "1.8"): "float64's largest finite number, 1.8 x 10^308 (a constant)",
    ("07", "0.044715"): "a constant of GELU's tanh approximation (Hendrycks and Gimpel, 2016)",
    ("08", "1e-12"): "the tolerance every comparison of sections 2 to 8 prints (section 11 recaps)",
    ("08", "2.13"): "the torch version the course pins (constraints.txt), not a measurement",
    ("05", "1e-10"): "float64 rounding (1e-16) over the step eps = 1e-6: what central "
    "differences can resolve (a constant)",
    ("05", "0.999"): "Adam's usual beta_2 (Kingma and Ba, 2015; a constant)",
    ("05", "0.986"): "exercise 5's hint: an example of a number that prints as 0.99",
    ("06", "1.5"): "the worked example of tied ranks: the mean of ranks 1 and 2 (arithmetic)",
    ("06", "0.15"): "Voita et al. (2019): 38 of 48 encoder heads pruned for 0.15 BLEU (published)",
    ("09", "6.3"): "2 pi, the period in positions of RoPE's fastest pair (theta_0 = 1 radian)",
}


def output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "\n".join(parts)


def sections(nb) -> list[int]:
    """The section number of every cell (a markdown cell starting with '## ' opens one)."""
    current, numbers = 0, []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            current += 1
        numbers.append(current)
    return numbers


def printed(nb, section=None) -> str:
    where = sections(nb)
    return "\n".join(
        output_text(cell) + "\n" + cell.source
        for cell, s in zip(nb.cells, where, strict=True)
        if cell.cell_type == "code"
        and (section is None or s == section)
        and not cell.source.startswith(IGNORED)
    )


def paragraphs(markdown: str) -> list[str]:
    """A markdown cell's paragraphs, each list item on its own."""
    return [
        item
        for block in re.split(r"\n\s*\n", markdown)
        for item in re.split(r"\n(?=\s*(?:[-*]|\d+\.)\s)", block)
        if item.strip()
    ]


def unsupported(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    number = path.name[:2]
    others = {p.name[:2]: p for p in NOTEBOOKS}
    found = []
    for cell, section in zip(nb.cells, sections(nb), strict=True):
        if cell.cell_type != "markdown":
            continue
        here = printed(nb, section)
        for paragraph in paragraphs(cell.source):
            for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\|", paragraph):
                cited = "".join(
                    printed(nbformat.read(others[n], as_version=4))
                    for n in re.findall(r"notebook (\d\d)", sentence)
                    if n in others and n != number
                )
                for match in NUMBER.finditer(sentence):
                    value = match.group(1)
                    if value in here or value in cited or (number, value) in ALLOWED:
                        continue
                    found.append(f"{value!r} in: {sentence.strip()[:120]}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_numbers_in_prose_are_printed_next_to_them(path):
    problems = unsupported(path)
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_rule_catches_a_number_nobody_printed(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("## 1. A section"),
        nbformat.v4.new_code_cell("print(0.25)"),
        nbformat.v4.new_markdown_cell("The head puts 0.25 here and 0.75 there; 3.5x faster."),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="0.25\n")]
    path = tmp_path / "99_example.ipynb"
    nbformat.write(nb, path)
    problems = unsupported(path)
    assert [p.split(" in:")[0] for p in problems] == ["'0.75'", "'3.5'"]
