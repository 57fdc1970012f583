"""Backpropagation through multi-head attention, by hand (notebook 05).

The forward pass here computes exactly what :func:`lib.attention.multi_head_attention`
computes, and keeps in a cache the intermediate arrays the backward pass needs. The
backward pass takes the gradient of the loss with respect to the output and returns the
gradient with respect to every input and parameter.

Two additions over the plain forward:

- ``head_mask``: one number per head, shape (heads,) or (batch, heads), that multiplies
  each head's output before the heads are concatenated. All ones is the ordinary layer;
  a 0 switches a head off (notebook 06 prunes heads this way). The gradient with respect
  to the head mask, at all ones, is the loss's sensitivity to each head.
- the backward pass of the softmax, :func:`softmax_backward`, derived in notebook 05:
  for ``p = softmax(s)`` and upstream gradient ``g = dL/dp``,
  ``dL/ds = p * (g - sum(g * p))`` along the softmax axis.

Conventions as in :mod:`lib.attention`: row vectors ``x @ W``; boolean masks,
True = may attend; a query with no key to attend to gets weights 0 and output 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .attention import MHAParams, merge_heads, split_heads

PARAM_NAMES = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")


def softmax_backward(weights: np.ndarray, d_weights: np.ndarray, axis: int = -1) -> np.ndarray:
    """Gradient through ``weights = softmax(scores, axis)``.

    weights: the softmax output p; d_weights: dL/dp, same shape.
    Returns dL/dscores = p * (dL/dp - sum(dL/dp * p, axis)).

    Where p is 0 (masked keys) the gradient is 0, so masked scores never receive any.
    """
    weights = np.asarray(weights)
    d_weights = np.asarray(d_weights)
    if weights.shape != d_weights.shape:
        raise ValueError(
            f"softmax_backward needs weights and d_weights of the same shape, got "
            f"{weights.shape} and {d_weights.shape}"
        )
    if axis in (-1, weights.ndim - 1):
        inner = _last_axis_sum(d_weights * weights)
    else:
        inner = np.sum(d_weights * weights, axis=axis, keepdims=True)
    return weights * (d_weights - inner)


def _last_axis_sum(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=-1, keepdims=True)``, as one matrix-vector product.

    NumPy's reductions over a short last axis (n_k = 12, say) are slow; one BLAS call on
    the array viewed as (rows, n_k) gives the same sums several times faster, which is
    most of a training step for the tiny models of notebooks 05 and 06.
    """
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    return (rows @ np.ones(x.shape[-1], dtype=x.dtype)).reshape(*x.shape[:-1], 1)


def weight_gradient(x: np.ndarray, d_y: np.ndarray) -> np.ndarray:
    """dL/dW for y = x @ W, summed over every leading axis: x^T d_y, (d_in, d_out).

    Each row of x (one position of one sequence) contributes the outer product of itself
    with its row of d_y; one matrix product of the flattened arrays adds them all up.
    """
    return x.reshape(-1, x.shape[-1]).T @ d_y.reshape(-1, d_y.shape[-1])


@dataclass
class MHACache:
    """What :func:`mha_backward` needs from the forward pass."""

    params: MHAParams
    x_q: np.ndarray  # (batch, n_q, d)
    x_kv: np.ndarray  # (batch, n_k, d)
    q: np.ndarray  # (batch, heads, n_q, d_k), already scaled by 1/sqrt(d_k)
    k: np.ndarray  # (batch, heads, n_k, d_k)
    v: np.ndarray  # (batch, heads, n_k, d_k)
    weights: np.ndarray  # (batch, heads, n_q, n_k)
    heads: np.ndarray  # (batch, heads, n_q, d_k), before the head mask
    concat: np.ndarray  # (batch, n_q, d), after the head mask
    head_mask: np.ndarray  # (batch, heads) or (heads,)


