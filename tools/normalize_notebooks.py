"""Keep stored notebooks free of volatile metadata (`make normalize`; `make execute` runs it).

    python tools/normalize_notebooks.py [NOTEBOOK ...]          # rewrite what is not normal
    python tools/normalize_notebooks.py --check [NOTEBOOK ...]  # only report; exit 1 if any

A normalised notebook is what JupyterLab writes when it saves the notebook unchanged, so that
opening and saving one leaves ``git status`` clean:

- the notebook's metadata holds only ``kernelspec`` (as JupyterLab writes it for the course's
  kernel: "Python 3 (ipykernel)") and ``language_info``;
- cells carry no execution timestamps (``execution``, ``ExecuteTime``) and no editor state
  (``collapsed``, ``scrolled``, ``lines_to_next_cell``);
- consecutive outputs of the same stream are one output (JupyterLab merges them when it loads
  a notebook, so a split stream would change on the first save);
- the file is written as Jupyter's server writes it (nbformat: one-space indent, sorted keys,
  a final newline).

With no NOTEBOOK arguments it works on every notebook in notebooks/ and notebooks/solved/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
VOLATILE_CELL_KEYS = ("execution", "ExecuteTime", "collapsed", "scrolled", "lines_to_next_cell")


def normalized(nb):
    """The notebook ``nb`` normalised (modified in place and returned)."""
    nb.metadata = nbformat.from_dict(
        {"kernelspec": dict(KERNELSPEC), "language_info": nb.metadata.get("language_info", {})}
    )
    if not nb.metadata.language_info:
        del nb.metadata["language_info"]
    for cell in nb.cells:
        for key in VOLATILE_CELL_KEYS:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = merged_streams(cell.outputs)
    return nb


def merged_streams(outputs):
    merged = []
    for out in outputs:
        previous = merged[-1] if merged else None
        if (
            out.output_type == "stream"
            and previous is not None
            and previous.output_type == "stream"
            and previous.name == out.name
        ):
            previous.text += out.text
        else:
            merged.append(out)
    return merged


def text_of(nb) -> str:
    return nbformat.writes(nb) + "\n"


def not_normalized(paths) -> list[Path]:
    """The notebooks among ``paths`` whose file differs from its normalised form."""
    stale = []
    for path in paths:
        stored = path.read_text()
        if text_of(normalized(nbformat.reads(stored, as_version=4))) != stored:
            stale.append(path)
    return stale


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if any")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("**/*.ipynb"))
    stale = not_normalized(paths)
    for path in stale:
        if path.is_relative_to(Path.cwd()):
            path = path.relative_to(Path.cwd())
        if args.check:
            print(f"{path}: not normalised (run `make normalize`)")
        else:
            path.write_text(text_of(normalized(nbformat.read(path, as_version=4))))
            print(f"normalised {path}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
