"""Checks of notebook 01 (attention with Python lists): log-softmax, window mask, attention."""

import math
from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import lists as L
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    diagnose,
    exercise,
    expect_bool,
    expect_shape,
    expect_tuple,
    hint,
    passed,
)


def log_softmax_reference(row: list[float]) -> list[float]:
    """log(softmax(row)) without forming the weights: s - m - log(sum exp(s - m)), m the
    largest score; a masked score (-inf) gets -inf."""
    finite = [s for s in row if s != -math.inf]
    if not finite:
        return [-math.inf] * len(row)
    top = max(finite)
    log_total = math.log(sum(math.exp(s - top) for s in finite))
    return [s - top - log_total for s in row]


# Where instability shows: near +1000 exp overflows unless the row is shifted; near -1000 it
# underflows to 0, and log(0) fails; scores far APART overflow unless the shift is the row's
# maximum, and their weights underflow to 0, so the log of the weights fails (or is -inf).
_HIGH_ROW = [1000.0, 1001.0, 999.0]
_LOW_ROW = [-1000.0, -1001.0, -999.0]
_FAR_ROW = [3.0, -800.0, 804.0, 0.5]
_MASKED_ROW = [0.3, -math.inf, 1.2, -math.inf]
_TINY = (
    f"on scores far apart ({_FAR_ROW}) three of the four "
    "weights are below exp(-800), which is 0.0 in floating point"
)
_DIRECT = (
    "compute the log-weights directly, score - m - "
    "log(sum exp(s - m)), without forming the weights."
)
_SHIFT = (
    f"scores far apart ({_FAR_ROW}) overflow exp although scores near 1000 do not: "
    "you shifted the row by something other than its largest score (its minimum, "
    "mean or first score?); subtract the maximum, so that every exponent is at most 0."
)


@exercise
def check_log_softmax_list(log_softmax_fn: Callable[[list[float]], list[float]]) -> None:
    """Exercise (notebook 01): the stable log-softmax (log-sum-exp) of one list, masks included."""
    name = "log_softmax_row"

    def wrong_answer(row, *hints):
        """The answer on ``row`` when it is wrong, else None; ``hints``: (error, sentence)."""
        got = as_array(call(log_softmax_fn, name, list(row), hints=hints), name)
        expect_shape(got, (len(row),), name, f"a list of {len(row)} log-weights")
        return None if close(got, log_softmax_reference(row)) else got

    for row in ([1.0, 2.0, 3.0], [0.5, -1.0, 0.0, 2.0, -0.25], [-3.0, -3.0]):
        got = wrong_answer(row)
        if got is None:
            continue
        shifted = np.array(row) - max(row)
        minus_sum = shifted - np.exp(shifted).sum()
        mistakes = {
            "you returned the weights themselves; return their "
            "logarithms (each one is at most 0).": L.softmax(row),
            "you subtracted the largest score but not the log of the sum "
            "of the exps, so exp of your values does not sum to 1.": shifted,
            "subtract the log of the sum of the exps, not the sum itself.": minus_sum,
            "the sign is flipped: a log-weight is log(weight) <= 0, i.e. score minus "
            "the log of the sum of the exps.": -np.array(log_softmax_reference(row)),
        }
        diagnose(got, name, mistakes)
        total = float(np.exp(got).sum())
        if not math.isclose(total, 1.0, rel_tol=1e-9):
            raise CheckFailed(
                f"{name}: exp of your log-weights should sum to 1, yours sum to {total:.4g}."
            )
        raise CheckFailed(f"{name}: wrong values for input {row}.")

    overflow = (
        f"{name}: exp overflowed on scores near 1000 ({_HIGH_ROW}); subtract the row's largest "
        "score m before exponentiating, and add it back: log(sum exp(s)) = m + log(sum exp(s - m))."
    )
    if wrong_answer(_HIGH_ROW, (OverflowError, overflow)) is not None:
        raise CheckFailed(overflow)
    underflow = (
        f"{name}: scores near -1000 ({_LOW_ROW}) underflow: every exp is 0, so is their "
        "total, and log(0) fails; subtract the row's largest score before exponentiating."
    )
    if wrong_answer(_LOW_ROW, ((ArithmeticError, ValueError), underflow)) is not None:
        raise CheckFailed(underflow)

    log_of_zero = f"{name}: {_TINY}, and you took the log of 0.0, which fails: {_DIRECT}"
    got = wrong_answer(_FAR_ROW, (OverflowError, f"{name}: {_SHIFT}"), (ValueError, log_of_zero))
    if got is not None:
        log_of_weights = [math.log(w) if w > 0 else -math.inf for w in L.softmax(_FAR_ROW)]
        mistakes = {
            f"{_TINY}, and you gave them log-weight -inf, as if they "
            f"were masked (they are not): {_DIRECT}": log_of_weights,
        }
        diagnose(got, name, mistakes)
        if not np.isfinite(got).all():
            raise CheckFailed(
                f"{name}: scores far apart ({_FAR_ROW}) gave {got.tolist()}: no "
                "score there is masked, so every log-weight must be a finite number."
            )
        raise CheckFailed(f"{name}: wrong values for scores far apart ({_FAR_ROW}).")

    masked = (
        f"{name}: a masked key (score -inf) has weight 0, so its log-weight is "
        "-inf; the others must be the log-softmax of the unmasked scores alone."
    )
    got = wrong_answer(_MASKED_ROW, ((ArithmeticError, ValueError), masked))
    if got is not None:
        zeroed = np.where(np.isneginf(_MASKED_ROW), 0.0, log_softmax_reference(_MASKED_ROW))
        gave_0 = (
            "a masked key has weight 0, and log(0) is -inf: you gave it "
            "0, which is the log-weight of a key that takes all the weight."
        )
        diagnose(got, name, {gave_0: zeroed})
        raise CheckFailed(masked)

    all_masked = (
        f"{name}: a row where every score is -inf (nothing to attend to) has "
        "every weight 0, so every log-weight is -inf; return that, without an error"
    )
    got = wrong_answer([-math.inf] * 3, ((ArithmeticError, ValueError), all_masked + "."))
    if got is not None:
        raise CheckFailed(f"{all_masked}; you returned {got.tolist()}.")
    passed("log_softmax_row: exp sums to 1; stable near ±1000 and far apart; masked keys -inf.")


