"""Checks of notebook 04 (looking at heads): row entropy, the previous-token score, and the
similarity of heads."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import heads as H
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


def _head_weights(seed: int, batch: int = 2, heads: int = 3, n: int = 5) -> np.ndarray:
    """Causal attention weights with some exact zeros and some one-hot rows."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=2.0, size=(batch, heads, n, n))
    weights = A.softmax(np.where(A.causal_mask(n), scores, -np.inf))
    weights[0, 0, 2] = np.eye(n)[1]  # a one-hot row
    return weights


def _plog(w):
    return np.log(np.where(w > 0, w, 1.0))


@exercise
def check_entropy(entropy_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): entropy in nats of every attention row, (..., n_k) -> (...)."""
    name = "entropy"
    for w in (_head_weights(0), _head_weights(10, batch=3, heads=2, n=6)):
        got = as_array(call(entropy_fn, name, w.copy()), name)
        expect_shape(got, w.shape[:-1], name, "one entropy per row, shape (..., n_q)")
        expected = H.row_entropy(w)
        if close(got, expected):
            continue
        if np.isnan(got).any():
            raise CheckFailed(
                f"{name}: masked keys have weight 0 and 0 * log(0) gives NaN; count "
                "those terms as 0 (only take the log where the weight is > 0)."
            )
        diagnose(
            got,
            [
                (
                    -expected,
                    f"{name}: your entropies are negative: entropy is MINUS the sum of w * log(w).",
                ),
                (
                    expected / np.log(2),
                    f"{name}: you used log base 2 (bits); use the natural log (nats), np.log.",
                ),
                (
                    lambda w=w: -(w * _plog(w)).sum(axis=-2),
                    f"{name}: you summed over the queries (axis -2); each row's entropy is a "
                    "sum over its keys, the last axis.",
                ),
                (
                    expected / w.shape[-1],
                    f"{name}: you averaged over the keys; entropy is a sum over the keys, not "
                    "a mean.",
                ),
            ],
        )
        raise CheckFailed(
            f"{name}: wrong values; a uniform row over k keys should give log(k) and a "
            "one-hot row 0."
        )
    passed("entropy: natural log, 0 * log 0 counted as 0, one value per query row.")


@exercise
def check_previous_token_score(score_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): mean weight on the previous token, per head."""
    name = "previous_token_score"
    for w in (_head_weights(1), _head_weights(11, batch=3, heads=4, n=6)):
        got = as_array(call(score_fn, name, w.copy()), name)
        expect_shape(got, (w.shape[1],), name, "one score per head, shape (heads,)")
        expected = H.offset_score(w, -1)
        if close(got, expected):
            continue
        n = w.shape[-1]
        diagnose(
            got,
            [
                (
                    lambda w=w: H.offset_score(w, 0),
                    f"{name}: you scored the diagonal (each token attending to "
                    "itself); the previous token of query i is key i-1.",
                ),
                (
                    lambda w=w: H.offset_score(w, 1),
                    f"{name}: you scored the next token (key i+1); the previous "
                    "token of query i is key i-1.",
                ),
                (
                    lambda w=w, n=n: np.stack(
                        [w[..., i, (i - 1) % n] for i in range(n)], axis=-1
                    ).mean(axis=(0, 2)),
                    f"{name}: query 0 has no previous token, but index -1 wrapped around to "
                    "the last key; leave query 0 out.",
                ),
                (
                    lambda w=w, n=n: np.stack(
                        [w[..., i, i - 1] if i else 0 * w[..., 0, 0] for i in range(n)], -1
                    ).mean(axis=(0, 2)),
                    f"{name}: query 0 has no previous token; leave it "
                    "out of the average instead of counting it as 0.",
                ),
                (
                    lambda w=w: np.tril(w, k=-1)[..., 1:, :].sum(axis=-1).mean(axis=(0, 2)),
                    f"{name}: you summed all earlier keys; score only the key right before "
                    "the query.",
                ),
            ],
        )
        raise CheckFailed(
            f"{name}: wrong values; average w[b, h, i, i-1] over the batch and over "
            "queries i = 1..n-1, one number per head."
        )
    passed("previous_token_score: mean of w[i, i-1] over queries 1..n-1, per head.")


@exercise
def check_head_similarity(similarity_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): cosine similarity between heads, (batch, heads, n, n) -> (h, h)."""
    name = "head_similarity"
    for w in (_head_weights(2, heads=4), _head_weights(12, batch=3, heads=2, n=4)):
        got = as_array(call(similarity_fn, name, w.copy()), name)
        heads = w.shape[1]
        expect_shape(got, (heads, heads), name, "a (heads, heads) matrix")
        if close(got, H.head_similarity(w), tol=1e-6):
            continue
        flat = np.moveaxis(w, 1, 0).reshape(heads, -1)
        mixed = w.reshape(heads, -1)
        mixed = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
        diagnose(
            got,
            [
                (
                    flat @ flat.T,
                    f"{name}: these are raw dot products; divide by both heads' norms "
                    "so that a head compared with itself gives 1.",
                ),
                (
                    mixed @ mixed.T,
                    f"{name}: reshaping (batch, heads, n, n) straight to (heads, -1) mixes "
                    "heads from different batch items; bring the heads axis to the front first.",
                ),
            ],
            tol=1e-6,
        )
        if not np.allclose(np.diag(got), 1.0):
            raise CheckFailed(
                f"{name}: a head compared with itself must give 1; your diagonal is "
                f"{np.round(np.diag(got), 3).tolist()}."
            )
        raise CheckFailed(
            f"{name}: wrong values; flatten each head's weights over batch and "
            "queries into one vector, then take cosine similarities."
        )
    passed("head_similarity: cosine of the flattened patterns, 1 on the diagonal.")
