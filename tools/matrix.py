"""`make test` on each Python the course supports, on OpenBLAS's kernel sets (`make test-matrix`).

    python -m tools.matrix

For Python 3.11, 3.12 and 3.13 (found on PATH or under pyenv, as `make test-colab` finds them)
it builds `.venv-3.X/` with the Makefile's own install rule (`make install PYTHON=... VENV=...`,
so each venv holds exactly what `make test` installs), then runs `make test` (lint, `tests/`
and strict nbval over the notebooks) in it twice, with `CI=true`:

- with the kernels OpenBLAS picks for this CPU (AVX-512 ones, "SkylakeX", where it has AVX-512);
- with `OPENBLAS_CORETYPE=Haswell`, OpenBLAS's AVX2 kernels.

Which kernels really ran is read from the run itself (tests/conftest.py prints threadpoolctl's
`architecture` of NumPy's OpenBLAS in pytest's header), not assumed. A Python that is not
found, or a kernel set this CPU cannot run, is said in one line, never skipped silently.

Each run's output goes to build/test-matrix/; the results (date, commit, CPU, per run: Python,
NumPy, OpenBLAS and the kernels used, passed and failed counts, each failure, time) to
docs/results/test-matrix.json and .md. Exit status 0 only if every run passed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

from tools.colab import find_minor

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "build" / "test-matrix"
RESULTS = ROOT / "docs" / "results" / "test-matrix.json"
MINORS = (11, 12, 13)
# OpenBLAS's names for its x86 kernel sets (threadpoolctl's "architecture") and the vector
# instructions they use.
INSTRUCTIONS = {
    "Haswell": "AVX2",
    "Zen": "AVX2",
    "SkylakeX": "AVX-512",
    "Cooperlake": "AVX-512",
    "SapphireRapids": "AVX-512",
}
HEADER = re.compile(r"^BLAS kernels: (\S+) (\S+) (\S+).*\(NumPy (\S+)\)$", re.MULTILINE)


def log(message: str) -> None:
    print(f"test-matrix: {message}", flush=True)


def duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def cpu() -> tuple[str, list[str]]:
    """The CPU's model name and which of AVX2 / AVX-512 it has (Linux; elsewhere unknown)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown", []
    model = re.search(r"^model name\s*:\s*(.*)$", info, re.MULTILINE)
    flags = set(re.search(r"^flags\s*:\s*(.*)$", info, re.MULTILINE)[1].split())
    return (model[1].strip() if model else "unknown"), [
        name for flag, name in (("avx2", "AVX2"), ("avx512f", "AVX-512")) if flag in flags
    ]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def make(args: list[str], env: dict, logfile: Path) -> int:
    """Run make at the repository root, its output to ``logfile``; returns its exit status."""
    with logfile.open("w") as out:
        return subprocess.run(
            ["make", "--no-print-directory", *args], cwd=ROOT, env=env, stdout=out, stderr=out
        ).returncode


def probe_kernels(venv: Path, env: dict) -> str:
    """The kernel set NumPy's OpenBLAS picks in ``venv`` under ``env``."""
    code = (
        "import numpy, threadpoolctl; print([i.get('architecture') for i in "
        "threadpoolctl.threadpool_info() if i['user_api'] == 'blas'][0])"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True
    )
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def short_message(problem: ET.Element) -> str:
    """The gist of a junit failure: the assertion's message (numbers included) or, for a
    notebook cell, nbval's report without the cell's source; at most 20 lines."""
    message = problem.get("message") or ""
    if "full report in element text" in message:
        message = problem.text or message
    message = re.sub(r"(#x1B|\x1b)\[[0-9;]*m", "", message)
    message = scrub(message)
    message = re.sub(r"\nInput:\n.*?\nTraceback:\n", "\n", message, flags=re.DOTALL)
    return "\n".join(message.strip().splitlines()[:20])


def scrub(text: str) -> str:
    """Text without this machine's paths: the checkout is ".", the temporary folder "<tmp>"."""
    text = text.replace(str(ROOT), ".").replace(tempfile.gettempdir(), "<tmp>")
    return text.replace(str(Path.home()), "~")


