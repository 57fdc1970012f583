"""Scaled dot-product and multi-head attention in NumPy (notebooks 02 and 03).

Conventions:
- row vectors: ``x @ W`` with ``W`` of shape (d_in, d_out);
- shapes are named in order in comments, e.g. ``# (batch, heads, n_q, n_k)``;
- masks are boolean, ``True`` = "this query may attend to this key", and broadcast
  against the scores (batch, heads, n_q, n_k);
- a query that may attend to no key gets attention weights of 0 and an attention output
  of 0 (the multi-head output is then just the output bias ``b_o``): defined, never NaN;
  with no keys at all (n_k = 0) that is every query; no queries (n_q = 0) or no sequences
  (batch = 0) give empty outputs of the right shape.

Floating inputs keep their dtype (float32 stays float32); integer inputs are promoted
to float64; lists are converted. Bad input raises ValueError, worded the same way in every
function (the checks live in :mod:`lib._validate`): NaN or inf in any input, weight or bias
and numbers whose products overflow the dtype are named with where they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from . import _validate as V

# --------------------------------------------------------------------------- softmax


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    Subtracting the maximum before ``exp`` keeps large scores from overflowing.
    ``-inf`` entries (masked keys) get weight 0; a slice that is entirely ``-inf`` gets
    all zeros instead of NaN. NaN or ``+inf`` in the input raise ``ValueError``.
    """
    x = V.real_array(x, "softmax input")
    V.no_nan_or_posinf(x, "softmax input")
    return _softmax_inplace(x.copy(), axis)


def _softmax_inplace(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax that overwrites ``scores`` (no NaN/+inf check: callers do that)."""
    if scores.size == 0:  # no keys (or no rows): nothing to normalise
        return scores
    top = scores.max(axis=axis, keepdims=True)
    top[np.isneginf(top)] = 0.0  # an all-masked slice: exp(-inf - 0) = 0, not NaN
    np.subtract(scores, top, out=scores)
    np.exp(scores, out=scores)
    total = scores.sum(axis=axis, keepdims=True)
    np.divide(scores, total, out=scores, where=total > 0)
    return scores


# --------------------------------------------------------------------------- masks


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """Boolean (n_q, n_k) mask, True where query i may attend to key j.

    With n_k == n_q (the default) query i sees keys 0..i. With n_k > n_q the queries are
    taken to be the *last* n_q positions of the key sequence (as when earlier keys are
    cached), so query i sees keys 0..i + (n_k - n_q).
    """
    n_q = V.count(n_q, "n_q", low=0)
    n_k = n_q if n_k is None else V.count(n_k, "n_k", low=0)
    return np.tri(n_q, n_k, k=n_k - n_q, dtype=bool)


def padding_mask(lengths, n_k: int) -> np.ndarray:
    """Boolean (batch, 1, 1, n_k) mask: key j of sequence b is real iff j < lengths[b].

    The two singleton axes let it broadcast over heads and queries, and combine with a
    causal mask by ``&``: ``causal_mask(n) & padding_mask(lengths, n)`` is
    (batch, 1, n, n).
    """
    n_k = V.count(n_k, "n_k", low=0)
    lengths = np.asarray(lengths)
    if lengths.ndim == 1 and lengths.size == 0:  # no sequences: np.asarray([]) is float64
        lengths = lengths.astype(np.int64)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"lengths must be a 1-D sequence of integers, got {lengths!r}")
    bad = lengths[(lengths < 0) | (lengths > n_k)]
    if bad.size:
        raise ValueError(f"lengths must lie in [0, n_k={n_k}], got {bad.tolist()}")
    keys = np.arange(n_k)
    return (keys[None, :] < lengths[:, None])[:, None, None, :]


# --------------------------------------------------------------------------- attention


def scaled_dot_product_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q k^T / sqrt(d_k)) v, over any leading batch axes.

    q: (..., n_q, d_k), k: (..., n_k, d_k), v: (..., n_k, d_v); the leading axes broadcast;
    mask: boolean, broadcastable to (..., n_q, n_k), True = may attend.
    Returns (output (..., n_q, d_v), weights (..., n_q, n_k)). With no keys (n_k = 0) the
    weights are (..., n_q, 0) and the output is 0.
    """
    q, k, v = V.real_array(q, "q"), V.real_array(k, "k"), V.real_array(v, "v")
    for name, a in (("q", q), ("k", k), ("v", v)):
        V.rank(a, name, range(2, 33), "(..., n, d), with at least 2 axes")
    V.same_d_k(q.shape, k.shape)
    V.same_keys(k.shape, v.shape)
    lead = V.leading_axes({"q": q.shape, "k": k.shape, "v": v.shape})
    V.finite_all({"q": q, "k": k, "v": v})
    if mask is not None:
        mask = V.mask(mask, lead + (q.shape[-2], k.shape[-2]))
    result = _attention(q, k, v, mask)
    if result is None:  # (the output, weighted means of v's rows, cannot overflow)
        raise V.overflow(V.SCORES, np.result_type(q, k), {"q": q, "k": k})
    return result


def _attention(q, k, v, mask) -> tuple[np.ndarray, np.ndarray] | None:
    """softmax(q k^T / sqrt(d_k), masked) v, unchecked; None when a score is not finite
    (NaN or inf in q or k, or an overflow), for the caller to explain."""
    # Fold 1/sqrt(d_k) into q: it touches n_q*d_k numbers instead of n_q*n_k, and a Python
    # float keeps float32 inputs in float32 (np.sqrt would give a float64 scalar).
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    if not V.scores_fit(q, k, V.largest_row_norm(q), V.largest_row_norm(k)):
        return None
    scores = q @ np.swapaxes(k, -1, -2)  # (..., n_q, n_k)
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)
    weights = _softmax_inplace(scores)  # (..., n_q, n_k)
    return weights @ v, weights


