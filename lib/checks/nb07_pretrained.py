"""Checks of notebook 07 (real pretrained heads): the head-type score, finding the
previous-token head, and the coreference probe. They use small synthetic attention stacks
with padding (no model needed), built so that each realistic mistake gives a different
answer, on two shapes each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import attention as A
from ._core import CheckFailed, as_array, call, close, diagnose, expect_shape, passed


def _padded_scores(seed: int, lead: tuple[int, ...], lengths: Sequence[int], n: int, heads: int):
    """Random scores (*lead, batch, heads, n, n) and the (batch, n) mask of real tokens."""
    rng = np.random.default_rng(seed)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]  # (batch, n)
    scores = rng.normal(scale=1.5, size=lead + (len(lengths), heads, n, n))
    return scores, mask


def _weights_from_scores(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return A.softmax(np.where(mask[:, None, None, :], scores, -np.inf))


def check_target_score(score_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]):
    """Exercise (notebook 07): mean weight on target keys over the chosen queries, per head."""
    from .. import head_types as T

    name = "target_score"
    for seed, lengths, n, heads in ((70, [6, 3, 5], 6, 3), (75, [4, 7, 2, 5], 7, 2)):
        scores, mask = _padded_scores(seed, (), lengths, n, heads)
        w = _weights_from_scores(scores, mask)  # (batch, heads, n, n)
        tokens = [["[CLS]"] + ["w"] * (length - 2) + ["[SEP]"] for length in lengths]
        for kind in ("previous", "[SEP]"):
            targets, queries = T.target_masks(tokens, n)[kind]
            got = as_array(call(score_fn, name, w.copy(), targets.copy(), queries.copy()), name)
            expect_shape(got, (w.shape[1],), name, "one score per head, shape (heads,)")
            if close(got, T.target_score(w, targets, queries)):
                continue
            on_target = (w * targets[:, None]).sum(axis=-1)  # (batch, heads, n_q)
            qb = queries[:, None, :]
            per_sentence = (on_target * qb).sum(axis=-1) / np.maximum(qb.sum(axis=-1), 1)
            read_columns = (np.swapaxes(w, -1, -2) * targets[:, None]).sum(axis=-1)
            diagnose(
                got,
                [
                    (
                        on_target.mean(axis=(0, 2)),
                        f"{name}: you averaged over every query position, padding and queries "
                        "without a target included; average only where `queries` is True.",
                    ),
                    (
                        (on_target * qb).sum(axis=(0, 2)),
                        f"{name}: you summed the weights over the queries; divide by the "
                        "number of chosen queries to get a mean in [0, 1].",
                    ),
                    (
                        per_sentence[queries.any(axis=1)].mean(axis=0),
                        f"{name}: you averaged within each sentence first, so a short "
                        "sentence counts as much as a long one; average over all chosen "
                        "(sentence, query) pairs at once.",
                    ),
                    (
                        (read_columns * qb).sum(axis=(0, 2)) / queries.sum(),
                        f"{name}: you read the weights column-wise; weights[b, h, i, j] is "
                        "what query i gives key j, so sum over the last axis (the keys).",
                    ),
                ],
            )
            raise CheckFailed(
                f"{name}: wrong values for the {kind!r} targets; for each head, add up the "
                "weight each chosen query puts on its target keys, then average over those "
                "queries."
            )
    passed("target_score: mean weight on the targets over exactly the chosen queries, per head.")


def _planted_heads(seed, prev, nxt, layers, heads, lengths):
    """(layers, batch, heads, n, n) weights with a previous-token head at ``prev`` and a
    next-token head at ``nxt``; the rest random. Returns (weights, mask)."""
    n = max(lengths)
    rng = np.random.default_rng(seed)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]
    scores = rng.normal(scale=1.0, size=(layers, len(lengths), heads, n, n))
    i = np.arange(n)
    scores[prev[0], :, prev[1]] += 6.0 * (i[None, :] == i[:, None] - 1)
    scores[nxt[0], :, nxt[1]] += 6.0 * (i[None, :] == i[:, None] + 1)
    return _weights_from_scores(scores, mask), mask


def _describe(value) -> str:
    """A short description of a wrong answer: its type, and its shape if it has one."""
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 40 else type(value).__name__


def check_find_previous_token_head(find_fn: Callable[[np.ndarray, np.ndarray], tuple]):
    """Exercise (notebook 07): the (layer, head) with the highest previous-token score."""
    name = "find_previous_token_head"
    cases = (
        (71, (2, 1), (0, 3), 3, 4, [7, 4, 6]),
        (72, (1, 4), (0, 2), 2, 5, [5, 6]),
    )
    for seed, prev, nxt, layers, heads, lengths in cases:
        w, mask = _planted_heads(seed, prev, nxt, layers, heads, lengths)
        got = call(find_fn, name, w.copy(), mask.copy())
        if isinstance(got, int | np.integer):
            raise CheckFailed(
                f"{name}: you returned the single number {int(got)}; return a "
                "(layer, head) pair of indices instead of a flat index into the scores."
            )
        if not (isinstance(got, tuple | list | np.ndarray) and len(got) == 2):
            raise CheckFailed(f"{name}: return a pair (layer, head), got {_describe(got)}.")
        try:
            got = (int(got[0]), int(got[1]))
        except (TypeError, ValueError):
            raise CheckFailed(
                f"{name}: return two integers (layer, head), got a pair of "
                f"{_describe(got[0])} and {_describe(got[1])}."
            ) from None
        if got == prev:
            continue
        diagnose(
            got,
            [
                (
                    (prev[1], prev[0]),
                    f"{name}: you returned (head, layer); the layer comes first, as in "
                    "attentions[layer, batch, head].",
                ),
                (
                    nxt,
                    f"{name}: you found the next-token head; the previous token of query i "
                    "is key i-1.",
                ),
                (
                    (prev[0] + 1, prev[1] + 1),
                    f"{name}: indices start at 0 in NumPy; you counted from 1.",
                ),
            ],
            same=lambda a, b: tuple(a) == tuple(b),
        )
        raise CheckFailed(
            f"{name}: ({got[0]}, {got[1]}) is not the head that puts the most weight on the "
            "previous token; score every head, then take the largest."
        )
    passed("find_previous_token_head: found the planted previous-token head twice.")


def _coreference_case(seed: int, layers: int, heads: int, lengths: Sequence[int]):
    """(layers, batch, heads, n, n) weights and pronoun/antecedent/distractor positions,
    with one exact tie planted."""
    n = max(lengths)
    scores, mask = _padded_scores(seed, (layers,), lengths, n, heads)
    w = _weights_from_scores(scores, mask)
    rng = np.random.default_rng(seed + 1)
    pronoun, antecedent, distractor = [], [], []
    for length in lengths:
        a, d, p = rng.choice(np.arange(1, length - 1), size=3, replace=False)
        pronoun.append(p)
        antecedent.append(a)
        distractor.append(d)
    p, a, d = (np.array(x) for x in (pronoun, antecedent, distractor))
    tie = w[0, 0, 1, p[0], a[0]] + w[0, 0, 1, p[0], d[0]]
    w[0, 0, 1, p[0], a[0]] = w[0, 0, 1, p[0], d[0]] = tie / 2  # layer 0, sentence 0, head 1
    return w, p, a, d


def check_coreference_accuracy(acc_fn: Callable[..., np.ndarray]) -> None:
    """Exercise (notebook 07): per head, how often the pronoun prefers its antecedent."""
    from .. import head_types as T

    name = "coreference_accuracy"
    cases = ((73, 2, 3, [8, 6, 8, 7, 5]), (74, 3, 2, [6, 9, 7, 5, 8, 6]))
    for seed, layers, heads, lengths in cases:
        w, p, a, d = _coreference_case(seed, layers, heads, lengths)
        got = as_array(call(acc_fn, name, w.copy(), p.copy(), a.copy(), d.copy()), name)
        expect_shape(got, (w.shape[0], w.shape[2]), name, "one accuracy per head, (layers, heads)")
        if close(got, T.coreference_accuracy(w, p, a, d)):
            continue
        b = np.arange(len(p))
        wh = np.moveaxis(w, 2, -1)  # (layers, batch, n, n, heads)
        to_a, to_d = wh[:, b, p, a], wh[:, b, p, d]
        from_a, from_d = wh[:, b, a, p], wh[:, b, d, p]
        diagnose(
            got,
            [
                (
                    (to_a >= to_d).mean(axis=1),
                    f"{name}: a tie is not a win; count a sentence only when the antecedent "
                    "gets strictly more weight than the distractor.",
                ),
                (
                    (from_a > from_d).mean(axis=1),
                    f"{name}: you compared how much the nouns attend to the pronoun; we want "
                    "the pronoun's row: weights[..., pronoun, antecedent] vs "
                    "weights[..., pronoun, distractor].",
                ),
                (
                    (to_a - to_d).mean(axis=1),
                    f"{name}: you averaged the weight differences; count the fraction of "
                    "sentences where the antecedent wins instead.",
                ),
                (
                    (to_a > to_d).sum(axis=1),
                    f"{name}: you counted wins; divide by the number of sentences to get a "
                    "fraction.",
                ),
            ],
        )
        raise CheckFailed(
            f"{name}: wrong values; for each head, the fraction of sentences in which "
            "weights[layer, b, head, pronoun[b], antecedent[b]] beats the distractor's."
        )
    passed("coreference_accuracy: strict wins of the antecedent, as a fraction per head.")
