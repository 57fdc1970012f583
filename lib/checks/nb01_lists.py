"""Checks of notebook 01 (attention with lists): the log-softmax of one row, the
sliding-window causal mask, and scaled dot-product attention on Python lists."""

from __future__ import annotations

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
    expect_shape,
    passed,
    same_array,
)

NEG_INF = float("-inf")

# --------------------------------------------------------------------------- log-softmax


def log_softmax_reference(row: list[float]) -> list[float]:
    """log(softmax(row)) computed without forming the weights: s - max - log(sum exp(s - max)).

    A masked score (-inf) gets -inf (the log of weight 0); a row that is entirely -inf gets
    -inf everywhere (every weight is 0, notebook 01's convention)."""
    finite = [s for s in row if s != NEG_INF]
    if not finite:
        return [NEG_INF] * len(row)
    top = max(finite)
    log_total = math.log(sum(math.exp(s - top) for s in finite))
    return [s - top - log_total if s != NEG_INF else NEG_INF for s in row]


_LOG_ROWS = [
    [1.0, 2.0, 3.0],
    [0.5, -1.0, 0.0, 2.0, -0.25],
    [-3.0, -3.0],
]
# Where instability shows: scores near +1000 overflow exp unless the row is shifted; scores
# near -1000 underflow to 0, and log(0) fails; a row whose scores are far APART overflows
# unless the shift is the row's maximum, and has weights that underflow to 0, so the log of
# the softmax's weights fails (or gives -inf for a score that is not masked).
_HIGH_ROW = [1000.0, 1001.0, 999.0]
_LOW_ROW = [-1000.0, -1001.0, -999.0]
_FAR_ROW = [3.0, -800.0, 804.0, 0.5]
_MASKED_ROW = [0.3, NEG_INF, 1.2, NEG_INF]
_ALL_MASKED_ROW = [NEG_INF, NEG_INF, NEG_INF]


def _log_of(weights) -> list[float]:
    return [math.log(w) if w > 0 else NEG_INF for w in weights]


def _shifted_log_softmax(row, shift):
    finite = [s for s in row if s != NEG_INF]
    c = shift(finite)
    log_total = math.log(sum(math.exp(s - c) for s in finite))
    return [s - c - log_total for s in row]


