"""lib stays small enough to read, counted as the formatter lays it out: no module over 350
lines, so that each is a notebook's worth of code a learner can read through, and lib at most
3,450 lines in all (the exercises' checks in ``lib/checks`` and the data in ``lib/data``
apart; notebooks 01-10's modules take about 3,140 of them, notebook 11's model and scores the
rest); the checks at most 400 lines a file and 3,350 in all. These bars only ever come down
for the notebooks they cover. A count met by packing measures nothing, so no line of lib may
be kept from the formatter (`make lint`, which `make test` runs first, checks that lib is as
ruff formats it)."""

from pathlib import Path

import lib

LIB = Path(lib.__file__).parent
CHECKS = LIB / "checks"
LONGEST, IN_ALL = 350, 3450
LONGEST_CHECK, CHECKS_IN_ALL = 400, 3350


def _lengths(folder: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted(folder.glob("*.py"))}


def test_no_lib_module_is_longer_than_a_read():
    lengths = _lengths(LIB)
    assert "attention.py" in lengths and "blockwise.py" in lengths  # the modules were found
    too_long = {name: n for name, n in lengths.items() if n > LONGEST}
    assert not too_long, f"lib modules over {LONGEST} lines: {too_long}"


def test_lib_without_its_checks_and_data_is_short():
    lengths = _lengths(LIB)  # lib/*.py only: lib/checks and lib/data are folders of their own
    total = sum(lengths.values())
    longest = sorted(lengths.items(), key=lambda item: -item[1])[:4]
    assert total <= IN_ALL, f"lib is {total} lines, over {IN_ALL}; the longest: {longest}"


def test_the_checks_are_short():
    lengths = _lengths(CHECKS)
    assert "_core.py" in lengths and len(lengths) > 10  # the checks were found
    too_long = {name: n for name, n in lengths.items() if n > LONGEST_CHECK}
    assert not too_long, f"lib/checks files over {LONGEST_CHECK} lines: {too_long}"
    total = sum(lengths.values())
    assert total <= CHECKS_IN_ALL, f"lib/checks is {total} lines, over {CHECKS_IN_ALL}"


def test_no_line_of_lib_is_packed_past_the_formatter():
    packed = [
        f"{path.relative_to(LIB)}:{number}"
        for path in sorted(LIB.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert not packed, f"packed lines in lib: {packed}"
