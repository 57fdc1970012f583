"""Attention on plain Python lists (notebook 01), written for reading, not for speed.

A matrix is a list of rows, each a list of floats: ``A[i][j]``. Conventions and errors are
:mod:`lib.attention`'s, except that the mask is one (n_q, n_k) list of True/False.
"""

from __future__ import annotations

import math
import numbers
import random

import numpy as np

from . import _validate as V_

Matrix = list[list[float]]
Mask = list[list[bool]]

NEG_INF = float("-inf")


def shape(A: Matrix, name: str = "matrix") -> tuple[int, int]:
    """(rows, cols) of a list-of-lists matrix (``[]``: 0 and 0); ragged ones are refused."""
    return _list_shape(A, name)


def zeros(rows: int, cols: int) -> Matrix:
    return [[0.0] * cols for _ in range(rows)]


def random_matrix(rows: int, cols: int, rng: random.Random, scale: float = 1.0) -> Matrix:
    """A rows x cols matrix of Gaussian numbers with standard deviation ``scale``, drawn from
    ``rng``, a ``random.Random(seed)``."""
    return [[rng.gauss(0.0, scale) for _ in range(cols)] for _ in range(rows)]


def transpose(A: Matrix) -> Matrix:
    rows, cols = shape(A)
    return [[A[i][j] for i in range(rows)] for j in range(cols)]


def matmul(A: Matrix, B: Matrix) -> Matrix:
    """(m, n) @ (n, p) -> (m, p)."""
    m, n = shape(A)
    n2, p = shape(B)
    if n != n2:
        raise ValueError(f"matmul: inner dimensions differ, A is ({m}, {n}) and B is ({n2}, {p})")
    B_cols = transpose(B)
    return [[sum(a * b for a, b in zip(row, col, strict=True)) for col in B_cols] for row in A]


def add(A: Matrix, B: Matrix) -> Matrix:
    if shape(A) != shape(B):
        raise ValueError(f"add: shapes differ, {shape(A)} and {shape(B)}")
    return [[a + b for a, b in zip(ra, rb, strict=True)] for ra, rb in zip(A, B, strict=True)]


def scale(A: Matrix, factor: float) -> Matrix:
    return [[a * factor for a in row] for row in A]


def softmax(row: list[float]) -> list[float]:
    """Softmax of one row: the maximum is subtracted first, so ``exp`` cannot overflow;
    ``-inf`` (masked keys) gets weight 0, and an all ``-inf`` row all zeros, not 0/0 = NaN."""
    _list_row(row, "softmax input")
    finite = [x for x in row if x != NEG_INF]
    if not finite:
        return [0.0] * len(row)
    top = max(finite)
    exps = [math.exp(x - top) if x != NEG_INF else 0.0 for x in row]
    total = sum(exps)
    return [e / total for e in exps]


def causal_mask(n: int) -> Mask:
    """n x n mask: query i may attend to keys 0..i (itself and the past)."""
    n = V_.integer(n, "n", low=0)
    return [[j <= i for j in range(n)] for i in range(n)]


def attention(Q: Matrix, K: Matrix, V: Matrix, mask: Mask | None = None) -> tuple[Matrix, Matrix]:
    """Scaled dot-product attention on lists.

    Q: (n_q, d_k), K: (n_k, d_k), V: (n_k, d_v), mask: (n_q, n_k) booleans or None.
    Returns (output (n_q, d_v), weights (n_q, n_k)); ``Q = []`` gives ``([], [])``.
    """
    n_q, d_k = _check_attention_inputs(Q, K, V, mask)
    if n_q == 0:
        return [], []
    scores = _scores(Q, K, d_k, mask)
    if scores is None:
        raise _list_overflow(V_.SCORES, {"q": Q, "k": K})
    weights = [softmax(row) for row in scores]  # (n_q, n_k)
    return matmul(weights, V), weights  # weighted means of V's rows: they cannot overflow


