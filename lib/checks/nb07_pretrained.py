"""Checks of notebook 07 (real pretrained heads), on small synthetic attention stacks with
padding (no model needed), built so that each realistic mistake gives its own answer."""

from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import head_types as HT
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    describe,
    diagnose,
    exercise,
    expect_shape,
    passed,
)


def _padded_weights(seed, lead, lengths, heads, scale=1.5, planted=None):
    """Weights (*lead, batch, heads, n, n) of random scores, padded keys masked, and the (batch,
    n) mask of real tokens; ``planted``: {offset: (layer, head)} that looks at key i + offset."""
    rng = np.random.default_rng(seed)
    n = max(lengths)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]
    scores = rng.normal(scale=scale, size=lead + (len(lengths), heads, n, n))
    for offset, (layer, head) in (planted or {}).items():
        scores[layer, :, head] += 6.0 * np.eye(n, k=offset)  # query i looks at key i + offset
    return A.softmax(np.where(mask[:, None, None, :], scores, -np.inf)), mask


_PER_SENTENCE = (
    "you averaged within each sentence first, so a short sentence counts as "
    "much as a long one; average over all chosen (sentence, query) pairs at once."
)


def _per_sentence(w, targets, queries) -> np.ndarray:
    """The target score of each head averaged within each sentence first (the mistake)."""
    on = (w * targets[:, None]).sum(axis=-1)  # (..., batch, heads, n_q)
    mean = (on * queries[:, None]).sum(axis=-1) / np.maximum(queries.sum(axis=-1), 1)[:, None]
    return mean[..., queries.any(axis=-1), :].mean(axis=-2)


@exercise
def check_target_score(score_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]):
    """Exercise (notebook 07): mean weight on target keys over the chosen queries, per head."""
    name = "target_score"
    for seed, lengths, heads in ((70, [6, 3, 5], 3), (75, [4, 7, 2, 5], 2)):
        w, _ = _padded_weights(seed, (), lengths, heads)  # (batch, heads, n, n)
        tokens = [["[CLS]"] + ["w"] * (length - 2) + ["[SEP]"] for length in lengths]
        for kind in ("previous", "[SEP]"):
            targets, queries = HT.target_masks(tokens, w.shape[-1])[kind]
            got = as_array(call(score_fn, name, w, targets, queries), name)
            expect_shape(got, (w.shape[1],), name, "one score per head, shape (heads,)")
            if close(got, HT.target_score(w, targets, queries)):
                continue
            on_target = (w * targets[:, None]).sum(axis=-1)  # (batch, heads, n_q)
            qb = queries[:, None, :]
            read_columns = (np.swapaxes(w, -1, -2) * targets[:, None]).sum(axis=-1)
            mistakes = {
                "you averaged over every query position, padding and queries without a target "
                "included; average only where `queries` is True.": on_target.mean(axis=(0, 2)),
                "you summed the weights over the queries; divide by the number of chosen "
                "queries to get a mean in [0, 1].": (on_target * qb).sum(axis=(0, 2)),
                _PER_SENTENCE: _per_sentence(w, targets, queries),
                "you read the weights column-wise; weights[b, h, i, j] is "
                "what query i gives key j, so sum over the last axis (the "
                "keys).": (read_columns * qb).sum(axis=(0, 2)) / queries.sum(),
            }
            diagnose(got, name, mistakes)
            raise CheckFailed(
                f"{name}: wrong values for the {kind!r} targets; for each head, add up the weight "
                "each chosen query puts on its target keys, then average over those queries."
            )
    passed("target_score: mean weight on the targets over exactly the chosen queries, per head.")


def _top(w, targets, queries, score=HT.target_score) -> tuple[int, int, float]:
    """The (layer, head, score) of the head with the highest ``score``."""
    scores = score(w, targets, queries)
    layer, head = np.unravel_index(np.argmax(scores), scores.shape)
    return int(layer), int(head), float(scores[layer, head])


def _read_head_answer(name: str, got) -> tuple[int, int, float]:
    """The student's (layer, head, score), or a sentence saying what is wrong with it."""
    if isinstance(got, int | np.integer) and not isinstance(got, bool):
        raise CheckFailed(
            f"{name}: you returned the single number {int(got)}; return (layer, head, score), "
            "with the layer and head as two indices, not a flat index into the scores."
        )
    if isinstance(got, tuple | list | np.ndarray) and len(got) == 2:
        raise CheckFailed(
            f"{name}: you returned two values; return the winning head's score as well: "
            "(layer, head, score)."
        )
    if not isinstance(got, tuple | list | np.ndarray) or len(got) != 3:
        raise CheckFailed(f"{name}: return three values (layer, head, score), got {describe(got)}.")
    layer, head, score = got
    try:
        layer, head = int(layer), int(head)
    except (TypeError, ValueError):
        raise CheckFailed(
            f"{name}: the layer and the head must be two integers, got "
            f"{describe(got[0])} and {describe(got[1])}."
        ) from None
    score_arr = np.asarray(score) if not isinstance(score, str) else None
    if score_arr is None or score_arr.size != 1 or not np.issubdtype(score_arr.dtype, np.number):
        raise CheckFailed(
            f"{name}: the score must be one number, the winning head's, got {describe(score)}."
        )
    return layer, head, float(score_arr)


_WRAPPED = (
    "your targets wrap around the end of the sentence; a query whose key i + offset falls "
    "outside the sentence has no target and is left out."
)


