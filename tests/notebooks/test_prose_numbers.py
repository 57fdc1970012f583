"""Every measured number in a notebook's prose is printed by a cell next to it.

The rule: a number in a markdown cell (a decimal such as 0.94, a power of ten such as 1e-12,
a percentage, a ratio such as 1.2x) must appear in the text output of a code cell of the
same section (between two ``##`` headings) whose output nbval checks, or in the code of one
(a tolerance, a parameter). A sentence that names another notebook ("notebook 04") may quote
that notebook's printed numbers. Numbers from cells marked ``# NBVAL_IGNORE_OUTPUT``
(timings) may not be quoted: they change from run to run. The few numbers that are neither
measured here nor parameters (constants, a paper's figures, ranges ``make bench`` measured)
are listed below, each with its reason, so that adding one is a decision, not an accident.
"""

import re

import nbformat
import pytest
from helpers import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
NUMBER = re.compile(
    r"(?<![\w.^{-])"  # not inside a word, a longer number or a LaTeX exponent
    r"(\d+\.\d+|\d+(?:\.\d+)?e-\d+|\d+(?:\.\d+)?(?=\s?%)|\d+(?:\.\d+)?(?=x\b))"
)
IGNORED = ("# NBVAL_IGNORE_OUTPUT",)

# Notebook 03, section 7 quotes the range of make bench's loop-section ratios (the cell beside
# it is a timing cell, ignored by nbval): `python bench/bench.py --only loop`, five runs.
_LOOP = "03 section 7: bench loop section, 5 runs (SkylakeX kernels, 1 thread)"

# Notebook 10, sections 5 and 6, quote one run of make bench's scale section, recorded in
# docs/benchmarks.md, "Runs before issue 24" (its cells beside are timing cells, ignored by nbval).
_SCALE = "10: bench scale section, the run in docs/benchmarks.md (SkylakeX kernels, 1 thread)"
# Notebook 10, appendix A, quotes the bars of the runs of 2026-11-25 on both kernel sets
# (docs/benchmarks.md, "The latest run") and the tiles' measurement that removed them.
_BARS = "10: make bench, docs/benchmarks.md, the latest run (bench/results/2026-11-25-*.json)"
_TILES = "10: bench/results/2026-11-25-tiles-vs-rows.txt (docs/benchmarks.md, the tiles)"
# Notebook 10, appendix A, quotes the spare-weights pool's run (docs/benchmarks.md, the weights).
_POOL = "10: bench/results/2026-11-25-weights-pool.txt"

# (notebook number, number as written) -> why it may stand in the prose unprinted.
ALLOWED: dict[tuple[str, str], str] = {
    # e.g. ("02", "1.8"): "float64's largest finite number, 1.8 x 10^308 (a constant)",
    ("03", "0.9"): f"{_LOOP}: loop over heads / reshape, lowest",
    ("03", "1.7"): f"{_LOOP}: loop over heads / reshape, highest",
    ("03", "44"): f"{_LOOP}: loop over sequences and heads / reshape, tiniest shape, highest",
    ("03", "1.3"): f"{_LOOP}: loop over sequences and heads / reshape, n = 32, lowest",
    ("03", "2.1"): f"{_LOOP}: loop over sequences and heads / reshape, n = 32, highest",
    ("03", "0.8"): f"{_LOOP}: loop over sequences and heads / reshape, two largest, lowest",
    ("03", "1.0"): f"{_LOOP}: loop over sequences and heads / reshape, two largest, highest",
    ("07", "0.044715"): "a constant of GELU's tanh approximation (Hendrycks and Gimpel, 2016)",
    ("08", "0.29"): "lib / mha, lowest, SkylakeX, docs/benchmarks.md, the latest run",
    ("08", "0.85"): "lib / mha, highest, SkylakeX, docs/benchmarks.md, the latest run",
    ("08", "0.28"): "lib / mha, lowest, Haswell, docs/benchmarks.md, the latest run",
    ("08", "0.98"): "lib / mha, highest, Haswell, docs/benchmarks.md, the latest run",
    ("08", "0.76"): "lib / SDPA module, lowest, SkylakeX, docs/benchmarks.md, the latest run",
    ("08", "1.09"): "lib / SDPA module, highest, SkylakeX, docs/benchmarks.md, the latest run",
    ("08", "0.95"): "lib / SDPA module, lowest, Haswell, docs/benchmarks.md, the latest run",
    ("08", "1.21"): "lib / SDPA module, highest, Haswell, docs/benchmarks.md, the latest run",
    ("08", "1e-12"): "the tolerance every comparison of sections 2 to 8 prints (section 11 recaps)",
    ("08", "2.13"): "the torch version the course pins (constraints.txt), not a measurement",
    ("05", "1e-10"): "float64 rounding (1e-16) over the step eps = 1e-6: what central "
    "differences can resolve (a constant)",
    ("05", "0.999"): "Adam's usual beta_2 (Kingma and Ba, 2015; a constant)",
    ("05", "0.986"): "exercise 5's hint: an example of a number that prints as 0.99",
    ("06", "1.5"): "the worked example of tied ranks: the mean of ranks 1 and 2 (arithmetic)",
    ("09", "6.3"): "2 pi, the period in positions of RoPE's fastest pair (theta_0 = 1 radian)",
    ("10", "0.47"): f"{_BARS}: causal (2, 4096, 512, 8), lib / lib without skipping, both sets",
    ("10", "0.46"): f"{_BARS}: causal (1, 8192, 512, 8), lib / lib without skipping, both sets",
    ("10", "1.09"): f"{_BARS}: causal core (2, 4096, 512, 8), lib / sdpa(is_causal), SkylakeX",
    ("10", "1.13"): f"{_BARS}: causal core (1, 8192, 512, 8), lib / sdpa(is_causal), SkylakeX",
    ("10", "1.20"): f"{_BARS}: causal core (2, 4096, 512, 8), lib / sdpa(is_causal), Haswell",
    ("10", "1.21"): f"{_BARS}: causal core (1, 8192, 512, 8), lib / sdpa(is_causal), Haswell",
    ("10", "1.19"): f"{_BARS}: memory at n = 16384, extra / one n x n buffer, %",
    ("10", "0.85"): f"{_TILES}: tiles / rows in float32, lowest on SkylakeX",
    ("10", "0.91"): f"{_TILES}: tiles / rows in float32, highest on SkylakeX",
    ("10", "1.24"): f"{_TILES}: tiles / rows in float32, lowest on Haswell",
    ("10", "1.42"): f"{_TILES}: tiles / rows in float32, highest on Haswell",
    ("10", "0.48"): f"{_POOL}: pool / fresh, lowest",
    ("10", "0.98"): f"{_POOL}: pool / fresh, highest",
    ("10", "1.33"): f"{_POOL}: fresh / mha+w, highest",
    ("10", "0.92"): f"{_POOL}: pool / mha+w, highest",
    ("10", "88"): f"{_POOL}: the largest spread between rounds, %",
    ("10", "0.45"): f"{_SCALE}: decoding, lib / torch per token",
    ("10", "100"): f"{_SCALE}: cached step vs recomputation after 512 tokens",
    ("10", "180"): f"{_SCALE}: cached step vs recomputation after 1008 tokens",
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


def unsupported(path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    number = path.name[:2]
    others = {p.name[:2]: p for p in NOTEBOOKS}
    found = []
    for cell, section in zip(nb.cells, sections(nb), strict=True):
        if cell.cell_type != "markdown":
            continue
        here = printed(nb, section)
        for sentence in re.split(r"(?<=[.!?])\s+|\n\s*[-|]", cell.source):
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