def _check_attention_inputs(Q, K, V, mask) -> tuple[int, int]:
    n_q, d_k = _list_matrix(Q, "Q")
    n_k, d_k2 = _list_matrix(K, "K")
    n_v, d_v = _list_matrix(V, "V")
    if n_q and n_k:
        V_.same_d_k((n_q, d_k), (n_k, d_k2), ("Q", "K"))
    V_.same_keys((n_k, d_k2), (n_v, d_v), ("K", "V"))
    if mask is not None:
        _list_mask(mask, n_q, n_k)
    if n_q and not n_k:
        raise ValueError(
            "attention on lists got queries but no keys (K = V = []): the output's width d_v "
            "is unknown; multi_head_attention (which knows it from W_v) gives zeros"
        )
    return n_q, d_k


def _scores(Q: Matrix, K: Matrix, d_k: int, mask: Mask | None) -> Matrix | None:
    """Q K^T / sqrt(d_k) with masked entries set to -inf; None if a score overflows."""
    scores = scale(matmul(Q, transpose(K)), 1.0 / math.sqrt(d_k))  # (n_q, n_k)
    if not _all_finite(scores):
        return None
    if mask is not None:
        scores = [
            [s if allowed else NEG_INF for s, allowed in zip(srow, mrow, strict=True)]
            for srow, mrow in zip(scores, mask, strict=True)
        ]
    return scores


def _all_finite(A: Matrix) -> bool:
    return all(math.isfinite(x) for row in A for x in row)


def split_columns(A: Matrix, n_parts: int) -> list[Matrix]:
    """Cut the columns of A into ``n_parts`` equal blocks (one per head)."""
    rows, cols = shape(A)
    n_parts = V_.integer(n_parts, "n_parts", low=1)
    if cols % n_parts:
        raise ValueError(f"cannot split {cols} columns into {n_parts} equal parts")
    width = cols // n_parts
    return [[row[p * width : (p + 1) * width] for row in A] for p in range(n_parts)]


def concat_columns(blocks: list[Matrix]) -> Matrix:
    """Join matrices side by side: the 'concat' of the heads."""
    rows = {shape(b)[0] for b in blocks}
    if len(rows) != 1:
        raise ValueError(f"concat: blocks have different numbers of rows: {sorted(rows)}")
    return [sum((b[i] for b in blocks), []) for i in range(rows.pop())]


def multi_head_attention(
    X_q: Matrix,
    X_kv: Matrix,
    W_q: Matrix,
    W_k: Matrix,
    W_v: Matrix,
    W_o: Matrix,
    n_heads: int,
    mask: Mask | None = None,
) -> tuple[Matrix, list[Matrix]]:
    """Multi-head attention on lists, one head at a time: head h uses column block h (width
    d_k = d_model / n_heads) of W_q, W_k and W_v; the heads' outputs are concatenated and
    projected by W_o. Returns (output (n_q, d_model), [weights (n_q, n_k) of each head]).
    """
    weights_in = {"W_q": W_q, "W_k": W_k, "W_v": W_v, "W_o": W_o}
    shapes = {name: _list_matrix(W, name) for name, W in weights_in.items()}
    d_model = shapes["W_q"][0]
    for name, shape in shapes.items():
        V_.square(shape, name, d_model)
    V_.heads(d_model, n_heads)
    n_q, width_q = _list_matrix(X_q, "X_q")
    n_k, width_kv = _list_matrix(X_kv, "X_kv")
    for name, rows, width in (("X_q", n_q, width_q), ("X_kv", n_k, width_kv)):
        if rows:
            V_.width((rows, width), name, d_model)
    if mask is not None:
        _list_mask(mask, n_q, n_k)
    if n_q == 0 or n_k == 0:
        return zeros(n_q, d_model), [[[] for _ in range(n_q)] for _ in range(n_heads)]
    Q, K, V = matmul(X_q, W_q), matmul(X_kv, W_k), matmul(X_kv, W_v)
    for part, P, X, name in (("q", Q, X_q, "X_q"), ("k", K, X_kv, "X_kv"), ("v", V, X_kv, "X_kv")):
        if not _all_finite(P):
            W_name = "W_" + part
            raise _list_overflow(V_.stage(part, name, False), {name: X, W_name: weights_in[W_name]})
    outputs, weights = [], []
    d_k = d_model // n_heads
    for Q_h, K_h, V_h in zip(*(split_columns(P, n_heads) for P in (Q, K, V)), strict=True):
        scores = _scores(Q_h, K_h, d_k, mask)
        if scores is None:
            raise _list_overflow(V_.SCORES, {"q": Q_h, "k": K_h})
        w_h = [softmax(row) for row in scores]  # (n_q, n_k)
        outputs.append(matmul(w_h, V_h))
        weights.append(w_h)
    out = matmul(concat_columns(outputs), W_o)
    if not _all_finite(out):
        raise _list_overflow(V_.OUTPUT, {"v": V, "W_o": W_o})
    return out, weights


