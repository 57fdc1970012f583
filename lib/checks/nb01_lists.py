"""Checks of notebook 01 (attention with lists): softmax of one row, the causal mask, and
scaled dot-product attention on Python lists. The attention check's mistake table is
shared with notebook 02's."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import lists as L
from ._core import CheckFailed, as_array, call, close, diagnose, expect_shape, passed, same_array

# --------------------------------------------------------------------------- softmax

_SOFTMAX_ROWS = [
    [1.0, 2.0, 3.0],
    [0.5, -1.0, 0.0, 2.0],
    [-3.0, -3.0],
]
_MASKED_ROW = [0.3, float("-inf"), 1.2, float("-inf")]
_ALL_MASKED_ROW = [float("-inf"), float("-inf"), float("-inf")]
# Where instability shows: scores near +1000 overflow exp unless the row is shifted; scores
# near -1000 underflow to 0 (and 0 / 0); a row whose scores are far APART overflows unless
# the shift is the row's maximum (the minimum, the mean or the first score are not enough).
_HIGH_ROW = [1000.0, 1001.0, 999.0]
_LOW_ROW = [-1000.0, -1001.0, -999.0]
_SPREAD_ROW = [-800.0, 0.0, 800.0, 1.0]

_SHIFT_MESSAGE = (
    "{name}: scores far apart ({row}) overflow exp although scores near 1000 do not: you "
    "shifted the row by something other than its largest score (its minimum, mean or first "
    "score?); subtract the maximum, so that every exponent is at most 0."
)


def check_softmax_list(softmax_fn: Callable[[list[float]], list[float]]) -> None:
    """Exercise (notebook 01): softmax of one Python list."""
    name = "softmax"

    def run(row, hints=()):
        got = as_array(call(softmax_fn, name, list(row), hints=hints), name)
        expect_shape(got, (len(row),), name, f"a list of {len(row)} weights")
        return got

    for row in _SOFTMAX_ROWS:
        got = run(row)
        if close(got, L.softmax(row)):
            continue
        diagnose(
            got,
            [
                (np.asarray(row) / np.sum(row), f"{name}: exponentiate each score first."),
                (np.exp(row), f"{name}: divide every exp by the row's total, so they sum to 1."),
            ],
        )
        if not math.isclose(float(got.sum()), 1.0, rel_tol=1e-9):
            raise CheckFailed(f"{name}: the weights should sum to 1, yours sum to {got.sum():.4g}.")
        raise CheckFailed(f"{name}: wrong values for input {row}.")

    overflow = (
        f"{name}: exp overflowed on scores near 1000 ({_HIGH_ROW}); subtract the row's "
        "largest score before exponentiating."
    )
    got = run(_HIGH_ROW, hints=[(OverflowError, overflow)])
    if not close(got, L.softmax(_HIGH_ROW)):
        raise CheckFailed(overflow)
    underflow = (
        f"{name}: scores near -1000 ({_LOW_ROW}) underflow: every exp is 0 and the total too; "
        "subtract the row's largest score before exponentiating."
    )
    got = run(_LOW_ROW, hints=[(ZeroDivisionError, underflow)])
    if not close(got, L.softmax(_LOW_ROW)):
        raise CheckFailed(underflow)
    spread = _SHIFT_MESSAGE.format(name=name, row=_SPREAD_ROW)
    got = run(_SPREAD_ROW, hints=[(OverflowError, spread), (ZeroDivisionError, spread)])
    if not close(got, L.softmax(_SPREAD_ROW)):
        raise CheckFailed(spread)

    got = run(_MASKED_ROW)
    if not close(got, L.softmax(_MASKED_ROW)):
        raise CheckFailed(
            f"{name}: entries that are -inf (masked keys) must get weight exactly 0 "
            "and the rest must still sum to 1."
        )
    all_masked = (
        f"{name}: a row where every score is -inf (nothing to attend to) must return all "
        "zeros, not raise an error."
    )
    got = run(_ALL_MASKED_ROW, hints=[(ArithmeticError, all_masked), (ValueError, all_masked)])
    if not close(got, np.zeros(len(_ALL_MASKED_ROW))):
        raise CheckFailed(
            f"{name}: a row where every score is -inf (nothing to attend to) must "
            f"return all zeros, you returned {got.tolist()}."
        )
    passed(
        "softmax: sums to 1, survives scores near 1000, gives masked keys 0 and an "
        "all-masked row zeros."
    )


# --------------------------------------------------------------------------- causal mask


def check_causal_mask_list(causal_mask_fn: Callable[[int], list[list[bool]]]) -> None:
    """Exercise (notebook 01): the causal mask as a list of lists of booleans."""
    name = "causal_mask"
    for n in (6, 4, 1):  # largest first: n = 1 cannot tell mistakes apart
        got = call(causal_mask_fn, name, n)
        try:
            arr = np.asarray(got)
        except ValueError:
            lengths = [len(row) if hasattr(row, "__len__") else None for row in got]
            raise CheckFailed(
                f"{name}({n}) should return {n} rows of {n} entries each, True or False; "
                f"your rows have lengths {lengths}."
            ) from None
        expect_shape(arr, (n, n), name, f"a {n} x {n} mask")
        expected = np.asarray(L.causal_mask(n))
        if arr.dtype != bool:
            if arr.dtype.kind in "iuf" and np.array_equal(arr, expected):
                raise CheckFailed(
                    f"{name}: the right entries, but as {arr.dtype} numbers: use True/False "
                    "(True = may attend)."
                )
            raise CheckFailed(
                f"{name}: use True/False entries (True = may attend), got {arr.dtype} values."
            )
        if np.array_equal(arr, expected):
            continue
        diagnose(
            arr,
            [
                (
                    expected & ~np.eye(n, dtype=bool),
                    f"{name}: the diagonal is False, so a token cannot attend to itself; "
                    "query i may attend to keys 0..i inclusive.",
                ),
                (
                    ~expected,
                    f"{name}: your mask is the wrong way round: True must mean 'query i "
                    "may attend to key j', which holds for keys at or before i.",
                ),
                (
                    expected.T,
                    f"{name}: your mask lets query i see the keys after it; it must see "
                    "keys 0..i and hide the future.",
                ),
                (
                    np.tri(n, k=1, dtype=bool),
                    f"{name}: off by one: query i can see key i+1; it may attend to keys 0..i "
                    "only.",
                ),
            ],
            same=same_array,
        )
        raise CheckFailed(
            f"{name}({n}) is wrong at row {int(np.argwhere(arr != expected)[0][0])}: "
            "query i may attend to keys 0..i and to nothing after."
        )
    passed("causal_mask: query i attends to keys 0..i, for n = 6, 4 and 1.")


# --------------------------------------------------------------------------- attention


def _finish(scores, v, mask, axis=-1):
    """Softmax (over ``axis``) of scores masked with -inf where mask is False, and w @ v."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = A._softmax_inplace(np.array(scores, dtype=float), axis)
    return w @ v, w


