"""Write every notebook's set-up cell and Colab badge from one setting (`make notebooks-links`).

    python tools/notebook_links.py            # rewrite what differs
    python tools/notebook_links.py --check    # only report; exit 1 if anything differs
    python tools/notebook_links.py --site     # print the site's address (nothing if unset)

The setting is the course's public address, ``[project.urls] Repository`` in pyproject.toml
(a GitHub repository: Colab opens notebooks from GitHub). From it this tool writes

- the **set-up cell**, the first code cell of every notebook (the learner's copies in
  notebooks/ and the solved ones in notebooks/solved/): one five-line template, filled in
  with the address to install the course from and the optional parts the notebook uses
  (found by reading its imports: ``lib.bert`` needs ``"model"``, torch needs ``"torch"``);
- the **Colab badge**, the line after the title in every notebook's first cell, and the
  README's Colab line and the Colab column of its table of notebooks;
- the README's **site line** ("Read the course online"), the address GitHub Pages gives
  the repository, where .github/workflows/site.yml publishes `make site`'s build;
- the **packaged data**: ``lib/data/`` holds copies of the files in ``data/`` that notebooks
  read at run time, so that they ship inside the package.

While the address is not set, the set-up cell installs the course from its wheel next to the
notebook (where Colab's Files pane uploads it; ``pip wheel --no-deps .`` in a clone makes
it), and the badges and the site line say that the course is not published yet; nothing
links anywhere.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
# the files of data/ that notebooks read at run time, shipped as copies in lib/data/
DATA_FILES = ("probe_sentences.json", "induction_runs.json")
BRANCH = "main"
STUDENT_BRANCH = "student"  # the student release, published by .github/workflows/student.yml
SETUP_CELL_ID = "setup"
SETUP_FIRST_LINE = "import importlib.metadata  # Set-up: after `make lab` this cell does nothing."
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
BADGE_LINE = re.compile(r"^(\[!\[Open In Colab\]|\*Run in Colab:\*).*$", re.MULTILINE)

# Five lines a newcomer can read. Where the course's distribution is not installed (its
# .dist-info, which pip writes last, is missing) pip installs it; then course_setup.set_up
# installs what the notebook needs (course_setup/install.py says how, and how it recovers).
SETUP_TEMPLATE = """\
{first_line}

if not any(importlib.metadata.distributions(name="{distribution}")):  # e.g. in Colab:
    %pip install --quiet --no-deps {source}
importlib.import_module("course_setup.cell").set_up(needs={needs})  # and what it needs"""

UNPUBLISHED_BADGE = (
    "*Run in Colab:* not yet: this copy of the course has no public address (instructor "
    'guide, "Publishing the course").'
)

# The README's line on Colab, just above its table of notebooks.
README_COLAB_LINE = re.compile(r"^\*Run in Colab:\*.*$", re.MULTILINE)
UNPUBLISHED_README_COLAB = (
    "*Run in Colab:* not yet: this copy of the course has no public address ([instructor "
    "guide](docs/instructor_guide.md#publishing-the-course))."
)
PUBLISHED_README_COLAB = (
    "*Run in Colab:* the last column opens a notebook there; its first cell installs the "
    "course (see [Run in Colab](#run-in-colab))."
)

# The README's line with the course's website, just above its table of notebooks.
SITE_LINE = re.compile(r"^\*Read the course online:\*.*$", re.MULTILINE)
UNPUBLISHED_SITE = (
    "*Read the course online:* not yet: this copy of the course has no public address; "
    "`make site` builds the website into `build/site/`."
)


@dataclass(frozen=True)
class Repository:
    owner: str
    name: str

    @property
    def url(self) -> str:
        return f"https://github.com/{self.owner}/{self.name}"

    @property
    def pages(self) -> str:
        """The address GitHub Pages serves the repository's site at (a repository named
        OWNER.github.io is served at the root of that host)."""
        host = f"{self.owner.lower()}.github.io"
        return f"https://{host}/" if self.name.lower() == host else f"https://{host}/{self.name}/"

    @property
    def archive(self) -> str:
        return f"{self.url}/archive/refs/heads/{BRANCH}.zip"

    def colab(self, notebook: str, student: bool = False) -> str:
        """Colab's address of a notebook: the solved one on the main branch, or with
        ``student=True`` its blank version at the root of the student release's branch."""
        where = f"{STUDENT_BRANCH}/{notebook}" if student else f"{BRANCH}/notebooks/{notebook}"
        return f"https://colab.research.google.com/github/{self.owner}/{self.name}/blob/{where}"