def window_mask_reference(n: int, window: int) -> list[list[bool]]:
    """n x n booleans: query i may attend to keys i - window + 1 .. i (those that exist)."""
    return [[i - window < j <= i for j in range(n)] for i in range(n)]


def _window_mistakes(n: int, w: int) -> dict[str, np.ndarray]:
    """Each realistic wrong mask for (n, window w): {the sentence naming it: the mask}."""
    i, j = np.indices((n, n))

    def band(low, high):  # key j may be attended to from query i when low <= j - i <= high
        return (j >= i + low) & (j <= i + high)

    right = band(-w + 1, 0)
    return {
        "that is the plain causal mask; the window must also hide keys more than window - "
        "1 positions back: query i sees keys i - window + 1 .. i.": np.tri(n, dtype=bool),
        "off by one: query i sees window + 1 keys; it should see "
        "exactly window of them, itself included.": band(-w, 0),
        "off by one: query i sees only window - 1 keys; it should "
        "see window of them, itself included.": band(-w + 2, 0),
        "query i cannot attend to itself; the window of window keys ends with key i.": band(-w, -1),
        "your window reaches into the future: query i may see "
        "keys before it, never keys after it.": band(-w + 1, w - 1),
        "your mask is transposed: rows are queries, columns keys, "
        "and query i sees the keys before it.": band(0, w - 1),
        "your mask is the wrong way round: True must mean 'query i may attend to key j'.": ~right,
    }


