"""A failing hypothesis example in CI prints its @reproduce_failure blob, and that blob alone
replays the same example elsewhere: no example database is needed (tests/README.md)."""

import ast
import os
import re
import subprocess
import sys

from helpers import ROOT

PLANTED = """
from hypothesis import Phase, given, reproduce_failure, settings, strategies as st

{decorators}
@given(st.integers(), st.lists(st.integers()))
def test_planted(n, xs):
    assert n < 1000 or len(xs) < 2
"""
BLOB = re.compile(r"@reproduce_failure\('[^']+', b'[^']*'\)")
EXAMPLE = re.compile(r"test_planted\(\s*n=(-?\d+),\s*xs=(\[[^\]]*\]),?\s*\)")
# No search: only explicit examples (there are none) and a @reproduce_failure blob run.
NO_SEARCH = "@settings(phases=[Phase.explicit])"


def run_pytest(folder, decorators, ci, status):
    """pytest on the planted test alone, with this suite's conftest (its hypothesis profiles)
    and hypothesis's plugin but no other (loading them, nbval's above all, took most of the
    time), in an empty folder (so no example database); its exit status must be ``status``."""
    folder.mkdir()
    (folder / "test_planted.py").write_text(PLANTED.format(decorators="\n".join(decorators)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CI", None)
    if ci:
        env["CI"] = "true"
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
        + ["--disable-plugin-autoload", "-p", "hypothesispytest", "test_planted.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == status, out.stdout + out.stderr
    return out.stdout


def test_a_ci_failure_prints_a_blob_that_replays_it_without_a_database(tmp_path):
    output = run_pytest(tmp_path / "ci", [], ci=True, status=1)
    blobs = set(BLOB.findall(output))
    assert len(blobs) == 1, output
    found = EXAMPLE.search(output)
    assert found, output
    assert int(found[1]) >= 1000 and len(ast.literal_eval(found[2])) >= 2  # the planted failure
    assert not (tmp_path / "ci" / ".hypothesis").exists()  # CI kept no example database

    # Elsewhere (no CI, no database) and with the search off, the blob alone replays it...
    replayed = run_pytest(tmp_path / "replay", [blobs.pop(), NO_SEARCH], ci=False, status=1)
    assert EXAMPLE.search(replayed).groups() == found.groups(), replayed
    # ... where without it no example runs at all (the test is skipped).
    run_pytest(tmp_path / "control", [NO_SEARCH], ci=False, status=0)
