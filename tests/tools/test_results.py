"""What docs/testing.md says of `make test-matrix` and `make test-latest` agrees with their
results files (docs/results/), and the judgements those tools make can fail."""

import json
import re

import pytest
from helpers import ROOT

from tools import latest as TL
from tools import matrix as TM

TESTING = (ROOT / "docs" / "testing.md").read_text()
RESULTS_SECTION = TESTING.split("\n## Results\n")[1].split("\n## ")[0]
MATRIX = ROOT / "docs" / "results" / "test-matrix.json"
LATEST = ROOT / "docs" / "results" / "test-latest.json"


def paragraph_citing(name: str) -> str | None:
    """The paragraph of docs/testing.md that links results/<name>, if any, on one line."""
    found = [p for p in TESTING.split("\n\n") if f"(results/{name})" in p]
    assert len(found) <= 1, f"{name} is cited by {len(found)} paragraphs"
    return " ".join(found[0].split()) if found else None


def check_date_and_commit(paragraph: str, results: dict) -> None:
    date = re.search(r"\b(\d{4}-\d\d-\d\d)\b", paragraph)
    commit = re.search(r"commit `?([0-9a-f]{7,40})\b", paragraph)
    assert date and date[1] == results["date"], (date, results["date"])
    assert commit and results["commit"].startswith(commit[1]), (commit, results["commit"])
    assert results["worktree_clean"], "the run had uncommitted changes"


def test_the_testing_page_claims_only_what_the_matrix_ran():
    paragraph = paragraph_citing("test-matrix.md")
    kernel_lines = [line for line in RESULTS_SECTION.splitlines() if "AVX" in line]
    if paragraph is None:
        assert not kernel_lines, "a claim about BLAS kernels without the matrix's results"
        return
    assert all(" ".join(line.split()) in paragraph for line in kernel_lines), "a claim outside it"
    results = json.loads(MATRIX.read_text())
    check_date_and_commit(paragraph, results)
    cells = results["cells"]
    pythons = {".".join(c["python"].split(".")[:2]) for c in cells}
    named = set(re.findall(r"\b3\.1\d\b", paragraph))
    assert named == pythons, (named, pythons)
    for instructions in ("AVX2", "AVX-512"):
        ran = any(c["instructions"] == instructions for c in cells)
        assert (instructions in paragraph) == ran, instructions
    for c in cells:  # the kernels asked for are the ones that ran
        assert c["kernels_asked"] in ("the CPU's own choice", f"OPENBLAS_CORETYPE={c['kernels']}")
    passed = sum(c["passed_all"] for c in cells)
    if results["passed"]:
        assert f"all {len(cells)} runs passed" in paragraph
    else:
        assert f"{passed} of {len(cells)} runs passed" in paragraph
        assert "passes with" not in paragraph


def test_the_testing_page_reports_the_latest_run():
    paragraph = paragraph_citing("test-latest.md")
    if paragraph is None:
        assert not LATEST.exists(), "test-latest's results are not reported in docs/testing.md"
        return
    results = json.loads(LATEST.read_text())
    check_date_and_commit(paragraph, results)
    assert f"{len(results['versions']['moved'])} packages moved" in paragraph
    broke = results["tests"]["failed"] + results["tests"]["errors"]
    broke += sum(len(nb["broken"]) for nb in results["notebooks"])
    assert ("nothing broke" in paragraph) == (broke == 0)


# --------------------------------------------------------------------------- the tools' judgements


def cell(source, *outputs):
    return {"cell_type": "code", "source": source, "outputs": list(outputs)}


def stdout(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


IMAGE = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}}
WARNING = {"output_type": "stream", "name": "stderr", "text": "FutureWarning: soon gone\n"}
ERROR = {"output_type": "error", "ename": "TypeError", "evalue": "no", "traceback": []}


def test_latest_allows_other_numbers_but_not_other_kinds_of_output():
    stored = {"cells": [cell("print(1)", stdout("0.123\n"), stdout("x\n")), cell("plot()", IMAGE)]}
    same_kinds = {"cells": [cell("print(1)", stdout("0.124\nx\n")), cell("plot()", IMAGE)]}
    assert TL.compare_kinds(stored, same_kinds) == []
    for ran, problem in [
        ([cell("print(1)", stdout("0.124\n")), cell("plot()", stdout("<Figure>\n"))], "outputs"),
        ([cell("print(1)", stdout("0.1\n"), WARNING), cell("plot()", IMAGE)], "soon gone"),
        ([cell("print(1)", ERROR), cell("plot()", IMAGE)], "raised TypeError: no"),
    ]:
        (broken,) = TL.compare_kinds(stored, {"cells": ran})
        assert problem in broken["problem"], broken


def test_latest_only_requires_an_ignored_cell_not_to_raise():
    stored = {"cells": [cell("# NBVAL_IGNORE_OUTPUT\ntime()", stdout("1 s\n"))]}
    assert TL.compare_kinds(stored, {"cells": [cell("time()", stdout("2 s\n"), WARNING)]}) == []
    (broken,) = TL.compare_kinds(stored, {"cells": [cell("time()", ERROR)]})
    assert broken["cell"] == 1 and "TypeError" in broken["problem"]


NBVAL_REPORT = (
    "#x1B[91mNotebook cell execution failed#x1B[0m&#10;Cell 3: differ&#10;Input:&#10;x = 1&#10;"
    "Traceback:&#10; mismatch 'stdout'&#10; - 0.12"
)
JUNIT = f"""<?xml version="1.0"?><testsuites>
<testsuite tests="4" failures="2" errors="0" skipped="1">
<testcase classname="tests.test_x.TestA" name="test_a[1]" file="tests/test_x.py">
<failure message="{ROOT}/tests/test_x.py: &#10;Max absolute difference among violations: 1.07e-06"/>
</testcase>
<testcase classname="notebooks.01_a.ipynb" name="Cell 3" file="notebooks/01_a.ipynb">
<failure message="... [+1 more lines; full report in element text]">{NBVAL_REPORT}</failure>
</testcase>
<testcase classname="tests.test_y" name="test_ok" file="tests/test_y.py"/>
<testcase classname="tests.test_y" name="test_skip" file="tests/test_y.py"><skipped/></testcase>
</testsuite></testsuites>"""


def test_the_matrix_reads_failures_with_their_numbers(tmp_path):
    (junit := tmp_path / "junit.xml").write_text(JUNIT)
    counts, failed = TM.failures(junit)
    assert counts == {"passed": 1, "failed": 2, "errors": 0, "skipped": 1}
    assert [f["test"] for f in failed] == [
        "tests/test_x.py::TestA::test_a[1]",
        "notebooks/01_a.ipynb::Cell 3",
    ]
    assert failed[0]["message"].splitlines() == [
        "./tests/test_x.py: ",  # no path of the machine that ran it
        "Max absolute difference among violations: 1.07e-06",
    ]
    assert failed[1]["message"].splitlines() == [
        "Notebook cell execution failed",
        "Cell 3: differ",
        " mismatch 'stdout'",
        " - 0.12",
    ]


@pytest.mark.parametrize("name", ["test-matrix", "test-latest"])
def test_each_tool_is_a_make_target_outside_ci(name):
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^{name}: install$", makefile, re.MULTILINE)
    assert name in makefile.split(".PHONY:")[1].split("\n\n")[0]
    assert f"make {name}" not in (ROOT / ".ci" / "run").read_text()
