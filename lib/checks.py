"""Checks for the exercises in the notebooks.

Each ``check_*`` function calls a student's implementation on a few fixed inputs and
compares the result with lib's reference. On success it prints one line starting with
"✓". On failure it raises :class:`CheckFailed` with one sentence the student can act on:
where the answer matches a known mistake (a missing 1/sqrt(d_k), softmax over the wrong
axis, a mask the wrong way round, ...) the sentence names that mistake; otherwise it says
which property is broken (shape, rows not summing to 1, ...). Messages never contain the
solution's code.

A stub that still raises ``NotImplementedError`` and an answer of the wrong shape are
reported as such, never as a crash inside the check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from . import attention as A
from . import heads as H
from . import lists as L


class CheckFailed(AssertionError):
    """An exercise's answer is not right yet; the message says what to fix."""


# --------------------------------------------------------------------------- helpers


def _call(
    fn: Callable,
    name: str,
    *args,
    hints: Sequence[tuple[type, str | Callable[[Exception], str]]] = (),
):
    """Call the student's function, turning its exceptions into one clear sentence.

    A hint is a sentence, or a function of the exception that returns one (to quote it).
    """
    try:
        return fn(*args)
    except NotImplementedError:
        raise CheckFailed(
            f"{name} is not implemented yet: replace `raise NotImplementedError()` with your code."
        ) from None
    except Exception as exc:  # noqa: BLE001 - any error in student code becomes a message
        for exc_type, hint in hints:
            if isinstance(exc, exc_type):
                raise CheckFailed(hint(exc) if callable(hint) else hint) from None
        raise CheckFailed(f"{name} raised {type(exc).__name__}: {exc}") from None


def _as_array(value, name: str, what: str = "its result") -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise CheckFailed(
            f"{name} should return numbers in a rectangular shape, but {what} is "
            f"{type(value).__name__} that cannot be read as an array."
        ) from None
    return arr


def _expect_shape(arr: np.ndarray, shape: tuple[int, ...], name: str, what: str) -> None:
    if arr.shape != tuple(shape):
        raise CheckFailed(f"{name}: expected {what} of shape {tuple(shape)}, got {arr.shape}.")


def _close(a: np.ndarray, b: np.ndarray, tol: float = 1e-7) -> bool:
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=False))


def _close_where_finite(got: np.ndarray, wrong: np.ndarray, tol: float = 1e-7) -> bool:
    """Like _close, but entries that are NaN/inf in ``got`` only need to be 0 or NaN/inf in
    ``wrong``: a student's unguarded softmax turns a row with nothing to attend to into NaN
    where lib's gives 0, and that must not hide the real mistake."""
    if got.shape != wrong.shape:
        return False
    finite = np.isfinite(got)
    if not finite.any():
        return False
    rest_ok = np.all((wrong[~finite] == 0) | ~np.isfinite(wrong[~finite]))
    return bool(rest_ok and np.allclose(got[finite], wrong[finite], rtol=tol, atol=tol))


def _match_mistake(got, mistakes, tol: float = 1e-7) -> None:
    """Raise the message of the first known mistake whose output equals ``got``."""
    for wrong, message in mistakes:
        if wrong is not None and _close(got, wrong, tol):
            raise CheckFailed(message)


def _passed(message: str) -> None:
    print(f"✓ {message}")


# --------------------------------------------------------------------------- softmax


_SOFTMAX_ROWS = [
    [1.0, 2.0, 3.0],
    [0.5, -1.0, 0.0, 2.0],
    [-3.0, -3.0],
]
_BIG_ROW = [1000.0, 1001.0, 999.0]
_MASKED_ROW = [0.3, float("-inf"), 1.2, float("-inf")]
_ALL_MASKED_ROW = [float("-inf"), float("-inf"), float("-inf")]


def check_softmax_list(softmax_fn: Callable[[list[float]], list[float]]) -> None:
    """Exercise (notebook 01): softmax of one Python list."""
    name = "softmax"
    for row in _SOFTMAX_ROWS:
        got = _as_array(_call(softmax_fn, name, list(row)), name)
        _expect_shape(got, (len(row),), name, f"a list of {len(row)} weights")
        expected = np.asarray(L.softmax(row))
        if not _close(got, expected):
            _match_mistake(
                got,
                [
                    (np.asarray(row) / np.sum(row), f"{name}: exponentiate each score first."),
                    (
                        np.exp(row),
                        f"{name}: divide every exp by the row's total, so they sum to 1.",
                    ),
                ],
            )
            if not math.isclose(float(got.sum()), 1.0, rel_tol=1e-9):
                raise CheckFailed(
                    f"{name}: the weights should sum to 1, yours sum to {got.sum():.4g}."
                )
            raise CheckFailed(f"{name}: wrong values for input {row}.")
    got = _call(
        softmax_fn,
        name,
        list(_BIG_ROW),
        hints=[
            (
                OverflowError,
                f"{name}: exp overflowed on scores near 1000; "
                "subtract the row's largest score before exponentiating.",
            )
        ],
    )
    got = _as_array(got, name)
    _expect_shape(got, (len(_BIG_ROW),), name, f"a list of {len(_BIG_ROW)} weights")
    if not _close(got, np.asarray(L.softmax(_BIG_ROW))):
        raise CheckFailed(
            f"{name}: scores near 1000 give wrong weights; subtract the row's "
            "largest score before exponentiating."
        )
    got = _as_array(_call(softmax_fn, name, list(_MASKED_ROW)), name)
    _expect_shape(got, (len(_MASKED_ROW),), name, f"a list of {len(_MASKED_ROW)} weights")
    if not _close(got, np.asarray(L.softmax(_MASKED_ROW))):
        raise CheckFailed(
            f"{name}: entries that are -inf (masked keys) must get weight exactly 0 "
            "and the rest must still sum to 1."
        )
    got = _call(
        softmax_fn,
        name,
        list(_ALL_MASKED_ROW),
        hints=[
            (
                ArithmeticError,
                f"{name}: a row where every score is -inf (nothing to attend to) "
                "must return all zeros, not raise an error.",
            )
        ],
    )
    got = _as_array(got, name)
    _expect_shape(got, (len(_ALL_MASKED_ROW),), name, f"a list of {len(_ALL_MASKED_ROW)} weights")
    if not _close(got, np.zeros(len(_ALL_MASKED_ROW))):
        raise CheckFailed(
            f"{name}: a row where every score is -inf (nothing to attend to) must "
            f"return all zeros, you returned {got.tolist()}."
        )
    _passed(
        "softmax: sums to 1, survives scores near 1000, gives masked keys 0 and an "
        "all-masked row zeros."
    )


