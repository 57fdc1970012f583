"""lib stays small enough to read (issue 24): no module over 450 lines, so that each is a
notebook's worth of code a learner can open and read through."""

from pathlib import Path

import lib

LIB = Path(lib.__file__).parent
LONGEST = 450


def test_no_lib_module_is_longer_than_a_read():
    lengths = {p.name: len(p.read_text().splitlines()) for p in sorted(LIB.glob("*.py"))}
    assert len(lengths) > 10  # the modules were found
    too_long = {name: n for name, n in lengths.items() if n > LONGEST}
    assert not too_long, f"lib modules over {LONGEST} lines: {too_long}"
