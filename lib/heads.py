"""Measuring what attention heads do (notebook 04), and the head-count sweep (notebook 05).

The measures take attention weights (..., heads, n_q, n_k), e.g. multi_head_attention's, whose
rows are probability distributions or all zeros (a query that attended to nothing).
"""

from collections.abc import Callable, Sequence

import numpy as np

from . import _validate as valid
from . import rounding as R
from .attention import causal_mask
from .tiny import train


def _check_weights(weights) -> np.ndarray:
    """The weights in float64, refused unless (..., heads, n_q, n_k), finite, >= 0 and each row
    summing to 1 (or 0: a query that attended to nothing)."""
    given = np.asarray(weights)
    weights = given.astype(np.float64)
    valid.rank(weights, "attention weights", range(3, 65), "(..., heads, n_q, n_k)")
    if not np.isfinite(weights).all():
        raise ValueError("attention weights contain NaN or inf")
    if (weights < 0).any():
        raise ValueError(f"attention weights must be >= 0, found {weights.min():.3g}")
    sums = weights.sum(axis=-1)
    # a softmax computed in the weights' dtype sums to 1 only up to its roundings (exp's, the
    # sum's, the division's, and an online softmax's rescalings): lib.rounding bounds them
    n_k = weights.shape[-1]
    dtype = np.float32 if given.dtype == np.float32 else np.float64
    slack = R.tolerance(dtype, n_k * (R.FUNCTION_DEPTH + 3) + R.FUNCTION_DEPTH + 2)
    bad = ~((np.abs(sums - 1.0) <= slack) | (sums == 0))
    if bad.any():
        raise ValueError(
            "every row of attention weights must sum to 1 (or be all 0 for a query with "
            f"nothing to attend to); one sums to {sums[bad].flat[0]:.6g}"
        )
    return weights


def row_entropy(weights) -> np.ndarray:
    """Entropy in nats of every attention row: (..., n_q). 0 means all weight on one key;
    log(k) spread evenly over k keys; a row of zeros has entropy 0 (0 * log 0 = 0)."""
    return _entropy(_check_weights(weights))


def _entropy(weights: np.ndarray) -> np.ndarray:
    logs = np.log(weights, out=np.zeros_like(weights), where=weights > 0)
    return -(weights * logs).sum(axis=-1)


def head_entropy(weights) -> np.ndarray:
    """Mean row entropy of each head, in nats: (heads,) for (..., heads, n_q, n_k) input,
    over the queries that attended to something. Under a causal mask, where early queries
    have few keys to choose from, compare heads with :func:`head_entropy_normalised`."""
    weights = _check_weights(weights)
    attended = weights.sum(axis=-1) > 0  # (..., heads, n_q)
    return _mean_per_head(_entropy(weights), attended)


def head_entropy_normalised(weights, mask) -> np.ndarray:
    """Mean over queries of entropy / log(number of keys the query may attend to): (heads,).
    1 means uniform over the allowed keys, 0 one key. Queries with a single allowed key
    (entropy 0 whatever the head does) are left out."""
    weights = _check_weights(weights)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), weights.shape)
    allowed = mask.sum(axis=-1)  # (..., heads, n_q)
    ent = _entropy(weights)
    use = allowed > 1
    ratio = np.divide(ent, np.log(np.maximum(allowed, 2)), where=use, out=np.zeros_like(ent))
    return _mean_per_head(ratio, use)


def _mean_per_head(values: np.ndarray, use: np.ndarray) -> np.ndarray:
    """(..., heads, n_q) -> (heads,): the mean of ``values`` where ``use``, per head."""
    other = tuple(range(values.ndim - 2)) + (values.ndim - 1,)  # every axis but the heads'
    return (values * use).sum(axis=other) / np.maximum(use.sum(axis=other), 1)


def head_similarity(weights) -> np.ndarray:
    """Cosine similarity between the heads' attention patterns, each flattened over batch
    and queries: (heads, heads); 1 = the same pattern (up to scale), 0 = no overlap."""
    weights = _check_weights(weights)
    head_axis = weights.ndim - 3
    flat = np.moveaxis(weights, head_axis, 0).reshape(weights.shape[head_axis], -1)
    norms = np.linalg.norm(flat, axis=1)
    if (norms == 0).any():
        raise ValueError("a head has all-zero weights; its similarity is undefined")
    unit = flat / norms[:, None]
    return np.clip(unit @ unit.T, -1.0, 1.0)


def offset_score(weights, offset: int = -1) -> np.ndarray:
    """Mean weight each head puts on the key ``offset`` positions from the query: (heads,),
    over the queries i whose key i + offset exists (-1: previous token, 0: itself)."""
    weights = _check_weights(weights)
    offset = valid.integer(offset, "offset")
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


def head_roles(weights, offsets: Sequence[int], threshold: float = 0.5) -> np.ndarray:
    """The lookup each head does (notebook 06): per head, the ``o`` in ``offsets`` whose key
    i - o gets the most mean weight (ties: the first listed), if that is at least
    ``threshold``; 0 for a head with no single lookup. (heads,) integers."""
    weights = _check_weights(weights)
    offsets = [valid.integer(o, "offset", low=1) for o in offsets]  # 0 would mean "no role"
    scores = np.stack([offset_score(weights, -o) for o in offsets])  # (offsets, heads)
    best = scores.argmax(axis=0)  # (heads,): first of the tied
    roles = np.asarray(offsets)[best]
    return np.where(scores.max(axis=0) >= threshold, roles, 0)


def head_count_sweep(
    make_model: Callable,
    make_batch: Callable,
    eval_data: tuple[np.ndarray, np.ndarray],
    head_counts: Sequence[int],
    seeds: Sequence[int],
    budget: int,
    target: float,
    eval_every: int = 20,
) -> dict:
    """Notebook 05's sweep: for every head count h and seed, train
    ``make_model(h, default_rng(seed))`` with :func:`lib.tiny.train` (lr 1e-2, stopping at
    ``target``). Returns ``{(h, seed): run}``, a run holding the last held-out "accuracy", the
    first evaluated "steps" that reached ``target`` (or None), each head's "entropy"
    (:func:`head_entropy_normalised`) and "mean_weights" (h, n, n) over ``eval_data``."""
    budget = valid.integer(budget, "budget", low=1)  # a run needs a step to be measured
    eval_ids = np.asarray(eval_data[0])
    mask = causal_mask(eval_ids.shape[-1])
    results = {}
    for h in head_counts:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            model = make_model(h, rng)
            log = train(model, make_batch, eval_data, budget, rng, 1e-2, eval_every, target)
            weights = model.forward(eval_ids)[1]  # (batch, heads, n, n)
            results[h, seed] = {
                "accuracy": log.accuracy[-1],
                "steps": log.steps_to(target),
                "entropy": head_entropy_normalised(weights, mask),
                "mean_weights": weights.mean(axis=0),
            }
    return results