def check_softmax(softmax_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 02): vectorised, stable softmax over the last axis."""
    name = "softmax"
    axis_hint = (
        np.exceptions.AxisError,
        lambda exc: (
            f"{name} raised AxisError ({exc}): the input may have any number of "
            "axes; take the softmax over the last one, axis=-1."
        ),
    )

    def call(arr):
        with np.errstate(all="ignore"):
            got = _as_array(_call(softmax_fn, name, arr.copy(), hints=[axis_hint]), name)
        _expect_shape(got, arr.shape, name, "an output (the input's shape)")
        return got

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 5))
    got = call(x)
    expected = A.softmax(x)
    if not _close(got, expected):
        e = np.exp(x)
        _match_mistake(
            got,
            [
                (
                    e / e.sum(axis=-2, keepdims=True),
                    f"{name}: your columns sum to 1 but your rows do not: normalise over the last "
                    "axis (axis=-1).",
                ),
                (
                    e / e.sum(axis=0, keepdims=True),
                    f"{name}: you normalised over axis 0; normalise over the last axis (axis=-1).",
                ),
                (
                    e / e.sum(),
                    f"{name}: you divided by the sum of the whole array; divide each "
                    "row by its own sum (axis=-1, keepdims=True).",
                ),
            ],
        )
        sums = got.sum(axis=-1)
        if not np.allclose(sums, 1.0):
            raise CheckFailed(
                f"{name}: each row (last axis) should sum to 1; one sums to "
                f"{sums.flat[np.argmax(np.abs(sums - 1))]:.4g}."
            )
        raise CheckFailed(f"{name}: rows sum to 1 but the values are wrong.")
    big = np.array([[1000.0, 1001.0, 999.0], [-2.0, 0.0, 1.0]])
    got = call(big)
    if not np.isfinite(got[0]).all():
        raise CheckFailed(
            f"{name}: scores near 1000 give NaN/inf; subtract the largest score "
            "of each row before np.exp."
        )
    far_apart = np.array([[-1000.0, -999.0, -1001.0], [0.0, 1.0, 2.0]])
    got = call(far_apart)
    if not _close(got, A.softmax(far_apart)):
        raise CheckFailed(
            f"{name}: a row far below the others gives wrong weights; subtract each "
            "row's own maximum (keepdims=True), not the maximum of the whole array."
        )
    masked = np.array([[0.3, -np.inf, 1.2], [-np.inf, -np.inf, -np.inf]])
    got = call(masked)
    if not _close(got[0], A.softmax(masked[0])):
        raise CheckFailed(f"{name}: -inf entries (masked keys) must get weight exactly 0.")
    if not _close(got[1], np.zeros(3)):
        raise CheckFailed(
            f"{name}: a row that is entirely -inf must give zeros, not "
            f"{np.round(got[1], 4).tolist()}; guard the all-masked case."
        )
    _passed(
        "softmax: rows sum to 1, stable for large and far-apart scores, masked entries 0, "
        "all-masked rows 0."
    )


# --------------------------------------------------------------------------- masks


def check_causal_mask_list(causal_mask_fn: Callable[[int], list[list[bool]]]) -> None:
    """Exercise (notebook 01): the causal mask as a list of lists of booleans."""
    name = "causal_mask"
    for n in (6, 4, 1):  # largest first: n = 1 cannot tell mistakes apart
        got = _call(causal_mask_fn, name, n)
        try:
            arr = np.asarray(got)
        except ValueError:
            lengths = [len(row) if hasattr(row, "__len__") else None for row in got]
            raise CheckFailed(
                f"{name}({n}) should return {n} rows of {n} entries each, True or False; "
                f"your rows have lengths {lengths}."
            ) from None
        _expect_shape(arr, (n, n), name, f"a {n} x {n} mask")
        if arr.dtype != bool:
            raise CheckFailed(
                f"{name}: use True/False entries (True = may attend), got {arr.dtype} values."
            )
        expected = np.asarray(L.causal_mask(n))
        if np.array_equal(arr, expected):
            continue
        if np.array_equal(arr, expected & ~np.eye(n, dtype=bool)):
            raise CheckFailed(
                f"{name}: the diagonal is False, so a token cannot attend to itself; "
                "query i may attend to keys 0..i inclusive."
            )
        if np.array_equal(arr, ~expected):
            raise CheckFailed(
                f"{name}: your mask is the wrong way round: True must mean 'query i "
                "may attend to key j', which holds for keys at or before i."
            )
        if np.array_equal(arr, expected.T):
            raise CheckFailed(
                f"{name}: your mask lets query i see the keys after it; it must see "
                "keys 0..i and hide the future."
            )
        if np.array_equal(arr, np.tri(n, k=1, dtype=bool)):
            raise CheckFailed(
                f"{name}: off by one: query i can see key i+1; it may attend to keys 0..i only."
            )
        raise CheckFailed(
            f"{name}({n}) is wrong at row {int(np.argwhere(arr != expected)[0][0])}: "
            "query i may attend to keys 0..i and to nothing after."
        )
    _passed("causal_mask: query i attends to keys 0..i, for n = 6, 4 and 1.")


def check_padding_mask(padding_mask_fn: Callable[[Sequence[int], int], np.ndarray]) -> None:
    """Exercise (notebook 02): padding mask of shape (batch, 1, 1, n_k)."""
    name = "padding_mask"
    lengths, n_k = [3, 5, 1], 5
    list_hint = (
        TypeError,
        lambda exc: (
            f"{name} raised TypeError ({exc}): lengths may arrive as a Python list, "
            "which cannot be indexed or compared like an array; convert it to an array first."
        ),
    )
    try:
        got = np.asarray(_call(padding_mask_fn, name, list(lengths), n_k, hints=[list_hint]))
    except ValueError:
        raise CheckFailed(
            f"{name}: expected one row of n_k={n_k} booleans per sequence, shape "
            "(batch, 1, 1, n_k); yours cannot be read as a rectangular array."
        ) from None
    expected = A.padding_mask(lengths, n_k)
    if got.shape == (len(lengths), n_k):
        raise CheckFailed(
            f"{name}: expected shape (batch, 1, 1, n_k) = {expected.shape} so that "
            f"the mask broadcasts over heads and queries; got {got.shape}."
        )
    _expect_shape(got, expected.shape, name, "a mask")
    if got.dtype != bool:
        raise CheckFailed(f"{name}: use booleans (True = may attend), got {got.dtype}.")
    if np.array_equal(got, expected):
        lengths2 = [0, 2]
        got2 = np.asarray(_call(padding_mask_fn, name, list(lengths2), 2, hints=[list_hint]))
        if not np.array_equal(got2, A.padding_mask(lengths2, 2)):
            raise CheckFailed(
                f"{name}: wrong for lengths {lengths2} with n_k=2: a sequence of "
                "length 0 has no real key."
            )
        _passed("padding_mask: real keys True, padding False, shape (batch, 1, 1, n_k).")
        return
    if np.array_equal(got, ~expected):
        raise CheckFailed(
            f"{name}: your mask is the wrong way round: True must mark real tokens "
            "(may attend) and False the padding."
        )
    if np.array_equal(got, A.padding_mask(np.minimum(np.array(lengths) + 1, n_k), n_k)):
        raise CheckFailed(
            f"{name}: off by one: a sequence of length L has real keys 0..L-1, "
            "so key L is already padding."
        )
    if np.array_equal(got, A.padding_mask(np.array(lengths) - 1, n_k)):
        raise CheckFailed(
            f"{name}: off by one: a sequence of length L has L real keys, "
            "0..L-1; you marked only L-1."
        )
    raise CheckFailed(
        f"{name}: wrong for lengths {lengths}: key j of sequence b is real "
        "exactly when j < lengths[b]."
    )


# --------------------------------------------------------------------------- attention


def _attention_mistakes(q, k, v, mask, use_lists: bool):
    """What the classic wrong versions of attention return on these inputs."""
    d_k = q.shape[-1]
    kt = np.swapaxes(k, -1, -2)
    raw = q @ kt

    def finish(scores, axis=-1, m=mask):
        if m is not None:
            scores = np.where(m, scores, -np.inf)
        w = A._softmax_inplace(np.array(scores, dtype=float), axis)
        return w @ v, w

    found = [
        (
            finish(raw),
            "you did not scale the scores: divide q @ k^T by sqrt(d_k) before the softmax.",
        ),
        (finish(raw / d_k), "you divided the scores by d_k; divide by sqrt(d_k)."),
        (finish(raw * math.sqrt(d_k)), "you multiplied the scores by sqrt(d_k); divide by it."),
    ]
    n_q, n_k = q.shape[-2], k.shape[-2]
    sizes = [(n_q, "queries and keys")] if n_q == n_k else [(n_q, "queries"), (n_k, "keys")]
    for size, what in sizes:
        if size != d_k:
            found.append(
                (
                    finish(raw / math.sqrt(size)),
                    f"you scaled by the square root of the number of {what}; d_k is the "
                    "length of one query vector (the last axis of q).",
                )
            )
    found += [
        (
            finish(raw / math.sqrt(d_k), axis=-2),
            "your softmax runs over the queries (columns sum "
            "to 1); take it over the keys, the last axis, so each query's row sums to 1.",
        ),
    ]
    if mask is not None:
        found += [
            (
                finish(raw / math.sqrt(d_k), m=~np.asarray(mask)),
                "your mask is applied the wrong way round: True means 'may attend', so set the "
                "scores to -inf where the mask is False.",
            ),
            (
                finish(raw / math.sqrt(d_k), m=None),
                "the mask had no effect: set the scores to -inf where the mask is False, before "
                "the softmax.",
            ),
        ]
        w = A._softmax_inplace(raw / math.sqrt(d_k)) * mask
        found.append(
            (
                (w @ v, w),
                "you masked the weights after the softmax, so rows no longer "
                "sum to 1: mask the scores (with -inf) before the softmax.",
            )
        )
    if not use_lists and q.ndim == 3:
        kT_all = np.transpose(k)  # what k.T does to a batched array
        try:
            s = np.matmul(q, kT_all) / math.sqrt(d_k)
            w = A._softmax_inplace(s)
            found.append(
                (
                    (w @ v, w),
                    "k.T reverses every axis of a batched array; swap only the "
                    "last two: np.swapaxes(k, -1, -2).",
                )
            )
        except ValueError:
            pass
    return found


def _check_attention_result(result, q, k, v, mask, name, use_lists):
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise CheckFailed(
            f"{name} should return a pair (output, weights), got {type(result).__name__}."
        )
    out = _as_array(result[0], name, "the output")
    weights = _as_array(result[1], name, "the weights")
    shape_w = q.shape[:-1] + (k.shape[-2],)
    shape_o = q.shape[:-1] + (v.shape[-1],)
    if shape_w != shape_o and (out.shape, weights.shape) == (shape_w, shape_o):
        raise CheckFailed(
            f"{name}: you returned (weights, output); return the pair in the order "
            "(output, weights)."
        )
    _expect_shape(weights, shape_w, name, "weights (..., n_q, n_k)")
    _expect_shape(out, shape_o, name, "an output (..., n_q, d_v)")
    exp_out, exp_w = A.scaled_dot_product_attention(q, k, v, mask)
    if _close(weights, exp_w) and _close(out, exp_out):
        return
    for (_, m_w), message in _attention_mistakes(q, k, v, mask, use_lists):
        if _close_where_finite(weights, m_w):
            raise CheckFailed(f"{name}: {message}")
    if _close(weights, exp_w):
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
        result = _call(attention_fn, name, *args, hints=hints)
        _check_attention_result(result, q, k, v, mask, name, use_lists=True)
    _passed(
        "attention: scaled by 1/sqrt(d_k), softmax over the keys, mask applied as True = "
        "may attend; output = weights @ V."
    )


def check_attention(attention_fn: Callable) -> None:
    """Exercise (notebook 02): attention(q, k, v, mask=None) on NumPy arrays, batched."""
    name = "scaled_dot_product_attention"
    rng = np.random.default_rng(2)
    cases = [
        ((5,), 5, 5, 4, 4, False),
        ((2,), 4, 6, 3, 2, True),
        ((2, 3), 4, 4, 8, 5, True),
    ]
    for lead, n_q, n_k, d_k, d_v, masked in cases:
        q = rng.normal(size=lead + (n_q, d_k))
        k = rng.normal(size=lead + (n_k, d_k))
        v = rng.normal(size=lead + (n_k, d_v))
        mask = A.causal_mask(n_q, n_k) if masked else None
        result = _call(
            attention_fn,
            name,
            q,
            k,
            v,
            mask,
            hints=[
                (
                    ValueError,
                    lambda exc, q=q, k=k: (
                        f"{name} raised ValueError ({exc}) for q {q.shape}, "
                        f"k {k.shape}: if it comes from transposing k, note that k.T reverses "
                        "every axis of a batched array; transpose only the last two axes of k."
                    ),
                )
            ],
        )
        _check_attention_result(result, q, k, v, mask, name, use_lists=False)
    _passed(
        "scaled_dot_product_attention: right for batched inputs, n_q != n_k, with and "
        "without a causal mask."
    )


# --------------------------------------------------------------------------- heads


def check_split_heads(split_heads_fn: Callable[[np.ndarray, int], np.ndarray]) -> None:
    """Exercise (notebook 03): (batch, seq, d_model) -> (batch, heads, seq, d_k)."""
    name = "split_heads"
    batch, seq, d_model, h = 2, 3, 8, 4
    d_k = d_model // h
    x = np.arange(batch * seq * d_model, dtype=float).reshape(batch, seq, d_model)
    float_hint = (
        TypeError,
        lambda exc: (
            f"{name} raised TypeError ({exc}): shapes must be whole numbers, and "
            "d_model / n_heads is a float; use integer division."
        ),
    )
    got = _as_array(_call(split_heads_fn, name, x.copy(), h, hints=[float_hint]), name)
    if got.shape == (batch, seq, h, d_k) and np.array_equal(got, x.reshape(batch, seq, h, d_k)):
        raise CheckFailed(
            f"{name}: you split the features into (heads, d_k) but left the heads axis "
            "behind seq; it must come right after batch: (batch, heads, seq, d_k)."
        )
    _expect_shape(got, (batch, h, seq, d_k), name, "(batch, heads, seq, d_k)")
    if np.array_equal(got, A.split_heads(x, h)):
        _passed("split_heads: head h gets features h*d_k:(h+1)*d_k of every token.")
        return
    if np.array_equal(got, x.reshape(batch, h, seq, d_k)):
        raise CheckFailed(
            f"{name}: reshaping straight to (batch, heads, seq, d_k) cuts the "
            "sequence into pieces; split the features into (heads, d_k) first, then "
            "move the heads axis in front of seq."
        )
    if np.array_equal(got, x.reshape(batch, seq, d_k, h).transpose(0, 3, 1, 2)):
        raise CheckFailed(
            f"{name}: each head must get a contiguous block of d_k features; yours "
            "gets every n_heads-th feature."
        )
    raise CheckFailed(
        f"{name}: wrong values: head h of token t should hold x[b, t, h*d_k:(h+1)*d_k]."
    )


def check_merge_heads(merge_heads_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 03): (batch, heads, seq, d_k) -> (batch, seq, heads * d_k)."""
    name = "merge_heads"
    batch, h, seq, d_k = 2, 4, 3, 2
    x = np.arange(batch * h * seq * d_k, dtype=float).reshape(batch, h, seq, d_k)
    got = _as_array(_call(merge_heads_fn, name, x.copy()), name)
    if got.shape == (batch, seq, h, d_k) and np.array_equal(
        got, A.merge_heads(x).reshape(got.shape)
    ):
        raise CheckFailed(
            f"{name}: the heads axis is in the right place, but (heads, d_k) must still "
            "become one axis of heads * d_k features: expected shape (batch, seq, heads * d_k)."
        )
    _expect_shape(got, (batch, seq, h * d_k), name, "(batch, seq, heads * d_k)")
    if np.array_equal(got, A.merge_heads(x)):
        _passed(
            "merge_heads: token t's vector is head 0's output, then head 1's, ... (the concat)."
        )
        return
    if np.array_equal(got, x.reshape(batch, seq, h * d_k)):
        raise CheckFailed(
            f"{name}: reshaping without moving the heads axis back behind seq mixes "
            "tokens together; transpose to (batch, seq, heads, d_k) before reshaping."
        )
    if np.array_equal(got, x.transpose(0, 2, 3, 1).reshape(batch, seq, h * d_k)):
        raise CheckFailed(
            f"{name}: your concat interleaves the heads' features; each head's d_k "
            "features must stay together, head 0 first."
        )
    raise CheckFailed(
        f"{name}: wrong values: token t should be the heads' d_k-vectors for t, "
        "joined in head order."
    )


