"""Run notebooks as Colab does: each one alone, the course not installed (used by tools/colab.py).

    python tools/colab_run.py --wheel COURSE.whl [--report R.json] [--out DIR]
                              NOTEBOOK.ipynb ... [--colab-saved NOTEBOOK.ipynb]

Run it with the Python of the Colab-like environment (``.venv-colab``): the kernel it
starts is that environment's. For each notebook it

1. checks that the course is not installed, and records every installed package's version;
2. copies the notebook alone into an empty folder and runs it top to bottom in a fresh
   kernel started in that folder, with ``COURSE_SOURCE`` pointing at the wheel and no
   ``PYTHONPATH``, so the set-up cell installs the course as it would in Colab;
3. checks that no package installed before has another version now, then uninstalls what
   the set-up cell added (so the next notebook starts as clean);
4. compares every stored output with what ran, as strict nbval does: streams and
   ``text/plain`` (images and cells marked ``# NBVAL_IGNORE_OUTPUT`` are not compared, nor
   the set-up cell, whose output is the install report).

``--colab-saved`` runs a notebook after saving it as Colab does (nbformat 4.0, no cell ids).
``--check-display`` also runs a two-cell notebook where an exercise check fails: under
Colab's IPython the failure must show as one line (``CheckFailed: ...``), while an ordinary
error keeps its traceback.
Only the standard library, nbformat and nbclient are used.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

COURSE = "mha-from-scratch-course"
SETUP_FIRST_LINE = "# Set-up. After `make lab` this cell does nothing."
IGNORE = ("# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP")


def installed() -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {item["name"].lower(): item["version"] for item in json.loads(out.stdout)}


def comparable(outputs) -> list[str]:
    """The outputs nbval compares, as text: streams joined per name, then text/plain."""
    texts = []
    for out in outputs:
        if out.output_type == "stream":
            if texts and texts[-1].startswith(f"[{out.name}]\n"):
                texts[-1] += out.text
            else:
                texts.append(f"[{out.name}]\n{out.text}")
        elif out.output_type in ("execute_result", "display_data"):
            if "text/plain" in out.get("data", {}):
                texts.append(f"[{out.output_type}]\n{out.data['text/plain']}")
        elif out.output_type == "error":
            texts.append(f"[error]\n{out.ename}: {out.evalue}")
    return texts


def compare(stored, ran) -> list[str]:
    """A description of each code cell whose outputs differ (empty when all agree)."""
    differences = []
    stored_code = [c for c in stored.cells if c.cell_type == "code"]
    ran_code = [c for c in ran.cells if c.cell_type == "code"]
    for index, (old, new) in enumerate(zip(stored_code, ran_code, strict=True)):
        if old.source.startswith(SETUP_FIRST_LINE) or old.source.lstrip().startswith(IGNORE):
            continue
        a, b = comparable(old.outputs), comparable(new.outputs)
        if a != b:
            diff = difflib.unified_diff(
                "\n".join(a).splitlines(), "\n".join(b).splitlines(), "stored", "ran", lineterm=""
            )
            lines = list(diff)[2:]
            differences.append(f"code cell {index + 1}:\n    " + "\n    ".join(lines[:20]))
    return differences


def as_colab_saves(nb):
    """The notebook as Colab writes it: nbformat 4.0, no cell ids."""
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)
    nb.nbformat_minor = 0
    for cell in nb.cells:
        cell.pop("id", None)
    return nb


def run_one(path: Path, wheel: Path, colab_saved: bool, out_dir: Path | None) -> dict:
    label = path.name + (" (saved by Colab: nbformat 4.0, no ids)" if colab_saved else "")
    before = installed()
    if COURSE in before:
        return {"notebook": label, "error": "the course was installed before the notebook ran"}
    stored = nbformat.read(path, as_version=4)
    nb = as_colab_saves(stored) if colab_saved else nbformat.read(path, as_version=4)
    result = {"notebook": label, "error": None}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder) / "content"  # Colab's working folder holds only the notebook
        work.mkdir()
        target = work / path.name
        nbformat.write(nb, target)
        if colab_saved:  # prove the file on disk really is what Colab writes
            raw = json.loads(target.read_text())
            assert raw["nbformat_minor"] == 0 and all("id" not in c for c in raw["cells"])
        env_before = dict(os.environ)
        os.environ["COURSE_SOURCE"] = str(wheel)
        os.environ.pop("PYTHONPATH", None)
        os.environ["JUPYTER_DATA_DIR"] = str(Path(folder) / "jupyter")  # no user kernelspecs
        os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # ipykernel 6.17's debugger noise
        started = time.monotonic()
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}
        )
        try:
            client.execute()
        except CellExecutionError as err:
            result["error"] = str(err).strip().splitlines()[-1][:300]
        except Exception as err:  # a dead kernel, a timeout: report it, go on
            result["error"] = f"{type(err).__name__}: {err}"[:300]
        finally:
            os.environ.clear()
            os.environ.update(env_before)
        result["seconds"] = round(time.monotonic() - started, 1)
        if out_dir is not None:  # a Colab-saved run goes to its own folder, for grading
            folder_out = out_dir / "colab-saved" if colab_saved else out_dir
            folder_out.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, folder_out / path.name)
    setup = next((c for c in nb.cells if c.cell_type == "code"), None)
    result["setup_output"] = "".join(
        o.get("text", "") for o in (setup.outputs if setup else []) if o.output_type == "stream"
    ).strip()
    after = installed()
    added = sorted(set(after) - set(before))
    result["added"] = [f"{name} {after[name]}" for name in added]
    result["changed"] = [
        f"{name} {before[name]} -> {after.get(name)}"
        for name in before
        if after.get(name) != before[name]
    ]
    if added:
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *added], check=True
        )
    result["differences"] = [] if result["error"] else compare(stored, nb)
    return result


DISPLAY_CELLS = (
    "from lib import checks\n\nchecks.check_softmax(lambda x: x)  # a wrong answer",
    "1 / 0",
)


def check_display(wheel: Path) -> dict:
    """How a failed check and an ordinary error look in a Colab-like kernel."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in DISPLAY_CELLS])
    result = {"notebook": "a failing exercise check (display)", "error": None, "differences": []}
    before = installed()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True
    )
    try:
        with tempfile.TemporaryDirectory() as folder:
            client = NotebookClient(
                nb,
                timeout=120,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": folder}},
            )
            client.execute()
    finally:
        added = sorted(set(installed()) - set(before))
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *added], check=True
        )
    errors = [[o for o in c.outputs if o.output_type == "error"] for c in nb.cells]
    check_tb = errors[0][0].traceback if errors[0] else []
    other_tb = errors[1][0].traceback if errors[1] else []
    if len(check_tb) != 1 or "CheckFailed" not in check_tb[0]:
        result["error"] = f"a failed check showed {len(check_tb)} traceback lines: {check_tb}"
    elif len(other_tb) < 2:
        result["error"] = f"an ordinary error lost its traceback: {other_tb}"
    result["display"] = check_tb[0] if check_tb else ""
    result["added"], result["changed"] = [], []
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--colab-saved", action="append", type=Path, default=[])
    parser.add_argument("--wheel", type=Path, required=True)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--out", type=Path, help="write the executed notebooks here")
    parser.add_argument("--check-display", action="store_true", help="see the docstring")
    args = parser.parse_args(argv)
    runs = [(p, False) for p in args.notebooks] + [(p, True) for p in args.colab_saved]
    results = []
    jobs = [
        lambda p=p, c=c: run_one(p.resolve(), args.wheel.resolve(), c, args.out) for p, c in runs
    ]
    if args.check_display:
        jobs.append(lambda: check_display(args.wheel.resolve()))
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # ipykernel 6.17's debugger noise
    for job in jobs:
        result = job()
        results.append(result)
        if "display" in result:
            shown = re.sub(r"\x1b\[[0-9;]*m", "", result["display"])
            print(f"{result['notebook']}: {'ERROR' if result['error'] else 'one line'}: {shown}")
            if result["error"]:
                print(f"    {result['error']}")
            continue
        status = "ERROR" if result["error"] else "ran"
        print(
            f"{result['notebook']}: {status} in {result.get('seconds', 0):.0f} s; "
            f"{len(result['differences'])} stored outputs differ; "
            f"set-up added {', '.join(result['added']) or 'nothing'}; "
            f"changed {', '.join(result['changed']) or 'nothing'}",
            flush=True,
        )
        print(f"    set-up cell said: {result['setup_output'] or '(nothing)'}")
        if result["error"]:
            print(f"    {result['error']}")
        for difference in result["differences"]:
            print("    " + difference.replace("\n", "\n    "))
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(results, indent=1) + "\n")
    bad = [r for r in results if r["error"] or r["changed"] or r["differences"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
