"""The course as a static website (`make site`): Sphinx configuration, the one place for it.

Built with the repository root as the source folder (README.md is the home page, so its links
to the notebooks and the instructor guide resolve as they do on GitHub) from the STORED
notebooks: nothing is executed. What a reader should not see is taken out of the text Sphinx
reads (`source-read` below), never out of the notebooks on disk, so the download link and
`_sources/` serve each notebook exactly as stored.
"""

import json
import re
from importlib.metadata import distribution
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

project = "Multi-head attention, built from scratch"
author = "the course's authors"
root_doc = "README"
# Only these are pages; everything else in the repository is not a source file.
# README links to these documents too: they are pages, under "Reference" in the sidebar.
REFERENCE = [
    "docs/instructor_guide",
    "docs/benchmarks",
    "tests/README",
    "docs/results/test-matrix",
    "docs/results/test-latest",
    "docs/results/ci-runs",
]
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
# Light until the figures are checked for dark backgrounds; readers can switch.
html_context = {"default_mode": "light"}
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
SETUP_FIRST_LINE = "# Set-up."
SETUP_NOTE = (
    "*The set-up cell below is collapsed: after `make lab` it does nothing; in Colab it "
    "installs the course's helpers.*"
)


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
    collapsed (tag hide-input) behind one line saying what it is, and a download link for
    the notebook under its Colab line."""
    nb = json.loads(text)
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            carry_figure_alt(cell)
            lines = source.splitlines(keepends=True)
            source = "".join(line for line in lines if not NBVAL_MARKER.match(line))
            if source.startswith(SETUP_FIRST_LINE):
                cell.setdefault("metadata", {}).setdefault("tags", []).append("hide-input")
                note = {"cell_type": "markdown", "id": "setup-note", "metadata": {}}
                cells.append({**note, "source": SETUP_NOTE})
        cell["source"] = source
        cells.append(cell)
    first = cells[0]
    assert first["cell_type"] == "markdown" and "*Run in Colab:*" in first["source"], name
    colab = re.search(r"^\*Run in Colab:\*.*$", first["source"], re.MULTILINE)
    stored = f"../_sources/notebooks/{name}.ipynb"  # Sphinx's copy of the file as stored
    link = f'\n\n*Download:* <a href="{stored}" download>{name}.ipynb</a> (with its outputs).'

    first["source"] = first["source"][: colab.end()] + link + first["source"][colab.end() :]
    nb["cells"] = cells
    return json.dumps(nb)


def course_order(text: str) -> str:
    """README (the home page) with the sidebar: the notebooks in course order, then the
    reference pages."""
    toctree = "\n\n```{{toctree}}\n:hidden:\n:caption: {}\n\n{}\n```\n"
    notebooks = "\n".join(f"notebooks/{n}" for n in NOTEBOOKS)
    return (
        text
        + toctree.format("The course", notebooks)
        + toctree.format("Reference", "\n".join(REFERENCE))
    )


def on_source_read(app, docname: str, source: list[str]) -> None:
    if docname.startswith("notebooks/"):
        source[0] = reader_notebook(source[0], Path(docname).name)
    elif docname == root_doc:
        source[0] = course_order(source[0])


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
    # The address of the site opens the home page.
    (Path(app.outdir) / "index.html").write_text(
        '<!DOCTYPE html><meta charset="utf-8"><title>Redirecting</title>'
        '<meta http-equiv="refresh" content="0; url=README.html">'
        '<a href="README.html">The course</a>\n'
    )


def setup(app):
    app.connect("source-read", on_source_read)
    app.connect("build-finished", on_build_finished)