@exercise
def check_log_softmax_list(log_softmax_fn: Callable[[list[float]], list[float]]) -> None:
    """Exercise (notebook 01): the log of the softmax weights of one Python list, computed
    stably (the log-sum-exp trick), masks included."""
    name = "log_softmax_row"

    def run(row, hints=()):
        got = as_array(call(log_softmax_fn, name, list(row), hints=hints), name)
        expect_shape(got, (len(row),), name, f"a list of {len(row)} log-weights")
        return got

    for row in _LOG_ROWS:
        got = run(row)
        if close(got, log_softmax_reference(row)):
            continue
        top = max(row)
        total_exp = sum(math.exp(x - top) for x in row)
        right = log_softmax_reference(row)
        diagnose(
            got,
            [
                (
                    L.softmax(row),
                    f"{name}: you returned the weights themselves; return their logarithms "
                    "(each one is at most 0).",
                ),
                (
                    [s - top for s in row],
                    f"{name}: you subtracted the largest score but not the log of the sum of "
                    "the exps, so exp of your values does not sum to 1.",
                ),
                (
                    [s - top - total_exp for s in row],
                    f"{name}: subtract the log of the sum of the exps, not the sum itself.",
                ),
                (
                    [-x for x in right],
                    f"{name}: the sign is flipped: a log-weight is log(weight) <= 0, i.e. "
                    "score minus the log of the sum of the exps.",
                ),
            ],
        )
        total = float(np.exp(got).sum())
        if not math.isclose(total, 1.0, rel_tol=1e-9):
            raise CheckFailed(
                f"{name}: exp of your log-weights should sum to 1, yours sum to {total:.4g}."
            )
        raise CheckFailed(f"{name}: wrong values for input {row}.")

    overflow = (
        f"{name}: exp overflowed on scores near 1000 ({_HIGH_ROW}); subtract the row's "
        "largest score m before exponentiating, and add it back: log(sum exp(s)) = "
        "m + log(sum exp(s - m))."
    )
    got = run(_HIGH_ROW, hints=[(OverflowError, overflow)])
    if not close(got, log_softmax_reference(_HIGH_ROW)):
        raise CheckFailed(overflow)
    underflow = (
        f"{name}: scores near -1000 ({_LOW_ROW}) underflow: every exp is 0, so is their "
        "total, and log(0) fails; subtract the row's largest score before exponentiating."
    )
    got = run(_LOW_ROW, hints=[(ArithmeticError, underflow), (ValueError, underflow)])
    if not close(got, log_softmax_reference(_LOW_ROW)):
        raise CheckFailed(underflow)

    shift = (
        f"{name}: scores far apart ({_FAR_ROW}) overflow exp although scores near 1000 do "
        "not: you shifted the row by something other than its largest score (its minimum, "
        "mean or first score?); subtract the maximum, so that every exponent is at most 0."
    )
    tiny = (
        f"{name}: on scores far apart ({_FAR_ROW}) three of the four weights are below "
        "exp(-800), which is 0.0 in floating point"
    )
    direct = (
        "compute the log-weights directly, score - m - log(sum exp(s - m)), without forming "
        "the weights."
    )
    log_of_zero = f"{tiny}, and you took the log of 0.0, which fails: {direct}"
    log_guarded = (
        f"{tiny}, and you gave them log-weight -inf, as if they were masked (they are not): "
        f"{direct}"
    )
    got = run(_FAR_ROW, hints=[(OverflowError, shift), (ValueError, log_of_zero)])
    expected = log_softmax_reference(_FAR_ROW)
    if not close(got, expected):
        diagnose(
            got,
            [
                (_log_of(L.softmax(_FAR_ROW)), log_guarded),
                (lambda: _shifted_log_softmax(_FAR_ROW, min), shift),
            ],
        )
        if not np.isfinite(got).all():
            raise CheckFailed(
                f"{name}: scores far apart ({_FAR_ROW}) gave {got.tolist()}: no score there "
                "is masked, so every log-weight must be a finite number."
            )
        raise CheckFailed(f"{name}: wrong values for scores far apart ({_FAR_ROW}).")

    masked = (
        f"{name}: a masked key (score -inf) has weight 0, so its log-weight is -inf; the "
        "others must be the log-softmax of the unmasked scores alone."
    )
    got = run(_MASKED_ROW, hints=[(ArithmeticError, masked), (ValueError, masked)])
    if not close(got, log_softmax_reference(_MASKED_ROW)):
        diagnose(
            got,
            [
                (
                    [
                        0.0 if s == NEG_INF else v
                        for s, v in zip(
                            _MASKED_ROW, log_softmax_reference(_MASKED_ROW), strict=True
                        )
                    ],
                    f"{name}: a masked key has weight 0, and log(0) is -inf: you gave it 0, "
                    "which is the log-weight of a key that takes all the weight.",
                ),
            ],
        )
        raise CheckFailed(masked)

    all_masked = (
        f"{name}: a row where every score is -inf (nothing to attend to) has every weight 0, "
        "so every log-weight is -inf; return that, without an error"
    )
    got = run(
        _ALL_MASKED_ROW,
        hints=[(ArithmeticError, all_masked + "."), (ValueError, all_masked + ".")],
    )
    if not close(got, log_softmax_reference(_ALL_MASKED_ROW)):
        raise CheckFailed(f"{all_masked}; you returned {got.tolist()}.")
    passed("log_softmax_row: exp sums to 1; stable near ±1000 and far apart; masked keys -inf.")


# --------------------------------------------------------------------------- sliding window


def window_mask_reference(n: int, window: int) -> list[list[bool]]:
    """n x n booleans: query i may attend to keys i - window + 1 .. i (those that exist)."""
    return [[i - window < j <= i for j in range(n)] for i in range(n)]