def attention_mistakes(q, k, v, mask, use_lists: bool) -> list[tuple[object, str]]:
    """The mistake table of attention: what each classic wrong version returns on these
    inputs, as (output, weights), with the sentence that names it."""
    d_k = q.shape[-1]
    raw = q @ np.swapaxes(k, -1, -2)
    scaled = raw / math.sqrt(d_k)
    found: list[tuple[object, str]] = []
    if mask is not None:
        m = np.asarray(mask)
        w_after = A._softmax_inplace(scaled.copy()) * m
        found += [
            (
                lambda: _finish(scaled * m, v, None),
                "you multiplied the scores by the mask, so a masked score becomes 0 and "
                "exp(0) still gives its key weight: set the masked scores to -inf before the "
                "softmax.",
            ),
            (
                lambda: _finish(scaled, v, ~m),
                "your mask is applied the wrong way round: True means 'may attend', so set the "
                "scores to -inf where the mask is False.",
            ),
            (
                lambda: _finish(scaled, v, None),
                "the mask had no effect: set the scores to -inf where the mask is False, before "
                "the softmax.",
            ),
            (
                (w_after @ v, w_after),
                "you masked the weights after the softmax, so rows no longer "
                "sum to 1: mask the scores (with -inf) before the softmax.",
            ),
        ]
    found += [
        (
            lambda: _finish(raw, v, mask),
            "you did not scale the scores: divide q @ k^T by sqrt(d_k) before the softmax.",
        ),
        (
            lambda: _finish(raw / d_k, v, mask),
            "you divided the scores by d_k; divide by sqrt(d_k).",
        ),
        (
            lambda: _finish(raw * math.sqrt(d_k), v, mask),
            "you multiplied the scores by sqrt(d_k); divide by it.",
        ),
    ]
    n_q, n_k = q.shape[-2], k.shape[-2]
    sizes = [(n_q, "queries and keys")] if n_q == n_k else [(n_q, "queries"), (n_k, "keys")]
    for size, what in sizes:
        if size != d_k:
            found.append(
                (
                    lambda size=size: _finish(raw / math.sqrt(size), v, mask),
                    f"you scaled by the square root of the number of {what}; d_k is the "
                    "length of one query vector (the last axis of q).",
                )
            )
    found.append(
        (
            lambda: _finish(scaled, v, mask, axis=-2),
            "your softmax runs over the queries (columns sum "
            "to 1); take it over the keys, the last axis, so each query's row sums to 1.",
        )
    )
    if not use_lists and q.ndim == 3:

        def k_dot_t():
            w = A._softmax_inplace(np.matmul(q, np.transpose(k)) / math.sqrt(d_k))
            return w @ v, w

        found.append(
            (
                k_dot_t,
                "k.T reverses every axis of a batched array; swap only the "
                "last two: np.swapaxes(k, -1, -2).",
            )
        )
    return found