def gist(message: str) -> str:
    """A failure message on one line (its first three non-blank lines)."""
    return " | ".join([line.strip() for line in message.splitlines() if line.strip()][:3])[:240]


def failures(junit: Path) -> tuple[dict, list[dict]]:
    """Counts and the failed tests (pytest node id, message) from pytest's junit report."""
    suite = ET.parse(junit).getroot().find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in suite.iter("testcase"):
        for problem in [*case.findall("failure"), *case.findall("error")]:
            file = case.get("file", "")
            module = file.removesuffix(".py").replace("/", ".")
            inner = case.get("classname", "").removeprefix(module).strip(".")
            test = "::".join(filter(None, [file, inner.replace(".", "::"), case.get("name")]))
            failed.append({"test": test, "kind": problem.tag, "message": short_message(problem)})
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {
        "passed": passed,
        "failed": counts["failures"],
        "errors": counts["errors"],
        "skipped": counts["skipped"],
    }, failed


def run_cell(version: str, venv: Path, coretype: str | None, own: str) -> dict:
    """`make test` in ``venv`` with OPENBLAS_CORETYPE=``coretype`` (None: the CPU's choice)."""
    label = f"{venv.name.removeprefix('.venv-')}-{coretype or 'own'}"
    logfile, junit = LOGS / f"{label}.log", LOGS / f"{label}.xml"
    junit.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env["CI"] = "true"
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    env["PYTEST_ADDOPTS"] = f"-o junit_family=xunit1 --junitxml={junit}"
    rerun = f"CI=true {'OPENBLAS_CORETYPE=' + coretype + ' ' if coretype else ''}"
    rerun += f"make test VENV={venv.name}"
    log(f"{rerun}  (output in {logfile.relative_to(ROOT)})")
    started = time.monotonic()
    status = make(["test", f"VENV={venv.name}"], env, logfile)
    seconds = time.monotonic() - started
    output = logfile.read_text(errors="replace")
    header = HEADER.search(output)
    cell = {
        "python": version,
        "kernels_asked": f"OPENBLAS_CORETYPE={coretype}" if coretype else "the CPU's own choice",
        "kernels": header[3] if header else None,
        "instructions": INSTRUCTIONS.get(header[3], "?") if header else None,
        "openblas": header[2] if header else None,
        "numpy": header[4] if header else None,
        "exit_status": status,
        "seconds": round(seconds),
        "rerun": rerun,
    }
    if junit.exists():
        counts, failed = failures(junit)
        cell.update(counts, failures=failed)
    else:  # lint failed (or make stopped) before pytest ran
        tail = output.strip().splitlines()[-15:]
        cell.update(passed=0, failed=0, errors=1, skipped=0)
        message = scrub("\n".join(tail))
        cell["failures"] = [
            {"test": "make test, before pytest", "kind": "error", "message": message}
        ]
    expected = coretype or own
    if cell["kernels"] != expected:
        cell["failures"].append(
            {
                "test": "kernels",
                "kind": "error",
                "message": f"{expected} kernels were asked for, pytest reported {cell['kernels']}",
            }
        )
        cell["errors"] += 1
    cell["passed_all"] = status == 0 and not cell["failures"]
    return cell