# --------------------------------------------------------------------------- heads


def valid_head_counts(d_model: int) -> list[int]:
    """The head counts that divide d_model evenly."""
    return V.divisors(V.count(d_model, "d_model"))


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(batch, seq, d_model) -> (batch, heads, seq, d_k), with d_k = d_model / heads.

    Reshape splits the last axis into (heads, d_k); the transpose then moves heads in
    front of seq. Reshaping straight to (batch, heads, seq, d_k) would also run, but it
    would cut the *sequence* into pieces instead of the features.
    """
    x = np.asarray(x)
    V.rank(x, "x", (3,), "(batch, seq, d_model)")
    V.heads(x.shape[2], n_heads)
    return _split(x, n_heads)


def _split(x: np.ndarray, n_heads: int) -> np.ndarray:
    """split_heads without its checks, for callers that made them."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(batch, heads, seq, d_k) -> (batch, seq, heads * d_k): the concat of the heads."""
    x = np.asarray(x)
    V.rank(x, "x", (4,), "(batch, heads, seq, d_k)")
    return _merge(x)


def _merge(x: np.ndarray) -> np.ndarray:
    """merge_heads without its check, for callers that made it."""
    batch, heads, seq, d_k = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * d_k)


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class MHAParams:
    """Weights of one multi-head attention layer (row-vector convention: x @ W).

    W_q, W_k, W_v: (d_model, d_model); columns h*d_k:(h+1)*d_k belong to head h.
    W_o: (d_model, d_model), mixes the concatenated heads.
    b_q, b_k, b_v, b_o: (d_model,), all four or none. A layer that lacks only some biases
    (for example no b_k) is written with zeros for the missing ones: a zero bias is the same
    as no bias. All-or-none is torch's rule too (``nn.MultiheadAttention(bias=...)``), and it
    keeps one meaning for :attr:`has_bias` and the parameter count 4 d^2 (+ 4 d).

    Lists are converted to arrays (integers to float64). The shapes, the bias rule and the
    head count are checked here; the object is frozen, so they stay true (``dataclasses.
    replace`` makes a changed copy, checked again). The numbers themselves can still be
    changed in place, so every forward checks them for NaN and inf.
    """

    W_q: np.ndarray
    W_k: np.ndarray
    W_v: np.ndarray
    W_o: np.ndarray
    n_heads: int
    b_q: np.ndarray | None = None
    b_k: np.ndarray | None = None
    b_v: np.ndarray | None = None
    b_o: np.ndarray | None = None

    def __post_init__(self) -> None:
        weights, biases = V.param_fields(
            {name: getattr(self, name) for name in V.WEIGHT_NAMES},
            {name: getattr(self, name) for name in V.BIAS_NAMES},
            self.n_heads,
        )
        for name, value in (weights | biases | {"n_heads": int(self.n_heads)}).items():
            object.__setattr__(self, name, value)

    @property
    def d_model(self) -> int:
        return self.W_q.shape[0]

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def has_bias(self) -> bool:
        """Whether the layer has its biases (all four: see the class docstring)."""
        return self.b_q is not None


