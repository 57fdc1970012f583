"""docs/instructor_guide.md's grading routes: every command a route's section gives is a make
target (with variables the Makefile reads) or a course tool that accepts those arguments,
and the GitHub Classroom commands, run in the order the guide gives them, do what it says."""

import argparse
import importlib
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "instructor_guide.md").read_text(encoding="utf-8")
MAKEFILE = (ROOT / "Makefile").read_text()
ROUTES = ["With the checks", "With nbgrader", "On Gradescope", "With GitHub Classroom"]
TOOL = re.compile(r"^(?:\S*python) (?:-m tools\.(\w+)|\S*tools/(\w+)\.py)(.*)$")


def section(title: str) -> str:
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", GUIDE, re.S | re.M)
    assert match, f"the guide has no section '### {title}'"
    return match.group(1)


def commands(title: str) -> list[str]:
    """The commands of a section's bash blocks, in order (`# or: ...` lines included)."""
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```", section(title), re.S | re.M):
        for line in block.splitlines():
            line = line.strip()
            if line.startswith("# or: "):
                line = line.removeprefix("# or: ")
            if line and not line.startswith("#"):
                found.append(line)
    return found


class Parsed(Exception):  # noqa: N818
    pass


def check_tool_arguments(module: str, args: list[str], monkeypatch) -> argparse.Namespace:
    """The tool's main() parses ``args`` without complaint (and is stopped right there)."""
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, argv=None, namespace=None):
        raise Parsed(original(self, argv, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    with pytest.raises(Parsed) as parsed:
        importlib.import_module(f"tools.{module}").main(args)
    return parsed.value.args[0]


@pytest.mark.parametrize("title", ROUTES)
def test_every_command_of_a_route_exists_with_its_arguments(title, monkeypatch):
    found = commands(title)
    assert found, f"'{title}' gives no command"
    for command in found:
        words = shlex.split(command)
        if words[0] == "make":
            target = words[1]
            assert re.search(rf"^{re.escape(target)}:", MAKEFILE, re.M), command
            for assignment in words[2:]:
                variable = assignment.split("=")[0]
                assert re.search(rf"\$\({variable}\)", MAKEFILE), (command, variable)
        elif words[0] in ("cd", "ln"):
            continue
        else:
            match = TOOL.match(command)
            assert match, f"not a make target or a course tool: {command}"
            module = match.group(1) or match.group(2)
            check_tool_arguments(module, shlex.split(match.group(3)), monkeypatch)


def test_every_route_has_a_section_and_the_table_links_them():
    for title in ROUTES:
        section(title)
        anchor = "#" + re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")
        assert f"]({anchor})" in GUIDE, anchor


def test_the_classroom_commands_in_the_guides_order(tmp_path):
    """`make classroom`, then the workflow's commands in the template folder with this
    checkout as .course: the unsolved notebook gets no point, with the check's sentence."""
    script = "\n".join(commands("With GitHub Classroom"))
    assert script.startswith("make classroom")
    done = subprocess.run(
        ["bash", "-c", f"rm -rf build/classroom\n{script}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)  # `points` on an unsolved exercise
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("✗ log_softmax_row: ") and "not implemented yet" in last, last
    assert "Graded 01_attention_with_lists.ipynb: 0 of 3 exercise checks passed." in done.stdout
    folders = sorted(p.name for p in (ROOT / "build" / "classroom").iterdir())
    assert folders == sorted(
        p.stem
        for p in (ROOT / "notebooks" / "solved").glob("*.ipynb")
        if "checks.check_" in p.read_text(encoding="utf-8")
    )
