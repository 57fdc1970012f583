"""Exact attention computed in blocks, so that the (n_q, n_k) score matrix never exists whole
(notebook 10): blocks of query rows (:func:`attend_in_blocks`, lib's kernel; a block also skips
the keys none of its rows may attend to), or tiles of queries and keys with an online softmax
(:func:`online_softmax_attention`, as in FlashAttention). :func:`multi_head_attention` is
lib's fast path: :func:`lib.attention.multi_head_attention` with the first kernel.
"""

import math

import numpy as np

from . import _validate as valid
from . import attention as A

ROW_BLOCK_BYTES = 4 << 20
"""Bytes of scores in one block: enough rows for fast matrix products, few enough that the
block stays in the CPU's cache from q k^T to P @ V."""


def causal_rule(r0: int, r1: int, k0: int, k1: int, offset: int) -> np.ndarray:
    """Which of keys k0 .. k1 - 1 queries r0 .. r1 - 1 may attend to with ``causal=True``
    (query i sees keys 0 .. i + offset): this block of :func:`lib.attention.causal_mask`."""
    return np.arange(k0, k1) <= np.arange(r0, r1)[:, None] + offset


def mask_rows(mask, r0: int, r1: int):
    """Rows r0 .. r1 - 1 of a mask (..., n_q or 1, n_k); None: no mask."""
    if mask is None or mask.shape[-2] == 1:
        return mask
    return mask[..., r0:r1, :]


def online_softmax_update(m, l, acc, scores, v):
    """One key block of the online softmax, for a block of query rows. m, l: (..., rows) each
    row's running maximum score (-inf before any key) and running sum of exp(score - m); acc:
    (..., rows, d_v) the running sum of exp(score - m) * v; scores: (..., rows, b) this block's
    scores (-inf = masked); v: (..., b, d_v). Returns the new (m, l, acc). The sums so far are
    relative to m: when the maximum grows to m_new, exp(m - m_new) rescales them to m_new."""
    m_new = np.maximum(m, scores.max(axis=-1, initial=-np.inf))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)  # a row with nothing seen yet: 0
    p = np.exp(scores - shift[..., None])  # (..., rows, b)
    alpha = np.exp(m - shift)  # rescales the old sums; exp(-inf) = 0 on the first block
    return m_new, alpha * l + p.sum(axis=-1), alpha[..., None] * acc + p @ v