def _as_head_mask(head_mask, batch: int, n_heads: int, dtype) -> np.ndarray:
    if head_mask is None:
        return np.ones(n_heads, dtype=dtype)
    head_mask = np.asarray(head_mask, dtype=dtype)
    if head_mask.shape not in ((n_heads,), (batch, n_heads)):
        raise ValueError(
            f"head_mask must have shape (heads,) = ({n_heads},) or (batch, heads) = "
            f"({batch}, {n_heads}), got {head_mask.shape}"
        )
    if not np.isfinite(head_mask).all():
        raise ValueError("head_mask contains NaN or inf")
    return head_mask


def _head_mask_4d(head_mask: np.ndarray) -> np.ndarray:
    """(heads,) -> (1, heads, 1, 1); (batch, heads) -> (batch, heads, 1, 1)."""
    if head_mask.ndim == 1:
        return head_mask[None, :, None, None]
    return head_mask[:, :, None, None]


def _check_inputs(x_q: np.ndarray, x_kv: np.ndarray, params: MHAParams, mask):
    for name, x in (("x_q", x_q), ("x_kv", x_kv)):
        if x.ndim != 3 or x.shape[-1] != params.d_model:
            raise ValueError(
                f"{name} must be (batch, n, d_model={params.d_model}), got shape {x.shape}"
            )
        if not np.isfinite(x).all():
            raise ValueError(f"{name} contains NaN or inf")
    if x_q.shape[0] != x_kv.shape[0]:
        raise ValueError(f"x_q and x_kv have different batch sizes: {x_q.shape} and {x_kv.shape}")
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise ValueError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    scores_shape = (x_q.shape[0], params.n_heads, x_q.shape[1], x_kv.shape[1])
    try:
        np.broadcast_shapes(mask.shape, scores_shape)
    except ValueError:
        raise ValueError(
            f"mask of shape {mask.shape} does not broadcast against the scores "
            f"(batch, heads, n_q, n_k) = {scores_shape}"
        ) from None
    if mask.ndim > 4 or np.broadcast_shapes(mask.shape, scores_shape) != scores_shape:
        raise ValueError(
            f"mask of shape {mask.shape} would grow the scores {scores_shape} when broadcast"
        )
    return mask.reshape((1,) * (4 - mask.ndim) + mask.shape)


def mha_forward(
    x_q: np.ndarray,
    x_kv: np.ndarray,
    params: MHAParams,
    mask: np.ndarray | None = None,
    head_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, MHACache]:
    """Multi-head attention forward pass that remembers what backward needs.

    x_q: (batch, n_q, d), x_kv: (batch, n_k, d); mask broadcastable to
    (batch, heads, n_q, n_k); head_mask (heads,) or (batch, heads), default all ones.
    Returns (output (batch, n_q, d), weights (batch, heads, n_q, n_k), cache).
    With ``head_mask`` all ones the output equals ``lib.attention.multi_head_attention``.
    """
    x_q = np.asarray(x_q, dtype=np.result_type(x_q, np.float32))
    x_kv = np.asarray(x_kv, dtype=x_q.dtype)
    mask = _check_inputs(x_q, x_kv, params, mask)
    h = params.n_heads
    head_mask = _as_head_mask(head_mask, x_q.shape[0], h, x_q.dtype)

    def project(x, W, b):
        y = x @ W
        return y if b is None else y + b

    scale = 1.0 / math.sqrt(params.d_k)
    q = split_heads(project(x_q, params.W_q, params.b_q) * scale, h)  # (batch, heads, n_q, d_k)
    k = split_heads(project(x_kv, params.W_k, params.b_k), h)  # (batch, heads, n_k, d_k)
    v = split_heads(project(x_kv, params.W_v, params.b_v), h)  # (batch, heads, n_k, d_k)

    scores = q @ k.transpose(0, 1, 3, 2)  # (batch, heads, n_q, n_k)
    if mask is not None:  # add 0 where allowed, -inf where not (cheaper than np.where)
        scores += np.where(mask, 0.0, -np.inf).astype(scores.dtype)
    top = scores.max(axis=-1, keepdims=True)
    top[np.isneginf(top)] = 0.0  # a query with nothing to attend to: all weights 0
    scores -= top
    weights = np.exp(scores, out=scores)  # (batch, heads, n_q, n_k), reusing the buffer
    total = _last_axis_sum(weights)
    np.divide(weights, total, out=weights, where=total > 0)

    heads = weights @ v  # (batch, heads, n_q, d_k)
    concat = merge_heads(heads * _head_mask_4d(head_mask))  # (batch, n_q, d)
    out = project(concat, params.W_o, params.b_o)  # (batch, n_q, d)
    cache = MHACache(params, x_q, x_kv, q, k, v, weights, heads, concat, head_mask)
    return out, weights, cache


