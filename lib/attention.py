"""Scaled dot-product and multi-head attention in NumPy (notebooks 02 and 03).

Row vectors (``x @ W``, W of shape (d_in, d_out)); boolean masks, True = "this query may
attend to this key"; shapes in comments. A query with no key to attend to gets weights 0 and
output 0, never NaN. Inputs are checked by ``lib._validate`` at the top of each function.
"""

import math
from dataclasses import dataclass

import numpy as np

from . import _validate as valid


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``. ``-inf`` entries (masked keys) get weight 0;
    an all ``-inf`` slice gets zeros, not NaN."""
    x = valid.real_array(x, "softmax input")
    valid.finite(x, "softmax input", masked_ok=True)
    return softmax_inplace(x.copy(), axis)


def softmax_inplace(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """:func:`softmax` computed in ``scores`` itself (no copy), unchecked."""
    top = scores.max(axis=axis, keepdims=True, initial=-np.inf)  # exp(s - top) <= 1: no overflow
    top[np.isneginf(top)] = 0.0  # an all-masked (or empty) slice: exp(-inf - 0) = 0, not NaN
    np.subtract(scores, top, out=scores)
    np.exp(scores, out=scores)
    total = scores.sum(axis=axis, keepdims=True)
    total[total == 0] = 1.0  # an all-masked slice: its zeros stay zeros
    np.divide(scores, total, out=scores)
    return scores


def mask_scores(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``scores`` with the masked keys (False) set to -inf, in place, so that exp gives them
    weight 0. A row where an allowed score overflowed to -inf becomes NaN first: it must not
    pass for a masked key, and the NaN reaches the output, whose check reports the overflow."""
    if np.isneginf(scores.min(initial=np.inf)):  # rare, so one quick look at all scores first
        allowed = True if mask is None else mask  # then the minimum of each row's allowed ones
        scores[np.isneginf(scores.min(axis=-1, initial=np.inf, where=allowed))] = np.nan
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)
    return scores


def masked_softmax(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The attention weights of ``scores`` (overwritten): the softmax of :func:`mask_scores`."""
    return softmax_inplace(mask_scores(scores, mask))


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """Boolean (n_q, n_k) mask: query i sees keys 0..i. With n_k > n_q the queries are the
    *last* n_q positions (earlier keys cached), so query i sees keys 0..i + (n_k - n_q)."""
    n_q = valid.integer(n_q, "n_q", low=0)
    n_k = n_q if n_k is None else valid.integer(n_k, "n_k", low=0)
    return np.tri(n_q, n_k, k=n_k - n_q, dtype=bool)


def padding_mask(lengths, n_k: int) -> np.ndarray:
    """Boolean (batch, 1, 1, n_k) mask: key j of sequence b is real iff j < lengths[b]. It
    broadcasts over heads and queries; ``causal_mask(n) & padding_mask(lengths, n)`` works."""
    n_k = valid.integer(n_k, "n_k", low=0)
    lengths = valid.integers(lengths, "lengths")
    bad = lengths[(lengths < 0) | (lengths > n_k)]
    if bad.size:
        raise ValueError(f"lengths must lie in [0, n_k={n_k}], got {bad.tolist()}")
    return (np.arange(n_k)[None, :] < lengths[:, None])[:, None, None, :]  # (batch, 1, 1, n_k)


def scaled_dot_product_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """softmax(q k^T / sqrt(d_k)) v over leading batch axes that broadcast (notebook 02): q
    (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), mask boolean and broadcastable to
    (..., n_q, n_k), True = may attend. Returns output (..., n_q, d_v), weights (..., n_q, n_k)."""
    q, k, v, mask, _ = valid.attention_inputs(q, k, v, mask)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        out, weights = attend(q, k, v, mask)
    valid.finite_output(out, {"q": q, "k": k, "v": v})
    return out, weights


def attend(q, k, v, mask) -> tuple[np.ndarray, np.ndarray]:
    """The computation of :func:`scaled_dot_product_attention`, for checked inputs."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))  # scaling q: n_q d_k products, not n_q n_k
    scores = q @ np.swapaxes(k, -1, -2)  # (..., n_q, n_k)
    weights = masked_softmax(scores, mask)  # (..., n_q, n_k)
    return weights @ v, weights  # (..., n_q, d_v), (..., n_q, n_k)


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(batch, seq, d_model) -> (batch, heads, seq, d_k): reshape splits the features into
    (heads, d_k), then the transpose moves heads in front of seq (notebook 03 shows why a
    reshape alone would cut the sequence instead)."""
    x = np.asarray(x)
    valid.rank(x, "x", (3,), "(batch, seq, d_model)")
    batch, seq, d_model = x.shape
    d_k = valid.heads(d_model, n_heads)
    return x.reshape(batch, seq, n_heads, d_k).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(batch, heads, seq, d_k) -> (batch, seq, heads * d_k): the concat of the heads."""
    x = np.asarray(x)
    valid.rank(x, "x", (4,), "(batch, heads, seq, d_k)")
    batch, heads, seq, d_k = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * d_k)


def glorot(rng: np.random.Generator, d_in: int, d_out: int, dtype=np.float64) -> np.ndarray:
    """A (d_in, d_out) weight, uniform in +-sqrt(6 / (d_in + d_out)) (Glorot & Bengio 2010):
    the variance that keeps activations and gradients about the same size through the layer."""
    limit = math.sqrt(6.0 / (d_in + d_out))
    return rng.uniform(-limit, limit, size=(d_in, d_out)).astype(dtype)


