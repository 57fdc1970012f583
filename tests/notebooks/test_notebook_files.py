"""The stored notebooks as files: normalised, and pointing only at paths that exist."""

import re

import nbformat
import pytest
from helpers import ROOT

from tools import normalize_notebooks as normalize

NOTEBOOKS = sorted((ROOT / "notebooks").glob("**/*.ipynb"))


def test_every_notebook_is_normalised():
    assert normalize.not_normalized(NOTEBOOKS) == []


def test_normalising_removes_what_jupyterlab_would_change(tmp_path):
    nb = nbformat.v4.new_notebook(
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}, "widgets": {}}
    )
    cell = nbformat.v4.new_code_cell(
        "print(1)", metadata={"execution": {"iopub.status.busy": "2026-01-01"}, "tags": ["x"]}
    )
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\n"),
        nbformat.v4.new_output("stream", name="stdout", text="b\n"),
        nbformat.v4.new_output("stream", name="stderr", text="c\n"),
    ]
    nb.cells.append(cell)
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    assert normalize.not_normalized([path]) == [path]
    assert normalize.main([str(path)]) == 0
    assert normalize.not_normalized([path]) == []
    done = nbformat.read(path, as_version=4)
    assert done.metadata == {"kernelspec": normalize.KERNELSPEC}
    assert done.cells[0].metadata == {"tags": ["x"]}
    assert [(o.name, o.text) for o in done.cells[0].outputs] == [
        ("stdout", "a\nb\n"),
        ("stderr", "c\n"),
    ]


# Repository paths a notebook mentions: lib/attention.py, data/README.md, tests/, ...
PATH = re.compile(
    r"(?<![\w./-])((?:lib|data|tests|tools|bench|docs|notebooks)/[\w./-]*|README\.md|Makefile)"
)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_paths_a_notebook_mentions_exist(path):
    nb = nbformat.read(path, as_version=4)
    missing = set()
    for cell in nb.cells:
        for match in PATH.finditer(cell.source):
            mentioned = match.group(1).rstrip(".,")
            if not (ROOT / mentioned).exists():
                missing.add(mentioned)
    assert not missing, f"{path.name} mentions paths that do not exist: {sorted(missing)}"


ALIAS = re.compile(r"^\s*from lib import (\w+) as (\w+)", re.M)


def lib_aliases(paths) -> dict:
    """{module: {alias: [files]}} for every `from lib import module as alias` in paths."""
    found: dict = {}
    for path in paths:
        if path.suffix == ".ipynb":
            nb = nbformat.read(path, as_version=4)
            text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        else:
            text = path.read_text()
        for module, alias in ALIAS.findall(text):
            found.setdefault(module, {}).setdefault(alias, []).append(path.name)
    return found


def test_each_lib_module_has_one_alias_everywhere():
    # One alias per module and one module per alias, in notebooks, tests, checks, bench and
    # tools alike, so that `B.` means lib.bert wherever a reader meets it.
    paths = [*NOTEBOOKS, *ROOT.glob("tests/**/*.py")]
    for folder in ("lib", "bench", "tools"):
        paths += (ROOT / folder).rglob("*.py")
    found = lib_aliases(paths)
    assert {"attention", "bert", "backprop", "plots", "pruning"} <= set(found)
    several = {m: aliases for m, aliases in found.items() if len(aliases) > 1}
    assert not several, f"modules imported under more than one alias: {several}"
    owners: dict = {}
    for module, aliases in found.items():
        for alias in aliases:
            owners.setdefault(alias, []).append(module)
    shared = {a: ms for a, ms in owners.items() if len(ms) > 1}
    assert not shared, f"aliases that name more than one module: {shared}"


MAX_PROSE_WORDS = 250  # a prose cell longer than this is split (one idea per cell)


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_no_prose_cell_is_longer_than_the_limit(path):
    nb = nbformat.read(path, as_version=4)
    long = {
        index: len(cell.source.split())
        for index, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown" and len(cell.source.split()) > MAX_PROSE_WORDS
    }
    assert not long, f"{path.name}: cells over {MAX_PROSE_WORDS} words (index: words): {long}"


MAX_OUTPUT_CHARS = 100  # what JupyterLab's output area shows unwrapped at 100 % zoom


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_no_printed_line_wraps_in_jupyterlab(path):
    # A longer line wraps in JupyterLab, possibly mid-number; tables become unreadable.
    nb = nbformat.read(path, as_version=4)
    long = []
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            lengths = [len(line) for line in text.split("\n")]
            long += [(index, n) for n in lengths if n > MAX_OUTPUT_CHARS]
    assert not long, f"{path.name}: (cell, characters) of lines over {MAX_OUTPUT_CHARS}: {long}"


TITLE_BULLETS = ("- **Needs:**", "- **Time:**", "- **Exercises:**")


@pytest.mark.parametrize(
    "path", NOTEBOOKS, ids=lambda p: ("solved-" if p.parent.name == "solved" else "") + p.name[:2]
)
def test_title_cell_has_the_same_parts_in_the_same_order(path):
    # The title, the Colab line, then what a reader decides by (read by make student, which
    # rewrites the exercises bullet, and by anyone choosing what to read next).
    source = nbformat.read(path, as_version=4).cells[0].source
    paragraphs = source.split("\n\n")
    assert paragraphs[0].startswith(f"# {path.name[:2]} · "), paragraphs[0]
    assert paragraphs[1].startswith(("*Run in Colab:*", "[![Open In Colab]")), paragraphs[1]
    bullets = re.findall(r"^- \*\*\w+:\*\*", paragraphs[2], re.MULTILINE)
    assert tuple(bullets) == TITLE_BULLETS, f"{path.name}: {paragraphs[2]!r}"