def _band(n, low, high):
    """Entry (i, j) True where i + low <= j <= i + high."""
    i, j = np.indices((n, n))
    return (j >= i + low) & (j <= i + high)


def _window_mistakes(n: int, window: int, expected: np.ndarray) -> dict[str, np.ndarray]:
    """What each realistic wrong mask is for (n, window)."""
    return {
        "causal": np.tri(n, dtype=bool),
        "one too many": _band(n, -window, 0),
        "one too few": _band(n, -window + 2, 0),
        "no diagonal": _band(n, -window, -1),
        "symmetric": _band(n, -window + 1, window - 1),
        "transposed": _band(n, 0, window - 1),
        "inverted": ~expected,
    }


_WINDOW_MESSAGES = {
    "causal": "that is the plain causal mask; the window must also hide keys more than "
    "window - 1 positions back: query i sees keys i - window + 1 .. i.",
    "one too many": "off by one: query i sees window + 1 keys; it should see exactly window "
    "of them, itself included.",
    "one too few": "off by one: query i sees only window - 1 keys; it should see window of "
    "them, itself included.",
    "no diagonal": "query i cannot attend to itself; the window of window keys ends with key i.",
    "symmetric": "your window reaches into the future: query i may see keys before it, never "
    "keys after it.",
    "transposed": "your mask is transposed: rows are queries, columns keys, and query i sees "
    "the keys before it.",
    "inverted": "your mask is the wrong way round: True must mean 'query i may attend to key j'.",
}


def _window_of(n: int, arr: np.ndarray) -> int | None:
    """The window w whose right mask for n tokens ``arr`` is (1 .. n), if any."""
    for w in range(1, n + 1):
        if np.array_equal(arr, window_mask_reference(n, w)):
            return w
    return None


@exercise
def check_sliding_window_mask_list(window_mask_fn: Callable[[int, int], list[list[bool]]]) -> None:
    """Exercise (notebook 01): the sliding-window causal mask as a list of lists of booleans.

    A mistake is named only when the answer is that mistake's on every (n, window) tried:
    an answer right on some and wrong on others is not "off by one"."""
    name = "sliding_window_mask"
    # Largest first: small cases cannot tell mistakes apart. (4, 6): a window longer than
    # the sentence is the plain causal mask; (5, 1): each token sees only itself.
    cases = ((7, 3), (6, 2), (4, 6), (5, 1))
    answers = []
    for n, window in cases:
        got = call(window_mask_fn, name, n, window)
        try:
            arr = np.asarray(got)
        except ValueError:
            lengths = [len(row) if hasattr(row, "__len__") else None for row in got]
            raise CheckFailed(
                f"{name}({n}, {window}) should return {n} rows of {n} entries each, True or "
                f"False; your rows have lengths {lengths}."
            ) from None
        expect_shape(arr, (n, n), name, f"a {n} x {n} mask")
        expected = np.asarray(window_mask_reference(n, window))
        if arr.dtype != bool:
            if arr.dtype.kind in "iuf" and np.array_equal(arr, expected):
                raise CheckFailed(
                    f"{name}: the right entries, but as {arr.dtype} numbers: use True/False "
                    "(True = may attend)."
                )
            raise CheckFailed(
                f"{name}: use True/False entries (True = may attend), got {arr.dtype} values."
            )
        answers.append((n, window, arr, expected))
    wrong = [(n, w, arr, exp) for n, w, arr, exp in answers if not np.array_equal(arr, exp)]
    if not wrong:
        passed(
            "sliding_window_mask: query i sees keys i-window+1 .. i, windows shorter and longer."
        )
        return
    n, window, arr, expected = wrong[0]
    where = f"{name}({n}, window={window})"
    tables = [_window_mistakes(m, w, exp) for m, w, _, exp in answers]
    for key, message in _WINDOW_MESSAGES.items():
        if all(same_array(a, t[key]) for (_, _, a, _), t in zip(answers, tables, strict=True)):
            raise CheckFailed(f"{where}: {message}")
    fixed = {_window_of(m, a) for m, _, a, _ in answers}
    if len(fixed) == 1 and None not in fixed:
        raise CheckFailed(
            f"{where}: your mask ignores `window`: it is the window-{fixed.pop()} mask for "
            "every window asked; use the window passed in."
        )
    row = int(np.argwhere(arr != expected)[0][0])
    raise CheckFailed(
        f"{where} is wrong at row {row}: query i may attend to keys i - window + 1 .. i "
        "(those that exist) and to nothing else."
    )


