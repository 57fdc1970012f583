"""Attention on plain Python lists (notebook 01): only Python and ``math``, written for reading.

A matrix is a list of rows, each a list of floats: ``A[i][j]``. The conventions are
:mod:`lib.attention`'s, except that the mask is one (n_q, n_k) list of True/False. Shapes are
checked where a mistake would otherwise end in a cryptic error; the numbers are not.
"""

import math
import random

Matrix = list[list[float]]
Mask = list[list[bool]]

NEG_INF = float("-inf")


def shape(A: Matrix, name: str = "matrix") -> tuple[int, int]:
    """(rows, cols) of a list of equally long lists (``[]``: 0 and 0); ragged ones, and NumPy
    arrays, are refused."""
    if not isinstance(A, list) or not all(isinstance(row, list) for row in A):
        got = f"a NumPy array: pass {name}.tolist()" if hasattr(A, "tolist") else type(A).__name__
        raise ValueError(f"{name} must be a list of rows (lists), got {got}")
    cols = len(A[0]) if A else 0
    for i, row in enumerate(A):
        if len(row) != cols:
            raise ValueError(
                f"{name} is ragged: row 0 has {cols} entries but row {i} has {len(row)}"
            )
    return len(A), cols


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
    top = max(row, default=NEG_INF)
    if top == NEG_INF:  # every key masked (or none): zeros
        return [0.0] * len(row)
    exps = [math.exp(x - top) for x in row]  # exp(-inf) = 0: a masked key gets weight 0
    total = sum(exps)
    return [e / total for e in exps]


def causal_mask(n: int) -> Mask:
    """n x n mask: query i may attend to keys 0..i (itself and the past)."""
    return [[j <= i for j in range(n)] for i in range(n)]


def attention(Q: Matrix, K: Matrix, V: Matrix, mask: Mask | None = None) -> tuple[Matrix, Matrix]:
    """Scaled dot-product attention on lists: Q (n_q, d_k), K (n_k, d_k), V (n_k, d_v), mask
    (n_q, n_k) booleans or None. Returns (output (n_q, d_v), weights (n_q, n_k))."""
    n_q, d_k = shape(Q, "Q")
    n_k, d_k2 = shape(K, "K")
    n_v, d_v = shape(V, "V")
    if n_q == 0:  # no queries: [] has no d_k to compare
        return [], []
    if n_k == 0:  # lists cannot say how wide an output of no values would be
        raise ValueError(f"got queries but no keys: Q is {(n_q, d_k)}, K and V are empty")
    if d_k != d_k2:
        raise ValueError(
            f"Q and K must share d_k (last axis): Q is {(n_q, d_k)}, K is {(n_k, d_k2)}"
        )
    if n_k != n_v:
        raise ValueError(
            f"K and V must have the same number of keys (axis -2): K is {(n_k, d_k2)}, "
            f"V is {(n_v, d_v)}"
        )
    scores = scale(matmul(Q, transpose(K)), 1.0 / math.sqrt(d_k))  # (n_q, n_k)
    if mask is not None:  # a blocked key's score becomes -inf: its weight, 0
        _check_mask(mask, n_q, n_k)
        scores = [
            [s if allowed else NEG_INF for s, allowed in zip(srow, mrow, strict=True)]
            for srow, mrow in zip(scores, mask, strict=True)
        ]
    weights = [softmax(row) for row in scores]  # (n_q, n_k)
    return matmul(weights, V), weights


def _check_mask(mask: Mask, n_q: int, n_k: int) -> None:
    """A list mask is (n_q, n_k) lists of True/False: it does not broadcast."""
    if shape(mask, "mask") != (n_q, n_k):
        raise ValueError(
            f"mask of shape {shape(mask)} does not match the attention scores' shape "
            f"{(n_q, n_k)} (n_q, n_k)"
        )
    for i, row in enumerate(mask):
        for j, value in enumerate(row):
            if value is not True and value is not False:
                raise ValueError(
                    "mask must be boolean, True = may attend, got "
                    f"{value!r} ({type(value).__name__}) at index {(i, j)}. An additive mask "
                    "(0 = attend, -inf = blocked) converts with "
                    "`[[x == 0 for x in row] for row in mask]`; a 0/1 mask with 1 = attend "
                    "with `[[x == 1 for x in row] for row in mask]`."
                )


def split_columns(A: Matrix, n_parts: int) -> list[Matrix]:
    """Cut the columns of A into ``n_parts`` equal blocks (one per head)."""
    cols = shape(A)[1]
    if not isinstance(n_parts, int) or n_parts < 1 or cols % n_parts:
        raise ValueError(f"cannot split {cols} columns into {n_parts!r} equal parts")
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
    projected by W_o. Returns (output (n_q, d_model), [weights (n_q, n_k) of each head])."""
    d_model = len(W_q)
    for name, W in {"W_q": W_q, "W_k": W_k, "W_v": W_v, "W_o": W_o}.items():
        if shape(W, name) != (d_model, d_model):
            raise ValueError(
                f"{name} must be (d_model, d_model) = ({d_model}, {d_model}), got {shape(W)}"
            )
    if not isinstance(n_heads, int) or n_heads < 1 or d_model % n_heads:
        fits = [h for h in range(1, d_model + 1) if d_model % h == 0]
        raise ValueError(
            f"n_heads must be an integer that divides d_model={d_model}, got {n_heads!r}; "
            f"valid head counts for d_model={d_model} are {fits}"
        )
    for name, X in {"X_q": X_q, "X_kv": X_kv}.items():
        rows, width = shape(X, name)
        if rows and width != d_model:
            raise ValueError(
                f"{name} has d_model={width} (shape {(rows, width)}) but the parameters have "
                f"d_model={d_model}"
            )
    if not X_q or not X_kv:  # no queries or no keys: every query attends to nothing
        return [[0.0] * d_model for _ in X_q], [[[] for _ in X_q] for _ in range(n_heads)]
    Q, K, V = matmul(X_q, W_q), matmul(X_kv, W_k), matmul(X_kv, W_v)  # (n, d_model) each
    outputs, weights = [], []
    for Q_h, K_h, V_h in zip(*(split_columns(P, n_heads) for P in (Q, K, V)), strict=True):
        out_h, weights_h = attention(Q_h, K_h, V_h, mask)  # (n_q, d_k), (n_q, n_k)
        outputs.append(out_h)
        weights.append(weights_h)
    return matmul(concat_columns(outputs), W_o), weights  # (n_q, d_model)