def mha_backward(d_out: np.ndarray, cache: MHACache) -> dict[str, np.ndarray]:
    """Gradients of the loss through :func:`mha_forward`.

    d_out: dL/d(output), (batch, n_q, d).
    Returns a dict with dL/d of: ``W_q W_k W_v W_o`` (and ``b_q b_k b_v b_o`` when the
    layer has biases), ``x_q``, ``x_kv`` (for self-attention, where one array is passed
    as both, the input's gradient is their sum) and ``head_mask`` (same shape as the
    head mask used).
    """
    p = cache.params
    d_out = np.asarray(d_out)
    if d_out.shape != cache.concat.shape:
        raise ValueError(
            f"d_out must have the output's shape {cache.concat.shape}, got {d_out.shape}"
        )
    h = p.n_heads
    grads: dict[str, np.ndarray] = {}

    # out = concat @ W_o + b_o
    grads["W_o"] = weight_gradient(cache.concat, d_out)
    if p.b_o is not None:
        grads["b_o"] = d_out.sum(axis=(0, 1))
    d_concat = d_out @ p.W_o.T  # (batch, n_q, d)

    # concat = merge(heads * head_mask)
    d_masked = split_heads(d_concat, h)  # (batch, heads, n_q, d_k)
    d_head_mask = np.einsum("bhnk,bhnk->bh", d_masked, cache.heads)  # (batch, heads)
    grads["head_mask"] = d_head_mask.sum(axis=0) if cache.head_mask.ndim == 1 else d_head_mask
    d_heads = d_masked * _head_mask_4d(cache.head_mask)

    # heads = weights @ v
    d_weights = d_heads @ cache.v.transpose(0, 1, 3, 2)  # (batch, heads, n_q, n_k)
    d_v = cache.weights.transpose(0, 1, 3, 2) @ d_heads  # (batch, heads, n_k, d_k)

    # weights = softmax(q k^T), with q already scaled
    d_scores = softmax_backward(cache.weights, d_weights)
    d_q = d_scores @ cache.k  # (batch, heads, n_q, d_k), for the scaled q
    d_k = d_scores.transpose(0, 1, 3, 2) @ cache.q  # (batch, heads, n_k, d_k)

    # the projections; q carried the scale 1/sqrt(d_k)
    scale = 1.0 / math.sqrt(p.d_k)
    d_qp = merge_heads(d_q) * scale  # (batch, n_q, d)
    d_kp = merge_heads(d_k)  # (batch, n_k, d)
    d_vp = merge_heads(d_v)  # (batch, n_k, d)
    for name, x, d in (("q", cache.x_q, d_qp), ("k", cache.x_kv, d_kp), ("v", cache.x_kv, d_vp)):
        grads["W_" + name] = weight_gradient(x, d)
        if getattr(p, "b_" + name) is not None:
            grads["b_" + name] = d.sum(axis=(0, 1))
    grads["x_q"] = d_qp @ p.W_q.T
    grads["x_kv"] = d_kp @ p.W_k.T + d_vp @ p.W_v.T
    return grads