def init_mha_params(
    d_model: int,
    n_heads: int,
    rng: np.random.Generator,
    bias: bool = False,
    dtype=np.float64,
) -> MHAParams:
    """Random weights, uniform in +-sqrt(6 / (d_in + d_out)) (Glorot/Xavier).

    With ``bias=True`` the biases are drawn from N(0, 0.1) rather than set to zero (the
    usual start for training), so that code which mishandles a bias gives a visibly
    different answer.
    """
    V.heads(d_model, n_heads)
    dtype = V.float_dtype(dtype)
    limit = math.sqrt(6.0 / (2 * d_model))

    def weight():
        return rng.uniform(-limit, limit, size=(d_model, d_model)).astype(dtype)

    def vector():
        return rng.normal(0.0, 0.1, size=d_model).astype(dtype) if bias else None

    return MHAParams(
        W_q=weight(),
        W_k=weight(),
        W_v=weight(),
        W_o=weight(),
        n_heads=n_heads,
        b_q=vector(),
        b_k=vector(),
        b_v=vector(),
        b_o=vector(),
    )


def count_params(params: MHAParams) -> int:
    """Number of learnable numbers: 4 d_model^2, plus 4 d_model with biases."""
    return sum(
        getattr(params, f.name).size
        for f in fields(params)
        if f.name != "n_heads" and getattr(params, f.name) is not None
    )


# --------------------------------------------------------------------------- multi-head