def check_param_count(param_count_fn: Callable[[int, int, bool], int]) -> None:
    """Exercise (notebook 03): parameters of one multi-head attention layer."""
    name = "mha_param_count"
    for d, h in ((512, 8), (64, 4), (12, 3)):
        for bias in (False, True):
            got = _call(param_count_fn, name, d, h, bias)
            if not isinstance(got, int | np.integer):
                raise CheckFailed(f"{name}: return a whole number, got {type(got).__name__}.")
            expected = 4 * d * d + (4 * d if bias else 0)
            if got == expected:
                continue
            b = 4 * d if bias else 0
            mistakes = {
                3 * d * d + (3 * d if bias else 0): "you left out the output projection W_O "
                "(and its bias).",
                4 * d * d: "you left out the biases: one vector of d_model per projection.",
                4 * d * d + (d if bias else 0): "only one bias counted: each of W_Q, W_K, W_V, "
                "W_O has its own.",
                4 * d * d + (3 * d if bias else 0): "you left out the bias of the output "
                "projection W_O.",
                h * 4 * d * d + b: "you gave every head full d_model x d_model matrices; each head "
                "projects to d_k = d_model / heads columns.",
                4 * d * (d // h) + b: "you counted one head's W_Q/W_K/W_V only; all heads together "
                "fill d_model columns, and W_O is d_model x d_model.",
            }
            if got in mistakes and got != expected:
                raise CheckFailed(f"{name}(d_model={d}, n_heads={h}, bias={bias}): {mistakes[got]}")
            raise CheckFailed(
                f"{name}(d_model={d}, n_heads={h}, bias={bias}) returned {got}; count "
                "W_Q, W_K, W_V, W_O (and their biases when bias=True)."
            )
    _passed("mha_param_count: right for three shapes, with and without biases.")


# --------------------------------------------------------------------------- looking at heads


def _head_weights(seed: int, batch: int = 2, heads: int = 3, n: int = 5) -> np.ndarray:
    """Causal attention weights with some exact zeros and some one-hot rows."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=2.0, size=(batch, heads, n, n))
    weights = A.softmax(np.where(A.causal_mask(n), scores, -np.inf))
    weights[0, 0, 2] = np.eye(n)[1]  # a one-hot row
    return weights


def check_entropy(entropy_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): entropy in nats of every attention row, (..., n_k) -> (...)."""
    name = "entropy"
    w = _head_weights(0)
    got = _as_array(_call(entropy_fn, name, w.copy()), name)
    _expect_shape(got, w.shape[:-1], name, "one entropy per row, shape (..., n_q)")
    expected = H.row_entropy(w)
    if _close(got, expected):
        _passed("entropy: natural log, 0 * log 0 counted as 0, one value per query row.")
        return
    if np.isnan(got).any():
        raise CheckFailed(
            f"{name}: masked keys have weight 0 and 0 * log(0) gives NaN; count "
            "those terms as 0 (only take the log where the weight is > 0)."
        )
    _match_mistake(
        got,
        [
            (
                -expected,
                f"{name}: your entropies are negative: entropy is MINUS the sum of w * log(w).",
            ),
            (
                expected / np.log(2),
                f"{name}: you used log base 2 (bits); use the natural log (nats), np.log.",
            ),
            (
                -(w * np.log(np.where(w > 0, w, 1.0))).sum(axis=-2),
                f"{name}: you summed over the queries (axis -2); each row's entropy is a sum "
                "over its keys, the last axis.",
            ),
            (
                expected / w.shape[-1],
                f"{name}: you averaged over the keys; entropy is a sum over the keys, not a mean.",
            ),
        ],
    )
    raise CheckFailed(
        f"{name}: wrong values; a uniform row over k keys should give log(k) and a one-hot row 0."
    )


def check_previous_token_score(score_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): mean weight on the previous token, per head."""
    name = "previous_token_score"
    w = _head_weights(1)
    got = _as_array(_call(score_fn, name, w.copy()), name)
    _expect_shape(got, (w.shape[1],), name, "one score per head, shape (heads,)")
    expected = H.offset_score(w, -1)
    if _close(got, expected):
        _passed("previous_token_score: mean of w[i, i-1] over queries 1..n-1, per head.")
        return
    n = w.shape[-1]
    wrap = np.stack([w[..., i, (i - 1) % n] for i in range(n)], axis=-1).mean(axis=(0, 2))
    zero_first = np.stack([w[..., i, i - 1] if i else 0 * w[..., 0, 0] for i in range(n)], -1)
    _match_mistake(
        got,
        [
            (
                H.offset_score(w, 0),
                f"{name}: you scored the diagonal (each token attending to "
                "itself); the previous token of query i is key i-1.",
            ),
            (
                H.offset_score(w, 1),
                f"{name}: you scored the next token (key i+1); the previous "
                "token of query i is key i-1.",
            ),
            (
                wrap,
                f"{name}: query 0 has no previous token, but index -1 wrapped around to the "
                "last key; leave query 0 out.",
            ),
            (
                zero_first.mean(axis=(0, 2)),
                f"{name}: query 0 has no previous token; leave it "
                "out of the average instead of counting it as 0.",
            ),
            (
                np.tril(w, k=-1)[..., 1:, :].sum(axis=-1).mean(axis=(0, 2)) if n > 1 else None,
                f"{name}: you summed all earlier keys; score only the key right before the query.",
            ),
        ],
    )
    raise CheckFailed(
        f"{name}: wrong values; average w[b, h, i, i-1] over the batch and over "
        "queries i = 1..n-1, one number per head."
    )


def check_head_similarity(similarity_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): cosine similarity between heads, (batch, heads, n, n) -> (h, h)."""
    name = "head_similarity"
    w = _head_weights(2, heads=4)
    got = _as_array(_call(similarity_fn, name, w.copy()), name)
    heads = w.shape[1]
    _expect_shape(got, (heads, heads), name, "a (heads, heads) matrix")
    expected = H.head_similarity(w)
    if _close(got, expected, tol=1e-6):
        _passed("head_similarity: cosine of the flattened patterns, 1 on the diagonal.")
        return
    flat = np.moveaxis(w, 1, 0).reshape(heads, -1)
    mixed = w.reshape(heads, -1)
    mixed = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
    _match_mistake(
        got,
        [
            (
                flat @ flat.T,
                f"{name}: these are raw dot products; divide by both heads' norms "
                "so that a head compared with itself gives 1.",
            ),
            (
                mixed @ mixed.T,
                f"{name}: reshaping (batch, heads, n, n) straight to (heads, -1) mixes heads "
                "from different batch items; bring the heads axis to the front first.",
            ),
        ],
        tol=1e-6,
    )
    if not np.allclose(np.diag(got), 1.0):
        raise CheckFailed(
            f"{name}: a head compared with itself must give 1; your diagonal is "
            f"{np.round(np.diag(got), 3).tolist()}."
        )
    raise CheckFailed(
        f"{name}: wrong values; flatten each head's weights over batch and "
        "queries into one vector, then take cosine similarities."
    )


# --- notebook 05 ---------------------------------------------------------------


def check_softmax_backward(
    softmax_backward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> None:
    """Exercise (notebook 05): dL/dscores from p = softmax(scores) (last axis) and dL/dp."""
    from .backprop import softmax_backward

    name = "softmax_backward"
    rng = np.random.default_rng(5)
    p = A.softmax(rng.normal(size=(2, 3, 4, 5)))  # (batch, heads, n_q, n_k)
    g = rng.normal(size=p.shape)
    got = _as_array(_call(softmax_backward_fn, name, p.copy(), g.copy()), name)
    _expect_shape(got, p.shape, name, "a gradient shaped like the weights")
    expected = softmax_backward(p, g)
    if _close(got, expected, 1e-9):
        _passed("softmax_backward: p * (g - sum(g * p)) along the keys; matches lib.")
        return
    _match_mistake(
        got,
        [
            (
                p * g,
                f"{name}: only the diagonal of the Jacobian is there; every score moves every "
                "weight of its row, so subtract the row's sum of g * p from g first.",
            ),
            (
                p * (1 - p) * g,
                f"{name}: p * (1 - p) is only the diagonal of the softmax Jacobian; the "
                "off-diagonal terms -p_i p_j are missing.",
            ),
            (
                g - (g * p).sum(axis=-1, keepdims=True),
                f"{name}: multiply by p at the end: a weight of 0 must pass no gradient back.",
            ),
            (
                softmax_backward(p, g, axis=-2),
                f"{name}: the sum runs over the wrong axis; softmax normalised the keys, "
                "the last axis.",
            ),
            (
                -expected,
                f"{name}: the sign is flipped.",
            ),
        ],
        tol=1e-9,
    )
    if not np.allclose(got.sum(axis=-1), 0.0, atol=1e-9):
        raise CheckFailed(
            f"{name}: each row of the gradient should sum to 0 (adding a constant to a row of "
            "scores changes nothing); yours does not."
        )
    raise CheckFailed(f"{name}: wrong values; compare with the Jacobian derived above.")


def _ce_case():
    rng = np.random.default_rng(50)
    logits = rng.normal(size=(2, 5, 4))  # (batch, n, classes)
    targets = rng.integers(0, 4, size=(2, 5))
    targets[:, 0] = -1  # not scored
    targets[1, 3] = -1
    return logits, targets


def check_cross_entropy_grad(grad_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 05): dL/dlogits of the mean cross-entropy over scored answers."""
    from .tiny import cross_entropy

    name = "cross_entropy_grad"
    logits, targets = _ce_case()
    got = _as_array(_call(grad_fn, name, logits.copy(), targets.copy()), name)
    _expect_shape(got, logits.shape, name, "a gradient shaped like the logits")
    _, expected = cross_entropy(logits, targets)
    if _close(got, expected, 1e-9):
        _passed("cross_entropy_grad: (softmax - one-hot) / scored count, 0 where not scored.")
        return
    scored = targets != -1
    count = scored.sum()
    probs = A.softmax(logits)
    onehot = np.eye(logits.shape[-1])[np.where(scored, targets, 0)]
    wrong_onehot = np.eye(logits.shape[-1])[targets]  # -1 picks the last class
    _match_mistake(
        got,
        [
            (
                expected * count,
                f"{name}: the loss is a mean over the scored answers, so divide by their count.",
            ),
            (
                expected * count / targets.size,
                f"{name}: divide by the number of *scored* answers, not by all positions.",
            ),
            (
                (probs - wrong_onehot) / count,
                f"{name}: a target of -1 means 'not scored': those positions must get a zero "
                "gradient, not be treated as the last class.",
            ),
            (
                (probs - onehot) / count,
                f"{name}: positions whose target is -1 are not scored; their gradient must be 0.",
            ),
            (
                probs * scored[..., None] / count,
                f"{name}: subtract 1 at the target class (softmax minus one-hot).",
            ),
            (-expected, f"{name}: the sign is flipped: it is softmax minus one-hot."),
        ],
        tol=1e-9,
    )
    raise CheckFailed(f"{name}: wrong values; the gradient is (softmax - one-hot) / count.")


def check_adam_step(adam_step_fn: Callable) -> None:
    """Exercise (notebook 05): one Adam update.

    ``adam_step_fn(param, grad, m, v, t, lr, beta1, beta2, eps) -> (param, m, v)``, with t the
    number of this step, starting at 1.
    """
    name = "adam_step"
    rng = np.random.default_rng(7)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    param = rng.normal(size=(3, 4))
    m = np.zeros_like(param)
    v = np.zeros_like(param)
    ref_p, ref_m, ref_v = param.copy(), m.copy(), v.copy()
    for t in (1, 2, 3):
        grad = rng.normal(size=param.shape)
        result = _call(
            adam_step_fn, name, param.copy(), grad, m.copy(), v.copy(), t, lr, b1, b2, eps
        )
        if not isinstance(result, tuple) or len(result) != 3:
            raise CheckFailed(
                f"{name} should return a tuple (param, m, v), got {type(result).__name__}."
            )
        got_p, got_m, got_v = (_as_array(x, name) for x in result)
        for arr, what in ((got_p, "param"), (got_m, "m"), (got_v, "v")):
            _expect_shape(arr, param.shape, name, f"the new {what}")
        new_m = b1 * ref_m + (1 - b1) * grad
        new_v = b2 * ref_v + (1 - b2) * grad**2
        m_hat, v_hat = new_m / (1 - b1**t), new_v / (1 - b2**t)
        new_p = ref_p - lr * m_hat / (np.sqrt(v_hat) + eps)
        if not _close(got_m, new_m, 1e-10):
            if _close(got_m, b1 * ref_m + grad, 1e-10):
                raise CheckFailed(
                    f"{name}: m should be a running *average*: weight the new gradient "
                    "by (1 - beta1)."
                )
            raise CheckFailed(
                f"{name}: m is wrong at step t={t}; it is the running average of the gradient."
            )
        if not _close(got_v, new_v, 1e-10):
            if _close(got_v, b2 * ref_v + (1 - b2) * np.abs(grad), 1e-10):
                raise CheckFailed(f"{name}: v averages the *squared* gradient.")
            raise CheckFailed(
                f"{name}: v is wrong at step t={t}; it is the running average of grad**2."
            )
        if not _close(got_p, new_p, 1e-10):
            _match_mistake(
                got_p,
                [
                    (
                        ref_p - lr * new_m / (np.sqrt(new_v) + eps),
                        f"{name}: the bias correction is missing: divide m by (1 - beta1**t) "
                        "and v by (1 - beta2**t) before the update.",
                    ),
                    (
                        ref_p + lr * m_hat / (np.sqrt(v_hat) + eps),
                        f"{name}: the parameter moved uphill; subtract the step.",
                    ),
                    (
                        ref_p - lr * m_hat / (v_hat + eps),
                        f"{name}: divide by the square root of v_hat, not by v_hat.",
                    ),
                ],
                tol=1e-10,
            )
            if t > 1 and _close(
                got_p,
                ref_p
                - lr * (new_m / (1 - b1 ** (t - 1))) / (np.sqrt(new_v / (1 - b2 ** (t - 1))) + eps),
                1e-10,
            ):
                raise CheckFailed(
                    f"{name}: the bias correction uses the wrong t; t counts steps from 1."
                )
            raise CheckFailed(f"{name}: the new param is wrong at step t={t}.")
        param, m, v = got_p, got_m, got_v
        ref_p, ref_m, ref_v = new_p, new_m, new_v
    _passed("adam_step: running averages of g and g^2, bias-corrected, three steps match.")


# --- notebook 06 ---------------------------------------------------------------


def _small_trained_model():
    """A 4-head tiny model trained briefly on the two-lookup task (deterministic)."""
    from . import tiny

    rng = np.random.default_rng(6)
    task = dict(seq_len=8, vocab_size=5, offsets=(1, 3))
    model = tiny.init_tiny_model(5, 8, 16, 4, 5, rng, n_slots=2)
    data = tiny.copy_offsets_task(64, rng=np.random.default_rng(60), **task)

    def batch(r):
        return tiny.copy_offsets_task(32, rng=r, **task)

    tiny.train(model, batch, data, 40, rng, lr=0.02, eval_every=40)
    return model, data


def check_ablation_drops(drops_fn: Callable) -> None:
    """Exercise (notebook 06): ``drops_fn(model, ids, targets) -> (heads,)`` accuracy drops."""
    from . import pruning, tiny

    name = "ablation_drops"
    model, (ids, targets) = _small_trained_model()
    got = _as_array(_call(drops_fn, name, model, ids, targets), name)
    _expect_shape(got, (model.n_heads,), name, "one drop per head")
    expected = pruning.ablation_drops(model, ids, targets)
    if _close(got, expected, 1e-9):
        _passed("ablation_drops: base accuracy minus accuracy with one head off, per head.")
        return
    base = tiny.accuracy(model, ids, targets)
    alone = np.array(
        [tiny.accuracy(model, ids, targets, np.eye(model.n_heads)[h]) for h in range(model.n_heads)]
    )
    _match_mistake(
        got,
        [
            (
                -expected,
                f"{name}: the sign is flipped: a head that helps should have a positive drop.",
            ),
            (
                base - expected,
                f"{name}: these are the accuracies with each head off; subtract them from the "
                "accuracy with all heads on.",
            ),
            (
                base - alone,
                f"{name}: you kept only head h (all the others off); switch off head h alone.",
            ),
            (
                1.0 - (base - expected),
                f"{name}: measure the drop from the model's own accuracy with all heads, "
                "not from 1.",
            ),
        ],
        tol=1e-9,
    )
    raise CheckFailed(
        f"{name}: wrong values; set entry h of an all-ones head mask to 0 and compare accuracies."
    )


def check_gradient_importance(importance_fn: Callable) -> None:
    """Exercise (notebook 06): ``importance_fn(model, ids, targets) -> (heads,)``.

    Importance = mean over sequences of |dL/d mask_h| at an all-ones mask; any positive
    multiple of it (a sum instead of a mean) is accepted, since only the ranking is used.
    """
    from . import pruning

    name = "gradient_importance"
    model, (ids, targets) = _small_trained_model()
    got = _as_array(_call(importance_fn, name, model, ids, targets), name)
    _expect_shape(got, (model.n_heads,), name, "one importance per head")
    expected = pruning.gradient_importance(model, ids, targets)

    def proportional(a, b):
        scale = (a @ b) / (b @ b)
        return scale > 0 and np.allclose(a, scale * b, rtol=1e-7, atol=1e-12 * np.abs(a).max())

    if proportional(got, expected):
        _passed("gradient_importance: mean over sequences of |dL/d mask_h|, per head.")
        return
    ones = np.ones((ids.shape[0], model.n_heads))
    _, grads = model.loss_and_grads(ids, targets, ones)
    per_seq = grads["head_mask"]  # (batch, heads)
    _, grads_zero = model.loss_and_grads(ids, targets, np.zeros_like(ones))
    checks_in_order = [
        (
            per_seq.sum(axis=0),
            f"{name}: take the absolute value: a head whose mask gradient is negative matters too.",
        ),
        (
            np.abs(per_seq.sum(axis=0)),
            f"{name}: take |gradient| per sequence before averaging; with one mask for the "
            "whole batch, sequences that pull in opposite directions cancel.",
        ),
        (
            np.abs(grads_zero["head_mask"]).sum(axis=0),
            f"{name}: measure the gradient at the model you have: all heads on (mask of ones), "
            "not off.",
        ),
    ]
    for wrong, message in checks_in_order:
        if np.all(np.isfinite(wrong)) and np.any(wrong != 0) and proportional(got, wrong):
            raise CheckFailed(message)
    raise CheckFailed(
        f"{name}: wrong values; pass a (batch, heads) mask of ones so the backward pass gives "
        "one gradient per sequence and head."
    )


def check_spearman(spearman_fn: Callable) -> None:
    """Exercise (notebook 06): Spearman rank correlation of two 1-D arrays, ties averaged."""
    from . import pruning

    name = "spearman"
    cases = [
        (np.array([0.30, 0.02, 0.11, 0.0, 0.0, 0.25]), np.array([0.9, 0.1, 0.7, 0.2, 0.3, 0.4])),
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0, 1000.0])),
        (np.array([3.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0])),
    ]
    for a, b in cases:
        got = _call(spearman_fn, name, a.copy(), b.copy())
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise CheckFailed(
                f"{name} should return one number, got {type(got).__name__}."
            ) from None
        expected = pruning.spearman(a, b)
        if abs(got - expected) < 1e-9:
            continue
        ordinal = lambda x: np.argsort(np.argsort(x, kind="stable"), kind="stable") + 1.0  # noqa: E731
        mistakes = [
            (
                float(np.corrcoef(a, b)[0, 1]),
                f"{name}: that is the Pearson correlation of the values; correlate their ranks.",
            ),
            (
                float(np.corrcoef(ordinal(a), ordinal(b))[0, 1]),
                f"{name}: tied values must share the mean of their ranks (two values tied for "
                "ranks 1 and 2 both get 1.5).",
            ),
            (
                float(np.corrcoef(np.argsort(a), np.argsort(b))[0, 1]),
                f"{name}: np.argsort gives the order, not the ranks; the rank of each value is "
                "the argsort of the argsort (then average the ties).",
            ),
            (-expected, f"{name}: the sign is flipped; rank both arrays in the same direction."),
        ]
        for wrong, message in mistakes:
            if abs(got - wrong) < 1e-9:
                raise CheckFailed(message)
        raise CheckFailed(
            f"{name}: for a={a.tolist()} and b={b.tolist()} expected {expected:.4f}, got {got:.4f}."
        )
    _passed("spearman: Pearson correlation of the ranks, ties averaged.")


# --- notebook 08 ---
# From NumPy to PyTorch. torch is imported inside these checks only, so that importing
# lib.checks stays fast for the notebooks that do not need it.


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _to_numpy(value, name: str, what: str) -> np.ndarray:
    """A tensor (detached) or anything array-like as a NumPy array."""
    if _is_tensor(value):
        value = value.detach().cpu().numpy()
    return _as_array(value, name, what)


def check_torch_attn_mask(to_torch_mask_fn: Callable) -> None:
    """Exercise (notebook 08): our boolean mask (True = may attend) -> nn.MultiheadAttention's
    boolean attn_mask (True = may NOT attend), as a torch tensor of the same shape."""
    import torch

    name = "to_torch_mask"
    rng = np.random.default_rng(8)
    masks = [A.causal_mask(4), rng.random((3, 5)) < 0.5, A.causal_mask(2, 6)]
    for mask in masks:
        got = _call(to_torch_mask_fn, name, mask.copy())
        if not _is_tensor(got):
            raise CheckFailed(
                f"{name}: return a torch.Tensor, not {type(got).__name__}; "
                "nn.MultiheadAttention does not accept NumPy arrays."
            )
        arr = got.detach().cpu().numpy()
        if arr.shape == mask.shape[::-1] and arr.shape != mask.shape:
            raise CheckFailed(
                f"{name}: your mask has shape {arr.shape}, transposed; keep ours "
                f"{mask.shape}: row i is query i, column j is key j."
            )
        _expect_shape(arr, mask.shape, name, "a mask of the same shape as ours")
        if got.dtype != torch.bool:
            if (
                got.dtype.is_floating_point
                and np.array_equal(np.isneginf(arr), ~mask)
                and np.all(arr[mask] == 0)
            ):
                raise CheckFailed(
                    f"{name}: that is a valid additive float mask (0 / -inf), but this "
                    "exercise asks for torch's boolean form: return a tensor of dtype torch.bool."
                )
            raise CheckFailed(
                f"{name}: return a boolean tensor (dtype torch.bool), got {got.dtype}; a float "
                "attn_mask is added to the scores, so 0/1 values would not block anything."
            )
        if np.array_equal(arr, mask):
            raise CheckFailed(
                f"{name}: you passed our mask through unchanged, but in nn.MultiheadAttention "
                "True means 'may NOT attend': every True of ours must become False and the "
                "other way round."
            )
        if mask.shape[0] == mask.shape[1] and np.array_equal(arr, (~mask).T):
            raise CheckFailed(
                f"{name}: your mask is transposed: row i must be query i and column j key j, "
                "as in ours."
            )
        if not np.array_equal(arr, ~mask):
            raise CheckFailed(
                f"{name}: wrong entries for the mask {mask.astype(int).tolist()}; torch's entry "
                "(i, j) must be True exactly where query i may NOT attend to key j."
            )
    _passed("to_torch_mask: same shape, dtype torch.bool, True where a query may NOT attend.")


def _bridge_params(bias: bool, seed: int = 80) -> A.MHAParams:
    return A.init_mha_params(6, 2, np.random.default_rng(seed), bias=bias)


def check_pack_in_proj(pack_fn: Callable) -> None:
    """Exercise (notebook 08): our W_q, W_k, W_v (+ biases) -> torch's in_proj_weight
    (3 d_model, d_model) and in_proj_bias (3 d_model,) or None."""
    from . import torch_bridge as TB

    name = "pack_in_proj"
    for bias in (True, False):
        params = _bridge_params(bias)
        d = params.d_model
        result = _call(pack_fn, name, params)
        if not (isinstance(result, tuple | list) and len(result) == 2):
            raise CheckFailed(
                f"{name} should return a pair (in_proj_weight, in_proj_bias), "
                f"got {type(result).__name__}."
            )
        weight = _to_numpy(result[0], name, "in_proj_weight")
        want_w, want_b = TB.pack_in_proj(params)
        if weight.shape == (d, 3 * d):
            raise CheckFailed(
                f"{name}: in_proj_weight has shape {weight.shape}, but torch stores a "
                f"projection as (out_features, in_features): it must be (3 d_model, d_model) "
                f"= {(3 * d, d)}."
            )
        _expect_shape(weight, (3 * d, d), name, "in_proj_weight (3 d_model, d_model)")
        if not _close(weight, want_w):
            Ws = (params.W_q, params.W_k, params.W_v)
            _match_mistake(
                weight,
                [
                    (
                        np.concatenate(Ws, axis=0),
                        f"{name}: you stacked W_q, W_k, W_v as they are; torch computes "
                        "x @ W.T, so each block must be the transpose of ours.",
                    ),
                    (
                        np.concatenate([params.W_k.T, params.W_q.T, params.W_v.T]),
                        f"{name}: the blocks are in the wrong order: torch expects the query "
                        "block first, then the key block, then the value block.",
                    ),
                    (
                        np.concatenate(Ws, axis=1).reshape(3 * d, d),
                        f"{name}: reshaping does not transpose: the numbers end up in the "
                        "wrong places; each block must be the transpose of our matrix.",
                    ),
                ],
            )
            raise CheckFailed(
                f"{name}: in_proj_weight has the right shape but wrong values; "
                "x @ in_proj_weight.T must give [x @ W_q, x @ W_k, x @ W_v] side by side."
            )
        got_b = result[1]
        if want_b is None:
            if got_b is not None:
                raise CheckFailed(
                    f"{name}: these params have no biases (params.b_q is None), so "
                    "in_proj_bias must be None."
                )
            continue
        if got_b is None:
            raise CheckFailed(
                f"{name}: these params have biases, but your in_proj_bias is None: pack "
                "b_q, b_k and b_v as well."
            )
        got_b = _to_numpy(got_b, name, "in_proj_bias")
        _expect_shape(got_b, (3 * d,), name, "in_proj_bias (3 d_model,)")
        if not _close(got_b, want_b):
            _match_mistake(
                got_b,
                [
                    (
                        np.concatenate([params.b_k, params.b_q, params.b_v]),
                        f"{name}: the biases are in the wrong order: query, then key, "
                        "then value, as in the weight.",
                    ),
                ],
            )
            raise CheckFailed(f"{name}: in_proj_bias must hold b_q, b_k, b_v one after another.")
    _passed(
        "pack_in_proj: (3 d_model, d_model), the q, k, v blocks transposed and in order; "
        "biases packed, or None."
    )


def check_load_into_torch(load_fn: Callable) -> None:
    """Exercise (notebook 08): an nn.MultiheadAttention(batch_first=True) that holds our
    params and gives our outputs and per-head weights."""
    import torch
    from torch import nn

    from . import torch_bridge as TB

    name = "load_into_torch"
    rng = np.random.default_rng(81)
    for bias in (True, False):
        params = A.init_mha_params(8, 2, rng, bias=bias)
        x_q = rng.normal(size=(2, 3, 8))
        x_kv = rng.normal(size=(2, 5, 8))
        module = _call(load_fn, name, params)
        if not isinstance(module, nn.MultiheadAttention):
            raise CheckFailed(
                f"{name} should return an nn.MultiheadAttention, got {type(module).__name__}."
            )
        if module.embed_dim != 8 or module.num_heads != 2:
            raise CheckFailed(
                f"{name}: the module has embed_dim={module.embed_dim}, "
                f"num_heads={module.num_heads}; it needs params.d_model=8 and "
                "params.n_heads=2."
            )
        if not module.batch_first:
            raise CheckFailed(
                f"{name}: your module expects (seq, batch, embed), torch's default; our "
                "arrays are (batch, seq, d_model): create it with batch_first=True."
            )
        dtype = module.out_proj.weight.dtype
        want_out, want_w = A.multi_head_attention(x_q, x_kv, params)
        tol = 1e-10 if dtype == torch.float64 else 1e-5

        def run(m, dtype=dtype, x_q=x_q, x_kv=x_kv):
            tq, tkv = (torch.from_numpy(a).to(dtype) for a in (x_q, x_kv))
            with torch.no_grad():
                m_training = m.training
                m.eval()
                try:
                    out, w = m(tq, tkv, tkv, average_attn_weights=False)
                finally:
                    m.train(m_training)
            return out.double().numpy(), w.double().numpy()

        got_out, got_w = _call(run, name, module)
        if _close(got_out, want_out, tol) and _close(got_w, want_w, tol):
            if module.training and module.dropout > 0:
                raise CheckFailed(
                    f"{name}: the weights are right, but the module is in training mode with "
                    "dropout, so its outputs would be random: switch it to eval mode."
                )
            continue
        # What the usual mistakes give, built with the same weights.
        reference = TB.to_torch_mha(params, dtype)
        mistakes = []
        sd = {k: v.clone() for k, v in reference.state_dict().items()}
        for key, message in (
            (
                "in_proj_weight",
                "your queries/keys/values are wrong: torch computes x @ W.T, so "
                "in_proj_weight needs our W_q, W_k, W_v transposed (rows = output features).",
            ),
            (
                "out_proj.weight",
                "the output projection is wrong: out_proj computes x @ W.T, so it needs "
                "W_o transposed.",
            ),
        ):
            wrong = {k: v.clone() for k, v in sd.items()}
            if key == "in_proj_weight":
                wrong[key] = torch.cat(
                    [torch.from_numpy(W).to(dtype) for W in (params.W_q, params.W_k, params.W_v)]
                )
            else:
                wrong[key] = torch.from_numpy(params.W_o).to(dtype)
            m = TB.to_torch_mha(params, dtype)
            m.load_state_dict(wrong)
            mistakes.append((run(m)[0], message))
        if bias:
            no_bias = TB.to_torch_mha(
                A.MHAParams(params.W_q, params.W_k, params.W_v, params.W_o, params.n_heads), dtype
            )
            mistakes.append(
                (
                    run(no_bias)[0],
                    "the biases are missing: copy b_q, b_k, b_v into in_proj_bias and b_o "
                    "into out_proj.bias.",
                )
            )
        for wrong_out, message in mistakes:
            if _close(got_out, wrong_out, tol):
                raise CheckFailed(f"{name}: {message}")
        raise CheckFailed(
            f"{name}: the module's outputs differ from A.multi_head_attention's (largest "
            f"difference {np.abs(got_out - want_out).max():.3g}); copy every one of our "
            "weights into the module's parameters."
        )
    _passed(
        "load_into_torch: nn.MultiheadAttention gives our outputs and per-head weights, "
        "with and without biases, for cross-attention."
    )


# --- notebook 07 ---
# Real pretrained heads: the head-type score, finding the previous-token head, and the
# coreference probe. The checks use small synthetic attention stacks with padding (no model
# needed), built so that each realistic mistake gives a different answer.


def _padded_attention(seed: int, shape_lead: tuple[int, ...], lengths: Sequence[int], n: int):
    """Random attention weights (*shape_lead, batch, heads, n, n) over each sentence's real
    keys, and the (batch, n) mask of real tokens."""
    rng = np.random.default_rng(seed)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]  # (batch, n)
    scores = rng.normal(scale=1.5, size=shape_lead + (len(lengths),) + (3, n, n))
    return scores, mask


def _weights_from_scores(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return A.softmax(np.where(mask[:, None, None, :], scores, -np.inf))


def check_target_score(score_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]):
    """Exercise (notebook 07): mean weight on target keys over the chosen queries, per head."""
    from . import head_types as T

    name = "target_score"
    lengths, n = [6, 3, 5], 6
    scores, mask = _padded_attention(70, (), lengths, n)
    w = _weights_from_scores(scores, mask)  # (batch, heads, n, n)
    tokens = [["[CLS]"] + ["w"] * (length - 2) + ["[SEP]"] for length in lengths]
    for kind in ("previous", "[SEP]"):
        targets, queries = T.target_masks(tokens, n)[kind]
        got = _as_array(_call(score_fn, name, w.copy(), targets.copy(), queries.copy()), name)
        _expect_shape(got, (w.shape[1],), name, "one score per head, shape (heads,)")
        expected = T.target_score(w, targets, queries)
        if _close(got, expected):
            continue
        on_target = (w * targets[:, None]).sum(axis=-1)  # (batch, heads, n_q)
        qb = queries[:, None, :]
        per_sentence = (on_target * qb).sum(axis=-1) / np.maximum(qb.sum(axis=-1), 1)
        read_columns = (np.swapaxes(w, -1, -2) * targets[:, None]).sum(axis=-1)
        _match_mistake(
            got,
            [
                (
                    on_target.mean(axis=(0, 2)),
                    f"{name}: you averaged over every query position, padding and queries "
                    "without a target included; average only where `queries` is True.",
                ),
                (
                    (on_target * qb).sum(axis=(0, 2)),
                    f"{name}: you summed the weights over the queries; divide by the number "
                    "of chosen queries to get a mean in [0, 1].",
                ),
                (
                    per_sentence[queries.any(axis=1)].mean(axis=0),
                    f"{name}: you averaged within each sentence first, so a short sentence "
                    "counts as much as a long one; average over all chosen (sentence, query) "
                    "pairs at once.",
                ),
                (
                    (read_columns * qb).sum(axis=(0, 2)) / queries.sum(),
                    f"{name}: you read the weights column-wise; weights[b, h, i, j] is what "
                    "query i gives key j, so sum over the last axis (the keys).",
                ),
            ],
        )
        raise CheckFailed(
            f"{name}: wrong values for the {kind!r} targets; for each head, add up the "
            "weight each chosen query puts on its target keys, then average over those queries."
        )
    _passed("target_score: mean weight on the targets over exactly the chosen queries, per head.")


def _planted_heads(seed: int, prev: tuple[int, int], nxt: tuple[int, int]):
    """(layers=3, batch, heads=4, n, n) weights with a previous-token head at ``prev`` and
    a next-token head at ``nxt``; the rest random. Returns (weights, mask)."""
    lengths, n = [7, 4, 6], 7
    rng = np.random.default_rng(seed)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]
    scores = rng.normal(scale=1.0, size=(3, len(lengths), 4, n, n))
    i = np.arange(n)
    scores[prev[0], :, prev[1]] += 6.0 * (i[None, :] == i[:, None] - 1)
    scores[nxt[0], :, nxt[1]] += 6.0 * (i[None, :] == i[:, None] + 1)
    return _weights_from_scores(scores, mask), mask


def _describe(value) -> str:
    """A short description of a wrong answer: its type, and its shape if it has one."""
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 40 else type(value).__name__


def check_find_previous_token_head(find_fn: Callable[[np.ndarray, np.ndarray], tuple]):
    """Exercise (notebook 07): the (layer, head) with the highest previous-token score."""
    name = "find_previous_token_head"
    for seed, prev, nxt in ((71, (2, 1), (0, 3)), (72, (0, 2), (1, 0))):
        w, mask = _planted_heads(seed, prev, nxt)
        got = _call(find_fn, name, w.copy(), mask.copy())
        if isinstance(got, int | np.integer):
            raise CheckFailed(
                f"{name}: you returned the single number {int(got)}; return a "
                "(layer, head) pair of indices instead of a flat index into the scores."
            )
        if not (isinstance(got, tuple | list | np.ndarray) and len(got) == 2):
            raise CheckFailed(f"{name}: return a pair (layer, head), got {_describe(got)}.")
        try:
            got = (int(got[0]), int(got[1]))
        except (TypeError, ValueError):
            raise CheckFailed(
                f"{name}: return two integers (layer, head), got a pair of "
                f"{_describe(got[0])} and {_describe(got[1])}."
            ) from None
        if got == prev:
            continue
        if got == (prev[1], prev[0]):
            raise CheckFailed(
                f"{name}: you returned (head, layer); the layer comes first, as in "
                "attentions[layer, batch, head]."
            )
        if got == nxt:
            raise CheckFailed(
                f"{name}: you found the next-token head; the previous token of query i is key i-1."
            )
        if got == (prev[0] + 1, prev[1] + 1):
            raise CheckFailed(f"{name}: indices start at 0 in NumPy; you counted from 1.")
        raise CheckFailed(
            f"{name}: ({got[0]}, {got[1]}) is not the head that puts the most weight on the "
            "previous token; score every head, then take the largest."
        )
    _passed("find_previous_token_head: found the planted previous-token head twice.")


def _coreference_case(seed: int):
    """(layers=2, batch=5, heads=3, n, n) weights and pronoun/antecedent/distractor
    positions, with one exact tie planted."""
    lengths, n = [8, 6, 8, 7, 5], 8
    scores, mask = _padded_attention(seed, (2,), lengths, n)
    w = _weights_from_scores(scores, mask)
    rng = np.random.default_rng(seed + 1)
    pronoun, antecedent, distractor = [], [], []
    for length in lengths:
        a, d, p = rng.choice(np.arange(1, length - 1), size=3, replace=False)
        pronoun.append(p)
        antecedent.append(a)
        distractor.append(d)
    p, a, d = (np.array(x) for x in (pronoun, antecedent, distractor))
    tie = w[0, 0, 1, p[0], a[0]] + w[0, 0, 1, p[0], d[0]]
    w[0, 0, 1, p[0], a[0]] = w[0, 0, 1, p[0], d[0]] = tie / 2  # layer 0, sentence 0, head 1
    return w, p, a, d


def check_coreference_accuracy(acc_fn: Callable[..., np.ndarray]) -> None:
    """Exercise (notebook 07): per head, how often the pronoun prefers its antecedent."""
    from . import head_types as T

    name = "coreference_accuracy"
    for seed in (73, 74):
        w, p, a, d = _coreference_case(seed)
        got = _as_array(_call(acc_fn, name, w.copy(), p.copy(), a.copy(), d.copy()), name)
        _expect_shape(got, (w.shape[0], w.shape[2]), name, "one accuracy per head, (layers, heads)")
        expected = T.coreference_accuracy(w, p, a, d)
        if _close(got, expected):
            continue
        b = np.arange(len(p))
        wh = np.moveaxis(w, 2, -1)  # (layers, batch, n, n, heads)
        to_a, to_d = wh[:, b, p, a], wh[:, b, p, d]
        from_a, from_d = wh[:, b, a, p], wh[:, b, d, p]
        _match_mistake(
            got,
            [
                (
                    (to_a >= to_d).mean(axis=1),
                    f"{name}: a tie is not a win; count a sentence only when the antecedent "
                    "gets strictly more weight than the distractor.",
                ),
                (
                    (from_a > from_d).mean(axis=1),
                    f"{name}: you compared how much the nouns attend to the pronoun; we want "
                    "the pronoun's row: weights[..., pronoun, antecedent] vs "
                    "weights[..., pronoun, distractor].",
                ),
                (
                    (to_a - to_d).mean(axis=1),
                    f"{name}: you averaged the weight differences; count the fraction of "
                    "sentences where the antecedent wins instead.",
                ),
                (
                    (to_a > to_d).sum(axis=1),
                    f"{name}: you counted wins; divide by the number of sentences to get a "
                    "fraction.",
                ),
            ],
        )
        raise CheckFailed(
            f"{name}: wrong values; for each head, the fraction of sentences in which "
            "weights[layer, b, head, pronoun[b], antecedent[b]] beats the distractor's."
        )
    _passed("coreference_accuracy: strict wins of the antecedent, as a fraction per head.")
