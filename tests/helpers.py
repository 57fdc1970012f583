"""Helpers shared by the test files (not a test module itself)."""

import contextlib
from pathlib import Path

import pytest

from lib.checks import CheckFailed

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- exercise checks


def rejects(check, fn, *fragments):
    """The check must raise CheckFailed whose message contains every fragment."""
    with pytest.raises(CheckFailed) as info:
        check(fn)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def stub(*args, **kwargs):
    """A student's exercise that has not been started."""
    raise NotImplementedError()


# --------------------------------------------------------------------------- lib's kernel sizes

TINY_BLOCKS = dict(ROW_BLOCK_BYTES=5 * 3 * 8, CAUSAL_MIN_ROWS=1)
"""Blocks of one or two query rows of a dozen keys (float64; float32: up to 3 rows): a score
matrix of a dozen rows is cut into many blocks, each skipping the keys its rows cannot reach,
as a long one is."""


@contextlib.contextmanager
def kernel_sizes(**sizes):
    """Set lib.blockwise's block sizes (ROW_BLOCK_BYTES=..., CAUSAL_MIN_ROWS=...) for the
    duration, so that a small problem is cut the way a long one is."""
    from lib import blockwise as BW

    old = {name: getattr(BW, name) for name in sizes}
    for name, value in sizes.items():
        setattr(BW, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(BW, name, value)