@dataclass(frozen=True)
class MHAParams:
    """Weights of one multi-head attention layer (row vectors: x @ W). W_q, W_k, W_v, W_o:
    (d_model, d_model), columns h*d_k:(h+1)*d_k of the first three belonging to head h; biases
    (d_model,), all four or none (torch's rule). Lists become checked arrays when it is built."""

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
        valid.mha_params(self)

    @property
    def d_model(self) -> int:
        return self.W_q.shape[0]

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def has_bias(self) -> bool:
        return self.b_q is not None

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights and biases the layer has, by name."""
        return {n: getattr(self, n) for n in valid.PARAM_NAMES if getattr(self, n) is not None}


def init_mha_params(
    d_model: int, n_heads: int, rng: np.random.Generator, bias: bool = False, dtype=np.float64
) -> MHAParams:
    """Random weights (:func:`glorot`); with ``bias=True`` biases from N(0, 0.1), not the
    usual zeros, so that code which mishandles a bias gives a visibly different answer."""
    valid.heads(d_model, n_heads)
    dtype = valid.float_dtype(dtype)
    weights = {name: glorot(rng, d_model, d_model, dtype) for name in valid.WEIGHT_NAMES}
    if bias:
        weights |= {name: rng.normal(0.0, 0.1, d_model).astype(dtype) for name in valid.BIAS_NAMES}
    return MHAParams(**weights, n_heads=n_heads)


def count_params(params: MHAParams) -> int:
    """Learnable numbers: 4 d^2, plus 4 d with biases."""
    return sum(a.size for a in params.arrays().values())


def project(x: np.ndarray, W: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x @ W + b (b None: no bias)."""
    return x @ W if b is None else x @ W + b


def multi_head_attention(
    x_q, x_kv, params: MHAParams, mask=None, *, causal=False, need_weights=True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Batched multi-head attention: notebook 03's steps (section 2), one line each.
    x_q (batch, n_q, d_model) queries, x_kv (batch, n_k, d_model) keys and values (the same
    array for self-attention); unbatched (n, d_model) inputs give unbatched outputs. mask:
    boolean, broadcastable to (batch, heads, n_q, n_k), True = may attend; ``causal=True``
    adds :func:`causal_mask`. Returns output (batch, n_q, d_model) and weights
    (batch, heads, n_q, n_k), None with ``need_weights=False``."""
    x_q, x_kv, p, mask, unbatched = valid.mha_inputs(x_q, x_kv, params, mask, causal)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        q = split_heads(project(x_q, p.W_q, p.b_q), p.n_heads)  # (batch, heads, n_q, d_k)
        k = split_heads(project(x_kv, p.W_k, p.b_k), p.n_heads)  # (batch, heads, n_k, d_k)
        v = split_heads(project(x_kv, p.W_v, p.b_v), p.n_heads)  # (batch, heads, n_k, d_k)
        heads, weights = attend(q, k, v, mask)  # (b, heads, n_q, d_k), (b, heads, n_q, n_k)
        out = project(merge_heads(heads), p.W_o, p.b_o)  # (batch, n_q, d_model)
    valid.finite_output(out, {"x_q": x_q, "x_kv": x_kv} | p.arrays())
    if unbatched:
        out, weights = out[0], weights[0]
    return out, weights if need_weights else None


def multi_head_attention_per_head(
    x_q, x_kv, params: MHAParams, mask=None, *, causal=False
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`multi_head_attention` one head at a time, with head h's d_k columns of W_q,
    W_k and W_v: notebook 03's loop, the reference the reshape form is tested against."""
    x_q, x_kv, p, mask, unbatched = valid.mha_inputs(x_q, x_kv, params, mask, causal)
    batch, n_q, n_k = x_q.shape[0], x_q.shape[1], x_kv.shape[1]
    if mask is not None:  # one (batch, n_q, n_k) slice per head
        mask = np.broadcast_to(mask, (batch, p.n_heads, n_q, n_k))
    outputs, weights = [], []
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        for h in range(p.n_heads):
            cols = slice(h * p.d_k, (h + 1) * p.d_k)  # head h's columns of W_q, W_k, W_v
            b_q, b_k, b_v = (None if b is None else b[cols] for b in (p.b_q, p.b_k, p.b_v))
            q = project(x_q, p.W_q[:, cols], b_q)  # (batch, n_q, d_k)
            k = project(x_kv, p.W_k[:, cols], b_k)  # (batch, n_k, d_k)
            v = project(x_kv, p.W_v[:, cols], b_v)  # (batch, n_k, d_k)
            out_h, weights_h = attend(q, k, v, None if mask is None else mask[:, h])
            outputs.append(out_h)
            weights.append(weights_h)
        out = project(np.concatenate(outputs, axis=-1), p.W_o, p.b_o)  # (batch, n_q, d_model)
    valid.finite_output(out, {"x_q": x_q, "x_kv": x_kv} | p.arrays())
    weights = np.stack(weights, axis=1)  # (batch, heads, n_q, n_k)
    return (out[0], weights[0]) if unbatched else (out, weights)
