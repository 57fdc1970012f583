"""Checks of notebook 11 (induction heads): prefix matching, ablation, prediction."""

from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import induction as IND
from .. import transformer as TR
from ..tiny import cross_entropy
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


def _patterns(seed: int, batch: int, heads: int, n: int, vocab: int):
    """Causal attention weights (batch, heads, n, n) and tokens (batch, n) with repeats."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=2.0, size=(batch, heads, n, n))
    return A.softmax(np.where(A.causal_mask(n), scores, -np.inf)), rng.integers(
        0, vocab, (batch, n)
    )


def _mean_over_matches(pattern, ids, key_of) -> np.ndarray:
    """Per head, the mean of pattern[b, :, i, key_of(b, i, j)] over the queries i whose token
    last appeared at j (as ``IND.previous_occurrence`` finds it), for a mistaken ``key_of``."""
    found = IND.previous_occurrence(ids)
    rows, queries = np.nonzero(found >= 0)
    keys = [key_of(b, i, found[b, i]) for b, i in zip(rows, queries, strict=True)]
    return pattern[rows, :, queries, keys].mean(axis=0)


def _carried_over(pattern, ids) -> np.ndarray:
    """The score with the last places seen carried from one sequence into the next."""
    values, last = [], {}
    for b, seq in enumerate(ids):
        for i, token in enumerate(seq):
            if last.get(token, i) < i:
                values.append(pattern[b, :, i, last[token] + 1])
            last[token] = i
    return np.mean(values, axis=0)


@exercise
def check_prefix_matching_score(score_fn: Callable) -> None:
    """Exercise (notebook 11): per head, the mean weight on the token after the previous
    occurrence of the query's token."""
    name = "prefix_matching_score"
    for seed, batch, heads, n, vocab in ((0, 2, 3, 9, 4), (1, 3, 2, 12, 5), (2, 4, 2, 10, 9)):
        pattern, ids = _patterns(seed, batch, heads, n, vocab)
        got = as_array(call(score_fn, name, pattern, ids), name)
        expect_shape(got, (heads,), name, "one score per head, shape (heads,)")
        if close(got, IND.prefix_matching_score(pattern, ids)):
            continue
        first = {(b, t): int(np.argmax(ids[b] == t)) for b in range(batch) for t in range(vocab)}
        found = IND.previous_occurrence(ids)
        counted = np.zeros((batch, n), dtype=bool)
        counted[found >= 0] = True
        mistakes = {
            "you read the weight on the earlier occurrence itself (key j); the score looks "
            "at the token after it, key j + 1.": _mean_over_matches(
                pattern, ids, lambda b, i, j: j
            ),
            "you matched the first occurrence of the token; use the last place it appeared "
            "before the query.": _mean_over_matches(
                pattern, ids, lambda b, i, j: first[b, ids[b, i]] + 1
            ),
            "you kept the places seen in one sequence for the next; start an empty record "
            "for each sequence.": lambda: _carried_over(pattern, ids),
            "you averaged each sequence first, then the sequences; average over all the scored "
            "queries together, so that a sequence with more of them counts more.": np.mean(
                [IND.prefix_matching_score(pattern[b, None], ids[b, None]) for b in range(batch)], 0
            ),
            "you averaged over every query, counting those whose token never appeared before "
            "as 0; average only over the queries with an earlier occurrence.": lambda: (
                IND.prefix_matching_score(pattern, ids) * counted.sum() / (batch * n)
            ),
        }
        diagnose(got, name, mistakes)
        raise CheckFailed(
            f"{name}: wrong values; for each query i whose token last appeared at j < i, read "
            "pattern[b, :, i, j + 1], then average over those queries, one number per head."
        )
    passed("prefix_matching_score: weight on key j + 1 after the last earlier match, per head.")