@exercise
def check_sliding_window_mask_list(window_mask_fn: Callable[[int, int], list[list[bool]]]) -> None:
    """Exercise (notebook 01): the sliding-window causal mask as lists of booleans. A mistake
    is named only when the answer is that mistake's on every (n, window) tried."""
    name = "sliding_window_mask"
    # Largest first: small cases cannot tell mistakes apart. (4, 6): a window longer than
    # the sentence is the plain causal mask; (5, 1): each token sees only itself.
    cases = ((7, 3), (6, 2), (4, 6), (5, 1))
    answers, right = [], []
    for n, window in cases:
        got = call(window_mask_fn, name, n, window)
        try:
            arr = np.asarray(got)
        except ValueError:
            lengths = [len(row) if hasattr(row, "__len__") else None for row in got]
            raise CheckFailed(
                f"{name}({n}, {window}) should return {n} rows of {n} entries "
                f"each, True or False; your rows have lengths {lengths}."
            ) from None
        expect_shape(arr, (n, n), name, f"a {n} x {n} mask")
        expected = np.asarray(window_mask_reference(n, window))
        expect_bool(arr, expected, name)
        answers.append(arr)
        right.append(np.array_equal(arr, expected))
    if all(right):
        passed(
            "sliding_window_mask: query i sees keys i-window+1 .. i, windows shorter and longer."
        )
        return
    (n, window), arr = cases[right.index(False)], answers[right.index(False)]
    where = f"{name}({n}, window={window})"
    tables = [_window_mistakes(n, w) for n, w in cases]
    mistakes = {message: [table[message] for table in tables] for message in tables[0]}
    diagnose(answers, where, mistakes, same=lambda got, wrong: all(map(np.array_equal, got, wrong)))
    fixed = {  # the window each answer is right for, if any
        next((w for w in range(1, m + 1) if np.array_equal(a, window_mask_reference(m, w))), None)
        for (m, _), a in zip(cases, answers, strict=True)
    }
    if len(fixed) == 1 and None not in fixed:
        raise CheckFailed(
            f"{where}: your mask ignores `window`: it is the window-{fixed.pop()} "
            "mask for every window asked; use the window passed in."
        )
    row = int(np.argwhere(arr != np.asarray(window_mask_reference(n, window)))[0][0])
    raise CheckFailed(
        f"{where} is wrong at row {row}: query i may attend to keys "
        "i - window + 1 .. i (those that exist) and to nothing else."
    )


def _same_weights(got_w, wrong_w) -> bool:
    """Where the student's weights are NaN/inf (an unguarded softmax on a row with nothing to
    attend to), the mistake's may be 0 or NaN/inf: that must not hide the real mistake."""
    wrong_w = np.asarray(wrong_w, dtype=float)
    finite = np.isfinite(got_w)
    if got_w.shape != wrong_w.shape or not finite.any():
        return False
    rest_ok = np.all((wrong_w[~finite] == 0) | ~np.isfinite(wrong_w[~finite]))
    return bool(rest_ok and np.allclose(got_w[finite], wrong_w[finite], rtol=1e-7, atol=1e-7))


# lib's other attention functions (L.attention, the namesake, is refused by call() itself)
_LIB_ATTENTION = (
    ("lib.lists", "multi_head_attention", "L.multi_head_attention"),
    ("lib.attention", "scaled_dot_product_attention", "lib's scaled_dot_product_attention"),
    ("lib.attention", "multi_head_attention", "lib's multi_head_attention"),
)


