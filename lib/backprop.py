"""Backpropagation through multi-head attention, by hand (notebook 05): :func:`mha_forward`
caches what :func:`mha_backward` needs for the gradient of every input and parameter.
"""

import math
from dataclasses import dataclass

import numpy as np

from . import _validate as valid
from . import attention as A
from .positions import RoPE, query_positions

PARAM_NAMES = valid.PARAM_NAMES


def softmax_backward(weights: np.ndarray, d_weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """dL/dscores = p * (dL/dp - sum(dL/dp * p, axis)) for p = softmax(scores, axis) given as
    ``weights`` and dL/dp as ``d_weights``: 0 where p is 0 (masked keys)."""
    weights = valid.array(weights, "weights")
    same = f"{weights.shape}, the shape of weights"
    d_weights = valid.array(d_weights, "d_weights", [weights.shape], same)
    return _softmax_grad(weights, d_weights, axis)


def _softmax_grad(weights: np.ndarray, d_weights: np.ndarray, axis: int = -1) -> np.ndarray:
    inner = np.sum(d_weights * weights, axis=axis, keepdims=True)  # sum over the keys
    return weights * (d_weights - inner)


def numeric_gradient(array: np.ndarray, f, eps: float = 1e-6) -> np.ndarray:
    """Central differences (f(+eps) - f(-eps)) / (2 eps) of f() with respect to every entry
    of ``array``, which is changed in place and restored (notebook 05's gradient check)."""
    grad = np.zeros_like(array)
    for idx in np.ndindex(array.shape):
        old = array[idx]
        array[idx] = old + eps
        up = f()
        array[idx] = old - eps
        down = f()
        array[idx] = old
        grad[idx] = (up - down) / (2 * eps)
    return grad


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """|a - b| / (|a| + |b|): one relative error for a whole array (notebook 05)."""
    return float(np.linalg.norm(a - b) / (np.linalg.norm(a) + np.linalg.norm(b)))


def weight_gradient(x: np.ndarray, d_y: np.ndarray) -> np.ndarray:
    """dL/dW = x^T d_y (d_in, d_out) for y = x @ W, summed over every leading axis."""
    return x.reshape(-1, x.shape[-1]).T @ d_y.reshape(-1, d_y.shape[-1])


@dataclass
class MHACache:
    """What :func:`mha_backward` needs from the forward pass."""

    params: A.MHAParams
    x_q: np.ndarray  # (batch, n_q, d)
    x_kv: np.ndarray  # (batch, n_k, d)
    q: np.ndarray  # (batch, heads, n_q, d_k), already scaled by 1/sqrt(d_k) (and turned)
    k: np.ndarray  # (batch, heads, n_k, d_k) (turned by RoPE, when there is one)
    v: np.ndarray  # (batch, heads, n_k, d_k)
    weights: np.ndarray  # (batch, heads, n_q, n_k)
    heads: np.ndarray  # (batch, heads, n_q, d_k), before the head mask
    concat: np.ndarray  # (batch, n_q, d), after the head mask
    head_mask: np.ndarray  # (batch, heads) or (heads,)
    rope: RoPE | None = None
    rope_angles: tuple | None = None  # (cos_q, sin_q, cos_k, sin_k), each (n, d_k / 2)
    score_bias_shape: tuple | None = None  # the shape of the score bias given


def mha_forward(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    params: A.MHAParams,
    mask: np.ndarray | None = None,
    head_mask: np.ndarray | None = None,
    *,
    causal: bool = False,
    rope: RoPE | None = None,
    score_bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, MHACache]:
    """Multi-head attention forward pass that remembers what backward needs; arguments,
    checks and errors as :func:`lib.attention.multi_head_attention`, batched inputs only.

    head_mask: (heads,) or (batch, heads), one factor per head, default all ones (0 switches a
    head off, as notebook 06 prunes; its gradient is the head's importance). Notebook 09's
    positions: rope, a :class:`lib.positions.RoPE`, turns queries and keys (keys at 0..n_k-1,
    queries the last n_q); score_bias (ALiBi) is added to the scaled scores before the mask,
    broadcast to (batch, heads, n_q, n_k). Returns (output, weights, cache).
    """
    x_q, x_kv, p, mask, _ = valid.mha_inputs(x_q, x_kv, params, mask, causal, unbatched_ok=False)
    head_mask, score_bias, angles = _extras(x_q, x_kv, p, head_mask, rope, score_bias)
    h = p.n_heads
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        q = A.split_heads(A.project(x_q, p.W_q, p.b_q), h)  # (batch, heads, n_q, d_k)
        k = A.split_heads(A.project(x_kv, p.W_k, p.b_k), h)  # (batch, heads, n_k, d_k)
        v = A.split_heads(A.project(x_kv, p.W_v, p.b_v), h)  # (batch, heads, n_k, d_k)
        q = q * (1.0 / math.sqrt(p.d_k))  # scaled before RoPE turns it, as backward expects
        if rope is not None:  # turn each pair of q's and k's coordinates by its angle
            q, k = rope.rotate(q, *angles[:2]), rope.rotate(k, *angles[2:])
        scores = q @ k.transpose(0, 1, 3, 2)  # (batch, heads, n_q, n_k)
        if score_bias is not None:
            scores += score_bias
        weights = A.masked_softmax(scores, mask)  # (batch, heads, n_q, n_k), in place
        heads = weights @ v  # (batch, heads, n_q, d_k)
        # (heads,) or (batch, heads) -> (..., heads, 1, 1): one factor per head
        concat = A.merge_heads(heads * head_mask[..., None, None])  # (batch, n_q, d)
        out = A.project(concat, p.W_o, p.b_o)  # (batch, n_q, d)
    inputs = {"x_q": x_q, "x_kv": x_kv} | p.arrays()
    valid.finite_output(out, inputs | ({} if score_bias is None else {"score_bias": score_bias}))
    bias_shape = None if score_bias is None else score_bias.shape  # for its gradient
    cache = MHACache(
        p, x_q, x_kv, q, k, v, weights, heads, concat, head_mask, rope, angles, bias_shape
    )
    return out, weights, cache


def mha_backward(d_out: np.ndarray, cache: MHACache) -> dict[str, np.ndarray]:
    """Gradients of the loss through :func:`mha_forward`, given d_out = dL/d(output): dL/d of
    the weights (and biases), ``x_q``, ``x_kv`` (for self-attention the input's gradient is
    their sum), ``head_mask`` and any ``score_bias``, each in the shape it was given."""
    shape = cache.concat.shape  # the output's: (batch, n_q, d_model)
    d_out = valid.array(d_out, "d_out", [shape], f"the output's shape {shape}")
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
        grads = _backward(d_out, cache)
    valid.gradients(grads, d_out)
    return grads


def _backward(d_out: np.ndarray, cache: MHACache) -> dict[str, np.ndarray]:
    p = cache.params
    grads: dict[str, np.ndarray] = {}

    # out = concat @ W_o + b_o
    grads["W_o"] = weight_gradient(cache.concat, d_out)
    if p.b_o is not None:
        grads["b_o"] = d_out.sum(axis=(0, 1))
    d_concat = d_out @ p.W_o.T  # (batch, n_q, d)

    # concat = merge(heads * head_mask)
    d_masked = A.split_heads(d_concat, p.n_heads)  # (batch, heads, n_q, d_k)
    d_head_mask = np.einsum("bhnk,bhnk->bh", d_masked, cache.heads)  # (batch, heads)
    grads["head_mask"] = d_head_mask.sum(axis=0) if cache.head_mask.ndim == 1 else d_head_mask
    d_heads = d_masked * cache.head_mask[..., None, None]

    # heads = weights @ v
    d_weights = d_heads @ cache.v.transpose(0, 1, 3, 2)  # (batch, heads, n_q, n_k)
    d_v = cache.weights.transpose(0, 1, 3, 2) @ d_heads  # (batch, heads, n_k, d_k)

    # weights = softmax(q k^T + score_bias), with q already scaled
    d_scores = _softmax_grad(cache.weights, d_weights)
    if cache.score_bias_shape is not None:  # summed over the axes the bias broadcast along
        shape = cache.score_bias_shape
        d_bias = d_scores.sum(axis=tuple(range(d_scores.ndim - len(shape))))  # axes it lacked
        grads["score_bias"] = d_bias.sum(
            axis=tuple(i for i, size in enumerate(shape) if size == 1), keepdims=True
        )
    d_q = d_scores @ cache.k  # (batch, heads, n_q, d_k), for the scaled (turned) q
    d_k = d_scores.transpose(0, 1, 3, 2) @ cache.q  # (batch, heads, n_k, d_k)
    if cache.rope is not None:  # RoPE turned q and k: turn their gradients back
        cos_q, sin_q, cos_k, sin_k = cache.rope_angles
        d_q, d_k = cache.rope.rotate(d_q, cos_q, -sin_q), cache.rope.rotate(d_k, cos_k, -sin_k)

    # the projections; q carried the scale 1/sqrt(d_k)
    scale = 1.0 / math.sqrt(p.d_k)
    d_qp = A.merge_heads(d_q) * scale  # (batch, n_q, d)
    d_kp = A.merge_heads(d_k)  # (batch, n_k, d)
    d_vp = A.merge_heads(d_v)  # (batch, n_k, d)
    for name, x, d in (("q", cache.x_q, d_qp), ("k", cache.x_kv, d_kp), ("v", cache.x_kv, d_vp)):
        grads["W_" + name] = weight_gradient(x, d)
        if getattr(p, "b_" + name) is not None:
            grads["b_" + name] = d.sum(axis=(0, 1))
    grads["x_q"] = d_qp @ p.W_q.T
    grads["x_kv"] = d_kp @ p.W_k.T + d_vp @ p.W_v.T
    return grads


def _extras(x_q, x_kv, p, head_mask, rope, score_bias):
    """mha_forward's additions, checked: the head mask (all ones when None), the score bias
    and RoPE's angles (cos_q, sin_q, cos_k, sin_k) for the positions."""
    (batch, n_q, _), n_k, h, dtype = x_q.shape, x_kv.shape[1], p.n_heads, x_q.dtype
    head_mask = np.ones(h) if head_mask is None else head_mask  # every head on
    layout = f"(heads,) = ({h},) or (batch, heads) = ({batch}, {h})"
    head_mask = valid.array(head_mask, "head_mask", [(h,), (batch, h)], layout)
    with np.errstate(over="ignore"):  # a factor too large for the inputs' dtype becomes inf,
        head_mask = head_mask.astype(dtype)  # which is refused by name just below
    valid.finite(head_mask, "head_mask")
    if score_bias is not None:
        score_bias = valid.array(score_bias, "score_bias")
        scores = (batch, h, n_q, n_k)
        valid.fits_scores(score_bias.shape, "score_bias", scores, "(batch, heads, n_q, n_k)")
    angles = None
    if rope is not None:
        if not isinstance(rope, RoPE):
            raise ValueError(f"rope must be a lib.positions.RoPE, got {type(rope).__name__}")
        valid.even(p.d_k, "d_k", "RoPE turns pairs of coordinates")
        queries, keys = query_positions(n_q, n_k), np.arange(n_k)
        angles = rope.cos_sin(queries, p.d_k, dtype) + rope.cos_sin(keys, p.d_k, dtype)
    return head_mask, score_bias, angles
