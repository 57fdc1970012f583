"""Scaled dot-product and multi-head attention in NumPy (notebooks 02 and 03).

Row vectors (``x @ W``, W of shape (d_in, d_out)); boolean masks, True = "this query may
attend to this key"; shapes in comments, e.g. ``# (batch, heads, n_q, n_k)``. The README's
"Conventions" hold: a query with no key to attend to gets weights 0 and output 0, never NaN;
mixed dtypes are promoted as NumPy promotes them; bad input raises a clear ValueError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from . import _validate as valid

# --------------------------------------------------------------------------- softmax


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``: the maximum is subtracted before ``exp``.
    ``-inf`` entries (masked keys) get weight 0; an all ``-inf`` slice gets zeros, not NaN."""
    x = valid.real_array(x, "softmax input")
    _no_nan_or_posinf(x, "softmax input")
    return softmax_inplace(x.copy(), axis)


def _no_nan_or_posinf(x: np.ndarray, name: str) -> None:
    """For scores, where -inf means "masked": NaN and +inf are refused."""
    bad = np.isnan(x) | np.isposinf(x)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} contains NaN or +inf (first at index {where}, shape {x.shape})")


def softmax_inplace(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """:func:`softmax` that overwrites ``scores`` and returns it, unchecked."""
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
    q, k, v, mask, _ = valid.attention_inputs(q, k, v, mask)
    result = _attention(q, k, v, mask)
    if result is None:  # (the output, weighted means of v's rows, cannot overflow)
        raise valid.overflow(valid.SCORES, np.result_type(q, k), {"q": q, "k": k})
    return result


def _attention(q, k, v, mask) -> tuple[np.ndarray, np.ndarray] | None:
    """softmax(q k^T / sqrt(d_k), masked) v, unchecked; None when a score is not finite
    (NaN or inf in q or k, or an overflow), for the caller to explain."""
    # Fold 1/sqrt(d_k) into q: it touches n_q*d_k numbers instead of n_q*n_k, and a Python
    # float keeps float32 inputs in float32 (np.sqrt would give a float64 scalar).
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    if not valid.scores_fit(q, k, valid.largest_row_norm(q), valid.largest_row_norm(k)):
        return None
    scores = q @ np.swapaxes(k, -1, -2)  # (..., n_q, n_k)
    weights = masked_softmax(scores, mask)  # (..., n_q, n_k)
    return weights @ v, weights


def masked_softmax(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """The attention weights of ``scores`` (overwritten, unchecked): the keys ``mask`` blocks
    (False) set to -inf, then :func:`softmax_inplace` over the keys (last axis)."""
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)
    return softmax_inplace(scores)


# --------------------------------------------------------------------------- heads


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


# --------------------------------------------------------------------------- parameters


def glorot(rng: np.random.Generator, d_in: int, d_out: int, dtype=np.float64) -> np.ndarray:
    """A (d_in, d_out) weight, uniform in +-sqrt(6 / (d_in + d_out)) (Glorot & Bengio 2010):
    the variance that keeps activations and gradients about the same size through the layer."""
    limit = math.sqrt(6.0 / (d_in + d_out))
    return rng.uniform(-limit, limit, size=(d_in, d_out)).astype(dtype)


@dataclass(frozen=True)
class MHAParams:
    """Weights of one multi-head attention layer (row-vector convention: x @ W).

    W_q, W_o: (d_model, d_model); columns h*d_k:(h+1)*d_k of W_q belong to query head h.
    W_k, W_v: (d_model, n_kv_heads * d_k). n_kv_heads defaults to n_heads; fewer key/value
    heads give grouped-query attention (notebook 10): query head h reads key/value head
    h // group, group = n_heads / n_kv_heads. Biases: b_q, b_o (d_model,), b_k, b_v
    (n_kv_heads * d_k,), all four or none (torch's rule; a zero bias is no bias).
    Shapes are checked when built (frozen: they stay true); every forward checks the numbers
    for NaN and inf (:func:`check_params`), since arrays can change in place.
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
    n_kv_heads: int | None = None

    def __post_init__(self) -> None:
        n_kv_heads = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        arrays = {name: getattr(self, name) for name in valid.PARAM_NAMES}
        fields = param_fields(arrays, self.n_heads, n_kv_heads)
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    @property
    def d_model(self) -> int:
        return self.W_q.shape[0]

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 for ordinary multi-head attention)."""
        return self.n_heads // self.n_kv_heads

    @property
    def has_bias(self) -> bool:
        """Whether the layer has its biases (all four: see the class docstring)."""
        return self.b_q is not None

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights and biases the layer has, by name."""
        return {n: getattr(self, n) for n in valid.PARAM_NAMES if getattr(self, n) is not None}


def param_fields(arrays: dict, n_heads, n_kv_heads) -> dict:
    """The fields of an MHAParams, checked (shapes, all four biases or none, head counts
    that divide) and converted to arrays."""
    arrays = {name: None if a is None else valid.real_array(a, name) for name, a in arrays.items()}
    d = arrays["W_q"].shape[0] if arrays["W_q"].ndim else 0
    valid.square(arrays["W_q"].shape, "W_q", d)
    valid.square(arrays["W_o"].shape, "W_o", d)
    d_k = valid.heads(d, n_heads)
    valid.kv_heads(n_heads, n_kv_heads)
    width = int(n_kv_heads) * d_k  # of the keys and of the values
    for name in ("W_k", "W_v"):
        if arrays[name].shape != (d, width):
            kv = "(d_model, d_model)" if width == d else "(d_model, n_kv_heads * d_k)"
            raise ValueError(f"{name} must be {kv} = ({d}, {width}), got {arrays[name].shape}")
    given = [name for name in valid.BIAS_NAMES if arrays[name] is not None]
    if given and len(given) != len(valid.BIAS_NAMES):
        missing = [name for name in valid.BIAS_NAMES if name not in given]
        raise ValueError(
            f"MHAParams takes all four biases or none, got {', '.join(given)} without "
            f"{', '.join(missing)}: pass zeros for a bias the layer does not have "
            "(a zero bias is the same as no bias)"
        )
    for name in given:
        kv_bias = name in ("b_k", "b_v") and width != d
        size, what = (width, "n_kv_heads * d_k") if kv_bias else (d, "d_model")
        if arrays[name].shape != (size,):
            raise ValueError(
                f"{name} must have shape ({what},) = ({size},), got {arrays[name].shape}"
            )
    return arrays | {"n_heads": int(n_heads), "n_kv_heads": int(n_kv_heads)}


def init_mha_params(
    d_model: int,
    n_heads: int,
    rng: np.random.Generator,
    bias: bool = False,
    dtype=np.float64,
    n_kv_heads: int | None = None,
) -> MHAParams:
    """Random weights (:func:`glorot`); with ``bias=True`` biases from N(0, 0.1), not the
    usual zeros, so that code which mishandles a bias gives a visibly different answer."""
    d_k = valid.heads(d_model, n_heads)
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    valid.kv_heads(n_heads, n_kv_heads)
    dtype = valid.float_dtype(dtype)
    width = n_kv_heads * d_k  # of the keys and of the values

    def vector(size):
        return rng.normal(0.0, 0.1, size=size).astype(dtype) if bias else None

    widths = dict(q=d_model, k=width, v=width, o=d_model)  # of each weight and its bias
    weights = {f"W_{part}": glorot(rng, d_model, w, dtype) for part, w in widths.items()}
    biases = {f"b_{part}": vector(w) for part, w in widths.items()}
    return MHAParams(**weights, **biases, n_heads=n_heads, n_kv_heads=n_kv_heads)


def count_params(params: MHAParams) -> int:
    """Learnable numbers: 2 d^2 + 2 d (n_kv_heads d_k), plus the biases (4 d^2 + 4 d when
    every head has its own keys and values)."""
    return sum(a.size for a in params.arrays().values())


def check_params(p) -> MHAParams:
    """``p`` is an MHAParams whose weights and biases hold no NaN or inf."""
    if not isinstance(p, MHAParams):
        raise ValueError(
            f"params must be an MHAParams (see lib.attention.init_mha_params), got "
            f"{type(p).__name__}"
        )
    valid.finite_all({f"params.{name}": a for name, a in p.arrays().items()})
    return p


# --------------------------------------------------------------------------- multi-head


def project(x: np.ndarray, W: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x @ W (+ b, added in place): one projection, unchecked."""
    y = x @ W
    if b is not None:
        y += b
    return y


def with_causal(mask, n_q: int, n_k: int) -> np.ndarray:
    """``mask`` (None: every key) and the causal rule of :func:`causal_mask`, together."""
    causal = causal_mask(n_q, n_k)
    return causal if mask is None else mask & causal


def prepare_mha(x_q, x_kv, params: MHAParams, mask, *, causal=False, batched_only=False):
    """The checks every multi-head forward starts with. Returns x_q, x_kv (batch, n, d_model)
    and params in their common dtype, the mask with four axes (``causal=True`` folded in;
    None: every key) and whether the inputs came unbatched."""
    check_params(params)
    x_q, x_kv, unbatched = _mha_inputs(x_q, x_kv, params.d_model, not batched_only)
    valid.finite_all({"x_q": x_q} if x_kv is x_q else {"x_q": x_q, "x_kv": x_kv})
    batch, n_q, n_k = x_q.shape[0], x_q.shape[1], x_kv.shape[1]
    if mask is not None:
        mask = valid.mask(mask, (batch, params.n_heads, n_q, n_k), "(batch, heads, n_q, n_k)")
    if causal:
        mask = with_causal(mask, n_q, n_k)
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    x_q, x_kv, params = promoted(x_q, x_kv, params)
    return x_q, x_kv, params, mask, unbatched


def promoted(x_q: np.ndarray, x_kv: np.ndarray, p):
    """x_q, x_kv and p (an MHAParams) in the dtype NumPy gives them together, so that every
    step of a forward is computed in its result's dtype (self-attention stays one array)."""
    arrays = p.arrays()
    dtype = np.result_type(x_q, x_kv, *arrays.values())
    changed = {name: a.astype(dtype) for name, a in arrays.items() if a.dtype != dtype}
    if changed:
        p = replace(p, **changed)
    same = x_kv is x_q
    x_q = x_q.astype(dtype, copy=False)
    return x_q, x_q if same else x_kv.astype(dtype, copy=False), p


def _mha_inputs(x_q, x_kv, d_model: int, unbatched: bool = True):
    """x_q, x_kv as real arrays (batch, n, d_model), and whether they came unbatched
    (self-attention, ``x_q is x_kv``, stays one array)."""
    same = x_kv is x_q
    x_q = valid.real_array(x_q, "x_q")
    x_kv = x_q if same else valid.real_array(x_kv, "x_kv")
    layouts = (
        "both (batch, n, d_model) or both (n, d_model)" if unbatched else "(batch, n, d_model)"
    )
    if x_q.ndim not in ((2, 3) if unbatched else (3,)) or x_kv.ndim != x_q.ndim:
        raise ValueError(
            f"x_q and x_kv must be {layouts}, got x_q {x_q.shape} and x_kv {x_kv.shape}"
        )
    was_unbatched = x_q.ndim == 2
    if was_unbatched:
        x_q = x_q[None]
        x_kv = x_q if same else x_kv[None]
    valid.width(x_q.shape, "x_q", d_model)
    valid.width(x_kv.shape, "x_kv", d_model)
    if x_q.shape[0] != x_kv.shape[0]:
        raise ValueError(f"x_q and x_kv have different batch sizes: {x_q.shape} and {x_kv.shape}")
    return x_q, x_kv, was_unbatched


def heads_qkv(x_q: np.ndarray, x_kv: np.ndarray, p: MHAParams):
    """The queries (batch, heads, n_q, d_k), keys and values (batch, heads, n_k, d_k) of
    checked inputs (:func:`prepare_mha`), each key/value head repeated for its group."""
    q = split_heads(project(x_q, p.W_q, p.b_q), p.n_heads)  # (batch, heads, n_q, d_k)
    k = split_heads(project(x_kv, p.W_k, p.b_k), p.n_kv_heads)  # (batch, kv, n_k, d_k)
    v = split_heads(project(x_kv, p.W_v, p.b_v), p.n_kv_heads)  # (batch, kv, n_k, d_k)
    if p.group > 1:  # grouped-query: kv head j serves query heads j*group .. +group-1
        k = np.repeat(k, p.group, axis=1)  # (batch, heads, n_k, d_k)
        v = np.repeat(v, p.group, axis=1)  # (batch, heads, n_k, d_k)
    return q, k, v


def multi_head_attention(
    x_q, x_kv, params: MHAParams, mask=None, *, causal=False, need_weights=True
) -> tuple[np.ndarray, np.ndarray | None]:
    """Batched multi-head attention, as notebook 03 derives it.

    x_q: (batch, n_q, d_model) queries; x_kv: (batch, n_k, d_model) keys and values (the
    same array for self-attention); unbatched (n, d_model) inputs give unbatched outputs.
    mask: boolean, broadcastable to (batch, heads, n_q, n_k), True = may attend;
    ``causal=True`` adds :func:`causal_mask`. Returns (output (batch, n_q, d_model), weights
    (batch, heads, n_q, n_k) or None with ``need_weights=False``).
    """
    x_q, x_kv, p, mask, unbatched = prepare_mha(x_q, x_kv, params, mask, causal=causal)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is explained below
        q, k, v = heads_qkv(x_q, x_kv, p)  # (batch, heads, n, d_k) each
        result = _attention(q, k, v, mask)  # None: a score overflowed
        if result is not None:
            heads, weights = result  # (batch, heads, n_q, d_k), (batch, heads, n_q, n_k)
            concat = merge_heads(heads)  # (batch, n_q, d_model)
            out = project(concat, p.W_o, p.b_o)  # (batch, n_q, d_model)
    if result is None or not valid.all_finite(out):
        valid.mha_nonfinite(p, x_q, x_kv)
    weights = weights if need_weights else None
    if unbatched:
        return out[0], None if weights is None else weights[0]
    return out, weights


def multi_head_attention_per_head(
    x_q, x_kv, params: MHAParams, mask=None, *, causal=False
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`multi_head_attention` one head at a time: head h uses its d_k columns of W_q and
    those of its key/value head h // group in W_k and W_v. The reference the reshape form is
    tested against, and notebook 03's loop to time against it."""
    x_q, x_kv, p, mask, unbatched = prepare_mha(x_q, x_kv, params, mask, causal=causal)
    batch, n_q, n_k = x_q.shape[0], x_q.shape[1], x_kv.shape[1]
    if mask is not None:  # one (batch, n_q, n_k) slice per head
        mask = np.broadcast_to(mask, (batch, p.n_heads, n_q, n_k))
    d_k = p.d_k
    outputs, weights = [], []
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is explained below
        for h in range(p.n_heads):
            cols = slice(h * d_k, (h + 1) * d_k)  # query head h
            kv_cols = slice((h // p.group) * d_k, (h // p.group + 1) * d_k)  # its kv head

            def part(W, b, cols):
                return W[:, cols], None if b is None else b[cols]

            q = project(x_q, *part(p.W_q, p.b_q, cols))  # (batch, n_q, d_k)
            k = project(x_kv, *part(p.W_k, p.b_k, kv_cols))  # (batch, n_k, d_k)
            v = project(x_kv, *part(p.W_v, p.b_v, kv_cols))  # (batch, n_k, d_k)
            result = _attention(q, k, v, None if mask is None else mask[:, h])
            if result is None:
                break
            outputs.append(result[0])
            weights.append(result[1])
        else:
            concat = np.concatenate(outputs, axis=-1)  # (batch, n_q, d_model)
            out = project(concat, p.W_o, p.b_o)
    if result is None or not valid.all_finite(out):
        valid.mha_nonfinite(p, x_q, x_kv)
    weights = np.stack(weights, axis=1)  # (batch, heads, n_q, n_k)
    return (out[0], weights[0]) if unbatched else (out, weights)
