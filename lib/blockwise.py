"""Exact attention computed in blocks: what makes attention fast and small (notebook 10).

The scores of one head are an (n_q, n_k) matrix: at n = 16384 that is 1 GiB of float32, for
one head of one sequence. Nothing forces us to hold it all at once, and the answer stays
exact. Two ways to cut it up:

- **blocks of query rows** (:func:`attend_in_blocks`, lib's kernel). A row's softmax
  needs only that row, so a block of rows is computed, exponentiated, multiplied by V and
  normalised while it sits in the CPU's cache, then forgotten. Memory: rows x n_k numbers
  per block, however many rows there are.
- **blocks of keys as well, with an online softmax** (:func:`online_softmax_attention`;
  Milakov & Gimelshein 2018's running max and sum, with the output of Rabe & Staats 2021 and
  FlashAttention). A row's softmax is put together one key block at a time: a running max,
  a running sum of exponentials and a running output, the last two rescaled as the max grows
  (:func:`online_softmax_update`). Memory: block_q x block_k numbers, whatever n is.

Both skip the keys a mask makes useless (about half of all scores with a causal mask).
:func:`multi_head_attention` is lib's fast path: what :func:`lib.attention.multi_head_attention`
computes, organised around the first kernel. The block sizes below were measured on the
course's machine; a speed trick stays only if it wins on every kernel set ``make bench`` can
run (AVX-512 and AVX2; docs/benchmarks.md, "What was removed, and why").
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass

import numpy as np

from . import _validate as valid
from . import attention as A

# --------------------------------------------------------------------------- block sizes

GROUP_BYTES = 2 << 20
"""Bytes of scores per block of whole score matrices (several heads or sequences, when they
are short): 2 MB stays in one core's L2 cache, where the softmax's passes run. Blocks of 8 MB
took 0.99x to 1.05x its time at n = 128 and 512 (bench/results/2026-11-27-block-sizes.txt)."""

ROW_BLOCK_BYTES = 8 << 20
"""Bytes of scores per block of query rows of one long score matrix: up to 8 MB (in the
shared L3), so that BLAS gets products of about a thousand rows. 2 and 4 MB were no faster
beyond the noise, nor 4 MB with the weights kept (bench/results/2026-11-27-block-sizes.txt)."""

CAUSAL_BLOCKS = 16
CAUSAL_MIN_ROWS = 128
"""A causal score matrix is cut into at least CAUSAL_BLOCKS blocks of query rows (fewer when
it has under CAUSAL_BLOCKS * CAUSAL_MIN_ROWS rows: a block keeps CAUSAL_MIN_ROWS, below which
the Python loop's overhead shows). With B blocks skipping leaves (1 + 1/B) / 2 of the work;
8 or 32 blocks were not faster on both kernel sets (docs/benchmarks.md, "Block sizes")."""

SAFE_SCORE = {np.dtype(np.float32): 30.0, np.dtype(np.float64): 300.0}
"""Largest |score| whose exp is taken without subtracting the row's maximum, far from exp's
overflow and underflow (float32: +-88; float64: +-709). Skipping the subtraction saved up to
15 % of a call's time on both kernel sets (bench/results/2026-11-27-block-sizes-and-exp.txt)."""


SPARE_WEIGHTS_BYTES = 16 << 20
"""Weights arrays at least this large (``need_weights=True``) reuse the memory of the last
one once nothing refers to it: memory touched for the first time costs a page fault per
page, most of the cost of keeping the weights. Without the reuse lib + weights took up to
1.33x the time of nn.MultiheadAttention keeping them, with it at most 0.92x, on both kernel
sets (bench/results/2026-11-25-weights-pool.txt). :func:`release_spare_weights` lets go."""


class _Spare:
    """The one buffer kept for weights (see :data:`SPARE_WEIGHTS_BYTES`)."""

    lock = threading.Lock()
    buffer: np.ndarray | None = None


def new_weights(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised array for per-head weights. Large ones reuse the memory of the last
    large weights array lib returned once nothing refers to it any more (a view, a slice
    or a tensor made from it still counts), so that a loop over batches touches its memory
    once, not at every call."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < SPARE_WEIGHTS_BYTES:
        return np.empty(shape, dtype)
    with _Spare.lock:
        spare = _Spare.buffer
        # 3 references when nobody else holds it: _Spare.buffer, `spare`, getrefcount's own.
        if spare is None or spare.nbytes < nbytes or sys.getrefcount(spare) > 3:
            spare = np.empty(nbytes, np.uint8)
            _Spare.buffer = spare
        return spare[:nbytes].view(dtype).reshape(shape)


def release_spare_weights() -> None:
    """Let go of the memory kept for weights (it is freed once no array uses it)."""
    with _Spare.lock:
        _Spare.buffer = None


# --------------------------------------------------------------------------- online softmax


def online_softmax_update(m, l, acc, scores, v):
    """One key block of the online softmax, for a block of query rows.

    m: (..., rows) the running maximum of each row's scores so far (-inf before any key);
    l: (..., rows) the running sum of exp(score - m); acc: (..., rows, d_v) the running sum
    of exp(score - m) * v; scores: (..., rows, b) this block's scores (-inf = masked);
    v: (..., b, d_v) this block's values. Returns the new (m, l, acc).

    When the maximum grows from m to m_new, everything summed so far was exponentiated
    relative to the old m: multiplying by exp(m - m_new) puts it relative to m_new. A row
    that has seen only masked keys keeps m = -inf, l = 0, acc = 0 (no NaN).
    """
    m_new = np.maximum(m, scores.max(axis=-1, initial=-np.inf))
    shift = np.where(np.isneginf(m_new), 0.0, m_new)  # a row with nothing seen yet: 0
    p = np.exp(scores - shift[..., None])  # (..., rows, b)
    alpha = np.exp(m - shift)  # rescales the old sums; exp(-inf) = 0 on the first block
    return m_new, alpha * l + p.sum(axis=-1), alpha[..., None] * acc + p @ v


def online_softmax_attention(q, k, v, mask=None, *, causal=False, block_q=128, block_k=128):
    """Exact softmax(q k^T / sqrt(d_k)) v, computed in (block_q x block_k) tiles with an
    online softmax: the full score matrix never exists.

    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v), leading axes broadcast;
    mask: boolean, broadcastable to (..., n_q, n_k), True = may attend; ``causal=True``:
    query i may attend to keys 0 .. i + (n_k - n_q), without a mask array (as
    :func:`lib.attention.causal_mask`), and tiles that no query may attend to are skipped.
    Returns the output (..., n_q, d_v); a query with nothing to attend to gets 0. Written
    for reading, not speed (a Python loop over tiles): :func:`attention` is the fast kernel.
    """
    q, k, v, mask, lead = valid.attention_inputs(q, k, v, mask)  # one dtype
    block_q = valid.integer(block_q, "block_q", low=1)
    block_k = valid.integer(block_k, "block_k", low=1)
    if mask is not None:  # a view with every axis, for slicing tiles out of it
        mask = np.broadcast_to(mask, lead + (q.shape[-2], k.shape[-2]))
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # a Python float keeps float32 in float32
    if not valid.scores_fit(q, k, valid.largest_row_norm(q), valid.largest_row_norm(k)):
        raise valid.overflow(valid.SCORES, np.result_type(q, k), {"q": q, "k": k})
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: see weighted_means
        return weighted_means(
            lambda values: _tiles(q, k, values, mask, causal, block_q, block_k, lead, v.dtype), v
        )


def _tiles(q, k, v, mask, causal, block_q, block_k, lead, dtype):
    """online_softmax_attention's loop over tiles (q already scaled)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    offset = n_k - n_q  # causal: query i sees keys 0 .. i + offset
    out = np.zeros(lead + (n_q, v.shape[-1]), dtype)
    for i0 in range(0, n_q, block_q):
        i1 = min(n_q, i0 + block_q)
        m = np.full(lead + (i1 - i0,), -np.inf, dtype)  # running maximum of each row
        l = np.zeros(lead + (i1 - i0,), dtype)  # running sum of exp(score - m)
        acc = np.zeros(lead + (i1 - i0, v.shape[-1]), dtype)  # running sum of exp(...) v
        for j0 in range(0, n_k, block_k):
            if causal and j0 > i1 - 1 + offset:  # no row of this block reaches these keys
                break
            j1 = min(n_k, j0 + block_k)
            s = q[..., i0:i1, :] @ np.swapaxes(k[..., j0:j1, :], -1, -2)  # (..., rows, b)
            if causal:
                rows = np.arange(i0, i1)[:, None] + offset
                s = np.where(np.arange(j0, j1)[None, :] <= rows, s, -np.inf)
            if mask is not None:
                s = np.where(mask[..., i0:i1, j0:j1], s, -np.inf)
            m, l, acc = online_softmax_update(m, l, acc, s, v[..., j0:j1, :])
        np.divide(acc, l[..., None], out=out[..., i0:i1, :], where=l[..., None] > 0)
    return out


# --------------------------------------------------------------------------- the fast kernel


@dataclass(frozen=True)
class MaskPlan:
    """How a boolean mask is applied block by block. reach: ints broadcasting to (batch,
    heads, rows): row r attends only among keys 0 .. reach - 1, so a block of rows leaves
    out the keys after its largest reach. add: None for a *prefix* mask (causal, padding or
    both: reach says it all), else the mask as 0 / -inf broadcasting to (batch, heads, rows,
    n_k)."""

    reach: np.ndarray
    add: np.ndarray | None = None


def make_plan(mask, causal: bool, n_q: int, n_k: int, dtype, n_kv_heads=1, group=1):
    """The MaskPlan of a boolean mask of four axes (batch|1, heads|1, n_q|1, n_k|1) or None,
    and of ``causal`` (alone or with a prefix mask, it builds no (n_q, n_k) mask); None when
    every key may be attended to. Group > 1: rows stacked as the queries (batch|1, n_kv_heads,
    group * n_q), row i * n_q + t of key/value head j being query t of head j * group + i."""
    if mask is None and not causal:
        return None
    # causal: query i reaches keys 0 .. i + (n_k - n_q) (the queries are the last n_q positions)
    reach = causal_reach = np.clip(np.arange(1, n_q + 1) + (n_k - n_q), 0, n_k)[None, None, :]
    add = None
    if mask is not None:
        mask = np.broadcast_to(mask, mask.shape[:-1] + (n_k,))
        prefix = not np.any(mask[..., 1:] & ~mask[..., :-1])  # no allowed key after a blocked one
        mask = A.with_causal(mask, n_q, n_k) if causal and not prefix else mask  # one -inf mask
        reach = np.where(mask.any(axis=-1), n_k - np.argmax(mask[..., ::-1], axis=-1), 0)
        if causal and prefix:  # two prefixes: the shorter reach, no (n_q, n_k) mask
            reach = np.minimum(reach, causal_reach)
        dtype = np.dtype(dtype)
        add = None if prefix else np.where(mask, dtype.type(0), dtype.type(-np.inf))

    def stacked(a):  # (batch|1, heads|1, n_q|1, ...) -> (batch|1, kv heads, group * n_q, ...)
        if group == 1:
            return a
        full = np.broadcast_to(a, (a.shape[0], n_kv_heads * group, n_q) + a.shape[3:])
        return full.reshape((a.shape[0], n_kv_heads, group * n_q) + a.shape[3:])

    return MaskPlan(stacked(reach), None if add is None else stacked(add))


def weighted_means(attend, v: np.ndarray) -> np.ndarray:
    """``attend(v)``, finite whenever the answer is. Each output row is a weighted mean of v's
    rows, but the kernels sum exp(score) * v before dividing (d_v divisions per row, not n_k),
    and with huge values that sum can overflow: then ``attend(v / top) * top``, with top v's
    largest |entry|. (A v holding inf is left for the caller to explain.)"""
    out = attend(v)
    if not valid.all_finite(out):
        top = float(np.abs(v).max())
        if math.isfinite(top):
            out = attend(v / top)
            out *= top
    return out


def attend_in_blocks(
    q, k, v, heads_out, weights=None, plan: MaskPlan | None = None, *, small=False, skip=True
) -> None:
    """softmax(q k^T, masked) v for blocks of (sequences, heads, query rows).

    q: (batch, heads, rows, d_k), already scaled by 1/sqrt(d_k); k: (batch, heads, n_k, d_k);
    v: (batch, heads, n_k, d_v). Writes heads_out (batch, heads, rows, d_v) and, unless it
    is None, weights (batch, heads, rows, n_k). ``plan``: the mask (None: every key).
    ``small``: every |score| <= :data:`SAFE_SCORE`, so exp needs no shift by the row's
    maximum. ``skip=False`` computes every key (to measure what skipping saves). Unchecked:
    the callers check the inputs and that the scores fit the dtype.
    """

    def attend(values):
        _attend_in_blocks(q, k, values, heads_out, weights, plan, small=small, skip=skip)
        return heads_out

    weighted_means(attend, v)


def _attend_in_blocks(q, k, v, heads_out, weights, plan, *, small, skip) -> None:
    """attend_in_blocks, without its care for huge values."""
    batch, h, n_q, _ = q.shape
    n_k = k.shape[2]
    dtype = np.result_type(q, k)
    k_t = k.transpose(0, 1, 3, 2)  # (batch, heads, d_k, n_k)
    reach, add = (None, None) if plan is None else (plan.reach, plan.add)
    rows = max(1, min(n_q, ROW_BLOCK_BYTES // dtype.itemsize // n_k))  # query rows per block
    if reach is not None and reach.shape[2] > 1 and skip:  # rows reach different keys
        rows = min(rows, max(CAUSAL_MIN_ROWS, -(-n_q // CAUSAL_BLOCKS)))
    group = GROUP_BYTES // dtype.itemsize  # scores per block of whole score matrices
    hs = max(1, min(h, group // (n_q * n_k))) if rows == n_q else 1  # heads per block
    bs = max(1, min(batch, group // (h * n_q * n_k))) if hs == h else 1  # sequences per block
    scratch = np.empty(bs * hs * rows * n_k, dtype)  # the scores of one block, kept in cache
    top = np.empty((bs, hs, rows, 1), dtype)
    inv = np.empty((bs, hs, rows, 1), dtype)
    ones = np.ones((n_k, 1), dtype)  # row sums as S @ ones: a BLAS call, 3-4x np.sum's speed
    columns = np.arange(n_k)
    for b0 in range(0, batch, bs):
        seqs = slice(b0, min(batch, b0 + bs))
        nb = seqs.stop - b0
        for h0 in range(0, h, hs):
            heads = slice(h0, min(h, h0 + hs))
            nh = heads.stop - h0
            for r0 in range(0, n_q, rows):
                rs = slice(r0, min(n_q, r0 + rows))
                nr = rs.stop - r0
                n_used, lo = n_k, n_k  # keys computed; keys every row of the block may see
                if reach is not None:
                    r = block_of(reach, seqs, heads, rs)
                    n_used = int(r.max()) if skip else n_k
                    lo = min(int(r.min()), n_used)
                o = heads_out[seqs, heads, rs]  # (nb, nh, nr, d_v)
                if weights is not None:
                    weights[seqs, heads, rs, n_used:] = 0.0
                if n_used == 0:  # no query in this block may attend to anything
                    o[...] = 0.0
                    continue
                # With every key used, the block of the weights is contiguous: compute in it.
                direct = weights is not None and n_used == n_k
                if direct:
                    S = weights[seqs, heads, rs]
                else:
                    S = scratch[: nb * nh * nr * n_used].reshape(nb, nh, nr, n_used)
                t, s = top[:nb, :nh, :nr], inv[:nb, :nh, :nr]
                np.matmul(q[seqs, heads, rs], k_t[seqs, heads, :, :n_used], out=S)
                if add is not None:
                    np.add(S, block_of(add, seqs, heads, rs)[..., :n_used], out=S)
                elif lo < n_used:  # a prefix mask: only keys lo .. n_used - 1 can be blocked
                    blocked = columns[lo:n_used] >= r[..., None]
                    np.copyto(S[..., lo:], -np.inf, where=blocked)
                if not small:  # subtract each row's maximum (0 for a fully masked row)
                    np.max(S, axis=-1, keepdims=True, out=t)
                    t[np.isneginf(t)] = 0.0
                    np.subtract(S, t, out=S)
                np.exp(S, out=S)
                np.matmul(S, ones[:n_used], out=s)
                np.divide(1.0, s, out=s, where=s > 0)  # a fully masked row keeps 0: weights 0
                np.matmul(S, v[seqs, heads, :n_used], out=o)
                np.multiply(o, s, out=o)  # normalise after P @ V: d_v numbers per row, not n_k
                if direct:
                    np.multiply(S, s, out=S)
                elif weights is not None:  # written once, from the block in cache
                    np.multiply(S, s, out=weights[seqs, heads, rs, :n_used])


def block_of(a: np.ndarray, seqs: slice, heads: slice, rows: slice) -> np.ndarray:
    """The (seqs, heads, rows, ...) block of an array of 3 or 4 axes (batch, heads, rows, ...)
    that broadcasts over its size-1 axes."""
    parts = (seqs, heads, rows)
    return a[tuple(part if a.shape[i] > 1 else slice(None) for i, part in enumerate(parts))]


def unread_values_finite(v: np.ndarray, plan: MaskPlan | None) -> bool:
    """Whether the values of keys no query reaches (padding, say; v: (batch, heads, n_k,
    d_v)) are finite: the kernel never reads them, the other forwards multiply them by 0 and
    get NaN from an overflow there. Looking at them makes all forwards agree."""
    if plan is None:
        return True
    unread = np.arange(v.shape[2]) >= plan.reach.max(axis=-1, keepdims=True)  # (b|1, h|1, n_k)
    return not unread.any() or valid.all_finite(v[np.broadcast_to(unread, v.shape[:3])])


# --------------------------------------------------------------------------- attention core


def attention(q, k, v, mask=None, *, causal=False, skip_masked_blocks=True) -> np.ndarray:
    """Exact softmax(q k^T / sqrt(d_k)) v with lib's blocked kernels: the output only.

    Arguments as :func:`online_softmax_attention`. A block of queries skips the keys none
    of its rows may attend to; ``skip_masked_blocks=False`` computes them anyway (and masks
    them), to measure what skipping saves. Memory beyond the output: one block of query
    rows (:data:`ROW_BLOCK_BYTES`), whatever n is. A query with nothing to attend to gets 0.
    """
    q, k, v, mask, lead = valid.attention_inputs(q, k, v, mask)  # one dtype
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = np.empty(lead + (n_q, v.shape[-1]), v.dtype)
    if out.size == 0 or n_k == 0:
        out[...] = 0.0
        return out
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # a Python float keeps float32 in float32

    def four_axes(a):  # (..., n, d) -> (prod(lead), 1, n, d); a view when nothing broadcasts
        return np.broadcast_to(a, lead + a.shape[-2:]).reshape((-1, 1) + a.shape[-2:])

    if mask is not None:  # four axes (batch|1, 1, n_q|1, n_k|1), broadcast only where needed
        mask = mask.reshape((1,) * (len(lead) + 2 - mask.ndim) + mask.shape)
        if any(n != 1 for n in mask.shape[:-2]):
            mask = np.broadcast_to(mask, lead + mask.shape[-2:])
        mask = mask.reshape((-1, 1) + mask.shape[-2:])
    plan = make_plan(mask, causal, n_q, n_k, v.dtype)
    out4 = out.reshape((-1, 1, n_q, v.shape[-1]))
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: see weighted_means
        if not attend(*(four_axes(a) for a in (q, k, v)), out4, None, plan, skip_masked_blocks):
            raise valid.overflow(valid.SCORES, np.result_type(q, k), {"q": q, "k": k})
    return out


# --------------------------------------------------------------------------- multi-head


def fused_qkv(p: A.MHAParams, dtype) -> tuple[np.ndarray, np.ndarray | None]:
    """[W_q / sqrt(d_k) | W_k | W_v] and its bias (None without biases) in ``dtype``: one
    matmul gives the keys, the values and the queries scaled (d^2 products, not n_q * n_k)."""
    scale = 1.0 / math.sqrt(p.d_k)  # a Python float keeps float32 in float32

    def joined(*parts):  # (q, k, v) in ``dtype``, the queries scaled
        q, k, v = (a.astype(dtype, copy=False) for a in parts)
        return np.concatenate([q * scale, k, v], axis=-1)

    return joined(p.W_q, p.W_k, p.W_v), None if p.b_q is None else joined(p.b_q, p.b_k, p.b_v)


def grouped_heads(q: np.ndarray, kv: np.ndarray, batch: int, n_kv_heads: int, group: int):
    """Projected queries (batch * n_q, heads * d_k) and [keys | values] (batch * n_k, ...) ->
    each key/value head's group of queries stacked, so that a key block is read once for them
    (batch, n_kv_heads, group * n_q, d_k), row i * n_q + t being query t of head j * group + i;
    k, v (batch, n_kv_heads, n_k, d_k), views."""
    d_k = q.shape[-1] // (n_kv_heads * group)
    rows = q.reshape(batch, -1, n_kv_heads, group, d_k).transpose(0, 2, 3, 1, 4)
    kv = kv.reshape(batch, -1, 2, n_kv_heads, d_k).transpose(2, 0, 3, 1, 4)  # (2, b, kv, n, d_k)
    return rows.reshape(batch, n_kv_heads, -1, d_k), kv[0], kv[1]


def concat_groups(heads: np.ndarray, group: int) -> np.ndarray:
    """The heads' outputs, stacked as :func:`grouped_heads` stacks their queries (batch,
    n_kv_heads, group * n_q, d_k) -> their concat (batch * n_q, heads * d_k)."""
    batch, kv, rows, d_k = heads.shape
    concat = heads.reshape(batch, kv, group, rows // group, d_k).transpose(0, 3, 1, 2, 4)
    return concat.reshape(-1, kv * group * d_k)


def attend(q, k, v, heads_out, weights, plan: MaskPlan | None, skip=True, norms=None) -> bool:
    """The kernel with its checks: False, computing nothing, when a score would not be a
    finite number (an overflow) or a value no query reads overflowed. ``norms``: the
    largest |q_i| and |k_j|, when the caller knows them (a decoder keeps the keys')."""
    q_norm, k_norm = norms or (valid.largest_row_norm(q), valid.largest_row_norm(k))
    if not (valid.scores_fit(q, k, q_norm, k_norm) and unread_values_finite(v, plan)):
        return False
    small = q_norm * k_norm <= SAFE_SCORE.get(q.dtype, 0)  # |q_i . k_j| <= |q_i| |k_j|
    attend_in_blocks(q, k, v, heads_out, weights, plan, small=small, skip=skip)
    return True


def multi_head_attention(
    x_q, x_kv, params: A.MHAParams, mask=None, *, causal=False, need_weights: bool = True
) -> tuple[np.ndarray, np.ndarray | None]:
    """lib's fast path: :func:`lib.attention.multi_head_attention` (same arguments, results
    and errors) with one fused projection, each group's queries stacked so that a key block
    is read once for them, the scores in cache-sized blocks, the keys a block cannot reach
    skipped (``causal=True`` builds no mask) and the rows normalised after ``P @ V``."""
    self_attention = x_q is x_kv
    x_q, x_kv, p, mask, unbatched = A.prepare_mha(x_q, x_kv, params, mask)
    batch, n_q, d = x_q.shape
    n_k = x_kv.shape[1]
    kv, g, d_k, dtype = p.n_kv_heads, p.group, p.d_k, x_q.dtype
    if batch * n_q * n_k == 0:  # nothing to compute: the readable form's b_o, or nothing
        out, weights = A.multi_head_attention(x_q, x_kv, p, mask, need_weights=need_weights)
    else:
        weights = new_weights((batch, p.n_heads, n_q, n_k), dtype) if need_weights else None
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is explained below
            W, b = fused_qkv(p, dtype)
            if self_attention:  # one matmul for the queries, keys and values
                qkv = A.project(x_q.reshape(batch * n_q, d), W, b)
                q, k_v = qkv[:, :d], qkv[:, d:]
            else:
                q = A.project(x_q.reshape(batch * n_q, d), W[:, :d], None if b is None else b[:d])
                k_v = A.project(x_kv.reshape(-1, d), W[:, d:], None if b is None else b[d:])
            rows, k, v = grouped_heads(q, k_v, batch, kv, g)  # rows: (batch, kv, g * n_q, d_k)
            heads = np.empty((batch, kv, g * n_q, d_k), dtype)
            w_rows = None if weights is None else weights.reshape(batch, kv, g * n_q, n_k)
            plan = make_plan(mask, causal, n_q, n_k, dtype, kv, g)
            fine = attend(rows, k, v, heads, w_rows, plan)
            out = A.project(concat_groups(heads, g), p.W_o, p.b_o)  # (batch * n_q, d)
        if not (fine and valid.all_finite(out)):
            valid.mha_nonfinite(p, x_q, x_kv)
        out = out.reshape(batch, n_q, d)
    if unbatched:
        return out[0], None if weights is None else weights[0]
    return out, weights
