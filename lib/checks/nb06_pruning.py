"""Checks of notebook 06 (pruning heads): ablation drops, gradient importance, and the
Spearman rank correlation. The first two run on small models trained here, two of them
with different numbers of heads, so that no shape can be hard-coded."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import numpy as np

from ._core import CheckFailed, as_array, call, close, diagnose, expect_shape, passed, same_value


@functools.cache
def _trained(n_heads: int, d_model: int, seed: int):
    from .. import tiny

    rng = np.random.default_rng(seed)
    task = dict(seq_len=8, vocab_size=5, offsets=(1, 3))
    model = tiny.init_tiny_model(5, 8, d_model, n_heads, 5, rng, n_slots=2)
    data = tiny.copy_offsets_task(64, rng=np.random.default_rng(seed * 10), **task)

    def batch(r):
        return tiny.copy_offsets_task(32, rng=r, **task)

    tiny.train(model, batch, data, 40, rng, lr=0.02, eval_every=40)
    return model, data


def _small_trained_models():
    """Two briefly trained tiny models (4 heads, then 2), each with its evaluation data,
    trained once per process: (a copy for the answer, the model for the reference, ids,
    targets), so that an answer that changes its model cannot change the reference."""
    for spec in ((4, 16, 6), (2, 12, 9)):
        model, (ids, targets) = _trained(*spec)
        yield copy.deepcopy(model), model, ids, targets


def check_ablation_drops(drops_fn: Callable) -> None:
    """Exercise (notebook 06): ``drops_fn(model, ids, targets) -> (heads,)`` accuracy drops."""
    from .. import pruning, tiny

    name = "ablation_drops"
    for answer_model, model, ids, targets in _small_trained_models():
        got = as_array(call(drops_fn, name, answer_model, ids.copy(), targets.copy()), name)
        expect_shape(got, (model.n_heads,), name, "one drop per head")
        expected = pruning.ablation_drops(model, ids, targets)
        if close(got, expected, 1e-9):
            continue
        base = tiny.accuracy(model, ids, targets)
        eye = np.eye(model.n_heads)
        diagnose(
            got,
            [
                (
                    -expected,
                    f"{name}: the sign is flipped: a head that helps should have a positive drop.",
                ),
                (
                    base - expected,
                    f"{name}: these are the accuracies with each head off; subtract them from "
                    "the accuracy with all heads on.",
                ),
                (
                    lambda: base - np.array([tiny.accuracy(model, ids, targets, e) for e in eye]),
                    f"{name}: you kept only head h (all the others off); switch off head h alone.",
                ),
                (
                    1.0 - (base - expected),
                    f"{name}: measure the drop from the model's own accuracy with all heads, "
                    "not from 1.",
                ),
            ],
            tol=1e-9,
        )
        raise CheckFailed(
            f"{name}: wrong values; set entry h of an all-ones head mask to 0 and compare "
            "accuracies."
        )
    passed("ablation_drops: base accuracy minus accuracy with one head off, per head.")


def _proportional(a, b) -> bool:
    """``a`` is a positive multiple of ``b`` (only the ranking of importances is used)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or not np.all(np.isfinite(b)) or not np.any(b != 0):
        return False
    if not np.all(np.isfinite(a)):
        return False
    scale = (a @ b) / (b @ b)
    return bool(scale > 0 and np.allclose(a, scale * b, rtol=1e-7, atol=1e-12 * np.abs(a).max()))


def check_gradient_importance(importance_fn: Callable) -> None:
    """Exercise (notebook 06): ``importance_fn(model, ids, targets) -> (heads,)``.

    Importance = mean over sequences of |dL/d mask_h| at an all-ones mask; any positive
    multiple of it (a sum instead of a mean) is accepted, since only the ranking is used.
    """
    from .. import pruning

    name = "gradient_importance"
    for answer_model, model, ids, targets in _small_trained_models():
        got = as_array(call(importance_fn, name, answer_model, ids.copy(), targets.copy()), name)
        expect_shape(got, (model.n_heads,), name, "one importance per head")
        if _proportional(got, pruning.gradient_importance(model, ids, targets)):
            continue
        ones = np.ones((ids.shape[0], model.n_heads))
        _, grads = model.loss_and_grads(ids, targets, ones)
        per_seq = grads["head_mask"]  # (batch, heads)
        diagnose(
            got,
            [
                (
                    per_seq.sum(axis=0),
                    f"{name}: take the absolute value: a head whose mask gradient is negative "
                    "matters too.",
                ),
                (
                    np.abs(per_seq.sum(axis=0)),
                    f"{name}: take |gradient| per sequence before averaging; with one mask for "
                    "the whole batch, sequences that pull in opposite directions cancel.",
                ),
                (
                    lambda: np.abs(
                        model.loss_and_grads(ids, targets, np.zeros_like(ones))[1]["head_mask"]
                    ).sum(axis=0),
                    f"{name}: measure the gradient at the model you have: all heads on (mask "
                    "of ones), not off.",
                ),
            ],
            same=_proportional,
        )
        raise CheckFailed(
            f"{name}: wrong values; pass a (batch, heads) mask of ones so the backward pass "
            "gives one gradient per sequence and head."
        )
    passed("gradient_importance: mean over sequences of |dL/d mask_h|, per head.")


def _ordinal(x):
    return np.argsort(np.argsort(x, kind="stable"), kind="stable") + 1.0


def check_spearman(spearman_fn: Callable) -> None:
    """Exercise (notebook 06): Spearman rank correlation of two 1-D arrays, ties averaged."""
    from .. import pruning

    name = "spearman"
    cases = [
        (np.array([0.30, 0.02, 0.11, 0.0, 0.0, 0.25]), np.array([0.9, 0.1, 0.7, 0.2, 0.3, 0.4])),
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0, 1000.0])),
        (np.array([3.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0])),
    ]
    for a, b in cases:
        got = call(spearman_fn, name, a.copy(), b.copy())
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise CheckFailed(
                f"{name} should return one number, got {type(got).__name__}."
            ) from None
        expected = pruning.spearman(a, b)
        if abs(got - expected) < 1e-9:
            continue
        diagnose(
            got,
            [
                (
                    float(np.corrcoef(a, b)[0, 1]),
                    f"{name}: that is the Pearson correlation of the values; correlate their "
                    "ranks.",
                ),
                (
                    float(np.corrcoef(_ordinal(a), _ordinal(b))[0, 1]),
                    f"{name}: tied values must share the mean of their ranks (two values tied "
                    "for ranks 1 and 2 both get 1.5).",
                ),
                (
                    float(np.corrcoef(np.argsort(a), np.argsort(b))[0, 1]),
                    f"{name}: np.argsort gives the order, not the ranks; the rank of each value "
                    "is the argsort of the argsort (then average the ties).",
                ),
                (
                    -expected,
                    f"{name}: the sign is flipped; rank both arrays in the same direction.",
                ),
            ],
            same=same_value,
        )
        raise CheckFailed(
            f"{name}: for a={a.tolist()} and b={b.tolist()} expected {expected:.4f}, got {got:.4f}."
        )
    passed("spearman: Pearson correlation of the ranks, ties averaged.")
