"""Attention on plain Python lists (notebook 01).

A matrix is a list of rows, each row a list of floats: ``A[i][j]``. Everything here is
written for reading, not for speed; notebook 02 replaces it with NumPy and proves the two
agree.

Conventions (the same as the rest of the course):
- row vectors: ``X @ W`` with ``W`` of shape (d_in, d_out);
- masks hold booleans, ``True`` = "this query may attend to this key";
- a query row that may attend to no key at all gets weights of 0 everywhere and an output
  of 0 (see :func:`softmax`), never NaN.
"""

from __future__ import annotations

import math
import random

Matrix = list[list[float]]
Mask = list[list[bool]]

NEG_INF = float("-inf")


def shape(A: Matrix) -> tuple[int, int]:
    """(rows, cols) of a list-of-lists matrix; raise ValueError if it is ragged or empty."""
    if not isinstance(A, list) or not A or not all(isinstance(row, list) for row in A):
        raise ValueError("expected a non-empty list of rows (a list of lists)")
    cols = len(A[0])
    for i, row in enumerate(A):
        if len(row) != cols:
            raise ValueError(f"ragged matrix: row 0 has {cols} entries but row {i} has {len(row)}")
    return len(A), cols


def zeros(rows: int, cols: int) -> Matrix:
    return [[0.0] * cols for _ in range(rows)]


def random_matrix(rows: int, cols: int, rng: random.Random, scale: float = 1.0) -> Matrix:
    """A rows x cols matrix of Gaussian numbers with standard deviation ``scale``.

    ``rng`` is a ``random.Random(seed)``: passing it in keeps every draw reproducible.
    """
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
    """Softmax of one row, stable and mask-aware.

    Subtracting the row's maximum first keeps ``exp`` from overflowing. Entries equal to
    ``-inf`` (masked keys) get weight 0. A row that is *entirely* ``-inf`` (a query with
    nothing it may attend to) returns all zeros: a defined "attend to nothing" rather than
    the 0/0 = NaN the textbook formula gives.
    """
    if not row:
        raise ValueError("softmax of an empty row")
    if any(math.isnan(x) or x == math.inf for x in row):
        raise ValueError(f"softmax: row contains NaN or +inf: {row}")
    finite = [x for x in row if x != NEG_INF]
    if not finite:
        return [0.0] * len(row)
    top = max(finite)
    exps = [math.exp(x - top) if x != NEG_INF else 0.0 for x in row]
    total = sum(exps)
    return [e / total for e in exps]


def causal_mask(n: int) -> Mask:
    """n x n mask: query i may attend to keys 0..i (itself and the past)."""
    return [[j <= i for j in range(n)] for i in range(n)]


def attention(Q: Matrix, K: Matrix, V: Matrix, mask: Mask | None = None) -> tuple[Matrix, Matrix]:
    """Scaled dot-product attention on lists.

    Q: (n_q, d_k), K: (n_k, d_k), V: (n_k, d_v), mask: (n_q, n_k) booleans or None.
    Returns (output (n_q, d_v), weights (n_q, n_k)).
    """
    n_q, d_k = shape(Q)
    n_k, d_k2 = shape(K)
    n_v, _ = shape(V)
    if d_k != d_k2:
        raise ValueError(f"attention: Q is ({n_q}, {d_k}) but K is ({n_k}, {d_k2}); d_k differs")
    if n_v != n_k:
        raise ValueError(f"attention: K has {n_k} rows but V has {n_v}; they must match")
    scores = scale(matmul(Q, transpose(K)), 1.0 / math.sqrt(d_k))  # (n_q, n_k)
    if mask is not None:
        if shape(mask) != (n_q, n_k):
            raise ValueError(f"attention: mask must be ({n_q}, {n_k}), got {shape(mask)}")
        scores = [
            [s if allowed else NEG_INF for s, allowed in zip(srow, mrow, strict=True)]
            for srow, mrow in zip(scores, mask, strict=True)
        ]
    weights = [softmax(row) for row in scores]  # (n_q, n_k)
    return matmul(weights, V), weights


def split_columns(A: Matrix, n_parts: int) -> list[Matrix]:
    """Cut the columns of A into ``n_parts`` equal blocks (one per head)."""
    rows, cols = shape(A)
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
    """Multi-head attention on lists, one head at a time.

    The (d_model, d_model) projections are cut column-wise into ``n_heads`` blocks of
    width d_k = d_model / n_heads; head h uses block h of W_q, W_k and W_v. The heads'
    outputs are concatenated and projected by W_o.
    Returns (output (n_q, d_model), [weights of head h (n_q, n_k) for each h]).
    """
    _, d_model = shape(X_q)
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    Q_heads = split_columns(matmul(X_q, W_q), n_heads)
    K_heads = split_columns(matmul(X_kv, W_k), n_heads)
    V_heads = split_columns(matmul(X_kv, W_v), n_heads)
    outputs, weights = [], []
    for Q_h, K_h, V_h in zip(Q_heads, K_heads, V_heads, strict=True):
        out_h, w_h = attention(Q_h, K_h, V_h, mask)
        outputs.append(out_h)
        weights.append(w_h)
    return matmul(concat_columns(outputs), W_o), weights
