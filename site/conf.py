"""The course as a static website (`make site`): Sphinx configuration, the one place for it.

Built with the repository root as the source folder (README.md is the home page, so its links
to the notebooks and the instructor guide resolve as they do on GitHub) from the STORED
notebooks: nothing is executed. What a reader should not see is taken out of the text Sphinx
reads (`source-read` below), never out of the notebooks on disk, so the download link and
`_sources/` serve each notebook exactly as stored.
"""

import json
import re
import sys
from importlib.metadata import distribution
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # tools.make_student writes the student notebooks
    sys.path.insert(0, str(ROOT))
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

project = "Multi-head attention, built from scratch"
author = "the course's authors"
root_doc = "README"
# Only these are pages; everything else in the repository is not a source file. In the
# sidebar, after the notebooks: the instructor guide, then under one heading the pages for
# contributors (README links to them too).
INSTRUCTORS = ["docs/instructor_guide"]
CONTRIBUTING = [
    "docs/testing",
    "docs/benchmarks",
    "tests/README",
    "docs/results/test-matrix",
    "docs/results/test-latest",
    "docs/results/ci-runs",
]
REFERENCE = INSTRUCTORS + CONTRIBUTING
include_patterns = ["README.md", "notebooks/[0-9][0-9]_*.ipynb", *(f"{d}.md" for d in REFERENCE)]
# Folders Sphinx need not walk at all: it lists every file below the source folder before
# matching, and the virtual environments (.venv, .venv-colab...) hold a few hundred thousand.
exclude_patterns = [".*", "build", "bench", "lib", "tools"]
extensions = ["myst_nb", "sphinx_copybutton"]

# Notebooks are shown with their stored outputs and never run: strict nbval checks them.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3  # README's links to "#section" anchors resolve
suppress_warnings = ["myst.header"]  # notebooks start at "# NN · title", then "##"

