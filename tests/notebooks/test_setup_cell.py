"""The set-up cell, the Colab badges and the packaged data agree with the one setting.

The setting is pyproject.toml's ``[project.urls] Repository`` (tools/notebook_links.py).
That the set-up cell really installs the course in a Colab-like environment is proven by
``make test-colab`` (tools/colab.py); these tests check the pieces it relies on.
"""

import json
import shutil
import subprocess
import sys
import tomllib

import nbformat
import pytest
from helpers import ROOT

from tools import notebook_links as links

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PUBLISHED = links.Repository("course-owner", "mha-course")


def first_code_cell(nb):
    return next(cell for cell in nb.cells if cell.cell_type == "code")


def test_every_notebook_agrees_with_the_public_address():
    assert links.differences(links.repository()) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_first_code_cell_is_the_setup_template(path):
    nb = nbformat.read(path, as_version=4)
    cell = first_code_cell(nb)
    assert cell.source == links.setup_source(links.repository(), links.needs_of(nb))
    assert cell.source.startswith(links.SETUP_FIRST_LINE)
    # Where the course is installed (here, as after `make lab`) it prints nothing.
    assert cell.outputs == []


def test_needs_are_read_from_the_imports():
    needs = {p.name[:2]: links.needs_of(nbformat.read(p, as_version=4)) for p in NOTEBOOKS}
    assert needs["07"] == ("model",)
    assert needs["08"] == ("torch",)
    assert needs["10"] == ("model", "torch")  # MiniLM's layer is converted to GQA
    assert all(needs[n] == () for n in needs if n not in ("07", "08", "10"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch.nn as nn")])
    assert links.needs_of(nb) == ("torch",)


def test_a_disagreeing_notebook_or_readme_is_found(tmp_path):
    for name in ("notebooks", "data", "lib/data"):
        (tmp_path / name).mkdir(parents=True)
    for path in NOTEBOOKS[:2]:
        shutil.copy(path, tmp_path / "notebooks" / path.name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for name in links.DATA_FILES:
        shutil.copy(ROOT / "data" / name, tmp_path / "data" / name)
        shutil.copy(ROOT / "data" / name, tmp_path / "lib" / "data" / name)
    assert links.differences(None, tmp_path) == []

    nb_path = tmp_path / "notebooks" / NOTEBOOKS[1].name
    nb = nbformat.read(nb_path, as_version=4)
    first_code_cell(nb).source += "\nprint('edited')"
    nbformat.write(nb, nb_path)
    (tmp_path / "lib" / "data" / links.DATA_FILES[0]).write_text("{}")
    assert links.differences(None, tmp_path) == [
        f"notebooks/{NOTEBOOKS[1].name}",
        f"lib/data/{links.DATA_FILES[0]}",
    ]
    # Publishing: everything disagrees until the tool is run, then nothing does.
    assert "README.md" in links.differences(PUBLISHED, tmp_path)
    links.write(PUBLISHED, tmp_path)
    assert links.differences(PUBLISHED, tmp_path) == []
    # ... and going back to unpublished restores the files exactly.
    links.write(None, tmp_path)
    assert (tmp_path / "README.md").read_text() == (ROOT / "README.md").read_text()
    assert (tmp_path / "notebooks" / NOTEBOOKS[0].name).read_text() == NOTEBOOKS[0].read_text()


def test_published_address_gives_badges_and_an_install_source():
    path = NOTEBOOKS[6]
    nb = links.updated_notebook(path, PUBLISHED)
    colab = f"https://colab.research.google.com/github/course-owner/mha-course/blob/main/notebooks/{path.name}"
    assert f"[![Open In Colab]({links.BADGE_IMAGE})]({colab})" in nb.cells[0].source
    setup = first_code_cell(nb).source
    assert (
        "%pip install --quiet --no-deps https://github.com/course-owner/mha-course/archive/refs/heads/main.zip"
        in setup
    )
    assert 'needs=("model",)' in setup
    assert "no public address" not in setup
    # Applying the tool twice changes nothing the second time.
    again = links.with_badge(nb.cells[0].source, links.badge(PUBLISHED, path.name))
    assert again == nb.cells[0].source
    readme = links.readme_text((ROOT / "README.md").read_text(), PUBLISHED)
    rows = [line for line in readme.splitlines() if line.startswith("| 0")]
    assert rows and all("colab.research.google.com/github/course-owner" in row for row in rows)


def test_unpublished_course_shows_no_link():
    text = (ROOT / "README.md").read_text()
    assert "colab.research.google.com" not in text
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert links.UNPUBLISHED_BADGE in nb.cells[0].source
        assert "https://" not in first_code_cell(nb).source


@pytest.mark.parametrize(
    ("urls", "expected"),
    [
        ("", None),
        ('Repository = "https://github.com/a/b"', ("a", "b")),
        ('Repository = "https://github.com/a-b/c.d.git"', ("a-b", "c.d")),
    ],
)
def test_the_setting_is_read_from_pyproject(tmp_path, urls, expected):
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n[project.urls]\n{urls}\n')
    repo = links.repository(tmp_path / "pyproject.toml")
    assert (repo.owner, repo.name) == expected if expected else repo is None


def test_a_non_github_address_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.urls]\nRepository = "https://example.org/a/b"\n'
    )
    with pytest.raises(ValueError, match="must look like https://github.com/OWNER/REPOSITORY"):
        links.repository(tmp_path / "pyproject.toml")


def run_in_ipython(cell: str, before: str = "") -> subprocess.CompletedProcess:
    """Run a set-up cell as a kernel runs it (IPython: its %pip line is a magic) in a fresh
    Python, after the code ``before``; it prints what the cell printed, then "success" or
    the error it ended with."""
    program = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        f"{before}\n"
        f"result = shell.run_cell({cell!r})\n"
        "print('success' if result.success else f'error: {result.error_in_exec!r}')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize("repo", [None, PUBLISHED], ids=["unpublished", "published"])
def test_setup_cell_is_five_lines_that_say_what_it_does(repo):
    cell = links.setup_source(repo, ("model", "torch"))
    assert len(cell.splitlines()) <= 5
    assert cell.splitlines()[0].endswith("# Set-up: after `make lab` this cell does nothing.")
    assert "in Colab" in cell and "what it needs" in cell


@pytest.mark.parametrize("repo", [None, PUBLISHED], ids=["unpublished", "published"])
def test_setup_cell_does_nothing_where_the_course_is_installed(repo):
    done = run_in_ipython(links.setup_source(repo, ("model", "torch")))
    assert done.stdout == "success\n", done.stdout + done.stderr


# As if the course were not installed, or pip had been stopped before writing its .dist-info
# (the two look the same to the cell): the course's distribution is not found, and %pip only
# records what it was asked; course_setup.set_up records what it was asked to set up.
MISSING = """
import importlib.metadata, course_setup
real = importlib.metadata.distributions
importlib.metadata.distributions = lambda **kw: [] if kw.get("name") == "{name}" else real(**kw)
shell.register_magic_function(lambda line: print("pip", line), "line", "pip")
import course_setup.cell
course_setup.cell.set_up = lambda needs: print("set_up", needs)
"""


@pytest.mark.parametrize("repo", [None, PUBLISHED], ids=["unpublished", "published"])
def test_where_the_course_is_missing_the_cell_installs_it_then_what_the_notebook_needs(repo):
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    done = run_in_ipython(links.setup_source(repo, ("model",)), MISSING.replace("{name}", name))
    source = links.wheel_name() if repo is None else PUBLISHED.archive
    assert done.stdout.splitlines() == [
        f"pip install --quiet --no-deps {source}",
        "set_up ('model',)",
        "success",
    ], done.stdout + done.stderr


def test_packaged_data_equals_the_data_folder():
    from lib import head_types

    for name in links.DATA_FILES:
        assert (ROOT / "lib" / "data" / name).read_bytes() == (ROOT / "data" / name).read_bytes()
    # lib reads the packaged copy, not the repository's data/ folder.
    assert "lib" in str(head_types.PROBE_SENTENCES)
    probe = head_types.load_probe_sentences()
    assert probe == json.loads((ROOT / "data" / "probe_sentences.json").read_text())


def test_model_pin_is_the_same_everywhere():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (pin,) = pyproject["project"]["optional-dependencies"]["model"]
    lines = (ROOT / "requirements-model.txt").read_text().splitlines()
    assert [line for line in lines if line and not line.startswith("#")] == [pin]


def test_the_colab_harness_finds_the_set_up_cell_as_the_tool_writes_it():
    # tools/colab_run.py runs in the Colab-like environment without the repository on its
    # path, so it keeps its own copy of the first line: the two must not drift apart.
    from tools import colab_run

    assert colab_run.SETUP_FIRST_LINE == links.SETUP_FIRST_LINE
    first = nbformat.read(NOTEBOOKS[0], as_version=4)
    assert first_code_cell(first).source.startswith(colab_run.SETUP_FIRST_LINE)