def online_softmax_attention(q, k, v, mask=None, *, causal=False, block_q=128, block_k=128):
    """Exact softmax(q k^T / sqrt(d_k)) v in (block_q x block_k) tiles with an online softmax,
    written for reading (:func:`attention` is the fast kernel). q, k, v and mask as
    :func:`lib.attention.scaled_dot_product_attention`; ``causal=True``: query i may attend to
    keys 0 .. i + (n_k - n_q), without a mask array. Tiles no query may attend to are skipped.
    Returns (..., n_q, d_v); a query with nothing to attend to gets 0."""
    q, k, v, mask, lead = valid.attention_inputs(q, k, v, mask)
    block_q = valid.integer(block_q, "block_q", low=1)
    block_k = valid.integer(block_k, "block_k", low=1)
    n_q, n_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    if mask is not None:  # at least (n_q or 1, n_k): a tile is a slice of it
        mask = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, (1, n_k)))
    scaled = q * (1.0 / math.sqrt(q.shape[-1]))  # a Python float keeps float32 in float32
    out = np.zeros(lead + (n_q, d_v), v.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        for i0 in range(0, n_q, block_q):
            i1 = min(n_q, i0 + block_q)
            m = np.full(lead + (i1 - i0,), -np.inf, v.dtype)  # running maximum of each row
            l = np.zeros(lead + (i1 - i0,), v.dtype)  # running sum of exp(score - m)
            acc = np.zeros(lead + (i1 - i0, d_v), v.dtype)  # running sum of exp(...) v
            for j0 in range(0, n_k, block_k):
                j1 = min(n_k, j0 + block_k)
                allowed = None if mask is None else mask_rows(mask, i0, i1)[..., j0:j1]
                if causal:
                    rule = causal_rule(i0, i1, j0, j1, n_k - n_q)
                    allowed = rule if allowed is None else allowed & rule
                if allowed is not None and not allowed.any():  # no row of the tile sees a key
                    continue
                s = scaled[..., i0:i1, :] @ np.swapaxes(k[..., j0:j1, :], -1, -2)
                s = A.mask_scores(s, allowed)
                m, l, acc = online_softmax_update(m, l, acc, s, v[..., j0:j1, :])
            l[l == 0] = np.inf  # a row that saw no key: output 0, not NaN
            out[..., i0:i1, :] = acc / l[..., None]
    valid.finite_output(out, {"q": q, "k": k, "v": v})
    return out


def attend_in_blocks(q, k, v, mask=None, causal=False, skip=True, weights=None) -> np.ndarray:
    """softmax(q k^T, masked) v, one block of query rows at a time, for checked inputs with q
    already scaled by 1 / sqrt(d_k); shapes, mask and causal as :func:`attention`. A block
    computes only the keys up to the last one any of its rows may attend to (``skip=False``:
    every key). ``weights``: None, or a zeroed (..., n_q, n_k) array that receives the
    attention weights."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])

    def matrices(a):  # (..., n, d) -> (one per leading index, n, d)
        return np.broadcast_to(a, lead + a.shape[-2:]).reshape((math.prod(lead),) + a.shape[-2:])

    q, k, v = matrices(q), matrices(k), matrices(v)
    if mask is not None:
        mask = matrices(np.broadcast_to(mask, np.broadcast_shapes(mask.shape, (1, n_k))))
    if weights is not None:
        weights = weights.reshape(len(q), n_q, n_k)  # a view: the caller's array is contiguous
    out = np.zeros(q.shape[:-1] + v.shape[-1:], v.dtype)
    # A block: rows of one score matrix, or several whole matrices when they are small.
    rows = max(1, min(n_q, ROW_BLOCK_BYTES // (v.dtype.itemsize * max(1, n_k))))
    group = max(1, ROW_BLOCK_BYTES // (v.dtype.itemsize * max(1, n_q * n_k))) if rows == n_q else 1
    offset = n_k - n_q  # causal: query i sees keys 0 .. i + offset
    for m0 in range(0, len(q), group):
        ms = slice(m0, m0 + group)
        for r0 in range(0, n_q, rows):
            r1 = min(n_q, r0 + rows)
            allowed = None if mask is None else mask_rows(mask[ms], r0, r1)
            keys = n_k  # the keys this block computes: up to the last one a row may see
            if skip and causal:
                keys = max(0, min(n_k, r1 + offset))
            if skip and allowed is not None:  # 1 + the last key a row of the block may see
                seen = np.flatnonzero(allowed.any(axis=(0, 1)))  # allowed: (matrices, rows, keys)
                keys = min(keys, int(seen[-1]) + 1 if seen.size else 0)
            if keys:  # else no row of this block may attend to anything: output, weights 0
                allowed = None if allowed is None else allowed[..., :keys]
                diagonal = r0 + offset if causal else None
                w = None if weights is None else weights[ms, r0:r1, :keys]
                attend_block(
                    q[ms, r0:r1], k[ms, :keys], v[ms, :keys], allowed, diagonal, out[ms, r0:r1], w
                )
    return out.reshape(lead + out.shape[-2:])


def attend_block(q, k, v, allowed, diagonal, out, weights) -> None:
    """One block of :func:`attend_in_blocks`: writes softmax(q k^T, masked) v into ``out``
    and, unless it is None, the weights into ``weights``. ``allowed``: the mask's block or
    None; ``diagonal``: None, or causal with the block's row t seeing keys 0 .. diagonal + t."""
    # a score the causal rule hides in this block still counts as an overflow if it is -inf
    # (reported where the readable form ignores it)
    s = A.mask_scores(np.matmul(q, np.swapaxes(k, -1, -2)), allowed)  # (matrices, rows, keys)
    if diagonal is not None:  # every row sees the keys before lo: mask only the others
        lo = max(0, diagonal + 1)
        rule = causal_rule(0, s.shape[-2], lo, s.shape[-1], diagonal)
        np.copyto(s[..., lo:], -np.inf, where=~rule)
    top = s.max(axis=-1, keepdims=True)
    top[np.isneginf(top)] = 0.0  # a row with no key: exp(-inf - 0) = 0, not NaN
    np.subtract(s, top, out=s)
    p = np.exp(s, out=s)
    total = p.sum(axis=-1, keepdims=True)
    total[total == 0] = np.inf  # a row with no key: weights and output 0, not NaN
    # Normalised after P @ V: d_v divisions per row instead of n_k.
    np.divide(np.matmul(p, v), total, out=out)
    if weights is not None:
        np.divide(p, total, out=weights)


def attention(q, k, v, mask=None, *, causal=False, skip_masked_blocks=True) -> np.ndarray:
    """Exact softmax(q k^T / sqrt(d_k)) v in blocks of query rows (:data:`ROW_BLOCK_BYTES` each,
    whatever n is), arguments as :func:`online_softmax_attention`. ``skip_masked_blocks=False``
    computes (and masks) the keys a block cannot see, to measure what skipping saves."""
    q, k, v, mask, _ = valid.attention_inputs(q, k, v, mask)
    scaled = q * (1.0 / math.sqrt(q.shape[-1]))  # a Python float keeps float32 in float32
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        out = attend_in_blocks(scaled, k, v, mask, causal, skip_masked_blocks)
    valid.finite_output(out, {"q": q, "k": k, "v": v})
    return out


def multi_head_attention(
    x_q, x_kv, params: A.MHAParams, mask=None, *, causal=False, need_weights: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """lib's fast path: :func:`lib.attention.multi_head_attention` (same arguments, results
    and errors) with the heads attended to by :func:`attend_in_blocks` (``causal=True`` builds
    no (n_q, n_k) mask). Values whose sum overflows before it is divided are reported as an
    overflow, where the readable form's weighted mean might still fit."""
    x_q, x_kv, p, mask, unbatched = valid.mha_inputs(x_q, x_kv, params, mask)
    batch, n_q, n_k = x_q.shape[0], x_q.shape[1], x_kv.shape[1]
    weights = np.zeros((batch, p.n_heads, n_q, n_k), x_q.dtype) if need_weights else None

    def heads(x, W, b):  # (batch, n, d_model) -> (batch, heads, n, d_k), in one product
        return A.split_heads(A.project(x.reshape(-1, p.d_model), W, b).reshape(x.shape), p.n_heads)

    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        q = heads(x_q, p.W_q, p.b_q) * (1.0 / math.sqrt(p.d_k))  # a Python float keeps float32
        k, v = heads(x_kv, p.W_k, p.b_k), heads(x_kv, p.W_v, p.b_v)  # (batch, heads, n_k, d_k)
        concat = A.merge_heads(attend_in_blocks(q, k, v, mask, causal, weights=weights))
        out = A.project(concat.reshape(-1, p.d_model), p.W_o, p.b_o).reshape(x_q.shape)
    inputs = {"x_q": x_q, "x_kv": x_kv} | p.arrays()
    valid.finite_output(out, inputs)
    if n_q:  # the values of skipped keys too: the readable form weighs them by 0, 0 * inf = NaN
        valid.finite_output(v, inputs)
    if unbatched:
        return out[0], None if weights is None else weights[0]
    return out, weights
