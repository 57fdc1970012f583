"""Checks of notebook 04 (looking at heads): row entropy, previous-token score, head similarity."""

from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import heads as H
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


def _answers(fn, name: str, cases, shape, what: str, refuse=()):
    """For each case (seed, leading axes, n), causal attention weights (*leading, n, n), with
    exact zeros and one-hot rows: (the weights, the answer on them, checked to be of
    ``shape(w)``)."""
    for seed, leading, n in cases:
        scores = np.random.default_rng(seed).normal(scale=2.0, size=(*leading, n, n))
        w = A.softmax(np.where(A.causal_mask(n), scores, -np.inf))
        w[..., 2, :] = np.eye(n)[1]  # one-hot rows
        got = as_array(call(fn, name, w, refuse=refuse), name)
        expect_shape(got, shape(w), name, what)
        yield w, got


@exercise
def check_entropy(entropy_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): entropy in nats of every attention row, (..., n_k) -> (...)."""
    name = "entropy"
    cases = ((0, (2, 3), 5), (10, (3, 2), 6), (20, (3,), 4))  # (batch, heads, n, n), (heads, n, n)
    what = "one entropy per row, shape (..., n_q)"
    refuse = (("lib.heads", "row_entropy", "H.row_entropy"),)  # lib's answer: refused
    for w, got in _answers(entropy_fn, name, cases, lambda w: w.shape[:-1], what, refuse):
        expected = H.row_entropy(w)
        if close(got, expected):
            continue
        if np.isnan(got).any():
            raise CheckFailed(
                f"{name}: masked keys have weight 0 and 0 * log(0) gives NaN; count "
                "those terms as 0 (only take the log where the weight is > 0)."
            )
        mean = expected / w.shape[-1]
        mistakes = {
            "your entropies are negative: entropy is MINUS the sum of w * log(w).": -expected,
            "you used log base 2 (bits); use the natural log (nats), np.log.": expected / np.log(2),
            "you summed over the queries (axis -2); each row's entropy is a sum over its "
            "keys, the last axis.": -(w * np.log(np.where(w > 0, w, 1.0))).sum(axis=-2),
            "you averaged over the keys; entropy is a sum over the keys, not a mean.": mean,
        }
        diagnose(got, name, mistakes)
        raise CheckFailed(
            f"{name}: wrong values; a uniform row over k keys gives log(k), a one-hot row 0."
        )
    passed("entropy: natural log, 0 * log 0 counted as 0, one value per query row.")


@exercise
def check_previous_token_score(score_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): mean weight on the previous token, per head."""
    name = "previous_token_score"
    cases, what = ((1, (2, 3), 5), (11, (3, 4), 6)), "one score per head, shape (heads,)"
    refuse = (("lib.heads", "offset_score", "H.offset_score"),)  # lib's answer: refused
    for w, got in _answers(score_fn, name, cases, lambda w: w.shape[1:2], what, refuse):
        if close(got, H.offset_score(w, -1)):
            continue
        n = w.shape[-1]
        previous = np.stack([w[..., i, i - 1] for i in range(n)], axis=-1)  # query 0: key -1
        earlier = np.tril(w, k=-1)[..., 1:, :].sum(axis=-1).mean(axis=(0, 2))  # all before
        mistakes = {
            "you scored the diagonal (each token attending to itself); the "
            "previous token of query i is key i-1.": H.offset_score(w, 0),
            "you scored the next token (key i+1); the previous "
            "token of query i is key i-1.": H.offset_score(w, 1),
            "query 0 has no previous token, but index -1 wrapped around to "
            "the last key; leave query 0 out.": previous.mean(axis=(0, 2)),
            "query 0 has no previous token; leave it out of the average instead of "
            "counting it as 0.": np.where(np.arange(n) > 0, previous, 0.0).mean(axis=(0, 2)),
            "you summed all earlier keys; score only the key right before the query.": earlier,
        }
        diagnose(got, name, mistakes)
        raise CheckFailed(
            f"{name}: wrong values; per head, average w[b, h, i, i-1] over b and queries i >= 1."
        )
    passed("previous_token_score: mean of w[i, i-1] over queries 1..n-1, per head.")


@exercise
def check_head_similarity(similarity_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 04): cosine similarity between heads, (batch, heads, n, n) -> (h, h)."""
    name = "head_similarity"
    cases, what = ((2, (2, 4), 5), (12, (3, 2), 4)), "a (heads, heads) matrix"
    for w, got in _answers(similarity_fn, name, cases, lambda w: (w.shape[1],) * 2, what):
        if close(got, H.head_similarity(w), tol=1e-6):
            continue
        flat = np.moveaxis(w, 1, 0).reshape(w.shape[1], -1)
        mixed = w.reshape(w.shape[1], -1)
        mixed = mixed / np.linalg.norm(mixed, axis=1, keepdims=True)
        mistakes = {
            "these are raw dot products; divide by both heads' norms so "
            "that a head compared with itself gives 1.": flat @ flat.T,
            "reshaping (batch, heads, n, n) straight to (heads, -1) mixes heads from "
            "different batch items; bring the heads axis to the front first.": mixed @ mixed.T,
        }
        diagnose(got, name, mistakes, tol=1e-6)
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
