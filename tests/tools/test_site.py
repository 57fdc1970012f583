"""The website (`make site`, `make test-site`) without a browser: the reader's view of a
notebook that site/conf.py makes, and the link and page judgements of tools/site_test.py.
What needs the browser is proven by the self-check `make test-site` runs itself (a page with
planted faults that must all be reported)."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="Sphinx is not installed (requirements-dev.txt)")

from tools import site_test as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIRST = "01_attention_with_lists"


def _conf():
    spec = importlib.util.spec_from_file_location("site_conf", ROOT / "site" / "conf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conf = _conf()


def test_the_reader_sees_no_nbval_marker_and_a_collapsed_set_up_cell():
    stored = (ROOT / "notebooks" / f"{FIRST}.ipynb").read_text()
    shown = json.loads(conf.reader_notebook(stored, FIRST))
    cells = json.loads(stored)["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    shown_code = [c["source"] for c in shown["cells"] if c["cell_type"] == "code"]
    assert len(shown_code) == len(code)
    assert not any("# NBVAL_" in line for c in shown_code for line in c.splitlines())
    at = next(i for i, c in enumerate(shown["cells"]) if c["source"].startswith("# Set-up."))
    assert shown["cells"][at]["metadata"]["tags"] == ["hide-input"]
    assert shown["cells"][at - 1]["source"] == conf.SETUP_NOTE
    first = shown["cells"][0]["source"]
    assert f'href="../_sources/notebooks/{FIRST}.ipynb" download' in first
    assert first.index("*Run in Colab:*") < first.index("*Download:*")
    assert (ROOT / "notebooks" / f"{FIRST}.ipynb").read_text() == stored  # never on disk


def test_a_marker_line_goes_but_the_rest_of_its_cell_stays():
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# T\n\n*Run in Colab:* no\n"},
            {"cell_type": "code", "metadata": {}, "source": ["# NBVAL_IGNORE_OUTPUT\n", "x = 1\n"]},
        ]
    }
    shown = json.loads(conf.reader_notebook(json.dumps(nb), "t"))
    assert shown["cells"][1]["source"] == "x = 1\n"


def test_the_sidebar_lists_every_notebook_in_course_order():
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert conf.NOTEBOOKS == stems
    text = conf.course_order("# Home\n")
    positions = [text.index(f"notebooks/{s}\n") for s in stems]
    assert positions == sorted(positions)


def test_dead_links_and_anchors_are_reported(tmp_path):
    (tmp_path / "a.html").write_text('<h1 id="top">A</h1><a name="old"></a>')
    base = "http://127.0.0.1:1/"
    urls = [base + u for u in ["a.html#top", "a.html#old", "a.html", "a.html#gone", "b.html"]]
    found = st.dead_links(tmp_path, base, "a.html", urls)
    assert found == ["link to a missing anchor: a.html#gone", "link to a missing file: b.html"]


def seen(**changes):
    base = "http://127.0.0.1:1/"
    view = {
        "nbval": 0,
        "setupShown": False,
        "prompts": 0,
        "colab": True,
        "downloads": [base + f"_sources/notebooks/{FIRST}.ipynb"],
        "prevNext": [base + st.NOTEBOOK_PAGES[1]],
        "sidebar": [base + p for p in st.NOTEBOOK_PAGES],
    }
    return {**view, **changes}, base


def test_a_notebook_page_as_it_should_be_passes():
    view, base = seen()
    assert st.reader_problems(st.NOTEBOOK_PAGES[0], view, base) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"nbval": 2}, "2 code blocks show an nbval marker"),
        ({"setupShown": True}, "the set-up cell is shown, not collapsed"),
        ({"prompts": 3}, "3 cell prompts shown"),
        ({"colab": False}, "no 'Run in Colab' line"),
        ({"downloads": []}, f"no download link for {FIRST}.ipynb"),
        ({"prevNext": []}, f"no next link to {st.NOTEBOOK_PAGES[1]}"),
    ],
)
def test_each_reader_fault_is_reported(change, problem):
    view, base = seen(**change)
    assert st.reader_problems(st.NOTEBOOK_PAGES[0], view, base) == [problem]


def test_a_sidebar_out_of_course_order_is_reported_on_any_page():
    view, base = seen()
    view["sidebar"] = list(reversed(view["sidebar"]))
    assert st.reader_problems("README.html", view, base)[0].startswith("sidebar not in course")


def test_sphinx_does_not_walk_the_virtual_environments(tmp_path, monkeypatch):
    """Sphinx lists every file below the source folder before matching; a virtual
    environment (a few hundred thousand files) made a build take minutes instead of seconds."""
    import os

    from sphinx.util.matching import get_matching_files

    for folder in (".venv-colab/lib", "build/site", "notebooks"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / ".venv-colab" / "lib" / "README.md").write_text("x")
    (tmp_path / "notebooks" / "01_a.ipynb").write_text("{}")
    walked, walk = [], os.walk

    def recording_walk(top, **kwargs):
        for root, dirs, files in walk(top, **kwargs):
            walked.append(os.path.relpath(root, tmp_path))
            yield root, dirs, files

    monkeypatch.setattr(os, "walk", recording_walk)
    found = list(get_matching_files(tmp_path, conf.include_patterns, conf.exclude_patterns))
    assert found == ["notebooks/01_a.ipynb"]
    assert not [w for w in walked if w.startswith((".venv", "build"))], walked


def test_a_figure_s_alt_text_reaches_myst_nb_s_cell_metadata():
    name = "04_looking_at_heads"
    stored = (ROOT / "notebooks" / f"{name}.ipynb").read_text()
    shown = json.loads(conf.reader_notebook(stored, name))
    alts = [
        out["metadata"]["image/png"]["alt"]
        for cell in json.loads(stored)["cells"]
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    carried = [
        c["metadata"]["mystnb"]["image"]["alt"] for c in shown["cells"] if "mystnb" in c["metadata"]
    ]
    assert carried == alts and len(alts) > 1


def test_figures_without_alt_text_that_says_what_they_show_are_reported():
    good = "Heatmap of head 3's weights: each token attends mostly to the previous one"
    html = (
        f'<img alt="{good}" src="../_images/a.png" />'
        '<img alt="../_images/b.png" src="../_images/b.png" />'  # docutils: no alt given
        '<img alt="a plot" src="../_images/c.png" />'
        f'<img alt="{good}" src="../_images/d.png" />'
        '<img alt="logo" src="../_static/logo.png" />'  # not a notebook's figure
    )
    problems = st.figure_alt_problems(html)
    assert [p.split(":")[0] for p in problems] == ["figure b.png", "figure c.png", "figure d.png"]
    assert "same as another figure" in problems[-1]
    assert st.figure_alt_problems(f'<p><img src="../_images/a.png" alt="{good}"></p>') == []