html_theme = "sphinx_book_theme"
html_title = project
html_theme_options = {
    "use_download_button": True,  # the source (.ipynb as stored) or print to PDF
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
# Light or dark as the reader's system is set ("auto"); readers can switch. make test-site
# checks both modes (axe-core's contrast rules) and that every figure is opaque.
html_context = {"default_mode": "auto"}
# Accessibility (checked by make test-site with axe-core): the theme's search button without a
# label that hides its text (_templates), inline code that wraps on a phone (_static/a11y.css).
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["a11y.css"]
# Search leaves the solutions out: their cells are skipped by the index (class no-search, set
# by hide_solutions_from_search below) and by each result's snippet (this script).
html_js_files = ["search-no-solutions.js"]
html_show_sourcelink = False
html_copy_source = True  # _sources/: each notebook as stored, linked from its page
html_last_updated_fmt = None
# Search is Sphinx's own: an index in the site, searched in the browser, no server.

# MathJax 3 served from the site itself, not a CDN: the copy the sphinx-mathjax-offline
# package ships (MathJax 3.2.2), the parts tex-chtml loads, copied into _static/mathjax.
MATHJAX = Path(distribution("sphinx-mathjax-offline").locate_file("sphinx-mathjax-offline"))
MATHJAX_PARTS = ["tex-chtml.js", "input", "output/chtml.js", "output/chtml", "ui", "a11y", "sre"]
mathjax_path = "mathjax/tex-chtml.js"

# A code line that is a marker for nbval, not for readers.
NBVAL_MARKER = re.compile(r"^\s*# NBVAL_[A-Z_]+\s*$")
SETUP_NOTE = (
    "*The set-up cell below is collapsed: after `make lab` it does nothing; in Colab it "
    "installs the course's helpers.*"
)


# Exercise solutions: the lines between these markers (tools/make_student.py's rule) are
# what a student writes. On the site the whole cell is collapsed behind a "Show solution"
# toggle (tag hide-cell: its code and its outputs, if it ever has any, since what a solution
# prints is its answer); the check cell after it stays in view, as it prints only what was
# checked. A reader who scrolls sees the exercise, the toggle and the check, not the answer.
SOLUTION_BEGIN = "### BEGIN SOLUTION"
SHOW_SOLUTION = {"code_prompt_show": "Show solution", "code_prompt_hide": "Hide solution"}
# The solution cells are also kept out of the site's search: tagged SOLUTION_TAG (myst-nb
# gives the cell's container the class tag_solution), they get Sphinx's class no-search, which
# its index skips, and _static/search-no-solutions.js removes every .no-search element from
# the text a result's snippet is cut from. A word only a solution uses finds nothing.
SOLUTION_TAG = "solution"
SOLUTION_CLASS = f"tag_{SOLUTION_TAG}"
NO_SEARCH = "no-search"
# Student versions (tools/make_student.py: solutions replaced by stubs, outputs cleared) are
# written into the site here, one beside each page's download link of the stored notebook.
STUDENT_FOLDER = "student"
# A cell whose text outputs are longer than this many lines shows them in a scroll box
# (myst-nb's tag output_scroll, 24em high) instead of at full length. The longest output
# stored today is a 20-line table (notebook 07's coreference probe), the result its section
# reads, which stays whole; 25 lines of output (about 450 px on the site) still fit on a
# laptop's screen with the code that printed them, while anything longer (a whole matrix, a
# log of every step) would push the prose out of sight.
LONG_OUTPUT_LINES = 25


def setup_first_line() -> str:
    """How every notebook's set-up cell begins (tools/notebook_links.py writes it)."""
    from tools.notebook_links import SETUP_FIRST_LINE

    return SETUP_FIRST_LINE


def output_lines(output: dict) -> int:
    """How many lines of text an output shows (0 for a figure or HTML)."""
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif output.get("output_type") == "error":
        text = "\n".join(output.get("traceback", []))
    elif "image/png" in output.get("data", {}) or "text/html" in output.get("data", {}):
        return 0
    else:
        text = output.get("data", {}).get("text/plain", "")
    text = "".join(text) if isinstance(text, list) else text
    return len(text.rstrip("\n").split("\n")) if text else 0


def is_solution(cell: dict, source: str) -> bool:
    """A cell with an exercise's solution; a solution in a markdown cell is refused (the site
    cannot collapse it yet, and it would be shown)."""
    found = any(line.strip() == SOLUTION_BEGIN for line in source.splitlines())
    if found and cell["cell_type"] != "code":
        raise ValueError("a solution in a markdown cell: site/conf.py cannot hide it yet")
    return found


def carry_figure_alt(cell: dict) -> None:
    """The alt text a figure is stored with (lib.plots.show puts it in the output's metadata)
    set where myst-nb reads it, the cell's ``mystnb.image.alt``: the page's ``<img alt>``."""
    alts = {
        out.get("metadata", {}).get("image/png", {}).get("alt")
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    } - {None}
    assert len(alts) <= 1, f"a cell with figures of different alt texts: {sorted(alts)}"
    if alts:
        cell.setdefault("metadata", {}).setdefault("mystnb", {})["image"] = {"alt": alts.pop()}


def reader_notebook(text: str, name: str) -> str:
    """The notebook as readers see it: the nbval markers dropped from code, the set-up cell
    collapsed (tag hide-input) behind one line saying what it is, every solution collapsed
    behind a "Show solution" toggle, long outputs in a scroll box, and download links for
    the notebook and its student version under its Colab line."""
    nb = json.loads(text)
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if cell["cell_type"] == "code":
            carry_figure_alt(cell)
            lines = source.splitlines(keepends=True)
            source = "".join(line for line in lines if not NBVAL_MARKER.match(line))
            if source.startswith(setup_first_line()):
                tags.append("hide-input")
                note = {"cell_type": "markdown", "id": "setup-note", "metadata": {}}
                cells.append({**note, "source": SETUP_NOTE})
            if sum(map(output_lines, cell.get("outputs", []))) > LONG_OUTPUT_LINES:
                tags.append("output_scroll")  # all of a cell's outputs share one box
        if is_solution(cell, source):
            tags += ["hide-cell", SOLUTION_TAG]
            cell["metadata"].setdefault("mystnb", {}).update(
                SHOW_SOLUTION
            )  # a figure keeps its alt
        if not tags:
            del cell["metadata"]["tags"]
        cell["source"] = source
        cells.append(cell)
    first = cells[0]
    from tools.notebook_links import BADGE_LINE  # "*Run in Colab:* not yet..." or the badge

    colab = BADGE_LINE.search(first["source"]) if first["cell_type"] == "markdown" else None
    assert colab, f"{name}: no Colab line in the title cell"
    stored = f"../_sources/notebooks/{name}.ipynb"  # Sphinx's copy of the file as stored
    blank = f"../{STUDENT_FOLDER}/{name}.ipynb"  # same name: the one students hand in
    link = (
        f'\n\n*Download:* <a href="{stored}" download>{name}.ipynb</a> (exercises blank, '
        f'with its outputs), or <a href="{blank}" download class="student-download">its '
        "student version</a> (no outputs)."
    )

    first["source"] = first["source"][: colab.end()] + link + first["source"][colab.end() :]
    nb["cells"] = cells
    return json.dumps(nb)


def solved_page(learner: str, name: str) -> str:
    """What a notebook's page shows: its solved copy (notebooks/solved/), whose solutions
    reader_notebook collapses and whose checks print what a right answer gets, under the
    learner's title (its bullet says how the exercises work). The page's download link still
    serves the learner's copy as stored, exercises blank."""
    solved = json.loads((ROOT / "notebooks" / "solved" / f"{name}.ipynb").read_text())
    solved["cells"][0] = json.loads(learner)["cells"][0]
    return json.dumps(solved)


def course_order(text: str) -> str:
    """README (the home page) with the sidebar: the notebooks in course order, the
    instructor guide, then the pages for contributors."""
    toctree = "\n\n```{{toctree}}\n:hidden:\n:caption: {}\n\n{}\n```\n"
    notebooks = "\n".join(f"notebooks/{n}" for n in NOTEBOOKS)
    return (
        text
        + toctree.format("The course", notebooks)
        + toctree.format("For instructors", "\n".join(INSTRUCTORS))
        + toctree.format("Contributing", "\n".join(CONTRIBUTING))
    )


def text_badges(text: str) -> str:
    """Colab badges as text links: their image is on Colab's server, and the site serves
    everything itself (make test-site fails on an outside request). Nothing to do until the
    course has a public address (tools/notebook_links.py writes the badges then)."""
    from tools.notebook_links import BADGE_IMAGE

    return text.replace(f"[![Open In Colab]({BADGE_IMAGE})]", "[Open in Colab]")


def on_source_read(app, docname: str, source: list[str]) -> None:
    if docname.startswith("notebooks/"):
        source[0] = reader_notebook(solved_page(source[0], Path(docname).name), Path(docname).name)
    elif docname == root_doc:
        source[0] = course_order(source[0])
    source[0] = text_badges(source[0])


def hide_solutions_from_search(app, doctree) -> int:
    """The class no-search on every solution cell of a page just read (before Sphinx indexes
    it: the index is made when the page is written). Returns how many cells were marked."""
    from docutils import nodes

    marked = 0
    for node in doctree.findall(nodes.Element):
        if SOLUTION_CLASS in node["classes"] and NO_SEARCH not in node["classes"]:
            node["classes"].append(NO_SEARCH)
            marked += 1
    return marked


def on_build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util.fileutil import copy_asset

    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        source = MATHJAX / "static" / "mathjax" / part
        if source.is_dir():
            copy_asset(source, target / part)
        else:
            (target / part).parent.mkdir(parents=True, exist_ok=True)
            (target / part).write_bytes(source.read_bytes())
    write_student_notebooks(Path(app.outdir) / STUDENT_FOLDER)
    # The address of the site opens the home page.
    (Path(app.outdir) / "index.html").write_text(
        '<!DOCTYPE html><meta charset="utf-8"><title>Redirecting</title>'
        '<meta http-equiv="refresh" content="0; url=README.html">'
        '<a href="README.html">The course</a>\n'
    )


def write_student_notebooks(folder: Path) -> None:
    """The student release (as `make student` writes it to build/student/) into the site."""
    from tools import make_student

    make_student.build(make_student.SOLVED, folder)


def visit_hidden_cell(self, node) -> None:
    """myst-nb's collapsed cell with its <summary> named by the text it shows ("Show code cell
    source"): myst-nb's aria-label "Toggle hidden content" hides that text from assistive
    technology, which axe-core reports (label-content-name-mismatch, serious)."""
    from myst_nb import sphinx_ as myst_nb_sphinx

    start = len(self.body)
    myst_nb_sphinx.visit_HideCellInput(self, node)
    label = ' aria-label="Toggle hidden content"'
    self.body[start:] = [part.replace(label, "") for part in self.body[start:]]


def setup(app):
    from myst_nb.sphinx_ import HideCodeCellNode, depart_HideCellInput

    app.add_node(HideCodeCellNode, override=True, html=(visit_hidden_cell, depart_HideCellInput))
    app.connect("source-read", on_source_read)
    app.connect("doctree-read", hide_solutions_from_search)
    app.connect("build-finished", on_build_finished)
