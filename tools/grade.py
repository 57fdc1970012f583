"""Grade submitted student notebooks by running the course's checks (`make grade`).

    python tools/grade.py SUBMISSION.ipynb [...] [--src notebooks]

Each submission is matched to the source notebook of the same file name in ``--src``. Before
it runs, every check cell is put back exactly as it is in the source (found by cell id), so
an edited or deleted check cannot pass; a check cell the submission lost is reported as
failed. The notebook then runs top to bottom in a fresh kernel, errors allowed, in the
source notebook's folder, and each check counts as passed when its cell raises nothing.

The report gives, per notebook, the checks passed and, for each failed one, the sentence the
check printed. It runs the student's code: grade in a throw-away environment.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_student import CHECK_CALL  # noqa: E402


@dataclass
class CheckResult:
    source: str
    passed: bool
    message: str = ""


def restore_checks(submission, source) -> list[tuple[str, str, bool]]:
    """Put the source's check cells back into ``submission`` (in place, by cell id).

    Returns (cell id, check source, present) for every check cell of the source.
    """
    by_id = {cell.get("id"): cell for cell in submission.cells}
    found = []
    for cell in source.cells:
        if cell.cell_type != "code" or not CHECK_CALL.search(cell.source):
            continue
        target = by_id.get(cell.get("id"))
        if target is not None:
            target.cell_type = "code"
            target.source = cell.source
        found.append((cell.get("id"), cell.source, target is not None))
    return found


def grade(submission_path: Path, source_path: Path, timeout: int = 300) -> list[CheckResult]:
    submission = nbformat.read(submission_path, as_version=4)
    source = nbformat.read(source_path, as_version=4)
    checks = restore_checks(submission, source)
    for cell in submission.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(
        submission,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(source_path.parent)}},
    ).execute()
    ran = {cell.get("id"): cell for cell in submission.cells}
    results = []
    for cell_id, text, present in checks:
        if not present:
            results.append(CheckResult(text, False, "the check cell was deleted"))
            continue
        errors = [o for o in ran[cell_id].outputs if o.output_type == "error"]
        if errors:
            results.append(CheckResult(text, False, f"{errors[0].ename}: {errors[0].evalue}"))
        else:
            results.append(CheckResult(text, True))
    return results


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, nargs="+")
    parser.add_argument("--src", type=Path, default=root / "notebooks")
    args = parser.parse_args(argv)
    status = 0
    for path in args.submissions:
        source = args.src / path.name
        if not source.exists():
            print(f"{path}: no source notebook named {path.name} in {args.src}", file=sys.stderr)
            status = 1
            continue
        results = grade(path, source)
        passed = sum(r.passed for r in results)
        print(f"{path}: {passed}/{len(results)} checks passed")
        for r in results:
            line = r.source.strip().splitlines()[0]
            print(
                f"  {'✓' if r.passed else '✗'} {line}" + ("" if r.passed else f"  -> {r.message}")
            )
    return status


if __name__ == "__main__":
    sys.exit(main())