def _small_models():
    rng = np.random.default_rng(5)
    for n_layers, n_heads, d_model in ((2, 2, 8), (1, 3, 12)):
        model = TR.init_transformer(7, n_layers, n_heads, rng, d_model=d_model, rope=True)
        ids, targets, repeated = IND.repeated_segment_task(6, 10, 7, 3, rng)
        yield model, ids, targets, repeated


def _loss(model, ids, targets, head_mask) -> float:
    return cross_entropy(model.forward(ids, head_mask)[0], targets)[0]


def _masked_losses(model, ids, targets, head_masks) -> np.ndarray:
    """The loss over ``targets`` (-1: not scored) under each (n_layers, n_heads) mask."""
    losses = [_loss(model, ids, targets, mask) for mask in head_masks]
    return np.array(losses).reshape(model.n_layers, model.n_heads)


@exercise
def check_ablation_losses(ablation_fn: Callable) -> None:
    """Exercise (notebook 11): the loss on repeated places with each head switched off."""
    name = "ablation_losses"
    for model, ids, targets, repeated in _small_models():
        got = as_array(call(ablation_fn, name, model, ids, targets, repeated), name)
        shape = (model.n_layers, model.n_heads)
        expect_shape(got, shape, name, "one loss per head, shape (n_layers, n_heads)")
        expected = IND.ablation_losses(model, ids, targets, repeated)
        if close(got, expected):
            continue
        singles = [
            np.eye(model.n_layers * model.n_heads)[k].reshape(shape) for k in range(got.size)
        ]
        on_repeated = np.where(repeated, targets, -1)
        mistakes = {
            "you scored every place; score only the repeated ones (set the other targets "
            "to -1).": lambda: _masked_losses(model, ids, targets, [1 - m for m in singles]),
            "you switched every head off but one; set only the one head's factor to 0.": lambda: (
                _masked_losses(model, ids, on_repeated, singles)
            ),
            "you returned the change in loss; return the loss itself, with the head off.": lambda: (
                expected - _loss(model, ids, on_repeated, None)
            ),
        }
        diagnose(got, name, mistakes)
        raise CheckFailed(
            f"{name}: wrong values; for each head, a head mask of ones with a 0 for that head, "
            "then the mean loss on the repeated places."
        )
    passed("ablation_losses: one head off at a time, loss on the repeated places.")


@exercise
def check_predict_from_pattern(predict_fn: Callable) -> None:
    """Exercise (notebook 11): for each query, the token at the key it attends to most."""
    name = "predict_from_pattern"
    for seed, batch, n, vocab in ((2, 3, 8, 20), (3, 2, 11, 30)):
        pattern, ids = _patterns(seed, batch, 1, n, vocab)
        pattern = pattern[:, 0]  # one head: (batch, n, n)
        got = as_array(call(predict_fn, name, ids, pattern), name)
        expect_shape(got, (batch, n), name, "one token per query, shape (batch, n)")
        if close(got, IND.predict_from_pattern(ids, pattern)):
            continue
        keys = pattern.argmax(axis=-1)  # (batch, n)
        mistakes = {
            "you returned the key's place; return the token at that place, ids[b, key].": keys,
            "you returned the token after the key; the induction head already attends to the "
            "token to copy, so read ids at the key itself.": lambda: np.take_along_axis(
                ids, np.minimum(keys + 1, n - 1), axis=-1
            ),
            "you took the largest weight along the queries (axis -2); each query's row is "
            "its weights over the keys, the last axis.": lambda: np.take_along_axis(
                ids, pattern.argmax(axis=-2), axis=-1
            ),
            "you read every sequence's tokens from the first sequence; index ids by its batch "
            "item too.": ids[0][keys],
        }
        diagnose(got, name, mistakes)
        raise CheckFailed(
            f"{name}: wrong values; for each query, the argmax of its row of weights (a key), "
            "then the token at that key of the same sequence."
        )
    passed("predict_from_pattern: the token at each query's most-weighted key.")