def write_results(results: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# `make test-matrix`",
        "",
        f"Run on {results['date']} at commit {results['commit'][:10]}"
        + ("" if results["worktree_clean"] else " (with uncommitted changes)")
        + f", CPU {results['cpu']} ({', '.join(results['cpu_features']) or 'no AVX2'}),"
        + f" `CI=true`; {duration(results['total_seconds'])} in all"
        + f" (load average {results['load_average']} at the start, {results['cores']} cores)."
        + " Written by `tools/matrix.py`; the data are in `test-matrix.json`.",
        "",
    ]
    lines += [f"- {note}" for note in results["not_run"]]
    lines += [
        f"- `.venv-{v.rsplit('.', 1)[0]}` (Python {v}): "
        + (s if isinstance(s, str) else f"installed in {duration(s)}")
        for v, s in results["installs"].items()
    ]
    lines += [
        "",
        "| Python | NumPy | OpenBLAS kernels | asked for | passed | failed | skipped | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in results["cells"]:
        lines.append(
            f"| {c['python']} | {c['numpy']} | {c['kernels']} ({c['instructions']}) "
            f"| {c['kernels_asked']} | {c['passed']} | {c['failed'] + c['errors']} "
            f"| {c['skipped']} | {duration(c['seconds'])} |"
        )
    failed = [c for c in results["cells"] if c["failures"]]
    if failed:
        lines += ["", "## Failures", ""]
    for c in failed:
        lines += [f"Python {c['python']}, {c['kernels']} kernels (rerun: `{c['rerun']}`):", ""]
        for f in c["failures"]:
            message = ["  " + line for line in f["message"].splitlines()]
            lines += [f"- `{f['test']}`", "", "  ```", *message, "  ```", ""]
    RESULTS.with_suffix(".md").write_text("\n".join(lines).rstrip() + "\n")


def main() -> int:
    started = time.monotonic()
    LOGS.mkdir(parents=True, exist_ok=True)
    model, features = cpu()
    results = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": git("rev-parse", "HEAD"),
        "worktree_clean": not git("status", "--porcelain", "--untracked-files=no"),
        "cpu": model,
        "cpu_features": features,
        "load_average": round(os.getloadavg()[0], 1),
        "cores": os.cpu_count(),
        "command": "make test-matrix",
        "not_run": [],
        "complete": True,
        "installs": {},
        "cells": [],
    }
    log(f"CPU {model} ({', '.join(features) or 'neither AVX2 nor AVX-512'})")
    for minor in MINORS:
        found = find_minor(minor)
        if not found:
            note = f"Python 3.{minor}: not found on PATH or under pyenv; its runs were not made"
            log(note)
            results["not_run"].append(note)
            results["complete"] = False
            continue
        python, version = found
        venv = ROOT / f".venv-3.{minor}"
        log(f"Python {version}: make install PYTHON={python} VENV={venv.name}")
        t0 = time.monotonic()
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        install_log = LOGS / f"3.{minor}-install.log"
        built = make(["-q", "install", f"VENV={venv.name}"], env, install_log) == 0
        if make(["install", f"PYTHON={python}", f"VENV={venv.name}"], env, install_log):
            note = f"Python {version}: make install failed (its output: {install_log.name})"
            log(note)
            results["not_run"].append(note)
            results["complete"] = False
            continue
        results["installs"][version] = "already built" if built else round(time.monotonic() - t0)
        own = probe_kernels(venv, env)
        coretypes = [None] if own == "Haswell" else [None, "Haswell"]
        if INSTRUCTIONS.get(own) != "AVX-512":
            note = f"this CPU's own kernels are {own}: OpenBLAS's AVX-512 kernels cannot run here"
            if own == "Haswell":
                note += "; they are the AVX2 ones, so one run per Python covers both"
            if note not in results["not_run"]:
                log(note)
                results["not_run"].append(note)
        for coretype in coretypes:
            cell = run_cell(version, venv, coretype, own)
            results["cells"].append(cell)
            verdict = "passed" if cell["passed_all"] else "FAILED"
            log(
                f"Python {version}, {cell['kernels']} ({cell['instructions']}): {verdict}: "
                f"{cell['passed']} passed, {cell['failed'] + cell['errors']} failed, "
                f"{cell['skipped']} skipped in {duration(cell['seconds'])}"
            )
            for f in cell["failures"]:
                log(f"    {f['test']}: {gist(f['message'])}")
    results["total_seconds"] = round(time.monotonic() - started)
    results["passed"] = results["complete"] and all(c["passed_all"] for c in results["cells"])
    write_results(results)
    log("")
    for c in results["cells"]:
        verdict = "passed" if c["passed_all"] else "FAILED"
        failed = c["failed"] + c["errors"]
        log(
            f"{c['python']:<7} {c['kernels']!s:<9} {verdict:<6} {c['passed']:>5} passed "
            f"{failed:>3} failed  {duration(c['seconds'])}"
        )
    for note in results["not_run"]:
        log(note)
    where = RESULTS.relative_to(ROOT)
    log(f"total {duration(results['total_seconds'])}; results in {where} and .md")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