# --------------------------------------------------------------------------- checks


def _list_mask(mask, n_q: int, n_k: int) -> None:
    """A list mask: (n_q, n_k) lists of True/False (the list version does not broadcast)."""
    rows, cols = _list_matrix(mask, "mask", booleans=True)
    if rows != n_q or (rows and cols != n_k):  # [] is a mask of 0 rows, whatever n_k is
        raise ValueError(
            f"mask of shape {(rows, cols)} does not match the attention scores' shape "
            f"{(n_q, n_k)} (n_q, n_k)"
        )


def _list_matrix(A, name: str, booleans: bool = False) -> tuple[int, int]:
    """(rows, cols) of a list-of-lists matrix of finite real numbers (True/False with
    ``booleans``)."""
    rows, cols = _list_shape(A, name)
    for i, row in enumerate(A):
        for j, value in enumerate(row):
            is_bool = isinstance(value, bool | np.bool_)
            if booleans and not is_bool:
                raise V_.not_boolean(
                    f"{value!r} ({type(value).__name__}) at index {(i, j)}", "list"
                )
            if not booleans and (is_bool or not isinstance(value, numbers.Real)):
                raise ValueError(
                    f"{name} must hold real numbers, got {value!r} ({type(value).__name__}) "
                    f"at index {(i, j)}"
                )
            if not booleans and not math.isfinite(value):
                raise ValueError(V_.nonfinite_message(name, (i, j), (rows, cols)))
    return rows, cols


def _list_shape(A, name: str) -> tuple[int, int]:
    """(rows, cols) of a list of equally long lists, entries unchecked (see _list_matrix)."""
    if isinstance(A, np.ndarray):
        raise ValueError(
            f"{name} must be a list of rows (lists), got a NumPy array: pass {name}.tolist()"
        )
    if not isinstance(A, list) or not all(isinstance(row, list) for row in A):
        raise ValueError(f"{name} must be a list of rows (lists), got {type(A).__name__}")
    cols = len(A[0]) if A else 0
    for i, row in enumerate(A):
        if len(row) != cols:
            raise ValueError(
                f"{name} is ragged: row 0 has {cols} entries but row {i} has {len(row)}"
            )
    return len(A), cols


def _list_row(row, name: str) -> None:
    """A list of real numbers for a softmax: -inf (masked) allowed, NaN and +inf not."""
    if not isinstance(row, list):
        raise ValueError(f"{name} must be a list of numbers, got {type(row).__name__}")
    for j, value in enumerate(row):
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            raise ValueError(
                f"{name} must hold real numbers, got {value!r} ({type(value).__name__}) "
                f"at index {(j,)}"
            )
        if math.isnan(value) or value == math.inf:
            raise ValueError(
                f"{name} contains NaN or +inf (first at index {(j,)}, shape {(len(row),)})"
            )


def _list_overflow(what: str, operands: dict[str, list]) -> ValueError:
    """:func:`overflow` for list matrices (Python floats are float64)."""
    return V_.overflow(what, np.float64, {n: np.array(m, dtype=float) for n, m in operands.items()})
