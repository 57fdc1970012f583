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

TINY_TILES = dict(TILE_ROWS=5, STRIP_ROWS=2, TILE_BYTES=5 * 3 * 8, TILES_MIN_KEYS=1)
"""Tiles of 5 query rows by 3 (float64) or 6 (float32) keys, strips of 2 rows, used from 2 keys
on: a score matrix of a dozen keys is cut into many tiles and strips."""


@contextlib.contextmanager
def kernel_sizes(**sizes):
    """Set lib.blockwise's block and tile sizes (ROW_BLOCK_BYTES=..., TILE_ROWS=...) for the
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