def _attention_case(attention_fn, name, q, k, v, mask, hints=(), overflow=None):
    """Run the student's attention on q, k, v (and mask) as lists; judge its (output, weights)
    against lib's and the classic wrong versions (``overflow``: the sentence for NaN or inf)."""
    args = (q.tolist(), k.tolist(), v.tolist(), None if mask is None else mask.tolist())
    result = call(attention_fn, name, *args, hints=hints, refuse=_LIB_ATTENTION)
    expect_tuple(result, 2, name, "a pair (output, weights)")
    out = as_array(result[0], name, "the output")
    weights = as_array(result[1], name, "the weights")
    if overflow and not np.isfinite(weights).all():
        raise CheckFailed(overflow)
    n_q, n_k, d_k = len(q), len(k), q.shape[-1]
    shape_w, shape_o = (n_q, n_k), (n_q, v.shape[-1])
    if shape_w != shape_o and (out.shape, weights.shape) == (shape_w, shape_o):
        raise CheckFailed(
            f"{name}: you returned (weights, output); return them in the order (output, weights)."
        )
    expect_shape(weights, shape_w, name, "weights (..., n_q, n_k)")
    with np.errstate(all="ignore"):
        if out.shape != shape_o and close(out, weights @ k):
            raise CheckFailed(
                f"{name}: your output is weights @ k (its width is d_k = "
                f"{k.shape[-1]}, not d_v = {v.shape[-1]}); it is weights @ v."
            )
    expect_shape(out, shape_o, name, "an output (..., n_q, d_v)")
    exp_out, exp_w = A.scaled_dot_product_attention(q, k, v, mask)
    if close(weights, exp_w) and close(out, exp_out):
        return

    def finish(scores, mask=mask, axis=-1):
        """The weights: softmax (over ``axis``) of scores, -inf where mask is False."""
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        return A.softmax(scores, axis)

    raw = q @ np.swapaxes(k, -1, -2)
    scaled = raw / math.sqrt(d_k)
    mistakes = {}
    if mask is not None:
        mistakes = {
            "you multiplied the scores by the mask, so a masked score "
            "becomes 0 and exp(0) still gives its key weight: set the masked "
            "scores to -inf before the softmax.": finish(scaled * mask, None),
            "your mask is applied the wrong way round: True means 'may attend', so "
            "set the scores to -inf where the mask is False.": finish(scaled, ~mask),
            "the mask had no effect: set the scores to -inf where the "
            "mask is False, before the softmax.": finish(scaled, None),
            "you masked the weights after the softmax, so rows no longer sum to 1: mask "
            "the scores (with -inf) before the softmax.": A.softmax(scaled) * mask,
        }
    sizes = [(n_q, "queries and keys")] if n_q == n_k else [(n_q, "queries"), (n_k, "keys")]
    by_size = {
        f"you scaled by the square root of the number of {what}; "
        "d_k is the length of one query vector (the last axis of q).": finish(raw / math.sqrt(size))
        for size, what in sizes
        if size != d_k
    }
    unscaled = finish(raw)
    mistakes |= {
        "you did not scale the scores: divide q @ k^T by sqrt(d_k) before the softmax.": unscaled,
        "you divided the scores by d_k; divide by sqrt(d_k).": finish(raw / d_k),
        "you multiplied the scores by sqrt(d_k); divide by it.": finish(raw * math.sqrt(d_k)),
        **by_size,
        "your softmax runs over the queries (columns sum to 1); take "
        "it over the keys, the last axis, so each query's row sums to 1.": finish(scaled, axis=-2),
    }
    diagnose(weights, name, mistakes, same=_same_weights)
    if close(weights, exp_w):
        raise CheckFailed(
            f"{name}: the weights are right but the output is not: it is weights @ v."
        )
    if not np.isfinite(weights).all():
        raise CheckFailed(f"{name}: the weights contain NaN or inf.")
    sums = weights.sum(axis=-1)
    if not np.allclose(sums, 1.0):
        raise CheckFailed(
            f"{name}: each query's weights should sum to 1; one row "
            f"sums to {sums.flat[np.argmax(np.abs(sums - 1))]:.4g}."
        )
    raise CheckFailed(
        f"{name}: the weights are wrong (rows do sum to "
        "1): compare your scores with q @ k^T / sqrt(d_k)."
    )


@exercise
def check_attention_list(attention_fn: Callable) -> None:
    """Exercise (notebook 01): attention(Q, K, V, mask) on lists -> (output, weights)."""
    name = "attention"
    advice = "no mask means every query may attend to every key, so skip the masking."
    no_mask = hint(TypeError, name, advice, " when called with mask=None")
    rng = np.random.default_rng(1)
    for n_q, n_k, d_k, d_v, masked in (
        (4, 4, 3, 2, True),
        (3, 5, 4, 3, False),
        (5, 5, 2, 2, False),
        (3, 6, 5, 2, True),
    ):
        q, k = rng.normal(size=(n_q, d_k)), rng.normal(size=(n_k, d_k))
        v = rng.normal(size=(n_k, d_v))
        mask = A.causal_mask(n_q, n_k) if masked else None
        _attention_case(attention_fn, name, q, k, v, mask, () if masked else [no_mask])
    # Scores near 2000, spread by a few units: exp overflows unless each row is shifted by
    # its maximum first (L.softmax does it); the weights are still far from one-hot.
    q = 32.0 * (1.0 + 1e-3 * rng.normal(size=(3, 4)))
    k = 32.0 * (1.0 + 1e-3 * rng.normal(size=(5, 4)))
    v = rng.normal(size=(5, 2))
    overflow = (
        f"{name}: exp overflowed on scores near {(q @ k.T).max() / 2:.0f}: "
        "subtract each row's largest score before exponentiating, as L.softmax does."
    )
    _attention_case(attention_fn, name, q, k, v, None, [(OverflowError, overflow)], overflow)
    passed("attention: scores / sqrt(d_k), softmax over the keys, True = may attend, weights @ V.")
