"""Attention on plain Python lists (notebook 01): only Python and ``math``, written for reading.

A matrix is a list of rows, each a list of floats: ``A[i][j]``. The conventions are
:mod:`lib.attention`'s, except that the mask is one (n_q, n_k) list of True/False. The checks
at the bottom catch what would otherwise end in a cryptic error or a NaN.
"""

from __future__ import annotations

import math
import numbers
import random

Matrix = list[list[float]]
Mask = list[list[bool]]

NEG_INF = float("-inf")


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
    n = _count(n, "n", low=0)
    return [[j <= i for j in range(n)] for i in range(n)]


def attention(Q: Matrix, K: Matrix, V: Matrix, mask: Mask | None = None) -> tuple[Matrix, Matrix]:
    """Scaled dot-product attention on lists.

    Q: (n_q, d_k), K: (n_k, d_k), V: (n_k, d_v), mask: (n_q, n_k) booleans or None.
    Returns (output (n_q, d_v), weights (n_q, n_k)); ``Q = []`` gives ``([], [])``.
    """
    n_q, d_k = _check_attention_inputs(Q, K, V, mask)
    if n_q == 0:
        return [], []
    scores = _scores(Q, K, d_k, mask)  # (n_q, n_k)
    weights = [softmax(row) for row in scores]  # (n_q, n_k)
    return matmul(weights, V), weights  # weighted means of V's rows: they cannot overflow


def _scores(Q: Matrix, K: Matrix, d_k: int, mask: Mask | None) -> Matrix:
    """Q K^T / sqrt(d_k), with the entries the mask blocks set to -inf."""
    scores = scale(matmul(Q, transpose(K)), 1.0 / math.sqrt(d_k))  # (n_q, n_k)
    _no_overflow(scores, "the scores q k^T / sqrt(d_k)", {"q": Q, "k": K})
    if mask is not None:
        scores = [
            [s if allowed else NEG_INF for s, allowed in zip(srow, mrow, strict=True)]
            for srow, mrow in zip(scores, mask, strict=True)
        ]
    return scores


def split_columns(A: Matrix, n_parts: int) -> list[Matrix]:
    """Cut the columns of A into ``n_parts`` equal blocks (one per head)."""
    rows, cols = shape(A)
    n_parts = _count(n_parts, "n_parts", low=1)
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
    d_model, n_q, n_k = _check_mha_inputs(X_q, X_kv, (W_q, W_k, W_v, W_o), n_heads, mask)
    if n_q == 0 or n_k == 0:
        return zeros(n_q, d_model), [[[] for _ in range(n_q)] for _ in range(n_heads)]
    Q, K, V = matmul(X_q, W_q), matmul(X_kv, W_k), matmul(X_kv, W_v)  # (n, d_model) each
    outputs, weights = [], []
    d_k = d_model // n_heads
    for Q_h, K_h, V_h in zip(*(split_columns(P, n_heads) for P in (Q, K, V)), strict=True):
        weights_h = [softmax(row) for row in _scores(Q_h, K_h, d_k, mask)]  # (n_q, n_k)
        outputs.append(matmul(weights_h, V_h))  # (n_q, d_k)
        weights.append(weights_h)
    out = matmul(concat_columns(outputs), W_o)  # (n_q, d_model)
    _no_overflow(
        out, "the output (the weighted sums of the values, then @ W_o)", {"v": V, "W_o": W_o}
    )
    return out, weights


# --------------------------------------------------------------------------- checks


def _check_attention_inputs(Q, K, V, mask) -> tuple[int, int]:
    n_q, d_k = _list_matrix(Q, "Q")
    n_k, d_k2 = _list_matrix(K, "K")
    n_v, d_v = _list_matrix(V, "V")
    if n_q and n_k and (d_k != d_k2 or d_k < 1):
        raise ValueError(
            f"Q and K must share d_k >= 1 (last axis): Q is {(n_q, d_k)}, K is {(n_k, d_k2)}"
        )
    if n_k != n_v:
        raise ValueError(
            f"K and V must have the same number of keys (axis -2): K is {(n_k, d_k2)}, "
            f"V is {(n_v, d_v)}"
        )
    if mask is not None:
        _list_mask(mask, n_q, n_k)
    if n_q and not n_k:
        raise ValueError(
            "attention on lists got queries but no keys (K = V = []): the output's width d_v "
            "is unknown; multi_head_attention (which knows it from W_v) gives zeros"
        )
    return n_q, d_k


