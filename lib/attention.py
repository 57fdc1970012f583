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
to float64; lists are converted. Inputs and weights of different dtypes are promoted as
NumPy promotes them (float32 with float64 is float64), before any step is computed. Bad
input raises ValueError, worded the same way in every function (the checks live in
:mod:`lib._validate`): NaN or inf in any input, weight or bias and numbers whose products
overflow the dtype are named with where they are.
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
    return softmax_inplace(x.copy(), axis)


def softmax_inplace(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax that overwrites ``scores`` and returns it (no NaN/+inf check: callers do
    that, as :func:`softmax` does)."""
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
    lengths = V.integers(lengths, "lengths")
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
    q, k, v, mask = V.attention_inputs(q, k, v, mask)
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
    weights = softmax_inplace(scores)  # (..., n_q, n_k)
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
    return split_heads_unchecked(x, n_heads)


def split_heads_unchecked(x: np.ndarray, n_heads: int) -> np.ndarray:
    """split_heads without its checks, for callers that made them."""
    batch, seq, d_model = x.shape
    return x.reshape(batch, seq, n_heads, d_model // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(batch, heads, seq, d_k) -> (batch, seq, heads * d_k): the concat of the heads."""
    x = np.asarray(x)
    V.rank(x, "x", (4,), "(batch, heads, seq, d_k)")
    return merge_heads_unchecked(x)


def merge_heads_unchecked(x: np.ndarray) -> np.ndarray:
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


def project(x: np.ndarray, W: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x @ W (+ b, added in place): one projection, unchecked."""
    y = x @ W
    if b is not None:
        y += b
    return y


def prepare_mha(x_q, x_kv, params: MHAParams, mask):
    """The checks every multi-head forward starts with: params, inputs (converted, with a
    batch axis), mask (boolean, with four axes). The inputs and params come back in their
    common dtype (NumPy's promotion), so that every step is computed in the result's."""
    V.params(params)
    x_q, x_kv, unbatched = V.mha_inputs(x_q, x_kv, params.d_model)
    V.finite_inputs(x_q, x_kv)
    mask = batched_mask(mask, x_q, x_kv, params.n_heads)
    x_q, x_kv, params = V.promoted(x_q, x_kv, params)
    return x_q, x_kv, params, mask, unbatched


def empty_mha_result(x_q, x_kv, params: MHAParams, need_weights: bool = True):
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
    """Batched multi-head attention: lib's fast version (the one later notebooks use).

    x_q: (batch, n_q, d_model) queries; x_kv: (batch, n_k, d_model) keys and values
    (pass the same array twice for self-attention; n_q != n_k for cross-attention).
    Unbatched (n, d_model) inputs are accepted and give unbatched outputs.
    mask: boolean, broadcastable to (batch, heads, n_q, n_k), True = may attend.
    Returns (output (batch, n_q, d_model), weights (batch, heads, n_q, n_k)); with
    ``need_weights=False`` the weights are not kept and ``None`` is returned in their place
    (less memory, and faster).

    It computes exactly what :func:`multi_head_attention_reshape` computes (the plain
    reshape/transpose form derived in notebook 03, equal to rounding), organised for speed
    by :func:`lib.blockwise.multi_head_attention`, which notebook 10 derives: one fused
    projection, the scores computed in blocks that stay in the CPU's cache, the keys a
    masked block of queries cannot reach skipped, the rows normalised after ``P @ V``.

    The contract all of lib's multi-head forwards keep (README, "Conventions"): the same
    answer for every combination of options (biases or none, self- or cross-attention, any
    broadcastable mask, float32/float64, lists or arrays); n_k = 0 gives weights
    (batch, heads, n_q, 0) and the output b_o, n_q = 0 or batch = 0 empty outputs; NaN or
    inf in the inputs or params, and products that overflow, raise ValueError naming the
    array and where.
    """
    return BW.multi_head_attention(x_q, x_kv, params, mask, need_weights=need_weights)


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
    x_q, x_kv, params, mask, unbatched = prepare_mha(x_q, x_kv, params, mask)
    h = params.n_heads
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
        split = split_heads_unchecked
        q = split(project(x_q, params.W_q, params.b_q), h)  # (batch, heads, n_q, d_k)
        k = split(project(x_kv, params.W_k, params.b_k), h)  # (batch, heads, n_k, d_k)
        v = split(project(x_kv, params.W_v, params.b_v), h)  # (batch, heads, n_k, d_k)
        result = _attention(q, k, v, mask)
        if result is not None:
            heads, weights = result
            concat = merge_heads_unchecked(heads)  # (batch, n_q, d_model)
            out = project(concat, params.W_o, params.b_o)  # (batch, n_q, d_model)
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
    x_q, x_kv, params, mask, unbatched = prepare_mha(x_q, x_kv, params, mask)
    if mask is not None:  # one (batch, n_q, n_k) slice per head
        mask = np.broadcast_to(mask, (x_q.shape[0], params.n_heads, x_q.shape[1], x_kv.shape[1]))
    d_k = params.d_k
    outputs, weights = [], []
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
        for h in range(params.n_heads):
            cols = slice(h * d_k, (h + 1) * d_k)

            def head_bias(b, cols=cols):
                return None if b is None else b[cols]

            q = project(x_q, params.W_q[:, cols], head_bias(params.b_q))  # (batch, n_q, d_k)
            k = project(x_kv, params.W_k[:, cols], head_bias(params.b_k))  # (batch, n_k, d_k)
            v = project(x_kv, params.W_v[:, cols], head_bias(params.b_v))  # (batch, n_k, d_k)
            result = _attention(q, k, v, None if mask is None else mask[:, h])
            if result is None:
                break
            outputs.append(result[0])
            weights.append(result[1])
        else:
            concat = np.concatenate(outputs, axis=-1)  # (batch, n_q, d_model)
            out = project(concat, params.W_o, params.b_o)
    if result is None or not V.all_finite(out):
        V.mha_nonfinite(x_q, x_kv, params)
    weights = np.stack(weights, axis=1)  # (batch, heads, n_q, n_k)
    return (out[0], weights[0]) if unbatched else (out, weights)


def batched_mask(mask, x_q: np.ndarray, x_kv: np.ndarray, n_heads: int):
    """Check a mask against the scores (batch, heads, n_q, n_k) and give it four axes."""
    if mask is None:
        return None
    scores_shape = (x_q.shape[0], n_heads, x_q.shape[1], x_kv.shape[1])
    mask = V.mask(mask, scores_shape, "(batch, heads, n_q, n_k)")
    return mask.reshape((1,) * (4 - mask.ndim) + mask.shape)


# Names used by other modules before they had public ones (lib.backprop, lib.checks.nb01_lists);
# kept so that those modules run unchanged until they switch to the names above.
_softmax_inplace = softmax_inplace
_split = split_heads_unchecked
_merge = merge_heads_unchecked
_batched_mask = batched_mask

# The fast path lives in lib.blockwise, which imports this module: imported last, when every
# name it uses from here exists.
from . import blockwise as BW  # noqa: E402