def _project(x: np.ndarray, W: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = x @ W
    if b is not None:
        y += b
    return y


def _prepare(x_q, x_kv, params: MHAParams, mask):
    """The checks every multi-head forward starts with: params, inputs (converted, with a
    batch axis), mask (boolean, with four axes)."""
    V.params(params)
    x_q, x_kv, unbatched = V.mha_inputs(x_q, x_kv, params.d_model)
    V.finite_inputs(x_q, x_kv)
    return x_q, x_kv, _batched_mask(mask, x_q, x_kv, params.n_heads), unbatched


def _empty_result(x_q, x_kv, params: MHAParams, need_weights: bool = True):
    """The answer when batch, n_q or n_k is 0: every query attends to nothing, so its
    output is b_o (0 without biases) and its weights, of which there are none, are 0."""
    batch, n_q, d = x_q.shape
    arrays = [x_q, x_kv] + [getattr(params, name) for name in V.PARAM_NAMES]
    dtype = np.result_type(*(a for a in arrays if a is not None))
    out = np.zeros((batch, n_q, d), dtype)
    if params.b_o is not None:
        out += params.b_o
    weights = np.zeros((batch, params.n_heads, n_q, x_kv.shape[1]), dtype)
    return out, weights if need_weights else None


def multi_head_attention(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
    *,
    need_weights: bool = True,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Batched multi-head attention: lib's fast version.

    x_q: (batch, n_q, d_model) queries; x_kv: (batch, n_k, d_model) keys and values
    (pass the same array twice for self-attention; n_q != n_k for cross-attention).
    Unbatched (n, d_model) inputs are accepted and give unbatched outputs.
    mask: boolean, broadcastable to (batch, heads, n_q, n_k), True = may attend.
    Returns (output (batch, n_q, d_model), weights (batch, heads, n_q, n_k)); with
    ``need_weights=False`` the weights are not kept and ``None`` is returned in their place
    (less memory, and a little faster).

    It computes exactly what :func:`multi_head_attention_reshape` computes (the plain
    reshape/transpose form derived in notebook 03, equal to rounding), organised for speed:

    - self-attention (``x_q is x_kv``) projects with one matmul by [W_q | W_k | W_v];
    - 1/sqrt(d_k) is folded into W_q and b_q (d_model^2 multiplications, not n_q * n_k);
    - the heads are views into the projection (no copies), and the scores are computed in
      blocks (of sequences, heads or query rows) sized to stay in the CPU cache, where the
      softmax runs in place; with ``need_weights=True`` each finished block is written
      once into the returned weights (the big array is touched once, not at every pass);
    - when every score is provably small (|score| <= |q_i| |k_j| by Cauchy-Schwarz, so
      the bound needs only the vectors' norms) exp cannot overflow or underflow and the
      usual "subtract the row's maximum" passes are skipped; otherwise they run (and only
      when the norms allow an overflow are the scores looked at for one);
    - with a mask, a block of query rows skips the keys after the last one any of its
      rows may attend to (with a causal mask, about half of the keys);
    - the rows are normalised after ``P @ V`` (n_q * d_k multiplications instead of
      n_q * n_k; the returned weights are normalised as they are written).

    The contract all of lib's multi-head forwards keep (README, "Conventions"): the same
    answer for every combination of options (biases or none, self- or cross-attention, any
    broadcastable mask, float32/float64, lists or arrays); n_k = 0 gives weights
    (batch, heads, n_q, 0) and the output b_o, n_q = 0 or batch = 0 empty outputs; NaN or
    inf in the inputs or params, and products that overflow, raise ValueError naming the
    array and where.
    """
    self_attention = x_q is x_kv
    x_q, x_kv, mask, unbatched = _prepare(x_q, x_kv, params, mask)
    batch, n_q, d = x_q.shape
    n_k = x_kv.shape[1]
    h = params.n_heads
    if batch * n_q * n_k == 0:
        out, weights = _empty_result(x_q, x_kv, params, need_weights)
    else:
        # Inputs and weights are finite (checked above), so a NaN or inf met below is an
        # overflow: V.mha_nonfinite explains it, and NumPy's warnings would only repeat it.
        with np.errstate(over="ignore", invalid="ignore"):
            q, k, v = _project_heads(x_q, x_kv, params, fuse=self_attention)  # (b, heads, n, d_k)
            heads = np.empty((batch, n_q, h, params.d_k), np.result_type(q, k, v))
            weights = np.empty((batch, h, n_q, n_k), np.result_type(q, k)) if need_weights else None
            fine = _attend_in_blocks(q, k, v, mask, heads.transpose(0, 2, 1, 3), weights)
            out = _project(heads.reshape(batch * n_q, d), params.W_o, params.b_o)
        if not (fine and V.all_finite(out)):
            V.mha_nonfinite(x_q, x_kv, params)
        out = out.reshape(batch, n_q, d)
    if unbatched:
        return out[0], None if weights is None else weights[0]
    return out, weights


# Bytes of scores per block. A block of whole score matrices (several heads, or several
# sequences, when sequences are short) stays within 2 MB, so that the softmax's passes over
# it run in one core's L2 cache. A block of query rows of one long score matrix may grow to
# 8 MB (it then sits in the shared L3): BLAS gets products of about a thousand rows and packs
# K and V fewer times. Both sizes measured a few per cent faster than the other choice on
# the course's 2-core machine, at the shapes `make bench` uses.
_GROUP_BYTES = 2 << 20
_ROW_BLOCK_BYTES = 8 << 20
# Largest |score| for which exp(score) is used without subtracting the row's maximum: far
# from overflow and underflow (float32: exp(+-88); float64: exp(+-709)), so every weight
# keeps full relative precision.
_SAFE_SCORE = {np.dtype(np.float32): 30.0, np.dtype(np.float64): 300.0}


def _project_heads(x_q, x_kv, params: MHAParams, fuse: bool):
    """q (pre-scaled by 1/sqrt(d_k)), k, v as (batch, heads, n, d_k) views of projections."""
    batch, n_q, d = x_q.shape
    n_k = x_kv.shape[1]
    h, d_k = params.n_heads, params.d_k
    scale = 1.0 / math.sqrt(d_k)  # a Python float keeps float32 in float32
    b_q = None if params.b_q is None else params.b_q * scale
    if fuse:  # self-attention: one (d, 3d) matmul
        W = np.concatenate([params.W_q * scale, params.W_k, params.W_v], axis=1)
        b = None if b_q is None else np.concatenate([b_q, params.b_k, params.b_v])
        qkv = _project(x_q.reshape(batch * n_q, d), W, b).reshape(batch, n_q, 3, h, d_k)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (batch, n, heads, d_k)
    else:
        q = _project(x_q.reshape(batch * n_q, d), params.W_q * scale, b_q)
        q = q.reshape(batch, n_q, h, d_k)
        W = np.concatenate([params.W_k, params.W_v], axis=1)
        b = None if params.b_k is None else np.concatenate([params.b_k, params.b_v])
        kv = _project(x_kv.reshape(batch * n_k, d), W, b).reshape(batch, n_k, 2, h, d_k)
        k, v = kv[:, :, 0], kv[:, :, 1]
    return q.transpose(0, 2, 1, 3), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def _attend_in_blocks(q, k, v, mask, heads_out, weights) -> bool:
    """softmax(q k^T, masked) v for blocks of (sequences, heads, query rows), into heads_out
    (batch, heads, n_q, d_k) and, if it is not None, weights (batch, heads, n_q, n_k).

    Returns False, computing nothing, when a score would not be a finite number (NaN or inf
    in q or k, or an overflow)."""
    batch, h, n_q, _ = q.shape
    n_k = k.shape[2]
    dtype = np.result_type(q, k)
    q_norm, k_norm = V.largest_row_norm(q), V.largest_row_norm(k)
    if not V.scores_fit(q, k, q_norm, k_norm):
        return False
    small = q_norm * k_norm <= _SAFE_SCORE.get(dtype, 0)
    k_t = k.transpose(0, 1, 3, 2)  # (batch, heads, d_k, n_k)
    add = reach = None
    if mask is not None:
        add = np.where(mask, dtype.type(0), dtype.type(-np.inf))  # 0: may attend, -inf: not
        # reach[..., i]: query i attends only among keys 0 .. reach - 1, so a block of rows
        # can leave out the keys after its largest reach (a causal mask halves the work).
        reach = np.where(mask.any(axis=-1), n_k - np.argmax(mask[..., ::-1], axis=-1), 0)
        # The values of keys that no query reaches (padding, say) are never read below, so
        # an overflow in them would go unseen; the other forwards multiply them by 0 and get
        # NaN. Look at those values (none, with a causal mask), so that all forwards agree.
        unread = np.arange(n_k) >= reach.max(axis=-1, keepdims=True)  # (b|1, h|1, n_k)
        if unread.any() and not V.all_finite(v[np.broadcast_to(unread, v.shape[:3])]):
            return False
    rows = max(1, min(n_q, _ROW_BLOCK_BYTES // dtype.itemsize // n_k))  # query rows per block
    group = _GROUP_BYTES // dtype.itemsize  # scores per block of whole score matrices
    hs = max(1, min(h, group // (n_q * n_k))) if rows == n_q else 1  # heads per block
    bs = max(1, min(batch, group // (h * n_q * n_k))) if hs == h else 1  # sequences per block
    scratch = np.empty(bs * hs * rows * n_k, dtype)  # the scores of one block, kept in cache
    top = np.empty((bs, hs, rows, 1), dtype)
    inv = np.empty((bs, hs, rows, 1), dtype)
    ones = np.ones((n_k, 1), dtype)  # row sums as S @ ones: a BLAS call, 3-4x np.sum's speed
    for b0 in range(0, batch, bs):
        seqs = slice(b0, min(batch, b0 + bs))
        nb = seqs.stop - b0
        for h0 in range(0, h, hs):
            heads = slice(h0, min(h, h0 + hs))
            nh = heads.stop - h0
            for r0 in range(0, n_q, rows):
                rs = slice(r0, min(n_q, r0 + rows))
                nr = rs.stop - r0
                n_used = n_k if reach is None else int(_block_of(reach, seqs, heads, rs).max())
                o = heads_out[seqs, heads, rs]  # (nb, nh, nr, d_k)
                if weights is not None:
                    weights[seqs, heads, rs, n_used:] = 0.0
                if n_used == 0:  # no query in this block may attend to anything
                    o[...] = 0.0
                    continue
                S = scratch[: nb * nh * nr * n_used].reshape(nb, nh, nr, n_used)
                t, s = top[:nb, :nh, :nr], inv[:nb, :nh, :nr]
                np.matmul(q[seqs, heads, rs], k_t[seqs, heads, :, :n_used], out=S)
                if add is not None:
                    np.add(S, _block_of(add, seqs, heads, rs)[..., :n_used], out=S)
                if not small:  # subtract each row's maximum (0 for a fully masked row)
                    np.max(S, axis=-1, keepdims=True, out=t)
                    t[np.isneginf(t)] = 0.0
                    np.subtract(S, t, out=S)
                np.exp(S, out=S)
                np.matmul(S, ones[:n_used], out=s)
                np.divide(1.0, s, out=s, where=s > 0)  # a fully masked row keeps 0: weights 0
                np.matmul(S, v[seqs, heads, :n_used], out=o)
                np.multiply(o, s, out=o)  # normalise after P @ V: d_k numbers per row, not n_k
                if weights is not None:  # written once, from the block in cache
                    np.multiply(S, s, out=weights[seqs, heads, rs, :n_used])
    return True


def _block_of(a: np.ndarray, seqs: slice, heads: slice, rows: slice) -> np.ndarray:
    """The (seqs, heads, rows, ...) block of an array of 3 or 4 axes (batch, heads, rows, ...)
    that broadcasts over its size-1 axes."""
    return a[
        seqs if a.shape[0] > 1 else slice(None),
        heads if a.shape[1] > 1 else slice(None),
        rows if a.shape[2] > 1 else slice(None),
    ]


def multi_head_attention_reshape(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The same as :func:`multi_head_attention`, written as notebook 03 derives it.

    Project, split the heads by reshape/transpose, run scaled dot-product attention on
    all (batch, heads) at once, merge the heads, project by W_o. Kept as the readable
    reference the fast version is tested against, and for the loop-vs-reshape benchmark.
    Same arguments, checks, empty-sequence answers and errors as the fast version.
    """
    x_q, x_kv, mask, unbatched = _prepare(x_q, x_kv, params, mask)
    h = params.n_heads
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
        q = _split(_project(x_q, params.W_q, params.b_q), h)  # (batch, heads, n_q, d_k)
        k = _split(_project(x_kv, params.W_k, params.b_k), h)  # (batch, heads, n_k, d_k)
        v = _split(_project(x_kv, params.W_v, params.b_v), h)  # (batch, heads, n_k, d_k)
        result = _attention(q, k, v, mask)
        if result is not None:
            heads, weights = result
            out = _project(_merge(heads), params.W_o, params.b_o)  # (batch, n_q, d_model)
    if result is None or not V.all_finite(out):
        V.mha_nonfinite(x_q, x_kv, params)
    return (out[0], weights[0]) if unbatched else (out, weights)


def multi_head_attention_per_head(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The same as :func:`multi_head_attention`, computed one head at a time.

    Head h uses columns h*d_k:(h+1)*d_k of W_q, W_k, W_v (and of the biases); the heads'
    outputs are concatenated along the features and projected by W_o. Kept as a
    reference the reshape version is tested against, and for the loop-vs-reshape
    benchmark. Same arguments, checks, empty-sequence answers and errors as the fast version.
    """
    x_q, x_kv, mask, unbatched = _prepare(x_q, x_kv, params, mask)
    if mask is not None:  # one (batch, n_q, n_k) slice per head
        mask = np.broadcast_to(mask, (x_q.shape[0], params.n_heads, x_q.shape[1], x_kv.shape[1]))
    d_k = params.d_k
    outputs, weights = [], []
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
        for h in range(params.n_heads):
            cols = slice(h * d_k, (h + 1) * d_k)

            def head_bias(b, cols=cols):
                return None if b is None else b[cols]

            q = _project(x_q, params.W_q[:, cols], head_bias(params.b_q))  # (batch, n_q, d_k)
            k = _project(x_kv, params.W_k[:, cols], head_bias(params.b_k))  # (batch, n_k, d_k)
            v = _project(x_kv, params.W_v[:, cols], head_bias(params.b_v))  # (batch, n_k, d_k)
            result = _attention(q, k, v, None if mask is None else mask[:, h])
            if result is None:
                break
            outputs.append(result[0])
            weights.append(result[1])
        else:
            concat = np.concatenate(outputs, axis=-1)  # (batch, n_q, d_model)
            out = _project(concat, params.W_o, params.b_o)
    if result is None or not V.all_finite(out):
        V.mha_nonfinite(x_q, x_kv, params)
    weights = np.stack(weights, axis=1)  # (batch, heads, n_q, n_k)
    return (out[0], weights[0]) if unbatched else (out, weights)


def _batched_mask(mask, x_q: np.ndarray, x_kv: np.ndarray, n_heads: int):
    """Check a mask against the scores (batch, heads, n_q, n_k) and give it four axes."""
    if mask is None:
        return None
    scores_shape = (x_q.shape[0], n_heads, x_q.shape[1], x_kv.shape[1])
    mask = V.mask(mask, scores_shape, "(batch, heads, n_q, n_k)")
    return mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
