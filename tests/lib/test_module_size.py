"""lib stays small enough to read, counted as the formatter lays it out: no module over 350
lines, so that each is a notebook's worth of code a learner can read through; the modules of
notebooks 01-10 at most 3,000 lines in all, and notebook 11's model and scores
(``transformer.py``, ``induction.py``) at most 245 more (the exercises' checks in
``lib/checks`` and the data in ``lib/data`` apart). The checks: at most 400 lines a file,
3,000 for notebooks 01-10 and 170 for notebook 11's. These bars only ever come down. A count
met by packing measures nothing, so no line of lib may be kept from the formatter
(`make lint`, which `make test` runs first, checks that lib is as ruff formats it)."""

from pathlib import Path

import lib

LIB = Path(lib.__file__).parent
CHECKS = LIB / "checks"
LONGEST, IN_ALL = 350, 3000
LONGEST_CHECK, CHECKS_IN_ALL = 400, 3000
NOTEBOOK_11 = {"transformer.py", "induction.py", "nb11_induction.py"}  # on top of 01-10
NOTEBOOK_11_LIB, NOTEBOOK_11_CHECKS = 245, 170


def _lengths(folder: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted(folder.glob("*.py"))}


def _split(lengths: dict[str, int]) -> tuple[int, int]:
    """(lines of the modules of notebooks 01-10, lines of notebook 11's)."""
    eleven = sum(n for name, n in lengths.items() if name in NOTEBOOK_11)
    return sum(lengths.values()) - eleven, eleven


def test_no_lib_module_is_longer_than_a_read():
    lengths = _lengths(LIB)
    assert "attention.py" in lengths and "blockwise.py" in lengths  # the modules were found
    too_long = {name: n for name, n in lengths.items() if n > LONGEST}
    assert not too_long, f"lib modules over {LONGEST} lines: {too_long}"


def test_lib_without_its_checks_and_data_is_short():
    lengths = _lengths(LIB)  # lib/*.py only: lib/checks and lib/data are folders of their own
    assert {"transformer.py", "induction.py"} <= lengths.keys()  # notebook 11's were found
    total, eleven = _split(lengths)
    longest = sorted(lengths.items(), key=lambda item: -item[1])[:4]
    assert total <= IN_ALL, f"lib for 01-10 is {total} lines, over {IN_ALL}; longest: {longest}"
    assert eleven <= NOTEBOOK_11_LIB, f"notebook 11's lib is {eleven} lines"


def test_the_checks_are_short():
    lengths = _lengths(CHECKS)
    assert "_core.py" in lengths and len(lengths) > 10  # the checks were found
    too_long = {name: n for name, n in lengths.items() if n > LONGEST_CHECK}
    assert not too_long, f"lib/checks files over {LONGEST_CHECK} lines: {too_long}"
    assert "nb11_induction.py" in lengths
    total, eleven = _split(lengths)
    assert total <= CHECKS_IN_ALL, f"lib/checks for 01-10 is {total} lines, over {CHECKS_IN_ALL}"
    assert eleven <= NOTEBOOK_11_CHECKS, f"notebook 11's checks are {eleven} lines"


def test_no_line_of_lib_is_packed_past_the_formatter():
    packed = [
        f"{path.relative_to(LIB)}:{number}"
        for path in sorted(LIB.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert not packed, f"packed lines in lib: {packed}"