# --------------------------------------------------------------------------- attention


def _finish(scores, v, mask, axis=-1):
    """Softmax (over ``axis``) of scores masked with -inf where mask is False, and w @ v."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = A.softmax_inplace(np.array(scores, dtype=float), axis)
    return w @ v, w


def attention_mistakes(q, k, v, mask) -> list[tuple[object, str]]:
    """The mistake table of attention: what each classic wrong version returns on these
    inputs, as (output, weights), with the sentence that names it."""
    d_k = q.shape[-1]
    raw = q @ np.swapaxes(k, -1, -2)
    scaled = raw / math.sqrt(d_k)
    found: list[tuple[object, str]] = []
    if mask is not None:
        m = np.asarray(mask)
        w_after = A.softmax_inplace(scaled.copy()) * m
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


def check_attention_result(result, q, k, v, mask, name):
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
    if out.shape != shape_o and out.shape == q.shape[:-1] + (k.shape[-1],):
        with np.errstate(all="ignore"):
            if close(out, weights @ k):
                raise CheckFailed(
                    f"{name}: your output is weights @ k (its width is d_k = {k.shape[-1]}, "
                    f"not d_v = {v.shape[-1]}); it is weights @ v."
                )
    expect_shape(out, shape_o, name, "an output (..., n_q, d_v)")
    exp_out, exp_w = A.scaled_dot_product_attention(q, k, v, mask)
    if close(weights, exp_w) and close(out, exp_out):
        return
    table = [(wrong, f"{name}: {message}") for wrong, message in attention_mistakes(q, k, v, mask)]
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


def _numeric(value) -> bool:
    try:
        with np.errstate(all="ignore"):
            np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return False
    return True


# lib's attention, which exercise 3 asks the student to write (section 5 of the notebook
# shows L.attention; while the student's function runs, these raise instead of running).
_LIB_ATTENTION = (
    ("lib.lists", "attention", "L.attention"),
    ("lib.lists", "multi_head_attention", "L.multi_head_attention"),
    ("lib.attention", "scaled_dot_product_attention", "lib's scaled_dot_product_attention"),
    ("lib.attention", "multi_head_attention", "lib's multi_head_attention"),
)


@exercise
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
        result = call(attention_fn, name, *args, hints=hints, refuse=_LIB_ATTENTION)
        check_attention_result(result, q, k, v, mask, name)
    # Scores near 2000, spread by a few units: exp overflows unless each row is shifted by
    # its maximum first (L.softmax does it); the weights are still far from one-hot.
    q = 32.0 * (1.0 + 1e-3 * rng.normal(size=(3, 4)))
    k = 32.0 * (1.0 + 1e-3 * rng.normal(size=(5, 4)))
    v = rng.normal(size=(5, 2))
    overflow = (
        f"{name}: exp overflowed on scores near {(q @ k.T).max() / 2:.0f}: subtract each "
        "row's largest score before exponentiating, as L.softmax does."
    )
    result = call(
        attention_fn,
        name,
        q.tolist(),
        k.tolist(),
        v.tolist(),
        None,
        hints=[(OverflowError, overflow)],
        refuse=_LIB_ATTENTION,
    )
    if isinstance(result, tuple | list) and len(result) == 2:
        with np.errstate(all="ignore"):
            weights = np.asarray(result[1], dtype=float) if _numeric(result[1]) else None
        if weights is not None and not np.isfinite(weights).all():
            raise CheckFailed(overflow)
    check_attention_result(result, q, k, v, None, name)
    passed("attention: scores / sqrt(d_k), softmax over the keys, True = may attend, weights @ V.")