@exercise
def check_find_offset_head(find_fn: Callable[[np.ndarray, np.ndarray, int], tuple]) -> None:
    """Exercise (notebook 07): the (layer, head, score) of the head that puts the most weight on
    key i + offset, over the queries that have such a key among their sentence's real tokens."""
    name = "find_offset_head"
    refuse = (("lib.head_types", "offset_masks", "HT.offset_masks"),)  # lib's targets: refused
    for seed, planted, layers, heads, lengths, offsets in (
        (71, {-1: (2, 1), 1: (0, 3), -2: (1, 2), 2: (2, 0)}, 3, 4, [7, 4, 6], (-1, 2)),
        (72, {-1: (1, 4), 1: (0, 2), -2: (0, 0), 2: (1, 1)}, 2, 5, [5, 6, 8, 3], (1, -2)),
    ):
        w, mask = _padded_weights(seed, (layers,), lengths, heads, 1.0, planted)
        n = mask.shape[1]
        i = np.arange(n)
        pair = mask[:, :, None] & mask[:, None, :]  # (batch, n_q, n_k): both real

        for offset in offsets:
            got = _read_head_answer(name, call(find_fn, name, w, mask, offset, refuse=refuse))
            targets, queries = HT.offset_masks(mask, offset)
            want = layer, head, score = _top(w, targets, queries)
            if got[:2] == want[:2] and close(got[2], score):
                continue
            wrapped = pair & (i[None, None, :] == (i[None, :, None] + offset) % n)
            inside = mask & (i + offset >= 0) & (i + offset < n)  # padding not checked
            mistakes = {
                f"you found the head for offset {-offset:+d}: the target "
                "of query i is key i + offset (offset -1 is the previous "
                "token).": lambda: _top(w, *HT.offset_masks(mask, -offset)),
                "you returned (head, layer, ...); the layer comes first, as "
                "in attentions[layer, batch, head].": (head, layer, score),
                "indices start at 0 in NumPy; you counted from 1.": (layer + 1, head + 1, score),
                _WRAPPED: lambda: _top(w, wrapped, mask),
            }
            diagnose(got, name, mistakes)
            mistakes = {  # the same wrapped targets, only the queries that have one chosen
                _WRAPPED: lambda: _top(w, wrapped, wrapped.any(axis=-1)),
                "you averaged over every real query, counting those without a key i + offset "
                "as 0; average only over queries that have one.": lambda: _top(w, targets, mask),
                "near the end of a short sentence, key i + offset is padding: such a query has "
                "no target, so leave it out of the average.": lambda: _top(w, targets, inside),
                _PER_SENTENCE: lambda: _top(w, targets, targets.any(axis=-1), _per_sentence),
            }
            diagnose(got, name, mistakes)
            if got[:2] == want[:2]:
                raise CheckFailed(
                    f"{name}: the right head, but its score {got[2]:.4f} should be {score:.4f}: "
                    "the mean weight on key i + offset over the queries that have such a key."
                )
            raise CheckFailed(
                f"{name}: ({got[0]}, {got[1]}) is not the head that puts the most weight on "
                f"key i + offset for offset {offset:+d}; score every head, then take the largest."
            )
    passed("find_offset_head: found the planted head for four offsets, with its score.")


@exercise
def check_coreference_accuracy(acc_fn: Callable[..., np.ndarray]) -> None:
    """Exercise (notebook 07): per head, how often the pronoun prefers its antecedent."""
    name = "coreference_accuracy"
    refuse = (("lib.head_types", "coreference_wins", "HT.coreference_wins"),)  # mean = answer
    for seed, layers, heads, lengths in (
        (73, 2, 3, [8, 6, 8, 7, 5]),
        (74, 3, 2, [6, 9, 7, 5, 8, 6]),
    ):
        w, _ = _padded_weights(seed, (layers,), lengths, heads)
        rng = np.random.default_rng(seed + 1)  # antecedent, distractor and pronoun positions
        picks = [rng.choice(np.arange(1, n - 1), size=3, replace=False) for n in lengths]
        a, d, p = np.array(picks).T
        tie = w[0, 0, 1, p[0], a[0]] + w[0, 0, 1, p[0], d[0]]  # plant an exact tie
        w[0, 0, 1, p[0], a[0]] = w[0, 0, 1, p[0], d[0]] = tie / 2
        got = as_array(call(acc_fn, name, w, p, a, d, refuse=refuse), name)
        expect_shape(got, (layers, heads), name, "one accuracy per head, (layers, heads)")
        if close(got, HT.coreference_accuracy(w, p, a, d)):
            continue
        b = np.arange(len(p))
        wh = np.moveaxis(w, 2, -1)  # (layers, batch, n, n, heads)
        to_a, to_d = wh[:, b, p, a], wh[:, b, p, d]
        wins = to_a > to_d
        mistakes = {
            "a tie is not a win; count a sentence only when the antecedent gets "
            "strictly more weight than the distractor.": (to_a >= to_d).mean(axis=1),
            "you compared how much the nouns attend to the pronoun; we want the "
            "pronoun's row: weights[..., pronoun, antecedent] vs weights[..., "
            "pronoun, distractor].": (wh[:, b, a, p] > wh[:, b, d, p]).mean(axis=1),
            "you averaged the weight differences; count the fraction of sentences "
            "where the antecedent wins instead.": (to_a - to_d).mean(axis=1),
            "you counted wins; divide by the number of sentences to get a fraction.": wins.sum(1),
        }
        diagnose(got, name, mistakes)
        raise CheckFailed(
            f"{name}: wrong values; for each head, the fraction of sentences in which "
            "weights[layer, b, head, pronoun[b], antecedent[b]] beats the distractor's."
        )
    passed("coreference_accuracy: strict wins of the antecedent, as a fraction per head.")
