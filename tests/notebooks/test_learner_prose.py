"""The notebooks and the README speak to a learner: no course machinery, no typed measurements.

Three rules, each with a planted example that must fail it:

- **No machinery.** Nowhere (code comments included) do the notebooks or the README name the
  course's process: issue numbers, benchmark "bars", the "syllabus" or a "seed tutorial",
  experiment codes such as E12.2, CI, or lint pragmas (``noqa``, ``fmt: skip``). In a
  notebook's teaching flow, the machine's engineering stays out too: ``make`` targets, "this
  machine", BLAS kernel sets (SkylakeX, Haswell), ``bench/`` and ``tests/`` paths. Those may
  stand in one optional appendix, a last section headed ``## Going further``. The set-up cell,
  whose comment says it does nothing after ``make lab``, is exempt from the ``make`` rule.
- **No measured number typed into prose.** A time (ns to seconds), a speed ratio (``1.3x``),
  a bandwidth or a rate (GB/s, GFLOP/s, tokens/s) measured on some machine is printed by a
  cell, never typed into markdown: typed, it goes stale while the cell beside it moves. A
  cell that says where its numbers are published (a link or a citation "et al.", a year in
  parentheses) may quote that publication's figures.
- **No measured share typed into prose.** Nor is an accuracy, a weight, an entropy, a loss, a
  score, a similarity, a p-value or a correlation: a fraction such as 0.47 in a sentence about
  one of them is printed by a cell, and the prose says what it shows in words that stay true if
  it moves a little (about half, nearly all). Nor is any number read off the output of the cell
  before and rounded (88.7 for a printed 88.72). Arithmetic (``1/64 = 0.016``) and a sentence
  citing its source may stand; a parameter the prose must name (a threshold) is listed in
  ``DERIVED``.
"""

import re
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT

from tools.notebook_links import SETUP_FIRST_LINE

NOTEBOOKS = sorted((ROOT / "notebooks").glob("**/*.ipynb"))  # the learner's and the solved
APPENDIX = re.compile(r"^## Going further\b", re.MULTILINE)

# Anywhere in a notebook or the README.
MACHINERY = [
    (re.compile(r"\bissues?\s*#?\d+|#(?![\da-f]{6}\b)\d{2,}\b", re.I), "an issue number"),
    (re.compile(r"\bsyllabus", re.IGNORECASE), "the syllabus"),
    (re.compile(r"\bseed tutorials?\b", re.IGNORECASE), "the seed tutorials"),
    (re.compile(r"\bE\d{1,2}\.\d\b"), "an experiment code"),
    (re.compile(r"\bCI\b"), "CI"),
    (re.compile(r"\bnoqa\b|\bfmt:\s*(skip|off)\b|\btype:\s*ignore\b"), "a lint pragma"),
]
# In markdown only: "bar" as a benchmark's target (a colour bar or a bar chart is fine).
BENCH_BAR = re.compile(r"(?<!colour )(?<!color )(?<!error )\bbars?\b(?! charts?| plots?)", re.I)
# In a notebook's teaching flow (before its "Going further" appendix).
ENGINEERING = [
    (re.compile(r"`make [\w-]+|\bmake (bench|test|lab|student|execute)\b"), "a make target"),
    (re.compile(r"\bthis machine\b|\bthe course's machine\b|\b2-core\b", re.I), "the machine"),
    (re.compile(r"SkylakeX|Haswell|\bkernel sets?\b|\bBLAS kernels?\b", re.I), "BLAS kernels"),
    (re.compile(r"\bbench/|\btests/|\bbench\.py\b"), "a path of the course's tooling"),
]

# A measured quantity: a time, a speed ratio, a bandwidth or rate.
MEASURED = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?\s*"
    r"(?:(?:ns|µs|us|ms|sec|seconds?)\b(?!/)|(?<=\s)s\b(?!/)|[x×](?![\w^]|\s*\d)|"
    r"(?:[GMKT]B|[GMT]FLOP|GFLOPS|tokens?|it)/s\b|GFLOPS\b)"
)
PUBLISHED = re.compile(r"\]\(https?://|\bet al\.|\(\d{4}\)|, \d{4}\)")

# A measured share: a fraction (0.47, .5, 1.00; not "1/64 = 0.016", arithmetic) in a sentence
# that speaks of what runs measure.
SHARE = re.compile(r"(?<![\w.=/])(?<!\d = )(?<!\d=)(?:0?\.\d+|1\.0+)(?!\w|\.\d)")
SHARE_CONTEXT = re.compile(
    r"\b(?:accurac(?:y|ies)|p-values?|p = |Spearman|correlations?|cosines?|loss(?:es)?|right|"
    r"entrop(?:y|ies)|of\s+(?:its|their)\s+weight|largest\s+weights?|scores?|similarit(?:y|ies)|"
    r"standard\s+deviations?|attention|on\s+average)\b"
)
# Any decimal number, as typed in prose or printed by a cell.
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]\d)")
SENTENCE_END = re.compile(r"(?<=[.!?:;])\s+|\n\s*\n|\n(?=\s*[-*|] )")

