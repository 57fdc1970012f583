"""Measuring what attention heads do (notebook 04), and the head-count sweep (notebook 05).

The measures take attention weights (..., heads, n_q, n_k), e.g. multi_head_attention's, whose
rows are probability distributions or all zeros (a query that attended to nothing)."""

from collections.abc import Callable, Sequence

import numpy as np

from . import _validate as valid
from . import rounding as R
from .attention import causal_mask
from .tiny import train


def _check_weights(weights) -> np.ndarray:
    """Float64 weights (..., heads, n_q, n_k), >= 0, each row summing to 1 (or 0: no key to see)."""
    given = np.asarray(weights)
    weights = given.astype(np.float64)
    valid.rank(weights, "attention weights", range(3, 65), "(..., heads, n_q, n_k)")
    valid.finite(weights, "attention weights")
    if (weights < 0).any():
        raise ValueError(f"attention weights must be >= 0, found {weights.min():.3g}")
    sums = weights.sum(axis=-1)
    # a softmax in the weights' dtype sums to 1 only up to its roundings: lib.rounding bounds them
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
    weights = _check_weights(weights)
    logs = np.log(weights, out=np.zeros_like(weights), where=weights > 0)
    return -(weights * logs).sum(axis=-1)


def head_entropy(weights) -> np.ndarray:
    """Mean row entropy (nats) of each head over the queries that attended to something. Under
    a causal mask early queries have few keys: compare with :func:`head_entropy_normalised`."""
    entropy = row_entropy(weights)  # (..., heads, n_q), checking the weights
    attended = np.asarray(weights).sum(axis=-1) > 0  # rows not all 0
    return _mean_per_head(entropy, attended)


def head_entropy_normalised(weights, mask) -> np.ndarray:
    """Mean over queries of entropy / log(keys allowed), (heads,): 1 is uniform over the allowed
    keys, 0 one key. Queries with one allowed key (entropy 0 whatever the head does) don't count."""
    ent = row_entropy(weights)  # (..., heads, n_q), checking the weights
    allowed = np.broadcast_to(np.asarray(mask, dtype=bool), np.shape(weights)).sum(axis=-1)
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
    flat = np.moveaxis(weights, -3, 0).reshape(weights.shape[-3], -1)  # (heads, everything else)
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
    return picked.mean(axis=tuple(range(picked.ndim - 2)) + (picked.ndim - 1,))  # all but heads


def head_roles(weights, offsets: Sequence[int], threshold: float = 0.5) -> np.ndarray:
    """Per head (notebook 06), the ``o`` in ``offsets`` whose key i - o gets the most mean weight
    (ties: the first listed) if that is at least ``threshold``, else 0 (no single lookup)."""
    offsets = [valid.integer(o, "offset", low=1) for o in offsets]  # 0 would mean "no role"
    scores = np.stack([offset_score(weights, -o) for o in offsets])  # (offsets, heads)
    roles = np.asarray(offsets)[scores.argmax(axis=0)]  # (heads,): the first of the tied
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
    """Notebook 05's sweep: for every head count h and seed, train ``make_model(h,
    default_rng(seed))`` (lr 1e-2, stopping at ``target``). Returns ``{(h, seed): run}``: the
    last held-out "accuracy", the first evaluated "steps" that reached ``target`` (or None), and
    over ``eval_data`` each head's "entropy" (normalised) and "mean_weights" (h, n, n)."""
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
