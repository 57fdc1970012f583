"""Measuring what attention heads do (notebook 04).

All functions take attention weights shaped (..., heads, n_q, n_k), as returned by
``lib.attention.multi_head_attention`` (batch, heads, n_q, n_k), and rows that are either
probability distributions or all zeros (a query that attended to nothing).
"""

from __future__ import annotations

import numpy as np


def _check_weights(weights) -> np.ndarray:
    weights = np.asarray(weights, dtype=float)
    if weights.ndim < 3:
        raise ValueError(
            f"expected attention weights (..., heads, n_q, n_k), got shape {weights.shape}"
        )
    if not np.isfinite(weights).all():
        raise ValueError("attention weights contain NaN or inf")
    if (weights < 0).any():
        raise ValueError(f"attention weights must be >= 0, found {weights.min():.3g}")
    sums = weights.sum(axis=-1)
    bad = ~(np.isclose(sums, 1.0, atol=1e-6) | (sums == 0))
    if bad.any():
        raise ValueError(
            "every row of attention weights must sum to 1 (or be all 0 for a query with "
            f"nothing to attend to); one sums to {sums[bad].flat[0]:.6g}"
        )
    return weights


def row_entropy(weights) -> np.ndarray:
    """Entropy in nats of every attention row: (..., n_q).

    0 means all weight on one key; log(k) means spread evenly over k keys. A row of zeros
    (nothing to attend to) has entropy 0. Uses 0 * log 0 = 0.
    """
    weights = _check_weights(weights)
    logs = np.log(weights, out=np.zeros_like(weights), where=weights > 0)
    return -(weights * logs).sum(axis=-1)


def head_entropy(weights) -> np.ndarray:
    """Mean row entropy of each head, in nats: (heads,) for (batch, heads, n_q, n_k) input.

    Averages over the batch and over the queries that attended to something. To compare
    heads under a causal mask, where early queries have few keys to choose from, see
    :func:`head_entropy_normalised`.
    """
    weights = _check_weights(weights)
    ent = row_entropy(weights)  # (..., heads, n_q)
    valid = weights.sum(axis=-1) > 0  # queries that attended to something
    head_axis = weights.ndim - 3
    other = tuple(a for a in range(ent.ndim) if a != head_axis)
    return (ent * valid).sum(axis=other) / np.maximum(valid.sum(axis=other), 1)


def head_entropy_normalised(weights, mask) -> np.ndarray:
    """Mean over queries of entropy / log(number of keys the query may attend to): (heads,).

    1 means uniform over the allowed keys, 0 means one key. Queries that may attend to a
    single key (entropy is then 0 whatever the head does) are left out.
    """
    weights = _check_weights(weights)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), weights.shape)
    allowed = mask.sum(axis=-1)  # (..., heads, n_q)
    ent = row_entropy(weights)
    use = allowed > 1
    ratio = np.divide(ent, np.log(np.maximum(allowed, 2)), where=use, out=np.zeros_like(ent))
    head_axis = weights.ndim - 3
    other = tuple(a for a in range(ent.ndim) if a != head_axis)
    return (ratio * use).sum(axis=other) / np.maximum(use.sum(axis=other), 1)


def head_similarity(weights) -> np.ndarray:
    """Cosine similarity between the heads' attention patterns: (heads, heads).

    Each head's weights over all batch items and queries are flattened into one vector;
    1 means the same pattern (up to scale), 0 means no overlap at all. The diagonal is 1.
    """
    weights = _check_weights(weights)
    head_axis = weights.ndim - 3
    flat = np.moveaxis(weights, head_axis, 0).reshape(weights.shape[head_axis], -1)
    norms = np.linalg.norm(flat, axis=1)
    if (norms == 0).any():
        raise ValueError("a head has all-zero weights; its similarity is undefined")
    unit = flat / norms[:, None]
    return np.clip(unit @ unit.T, -1.0, 1.0)


def offset_score(weights, offset: int = -1) -> np.ndarray:
    """Mean weight each head puts on the key ``offset`` positions from the query: (heads,).

    offset = -1 scores "previous token" heads, +1 "next token", 0 "attend to itself".
    Averages over the batch and over the queries i for which key i + offset exists.
    """
    weights = _check_weights(weights)
    n_q, n_k = weights.shape[-2:]
    queries = np.arange(n_q)
    keys = queries + offset
    ok = (keys >= 0) & (keys < n_k)
    if not ok.any():
        raise ValueError(f"offset={offset} leaves no query with a key at that offset (n_k={n_k})")
    picked = weights[..., queries[ok], keys[ok]]  # (..., heads, queries with such a key)
    head_axis = weights.ndim - 3
    other = tuple(a for a in range(picked.ndim) if a != head_axis)
    return picked.mean(axis=other)