def repository(pyproject: Path = ROOT / "pyproject.toml") -> Repository | None:
    """The public address from ``[project.urls] Repository``, or None while it is not set."""
    urls = tomllib.loads(pyproject.read_text())["project"].get("urls", {})
    url = urls.get("Repository")
    if url is None:
        return None
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", url)
    if match is None:
        raise ValueError(
            f"[project.urls] Repository = {url!r}: Colab opens notebooks from GitHub, so it "
            "must look like https://github.com/OWNER/REPOSITORY"
        )
    return Repository(*match.groups())


def needs_of(nb) -> tuple[str, ...]:
    """The optional parts a notebook uses, read from the imports in its code cells."""
    modules = set()
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.startswith(SETUP_FIRST_LINE):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module)
                modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    needs = []
    if "lib.bert" in modules:
        needs.append("model")
    if any(m == "torch" or m.startswith("torch.") or m == "lib.torch_bridge" for m in modules):
        needs.append("torch")
    return tuple(needs)


def wheel_name(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The file name of the course's wheel (``pip wheel --no-deps .`` in a clone makes it)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return f"{project['name'].replace('-', '_')}-{project['version']}-py3-none-any.whl"


def setup_source(repo: Repository | None, needs: tuple[str, ...]) -> str:
    """The set-up cell for a notebook that uses the optional parts ``needs``: it installs the
    course from its public archive, or while it has none, from its wheel next to the notebook
    (where Colab's Files pane uploads it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return SETUP_TEMPLATE.format(
        first_line=SETUP_FIRST_LINE,
        distribution=project["name"],
        source=wheel_name() if repo is None else repo.archive,
        needs=_tuple(needs),
    )


def _tuple(names: tuple[str, ...]) -> str:
    """A tuple of strings as ruff formats it: ("a",) or ("a", "b")."""
    items = ", ".join(f'"{name}"' for name in names)
    return f"({items},)" if len(names) == 1 else f"({items})"


def badge(repo: Repository | None, notebook: str, student: bool = False) -> str:
    if repo is None:
        return UNPUBLISHED_BADGE
    line = f"[![Open In Colab]({BADGE_IMAGE})]({repo.colab(notebook, student)})"
    if student:  # the blank notebook's badge, then where its solved version opens
        line += f" (blank exercises; [the solved notebook]({repo.colab(f'solved/{notebook}')}))"
    return line


def with_badge(title_cell: str, line: str) -> str:
    """The title cell with ``line`` as the paragraph right after its first line."""
    if BADGE_LINE.search(title_cell):
        return BADGE_LINE.sub(lambda _: line, title_cell, count=1)
    title, _, rest = title_cell.partition("\n")
    return f"{title}\n\n{line}\n{rest}" if rest.strip() else f"{title}\n\n{line}"


def updated_notebook(path: Path, repo: Repository | None):
    """The notebook at ``path`` with its badge and set-up cell as the setting says (a solved
    copy's badge opens it from notebooks/solved/)."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    if first.cell_type != "markdown" or not first.source.startswith("# "):
        raise ValueError(f"{path.name}: the first cell must be the markdown title (# ...)")
    where = f"solved/{path.name}" if path.parent.name == "solved" else path.name
    first.source = with_badge(first.source, badge(repo, where))
    source = setup_source(repo, needs_of(nb))
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    if not code:
        raise ValueError(f"{path.name} has no code cell")
    setup = nb.cells[code[0]]
    if setup.source.startswith(SETUP_FIRST_LINE) or setup.get("id") == SETUP_CELL_ID:
        setup.source = source
    else:
        cell = nbformat.v4.new_code_cell(source)
        if nb.nbformat_minor >= 5:
            cell.id = SETUP_CELL_ID
        else:
            cell.pop("id", None)
        nb.cells.insert(code[0], cell)
    return nb


def site_line(repo: Repository | None) -> str:
    """The README's line with the course's website (GitHub Pages), or "not yet"."""
    if repo is None:
        return UNPUBLISHED_SITE
    return (
        f"*Read the course online:* [{repo.pages}]({repo.pages}) (every notebook as a web "
        "page, with search; published from `main` by .github/workflows/site.yml)."
    )


def with_site_line(text: str, repo: Repository | None) -> str:
    """The README with its site line as the setting says: rewritten where it is, or put as
    its own paragraph just above the table of notebooks."""
    line = site_line(repo)
    if SITE_LINE.search(text):
        return SITE_LINE.sub(lambda _: line, text, count=1)
    table = text.find("\n| # | notebook |")
    if table < 0:
        raise ValueError("README.md has no table of notebooks ('| # | notebook | ...')")
    return f"{text[:table]}\n{line}\n{text[table:]}"


def readme_text(text: str, repo: Repository | None) -> str:
    """The README with its site line, its Colab line and the Colab column of its notebook
    table as the setting says: while the course has no address, one "not yet" line and no
    Colab column; once it has one, a badge per notebook in a column of its own."""
    text = with_site_line(text, repo)
    colab_line = UNPUBLISHED_README_COLAB if repo is None else PUBLISHED_README_COLAB
    if README_COLAB_LINE.search(text):
        text = README_COLAB_LINE.sub(lambda _: colab_line, text, count=1)
    else:  # its own paragraph, just above the table (and below the site line)
        table = text.find("\n| # | notebook |")
        text = f"{text[:table]}\n{colab_line}\n{text[table:]}"
    out = []
    for line in text.split("\n"):
        row = re.match(r"^\| (\d\d) \| \[[^]]*\]\(notebooks/([^)]+\.ipynb)\) \|", line)
        if row:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")][:3]
            cells += [badge(repo, row.group(2))] if repo else []
            line = "| " + " | ".join(cells) + " |"
        elif line.startswith("| # | notebook |"):
            line = "| # | notebook | what you leave with |" + (" Colab |" if repo else "")
        elif line.startswith("|---|----------|"):
            line = "|---|----------|---------------------|" + ("-------|" if repo else "")
        out.append(line)
    return "\n".join(out)


def notebooks(root: Path = ROOT) -> list[Path]:
    """The learner's notebooks, then the solved copies (notebooks/solved/)."""
    learner = sorted((root / "notebooks").glob("*.ipynb"))
    return learner + sorted((root / "notebooks" / "solved").glob("*.ipynb"))


def expected_files(repo: Repository | None, root: Path = ROOT) -> dict[Path, str]:
    files = {}
    for path in notebooks(root):
        files[path] = nbformat.writes(updated_notebook(path, repo)) + "\n"
    files[root / "README.md"] = readme_text((root / "README.md").read_text(), repo)
    for name in DATA_FILES:
        files[root / "lib" / "data" / name] = (root / "data" / name).read_text()
    return files


def differences(repo: Repository | None, root: Path = ROOT) -> list[str]:
    """What disagrees with the setting (names relative to ``root``); empty when all agree.

    Notebooks are compared by their badge and set-up cell, not byte for byte, so that a
    notebook saved by JupyterLab with other formatting still agrees.
    """
    found = []
    for path in notebooks(root):
        stored = nbformat.read(path, as_version=4)
        want = updated_notebook(path, repo)
        if _setup_and_badge(stored) != _setup_and_badge(want):
            found.append(str(path.relative_to(root)))
    readme = (root / "README.md").read_text()
    if readme_text(readme, repo) != readme:
        found.append("README.md")
    for name in DATA_FILES:
        packaged = root / "lib" / "data" / name
        if not packaged.is_file() or packaged.read_bytes() != (root / "data" / name).read_bytes():
            found.append(str(packaged.relative_to(root)))
    return found


def _setup_and_badge(nb) -> tuple[str, str]:
    code = next(cell for cell in nb.cells if cell.cell_type == "code")
    match = BADGE_LINE.search(nb.cells[0].source)
    return code.source, match.group(0) if match else ""


def write(repo: Repository | None, root: Path = ROOT) -> list[str]:
    """Bring every file under ``root`` in line with the setting; returns the names rewritten."""
    stale = set(differences(repo, root))
    written = []
    for path, text in expected_files(repo, root).items():
        name = str(path.relative_to(root))
        if name in stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(name)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report; exit 1 on a difference")
    parser.add_argument(
        "--site", action="store_true", help="print the site's address (nothing while unset)"
    )
    args = parser.parse_args(argv)
    repo = repository()
    if args.site:  # .github/workflows/site.yml deploys only when this prints an address
        print(repo.pages if repo else "")
        return 0
    where = repo.url if repo else "not set (the course is not published yet)"
    if args.check:
        stale = differences(repo)
        for name in stale:
            print(f"{name}: disagrees with the public address ({where})")
        if stale:
            print("run `make notebooks-links` to bring them in line")
        return 1 if stale else 0
    for name in write(repo):
        print(f"wrote {name}")
    print(f"public address: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