def _check_mha_inputs(X_q, X_kv, weights, n_heads, mask) -> tuple[int, int, int]:
    """(d_model, n_q, n_k) of checked inputs: square weights, a head count that divides
    d_model, inputs as wide as the weights, a mask that fits."""
    names = ("W_q", "W_k", "W_v", "W_o")
    shapes = [_list_matrix(W, name) for W, name in zip(weights, names, strict=True)]
    d_model = shapes[0][0]
    for (rows, cols), name in zip(shapes, names, strict=True):
        if (rows, cols) != (d_model, d_model):
            raise ValueError(
                f"{name} must be (d_model, d_model) = ({d_model}, {d_model}), got {(rows, cols)}"
            )
    n_heads = _count(n_heads, "n_heads", low=1)
    if d_model % n_heads:
        fits = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; "
            f"valid head counts for d_model={d_model} are {fits}"
        )
    n_q, width_q = _list_matrix(X_q, "X_q")
    n_k, width_kv = _list_matrix(X_kv, "X_kv")
    for name, rows, width in (("X_q", n_q, width_q), ("X_kv", n_k, width_kv)):
        if rows and width != d_model:
            raise ValueError(
                f"{name} has d_model={width} (shape {(rows, width)}) but the parameters have "
                f"d_model={d_model}"
            )
    if mask is not None:
        _list_mask(mask, n_q, n_k)
    return d_model, n_q, n_k


def _count(value, name: str, low: int) -> int:
    """A whole number >= ``low``: an ``int``, not a bool or a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        got = f"{value!r}" + ("" if isinstance(value, int) else f" ({type(value).__name__})")
        raise ValueError(f"{name} must be an integer >= {low}, got {got}")
    return int(value)


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
    rows, cols = shape(A, name)
    for i, row in enumerate(A):
        for j, value in enumerate(row):
            if booleans and value is not True and value is not False:
                raise ValueError(
                    "mask must be boolean, True = may attend, got "
                    f"{value!r} ({type(value).__name__}) at index {(i, j)}. An additive mask "
                    "(0 = attend, -inf = blocked) converts with "
                    "`[[x == 0 for x in row] for row in mask]`; a 0/1 mask with 1 = attend "
                    "with `[[x == 1 for x in row] for row in mask]`."
                )
            if not booleans:
                _real(value, name, (i, j))
                if not math.isfinite(value):
                    raise ValueError(
                        f"{name} contains NaN or inf (first at index {(i, j)}, "
                        f"shape {(rows, cols)})"
                    )
    return rows, cols


def _real(value, name: str, where: tuple) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{name} must hold real numbers, got {value!r} ({type(value).__name__}) "
            f"at index {where}"
        )


def shape(A: Matrix, name: str = "matrix") -> tuple[int, int]:
    """(rows, cols) of a list of equally long lists (``[]``: 0 and 0), entries unchecked
    (see _list_matrix); ragged ones, and NumPy arrays, are refused."""
    if hasattr(A, "tolist") and not isinstance(A, list):  # a NumPy array, say
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
        _real(value, name, (j,))
        if math.isnan(value) or value == math.inf:
            raise ValueError(
                f"{name} contains NaN or +inf (first at index {(j,)}, shape {(len(row),)})"
            )


def _no_overflow(A: Matrix, what: str, operands: dict[str, Matrix]) -> None:
    """Finite inputs whose products are too large for a Python float (float64): say which
    arrays, and their largest entries."""
    if all(math.isfinite(x) for row in A for x in row):
        return
    largest = ", ".join(
        f"largest |{name}| = {max((abs(x) for row in M for x in row), default=0.0):.3g}"
        for name, M in operands.items()
    )
    raise ValueError(f"{what} overflow float64 ({largest}): scale them down")
