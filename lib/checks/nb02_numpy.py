"""Checks of notebook 02 (attention with NumPy): softmax, causal mask after a cache, padding."""

from collections.abc import Callable, Sequence

import numpy as np

from .. import attention as A
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    diagnose,
    exercise,
    expect_bool,
    expect_shape,
    hint,
    passed,
    same_unstable,
)

# Rows where instability shows (see notebook 01's check): near +1000, near -1000, far apart
# (a shift by the minimum, mean or first score overflows: see each row), and an ordinary row.
_UNSTABLE = np.array(
    [
        [1000.0, 1001.0, 999.0, 1000.5],
        [-1000.0, -1001.0, -999.0, -1000.5],
        [-800.0, 0.0, 800.0, 1.0],  # overflows after a shift by min, mean or first score
        [-750.0, 0.0, 1.0, 2.0],  # ... by min or first score
        [5.0, 0.0, -740.0, 1.0],  # ... by min only
        [0.5, -1.0, 2.0, 0.0],
    ]
)


@exercise
def check_softmax(softmax_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 02): vectorised, stable softmax over the last axis."""
    name = "softmax"
    advice = "the input may have any number of axes; take the softmax over the last one, axis=-1."
    hints = [hint(np.exceptions.AxisError, name, advice)]

    def run(x):
        with np.errstate(all="ignore"):
            got = as_array(call(softmax_fn, name, x, hints=hints), name)
        expect_shape(got, x.shape, name, "an output (the input's shape)")
        return got

    def normalised(e, axis=-1):
        return e / e.sum(axis=axis, keepdims=True)

    rng = np.random.default_rng(0)
    for x in (rng.normal(size=(3, 4, 5)), rng.normal(size=(4, 7))):
        got = run(x)
        if close(got, A.softmax(x)):
            continue
        e = np.exp(x)
        mistakes = {
            "your columns sum to 1 but your rows do not: normalise "
            "over the last axis (axis=-1).": normalised(e, -2),
            "you normalised over axis 0; normalise over the last axis (axis=-1).": normalised(e, 0),
            "you divided by the sum of the whole array; divide each "
            "row by its own sum (axis=-1, keepdims=True).": e / e.sum(),
        }
        diagnose(got, name, mistakes)
        sums = got.sum(axis=-1)
        if not np.allclose(sums, 1.0):
            raise CheckFailed(
                f"{name}: each row (last axis) should sum to 1; one "
                f"sums to {sums.flat[np.argmax(np.abs(sums - 1))]:.4g}."
            )
        raise CheckFailed(f"{name}: rows sum to 1 but the values are wrong.")

    for x in (_UNSTABLE, _UNSTABLE[[2, 5, 0, 4, 3, 1]].reshape(2, 3, 4)):
        got = run(x)
        if close(got, A.softmax(x)):
            continue
        shifts = {  # what each mistake subtracts before np.exp
            "scores near 1000 give NaN/inf (exp overflows) and scores near -1000 give 0 / "
            "0; subtract the largest score of each row before np.exp.": 0.0,
            "you subtracted each row's minimum: a row whose scores are far apart (-800 "
            "... 800) still overflows; subtract each row's maximum, so that every "
            "exponent is at most 0.": x.min(axis=-1, keepdims=True),
            "you subtracted each row's mean: a row whose scores are far apart (-800 ... 800) still "
            "overflows; subtract each row's maximum.": x.mean(axis=-1, keepdims=True),
            "you subtracted each row's first score: a row whose scores are far apart still "
            "overflows; subtract each row's maximum.": x[..., :1],
            "a row far below the others gives 0 / 0; subtract each row's own maximum "
            "(keepdims=True), not the maximum of the whole array.": x.max(),
        }
        with np.errstate(all="ignore"):  # these mistakes overflow: that is the point
            mistakes = {message: normalised(np.exp(x - s)) for message, s in shifts.items()}
        diagnose(got, name, mistakes, same=same_unstable)
        if not np.isfinite(got).all():
            raise CheckFailed(
                f"{name}: scores of size 1000 or far apart give NaN/inf; "
                "subtract each row's largest score before np.exp."
            )
        raise CheckFailed(
            f"{name}: wrong weights for scores of size 1000 or far "
            "apart; subtract each row's largest score before np.exp."
        )

    masked = np.array([[0.3, -np.inf, 1.2], [-np.inf, -np.inf, -np.inf]])
    got = run(masked)
    if not close(got[0], A.softmax(masked[0])):
        raise CheckFailed(f"{name}: -inf entries (masked keys) must get weight exactly 0.")
    if not close(got[1], np.zeros(3)):
        raise CheckFailed(
            f"{name}: a row that is entirely -inf must give zeros, not "
            f"{np.round(got[1], 4).tolist()}; guard the all-masked case."
        )
    passed("softmax: rows sum to 1, stable far apart, -inf gives 0 and an all -inf row zeros.")


def _as_mask(value, where: str, shape: tuple[int, ...], each: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except ValueError:
        raise CheckFailed(
            f"{where}: expected one row of {shape[-1]} booleans per {each}, "
            f"shape {shape}; yours cannot be read as a rectangular array."
        ) from None


@exercise
def check_causal_mask(causal_mask_fn: Callable[[int, int], np.ndarray]) -> None:
    """Exercise (notebook 02): the (n_q, n_k) causal mask of queries after n_k - n_q cached keys."""
    name = "causal_mask"
    # The first case tells the mistakes apart; (4, 4) is the square mask; (1, 6) is one new
    # token after five cached ones (it sees everything); (6, 7): one cached key.
    for n_q, n_k in ((3, 7), (4, 4), (1, 6), (6, 7)):
        where = f"{name}({n_q}, {n_k})"
        arr = _as_mask(call(causal_mask_fn, name, n_q, n_k), where, (n_q, n_k), "query")
        expected = A.causal_mask(n_q, n_k)
        if arr.shape == (n_k, n_q) and n_q != n_k:
            raise CheckFailed(
                f"{where}: expected shape (n_q, n_k) = ({n_q}, {n_k}), "
                f"one row per query; got {arr.shape}, one row per key."
            )
        expect_shape(arr, (n_q, n_k), name, "a mask (n_q, n_k)")
        expect_bool(arr, expected, where)
        if np.array_equal(arr, expected):
            continue
        offset = n_k - n_q
        no_cache = expected & (np.arange(n_k) >= offset)
        square, late, early, wrong_way = (
            np.tri(n_q, n_k, k, dtype=bool) for k in (0, offset + 1, offset - 1, -offset)
        )
        mistakes = {
            "you lined query i up with key i (the first keys), as a square mask "
            "would; the queries are the LAST n_q positions, so query i sits at "
            "position n_k - n_q + i and sees every key up to that one.": square,
            "your queries cannot see the cached keys 0..n_k - n_q - 1; those come "
            "before every query, so every query may attend to them.": no_cache,
            "off by one: query i sees the key after its own position n_k - n_q + i.": late,
            "off by one: query i cannot see its own position n_k - n_q + i (itself).": early,
            "you shifted the diagonal the wrong way: the queries come after the cached keys, "
            "so each sees n_k - n_q keys MORE than in a square mask, not fewer.": wrong_way,
            "your mask is the wrong way round: True must "
            "mean 'query i may attend to key j'.": ~expected,
        }
        diagnose(arr, where, mistakes, tol=0)
        row = int(np.argwhere(arr != expected)[0][0])
        raise CheckFailed(
            f"{where} is wrong in row {row}: query i sits at position "
            "n_k - n_q + i and may attend to keys 0 .. n_k - n_q + i."
        )
    passed("causal_mask: query i (position n_k - n_q + i) sees keys 0 .. n_k - n_q + i.")


@exercise
def check_padding_mask(padding_mask_fn: Callable[[Sequence[int], int], np.ndarray]) -> None:
    """Exercise (notebook 02): padding mask of shape (batch, 1, 1, n_k)."""
    name = "padding_mask"
    advice = (
        "lengths may arrive as a Python list, which cannot be indexed or compared like an "
        "array; convert it to an array first."
    )
    hints = [hint(TypeError, name, advice)]
    for lengths, n_k in (([3, 5, 1], 5), ([0, 2, 4, 1], 4)):
        expected = A.padding_mask(lengths, n_k)
        got = call(padding_mask_fn, name, list(lengths), n_k, hints=hints)
        got = _as_mask(got, name, expected.shape, "sequence")
        if got.shape == (len(lengths), n_k):
            raise CheckFailed(
                f"{name}: expected shape (batch, 1, 1, n_k) = {expected.shape} so "
                f"that the mask broadcasts over heads and queries; got {got.shape}."
            )
        expect_shape(got, expected.shape, name, "a mask")
        expect_bool(got, expected, name)
        if np.array_equal(got, expected):
            continue
        arr = np.array(lengths)
        mistakes = {
            "your mask is the wrong way round: True must mark real "
            "tokens (may attend) and False the padding.": ~expected,
            "off by one: a sequence of length L has real keys 0..L-1, so key L "
            "is already padding.": A.padding_mask(np.minimum(arr + 1, n_k), n_k),
            "off by one: a sequence of length L has L real keys, 0..L-1; you "
            "marked only L-1.": A.padding_mask(np.maximum(arr - 1, 0), n_k),
        }
        diagnose(got, name, mistakes, tol=0)
        if 0 in lengths:
            raise CheckFailed(
                f"{name}: wrong for lengths {lengths} with "
                f"n_k={n_k}: a sequence of length 0 has no real key."
            )
        raise CheckFailed(
            f"{name}: wrong for lengths {lengths}: key j of "
            "sequence b is real exactly when j < lengths[b]."
        )
    passed("padding_mask: real keys True, padding False, shape (batch, 1, 1, n_k).")