# (notebook, quantity as written) -> why it may stand in the prose: arithmetic or a parameter,
# not a run.
DERIVED: dict[tuple[str, str], str] = {
    ("07", "0.5"): "HT.classify_heads' threshold for a head type (a parameter)",
    ("07", "0.75"): "HT.classify_heads' normalised entropy for 'broad' (a parameter)",
    ("07", "0.4"): "the lowest of the thresholds the cell tries (a parameter)",
    ("07", "0.6"): "the highest of the thresholds the cell tries (a parameter)",
    ("09", "0.23"): "ALiBi on equal content scores: a softmax of -m x distance (arithmetic)",
    ("09", "0.18"): "ALiBi on equal content scores: a softmax of -m x distance (arithmetic)",
}


def cells(nb):
    """(cell, in the appendix?) for every cell of ``nb``."""
    appendix = False
    for cell in nb.cells:
        if cell.cell_type == "markdown" and APPENDIX.search(cell.source):
            appendix = True
        yield cell, appendix


def code_comments(source: str) -> str:
    return "\n".join(line.split("#", 1)[1] for line in source.splitlines() if "#" in line)


def machinery(nb) -> list[str]:
    found = []
    headings = [c for c in nb.cells if c.cell_type == "markdown" and APPENDIX.search(c.source)]
    if len(headings) > 1:
        found.append("more than one '## Going further' appendix")
    for index, (cell, appendix) in enumerate(cells(nb)):
        if cell.cell_type == "markdown":
            text = cell.source
        elif cell.cell_type == "code":
            text = code_comments(cell.source)
            if cell.source.startswith(SETUP_FIRST_LINE):
                continue
        else:
            continue
        rules = MACHINERY + ([] if appendix else ENGINEERING)
        for pattern, what in rules:
            found += [f"cell {index}: {what}: {m.group(0)!r}" for m in pattern.finditer(text)]
        if cell.cell_type == "markdown":
            found += [f"cell {index}: a bar: {m.group(0)!r}" for m in BENCH_BAR.finditer(text)]
    return found


def typed_measurements(nb, number: str) -> list[str]:
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or PUBLISHED.search(cell.source):
            continue
        text = re.sub(r"\$[^$]*\$", "", cell.source)  # formulas: 2x, 4x in maths are algebra
        for match in MEASURED.finditer(text):
            quantity = match.group(0).strip()
            if (number, quantity) not in DERIVED:
                found.append(f"cell {index}: {quantity!r} typed into prose")
    return found


def printed(cell) -> str:
    """What a code cell printed: its streams and the plain text of its results."""
    return "".join(
        o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in cell.outputs
    )


def read_off(quantity: str, output: str) -> bool:
    """Whether ``quantity`` rounds a longer number of ``output`` (88.7 for 88.72)."""
    places = len(quantity.split(".")[1])
    return any(
        len(x.split(".")[1]) > places and f"{float(x):.{places}f}" == quantity
        for x in DECIMAL.findall(output)
    )


def typed_shares(nb, number: str) -> list[str]:
    found, output = [], ""  # output: what the last code cell printed
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            output = printed(cell)
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"\$[^$]*\$|`[^`]*`", "", cell.source)  # maths and code: not prose
        for sentence in SENTENCE_END.split(text):
            if PUBLISHED.search(sentence):
                continue
            shares = SHARE.findall(sentence) if SHARE_CONTEXT.search(sentence) else []
            shares += [
                q for q in DECIMAL.findall(sentence) if read_off(q, output) and q not in shares
            ]
            found += [
                f"cell {index}: {q!r} typed into prose"
                for q in shares
                if (number, q) not in DERIVED
            ]
    return found


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT / "notebooks").stem[:9]
)
def test_notebooks_do_not_speak_of_the_courses_machinery(path):
    problems = machinery(nbformat.read(path, as_version=4))
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT / "notebooks").stem[:9]
)
def test_no_measured_number_is_typed_into_prose(path):
    problems = typed_measurements(nbformat.read(path, as_version=4), path.name[:2])
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT / "notebooks").stem[:9]
)
def test_no_measured_share_is_typed_into_prose(path):
    problems = typed_shares(nbformat.read(path, as_version=4), path.name[:2])
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def readme_machinery(text: str) -> list[str]:
    found = []
    for pattern, what in MACHINERY:
        found += [f"{what}: {m.group(0)!r}" for m in pattern.finditer(text)]
    found += [f"a bar: {m.group(0)!r}" for m in BENCH_BAR.finditer(text)]
    found += [f"BLAS kernels: {m.group(0)!r}" for m in ENGINEERING[2][0].finditer(text)]
    return found


