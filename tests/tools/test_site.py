"""The website (`make site`, `make test-site`) without a browser: the reader's view of a
notebook that site/conf.py makes, and the link and page judgements of tools/site_test.py.
What needs the browser is proven by the self-check `make test-site` runs itself (a page with
planted faults that must all be reported)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="Sphinx is not installed (requirements-dev.txt)")

from tools import site_test as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIRST = "01_attention_with_lists"
SOLVED = ROOT / "notebooks" / "solved"  # what a page shows, solutions collapsed


def _conf():
    spec = importlib.util.spec_from_file_location("site_conf", ROOT / "site" / "conf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conf = _conf()


def test_the_reader_sees_no_nbval_marker_and_a_collapsed_set_up_cell():
    stored = (SOLVED / f"{FIRST}.ipynb").read_text()
    shown = json.loads(conf.reader_notebook(stored, FIRST))
    cells = json.loads(stored)["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    shown_code = [c["source"] for c in shown["cells"] if c["cell_type"] == "code"]
    assert len(shown_code) == len(code)
    assert not any("# NBVAL_" in line for c in shown_code for line in c.splitlines())
    at = next(
        i for i, c in enumerate(shown["cells"]) if c["source"].startswith(conf.setup_first_line())
    )
    assert shown["cells"][at]["metadata"]["tags"] == ["hide-input"]
    assert shown["cells"][at - 1]["source"] == conf.SETUP_NOTE
    first = shown["cells"][0]["source"]
    assert f'href="../_sources/notebooks/{FIRST}.ipynb" download' in first
    assert first.index("*Run in Colab:*") < first.index("*Download:*")
    assert (SOLVED / f"{FIRST}.ipynb").read_text() == stored  # never on disk


def test_a_page_shows_the_solved_copy_under_the_learners_title():
    learner = (ROOT / "notebooks" / f"{FIRST}.ipynb").read_text()
    source = [learner]
    conf.on_source_read(None, f"notebooks/{FIRST}", source)
    shown = json.loads(source[0])["cells"]
    solved = json.loads((SOLVED / f"{FIRST}.ipynb").read_text())["cells"]
    assert shown[0]["source"].startswith("".join(json.loads(learner)["cells"][0]["source"])[:40])
    assert "checks.show_solution(" in shown[0]["source"]
    solutions = [c for c in shown if conf.SOLUTION_BEGIN in c["source"]]
    assert len(solutions) == sum(conf.SOLUTION_BEGIN in "".join(c["source"]) for c in solved) == 3
    assert all("hide-cell" in c["metadata"]["tags"] for c in solutions)


def test_a_marker_line_goes_but_the_rest_of_its_cell_stays():
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# T\n\n*Run in Colab:* no\n"},
            {"cell_type": "code", "metadata": {}, "source": ["# NBVAL_IGNORE_OUTPUT\n", "x = 1\n"]},
        ]
    }
    shown = json.loads(conf.reader_notebook(json.dumps(nb), "t"))
    assert shown["cells"][1]["source"] == "x = 1\n"


def test_published_colab_badges_become_text_links_with_no_outside_image():
    from tools import notebook_links as links

    repo = links.Repository("Course-Owner", "mha-course")
    readme = links.readme_text((ROOT / "README.md").read_text(), repo)
    stored = json.loads((ROOT / "notebooks" / f"{FIRST}.ipynb").read_text())
    stored["cells"][0]["source"] = links.with_badge(
        "".join(stored["cells"][0]["source"]), links.badge(repo, f"{FIRST}.ipynb")
    )
    for docname, text in (("README", readme), (f"notebooks/{FIRST}", json.dumps(stored))):
        assert links.BADGE_IMAGE in text
        source = [text]
        conf.on_source_read(None, docname, source)
        assert links.BADGE_IMAGE not in source[0]
        assert f"[Open in Colab]({repo.colab(f'{FIRST}.ipynb')})" in source[0]


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
        ({"colab": False}, "no Colab line ('Run in Colab' or 'Open in Colab')"),
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


def test_every_solution_is_collapsed_behind_a_show_solution_toggle():
    stored = (SOLVED / f"{FIRST}.ipynb").read_text()
    shown = json.loads(conf.reader_notebook(stored, FIRST))["cells"]
    solutions = [c for c in shown if conf.SOLUTION_BEGIN in c["source"]]
    assert len(solutions) == len(st.solution_regions(FIRST)) == 3
    for cell in solutions:  # code and outputs both hidden, behind the solution's own label
        assert "hide-cell" in cell["metadata"]["tags"]
        assert cell["metadata"]["mystnb"]["code_prompt_show"] == st.SHOW_SOLUTION
    checks = [c for c in shown if c["source"].startswith("checks.check_")]
    assert checks and not any("tags" in c["metadata"] for c in checks)  # checks stay shown
    first = shown[0]["source"]
    assert f'href="../student/{FIRST}.ipynb" download' in first


def test_a_solution_in_a_markdown_cell_is_refused_not_shown():
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# T\n\n*Run in Colab:* no\n"},
            {"cell_type": "markdown", "metadata": {}, "source": "### BEGIN SOLUTION\nx\n"},
        ]
    }
    with pytest.raises(ValueError, match="markdown cell"):
        conf.reader_notebook(json.dumps(nb), "t")


def output(lines):
    return {"output_type": "stream", "name": "stdout", "text": "".join(f"{i}\n" for i in lines)}


@pytest.mark.parametrize(
    ("outputs", "scrolls"),
    [
        ([output(range(25))], False),
        ([output(range(26))], True),
        ([output(range(13)), output(range(13))], True),  # one box for the cell's outputs
        ([{"output_type": "display_data", "data": {"image/png": "", "text/plain": "x"}}], False),
    ],
)
def test_a_long_output_goes_in_a_scroll_box(outputs, scrolls):
    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# T\n\n*Run in Colab:* no\n"},
            {"cell_type": "code", "metadata": {}, "source": "f()", "outputs": outputs},
        ]
    }
    cell = json.loads(conf.reader_notebook(json.dumps(nb), "t"))["cells"][1]
    assert ("output_scroll" in cell["metadata"].get("tags", [])) == scrolls


def test_a_served_student_notebook_with_a_solution_is_reported(tmp_path):
    from tools import make_student

    out = make_student.build(SOLVED, tmp_path)
    blank = next(target for _, target in out if target.stem == FIRST).read_text()
    assert st.student_notebook_problems(blank, FIRST) == []
    solved = (SOLVED / f"{FIRST}.ipynb").read_text()
    assert st.student_notebook_problems(solved, FIRST) == [
        f"student/{FIRST}.ipynb has a '### BEGIN SOLUTION' marker",
        f"student/{FIRST}.ipynb holds 3 solution(s)",
        f"student/{FIRST}.ipynb has outputs",
    ]
    assert st.student_notebook_problems("<html>", FIRST) == [
        f"student/{FIRST}.ipynb is not a notebook"
    ]


# The accessibility checks' judgements (what they see in the browser is proven by the self-check).


def test_headings_in_order_with_one_h1_pass():
    levels = [1, 2, 3, 3, 2, 3, 4, 2]
    assert st.heading_problems([{"level": n, "text": f"h{n}"} for n in levels]) == []


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        ([1, 3], "heading skips a level: h1 'h1' then h3 'h3'"),
        ([1, 2, 4], "heading skips a level: h2 'h2' then h4 'h4'"),
        ([1, 2, 1], "2 h1 headings, not one: ['h1', 'h1']"),
        ([2, 3], "0 h1 headings, not one: []"),
        ([2, 1, 2], "a heading before the h1: h2 'h2'"),
    ],
)
def test_each_heading_fault_is_reported(levels, problem):
    assert problem in st.heading_problems([{"level": n, "text": f"h{n}"} for n in levels])


def test_serious_and_critical_axe_violations_fail_image_alt_included():
    def violation(rule, impact):
        return {"id": rule, "impact": impact, "count": 2, "first": "p", "summary": "why"}

    problems = st.axe_problems(
        [
            violation("color-contrast", "serious"),
            violation("button-name", "critical"),
            violation("region", "moderate"),
            violation("image-alt", "critical"),
        ],
        "dark",
    )
    assert problems == [
        "axe (dark mode): serious color-contrast on 2 element(s), first p: why",
        "axe (dark mode): critical button-name on 2 element(s), first p: why",
        "axe (dark mode): critical image-alt on 2 element(s), first p: why",
    ]


def test_see_through_figures_and_figures_without_alt_text_that_says_what_they_show():
    base = "http://127.0.0.1:1/"
    good = "Heatmap of head 3's weights: each token attends mostly to the previous one"
    curves = "Loss curves of one, two and four heads falling over 300 steps"

    def figure(name, alt, see_through=0):
        return {"src": base + name, "alt": alt, "seeThrough": see_through, "pixels": 4}

    figures = [
        figure("_images/a.png", good),
        figure("_images/b.png", curves, see_through=1),
        figure("_images/c.png", "../_images/c.png"),  # docutils: no alt given
        figure("_images/d.png", "a plot"),
        figure("_images/e.png", good),
        figure("_static/logo.png", "logo"),  # not a notebook's figure: any alt will do
        figure("_static/badge.png", ""),
    ]
    assert st.figure_problems(figures, base) == [
        "figure not opaque: _images/b.png (25% of its pixels see-through)",
        "figure _images/c.png: its alt text is its file name (none was given)",
        "figure _images/d.png: alt text 'a plot' is too short: say what the figure shows",
        f"figure _images/e.png: alt text {good!r} is the same as another figure's",
        "figure _static/badge.png: no alt text",
    ]
    assert st.figure_problems([figure("_images/a.png", good)], base) == []


def test_the_planted_see_through_png_is_a_valid_half_transparent_image():
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(st.see_through_png()))
    assert image.mode == "RGBA" and image.size == (8, 8)
    assert {image.getpixel((x, y))[3] for x in range(8) for y in range(8)} == {128}


def test_axe_core_is_pinned_to_one_version_in_package_json_and_its_lock():
    pin = st.axe_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", pin), pin
    lock = json.loads((ROOT / "tools" / "axe" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/axe-core"]["version"] == pin


def test_without_npm_the_missing_tool_is_named_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(st, "AXE_DIR", tmp_path / "axe")
    monkeypatch.setattr(st.shutil, "which", lambda name: None)
    st.axe_source.cache_clear()
    try:
        with pytest.raises(st.bt.Missing, match=r"^npm is missing: .*axe-core \d"):
            st.axe_source()
    finally:
        st.axe_source.cache_clear()


def test_a_figure_s_alt_text_reaches_myst_nb_s_cell_metadata():
    name = "04_looking_at_heads"
    stored = (SOLVED / f"{name}.ipynb").read_text()
    shown = json.loads(conf.reader_notebook(stored, name))
    alts = [
        out["metadata"]["image/png"]["alt"]
        for cell in json.loads(stored)["cells"]
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    carried = [
        c["metadata"]["mystnb"]["image"]["alt"]
        for c in shown["cells"]
        if "image" in c["metadata"].get("mystnb", {})
    ]
    assert carried == alts and len(alts) > 1


# --- Search leaves the solutions out (site/conf.py, site/_static/search-no-solutions.js) ---
def test_every_solution_cell_is_tagged_for_search_to_leave_out():
    stored = (SOLVED / f"{FIRST}.ipynb").read_text()
    shown = json.loads(conf.reader_notebook(stored, FIRST))["cells"]
    tagged = [c for c in shown if conf.SOLUTION_TAG in c["metadata"].get("tags", [])]
    assert tagged == [c for c in shown if conf.SOLUTION_BEGIN in c["source"]]
    assert len(tagged) == 3


def test_solution_cells_get_the_class_sphinx_s_index_skips_and_nothing_else_does():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    doctree = new_document("page", get_default_settings(Parser))
    solution = nodes.container("", nodes.literal_block("x = 1", "x = 1"))
    solution["classes"] = ["cell", "tag_hide-cell", conf.SOLUTION_CLASS]
    shown = nodes.container("", nodes.paragraph("", "prose"), classes=["cell"])
    doctree += [solution, shown]
    assert conf.hide_solutions_from_search(None, doctree) == 1
    assert conf.NO_SEARCH == "no-search"  # the class sphinx.search's word collector skips
    assert solution["classes"][-1] == "no-search" and "no-search" not in shown["classes"]
    assert conf.hide_solutions_from_search(None, doctree) == 0  # read twice, marked once


def test_the_snippet_script_is_served_and_drops_what_the_index_skips():
    assert conf.html_js_files == ["search-no-solutions.js"]
    script = (ROOT / "site" / "_static" / "search-no-solutions.js").read_text()
    assert "Search.htmlToText = " in script
    assert f'querySelectorAll(".{conf.NO_SEARCH}")' in script


def test_a_word_only_a_solution_uses_is_found_and_nowhere_else_on_its_page():
    word = st.solution_only_word(FIRST)
    assert word is not None
    cells = st.notebook_cells(FIRST)
    assert any(word in text for solution, text in cells if solution)
    rest = "\n".join(text for solution, text in cells if not solution).lower()
    assert word.lower() not in rest and st._stem(word) not in rest
    assert st.SOLUTION_MARK not in "\n".join(text for _, text in cells)  # markers left out


def test_a_word_first_met_in_a_solution_and_again_after_it():
    word = st.solution_first_word(FIRST)
    cells = st.notebook_cells(FIRST)
    at = next(i for i, (_, text) in enumerate(cells) if st._stem(word) in text.lower())
    assert cells[at][0], "first met in a solution cell"
    assert any(word in text for solution, text in cells[at + 1 :] if not solution)


def test_a_snippet_showing_a_solution_s_line_is_reported_and_prose_is_not():
    line = sorted(st.solution_lines())[0]
    spaced = "... some prose " + line.replace(" ", "\n   ") + " more ..."
    assert st.snippet_problems("w", [("notebooks/x.html", spaced)]) == [
        f"search for 'w': the snippet from notebooks/x.html shows a solution's line: {line!r}"
    ]
    assert st.snippet_problems("w", [("notebooks/x.html", "prose about attention")]) == []
    assert all(len(line) >= st.SNIPPET_LINE_MIN for line in st.solution_lines())


def test_the_self_check_empties_the_script_and_indexes_the_solution_words(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "search-no-solutions.js").write_text("Search.htmlToText = 1;")
    docnames = ["README", *(p.removesuffix(".html") for p in st.NOTEBOOK_PAGES)]
    index = {"docnames": docnames, "terms": {"attent": [1, 2]}}
    (tmp_path / "searchindex.js").write_text(f"Search.setIndex({json.dumps(index)})")
    st.plant_search_faults(tmp_path)
    assert "Search" not in (tmp_path / "_static" / "search-no-solutions.js").read_text()
    text = (tmp_path / "searchindex.js").read_text()
    assert text.startswith("Search.setIndex(") and text.endswith(")")
    terms = json.loads(text[len("Search.setIndex(") : -1])["terms"]
    word = st.solution_only_word(FIRST)
    assert terms[st._stem(word)] == docnames.index(f"notebooks/{FIRST}")
    assert terms["attent"] == [1, 2]


class _Page:
    """A page whose first ``failures`` screenshots time out, as Playwright's do."""

    def __init__(self, failures: int):
        self.failures, self.taken = failures, []

    def screenshot(self, path: str, full_page: bool) -> None:
        if self.failures:
            self.failures -= 1
            raise TimeoutError("Page.screenshot: Timeout 30000ms exceeded.\n  - waiting for fonts")
        self.taken.append(path)


@pytest.mark.parametrize("failures, taken, logged", [(0, 1, 0), (1, 1, 1), (2, 0, 2)])
def test_a_screenshot_that_times_out_is_tried_again_then_logged(
    tmp_path, capsys, failures, taken, logged
):
    page = _Page(failures)
    st.save_screenshot(page, tmp_path / "page.png", full_page=False)  # never raises
    lines = capsys.readouterr().out.splitlines()
    assert len(page.taken) == taken
    assert len(lines) == logged
    assert all("page.png not taken" in line and "waiting for fonts" in line for line in lines)