def _same_weights(got_w, wrong) -> bool:
    """A mistake's (output, weights) matches when its weights do (its output follows from
    them). Entries that are NaN/inf in the student's weights only need to be 0 or NaN/inf in
    the mistake's: an unguarded softmax turns a row with nothing to attend to into NaN where
    lib's gives 0, and that must not hide the real mistake."""
    wrong_w = np.asarray(wrong[1], dtype=float)
    if got_w.shape != wrong_w.shape:
        return False
    finite = np.isfinite(got_w)
    if not finite.any():
        return False
    rest_ok = np.all((wrong_w[~finite] == 0) | ~np.isfinite(wrong_w[~finite]))
    return bool(rest_ok and np.allclose(got_w[finite], wrong_w[finite], rtol=1e-7, atol=1e-7))


def check_attention_result(result, q, k, v, mask, name, use_lists):
    """Judge one (output, weights) answer of attention against lib's and the mistake table."""
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise CheckFailed(
            f"{name} should return a pair (output, weights), got {type(result).__name__}."
        )
    out = as_array(result[0], name, "the output")
    weights = as_array(result[1], name, "the weights")
    shape_w = q.shape[:-1] + (k.shape[-2],)
    shape_o = q.shape[:-1] + (v.shape[-1],)
    if shape_w != shape_o and (out.shape, weights.shape) == (shape_w, shape_o):
        raise CheckFailed(
            f"{name}: you returned (weights, output); return the pair in the order "
            "(output, weights)."
        )
    expect_shape(weights, shape_w, name, "weights (..., n_q, n_k)")
    expect_shape(out, shape_o, name, "an output (..., n_q, d_v)")
    exp_out, exp_w = A.scaled_dot_product_attention(q, k, v, mask)
    if close(weights, exp_w) and close(out, exp_out):
        return
    table = [
        (wrong, f"{name}: {message}")
        for wrong, message in attention_mistakes(q, k, v, mask, use_lists)
    ]
    diagnose(weights, table, same=_same_weights)
    if close(weights, exp_w):
        raise CheckFailed(
            f"{name}: the weights are right but the output is not: it is weights @ v."
        )
    if not np.isfinite(weights).all():
        raise CheckFailed(f"{name}: the weights contain NaN or inf.")
    sums = weights.sum(axis=-1)
    if not np.allclose(sums, 1.0):
        raise CheckFailed(
            f"{name}: each query's weights should sum to 1; one row sums to "
            f"{sums.flat[np.argmax(np.abs(sums - 1))]:.4g}."
        )
    raise CheckFailed(
        f"{name}: the weights are wrong (rows do sum to 1): compare your scores "
        "with q @ k^T / sqrt(d_k)."
    )


def check_attention_list(attention_fn: Callable) -> None:
    """Exercise (notebook 01): attention(Q, K, V, mask) on lists -> (output, weights)."""
    name = "attention"
    rng = np.random.default_rng(1)
    for n_q, n_k, d_k, d_v, masked in (
        (4, 4, 3, 2, True),
        (3, 5, 4, 3, False),
        (5, 5, 2, 2, False),
        (3, 6, 5, 2, True),
    ):
        q, k, v = (
            rng.normal(size=(n_q, d_k)),
            rng.normal(size=(n_k, d_k)),
            rng.normal(size=(n_k, d_v)),
        )
        mask = A.causal_mask(n_q, n_k) if masked else None
        args = (q.tolist(), k.tolist(), v.tolist(), None if mask is None else mask.tolist())
        hints = []
        if mask is None:
            hints.append(
                (
                    TypeError,
                    lambda exc: (
                        f"{name} raised TypeError ({exc}) when called with mask=None: "
                        "no mask means every query may attend to every key, so skip the masking."
                    ),
                )
            )
        result = call(attention_fn, name, *args, hints=hints)
        check_attention_result(result, q, k, v, mask, name, use_lists=True)
    passed(
        "attention: scaled by 1/sqrt(d_k), softmax over the keys, mask applied as True = "
        "may attend; output = weights @ V."
    )