def test_the_readme_does_not_speak_of_the_courses_machinery():
    problems = readme_machinery((ROOT / "README.md").read_text())
    assert not problems, "README.md:\n" + "\n".join(problems)


def test_lib_which_learners_open_does_not_speak_of_the_courses_machinery():
    found = []
    for path in sorted((ROOT / "lib").rglob("*.py")):
        for pattern, what in MACHINERY[:4]:  # issue numbers, syllabus, seed tutorials, E12.2
            found += [
                f"{path.name}: {what}: {m.group(0)!r}" for m in pattern.finditer(path.read_text())
            ]
    assert not found, "\n".join(found)


def test_the_readme_is_a_first_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 125, f"README.md is {len(lines)} lines; a first page is about 120"


def planted(*sources) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for source in sources:
        if source.startswith("code:"):
            nb.cells.append(nbformat.v4.new_code_cell(source.removeprefix("code:")))
        else:
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
    return nb


def test_planted_machinery_is_found():
    nb = planted(
        "# 99 · Title",
        f"code:{SETUP_FIRST_LINE}\nx = 1",
        "As issue 24 asked, the syllabus's experiment E12.2 meets its bars on CI.",
        "code:y = 2  # noqa: NPY002",
        "Run `make bench` on this machine: SkylakeX kernels.",
        "A colour bar in #949494, a bar chart and error bars are fine.",
        "## Going further: the machine",
        "`make bench` on this machine, with Haswell kernels, is allowed here; issue 3 is not.",
    )
    problems = machinery(nb)
    kinds = [p.split(": ")[1] for p in problems]
    assert kinds == [
        "an issue number",
        "the syllabus",
        "an experiment code",
        "CI",
        "a bar",
        "a lint pragma",
        "a make target",
        "the machine",
        "BLAS kernels",
        "an issue number",
    ], problems
    assert readme_machinery("Bars of issue 24, with SkylakeX kernels.") == [
        "an issue number: 'issue 24'",
        "a bar: 'Bars'",
        "BLAS kernels: 'SkylakeX'",
    ]


def test_planted_measurements_are_found():
    nb = planted(
        "The fast path took 0.76x to 1.09x of the module's time, 12 ms a call, at 9.0 GB/s.",
        "It reached 3.2 GFLOP/s and 120 tokens/s; the loop was 2x slower.",
        "Vaswani et al. (2017) trained in 12 hours at 3.5 days; quoted with its source.",
        "Here $2x + 1$ is algebra, 4 heads is a count and 0.93 is an accuracy.",
    )
    problems = typed_measurements(nb, "99")
    assert [p.split("'")[1] for p in problems] == [
        "0.76x",
        "1.09x",
        "12 ms",
        "9.0 GB/s",
        "3.2 GFLOP/s",
        "120 tokens/s",
        "2x",
    ], problems


def test_planted_shares_are_found():
    nb = planted(
        "The head puts 0.68 of its weight on `sat`; the test accuracy is .9993 at six heads.",
        "Spearman's correlation lies between 0.762 and 0.874: p = 0.066, with entropy 1.00.",
        "Chance is 1/64 = 0.016 of the positions right; `lr = 0.01` is a parameter.",
        "Ainslie et al. (2023) report 0.95 accuracy after 5 % of the steps; quoted.",
        "Here $0.5 x$ is algebra, and the model has 0.9 million weights.",
        "The largest weight stays at about 0.24; the mean score is 0.33 and the similarity 0.379.",
        "code:print(f'{np.log(np.finfo(np.float32).max):.2f}')",
        "A float32 score above 88.7 overflows; a 2.0 not in the output above is not read off it.",
    )
    nb.cells[-2].outputs = [nbformat.v4.new_output("stream", text="88.72\n")]
    problems = typed_shares(nb, "99")
    assert [p.split("'")[1] for p in problems] == [
        "0.68",
        ".9993",
        "0.762",
        "0.874",
        "0.066",
        "1.00",
        "0.24",
        "0.33",
        "0.379",
        "88.7",
    ], problems


def test_every_notebook_is_listed():
    assert len(NOTEBOOKS) >= 10 and all(isinstance(p, Path) for p in NOTEBOOKS)
