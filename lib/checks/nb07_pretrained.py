"""Checks of notebook 07 (real pretrained heads): the head-type score, finding the head
for any offset (the previous token, the one after next, ...), and the coreference probe.
They use small synthetic attention stacks with padding (no model needed), built so that
each realistic mistake gives a different answer, on two shapes each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import attention as A
from .. import head_types as HT
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


def _padded_scores(seed: int, lead: tuple[int, ...], lengths: Sequence[int], n: int, heads: int):
    """Random scores (*lead, batch, heads, n, n) and the (batch, n) mask of real tokens."""
    rng = np.random.default_rng(seed)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]  # (batch, n)
    scores = rng.normal(scale=1.5, size=lead + (len(lengths), heads, n, n))
    return scores, mask


def _weights_from_scores(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return A.softmax(np.where(mask[:, None, None, :], scores, -np.inf))


@exercise
def check_target_score(score_fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]):
    """Exercise (notebook 07): mean weight on target keys over the chosen queries, per head."""
    name = "target_score"
    for seed, lengths, n, heads in ((70, [6, 3, 5], 6, 3), (75, [4, 7, 2, 5], 7, 2)):
        scores, mask = _padded_scores(seed, (), lengths, n, heads)
        w = _weights_from_scores(scores, mask)  # (batch, heads, n, n)
        tokens = [["[CLS]"] + ["w"] * (length - 2) + ["[SEP]"] for length in lengths]
        for kind in ("previous", "[SEP]"):
            targets, queries = HT.target_masks(tokens, n)[kind]
            got = as_array(call(score_fn, name, w.copy(), targets.copy(), queries.copy()), name)
            expect_shape(got, (w.shape[1],), name, "one score per head, shape (heads,)")
            if close(got, HT.target_score(w, targets, queries)):
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


def _planted_offset_heads(seed, planted, layers, heads, lengths):
    """(layers, batch, heads, n, n) weights in which head planted[offset] = (layer, head)
    looks at key i + offset; the other heads random. Returns (weights, mask)."""
    n = max(lengths)
    rng = np.random.default_rng(seed)
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]
    scores = rng.normal(scale=1.0, size=(layers, len(lengths), heads, n, n))
    i = np.arange(n)
    for offset, (layer, head) in planted.items():
        scores[layer, :, head] += 6.0 * (i[None, :] == i[:, None] + offset)
    return _weights_from_scores(scores, mask), mask


def _describe(value) -> str:
    """A short description of a wrong answer: its type, and its shape if it has one."""
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0:
        return f"{type(value).__name__} of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 40 else type(value).__name__


def _best(scores: np.ndarray) -> tuple[int, int, float]:
    layer, head = np.unravel_index(np.argmax(scores), scores.shape)
    return int(layer), int(head), float(scores[layer, head])


def _read_head_answer(name: str, got) -> tuple[int, int, float]:
    """The student's (layer, head, score), or a sentence saying what is wrong with it."""
    if isinstance(got, bool | str | dict) or got is None:
        raise CheckFailed(
            f"{name}: return three values (layer, head, score), got {_describe(got)}."
        )
    if isinstance(got, int | np.integer):
        raise CheckFailed(
            f"{name}: you returned the single number {int(got)}; return (layer, head, score), "
            "with the layer and head as two indices, not a flat index into the scores."
        )
    if not isinstance(got, tuple | list | np.ndarray) or len(got) != 3:
        if isinstance(got, tuple | list | np.ndarray) and len(got) == 2:
            raise CheckFailed(
                f"{name}: you returned two values; return the winning head's score as well: "
                "(layer, head, score)."
            )
        raise CheckFailed(
            f"{name}: return three values (layer, head, score), got {_describe(got)}."
        )
    layer, head, score = got
    try:
        layer, head = int(layer), int(head)
    except (TypeError, ValueError):
        raise CheckFailed(
            f"{name}: the layer and the head must be two integers, got "
            f"{_describe(got[0])} and {_describe(got[1])}."
        ) from None
    score_arr = np.asarray(score) if not isinstance(score, str) else None
    if score_arr is None or score_arr.size != 1 or not np.issubdtype(score_arr.dtype, np.number):
        raise CheckFailed(
            f"{name}: the score must be one number, the winning head's score, got "
            f"{_describe(score)}."
        )
    return layer, head, float(score_arr)


@exercise
def check_find_offset_head(find_fn: Callable[[np.ndarray, np.ndarray, int], tuple]) -> None:
    """Exercise (notebook 07): the (layer, head, score) of the head that puts the most weight
    on the token ``offset`` places away (key i + offset), scored over the queries that have
    such a key among the real tokens of their sentence."""
    name = "find_offset_head"
    cases = (
        (71, {-1: (2, 1), 1: (0, 3), -2: (1, 2), 2: (2, 0)}, 3, 4, [7, 4, 6], (-1, 2)),
        (72, {-1: (1, 4), 1: (0, 2), -2: (0, 0), 2: (1, 1)}, 2, 5, [5, 6, 8, 3], (1, -2)),
    )
    for seed, planted, layers, heads, lengths, offsets in cases:
        w, mask = _planted_offset_heads(seed, planted, layers, heads, lengths)
        n = mask.shape[1]
        i = np.arange(n)
        pair = mask[:, :, None] & mask[:, None, :]  # (batch, n_q, n_k): both real

        for offset in offsets:
            got = _read_head_answer(name, call(find_fn, name, w.copy(), mask.copy(), offset))

            def best_of(targets, queries):
                return _best(HT.target_score(w, targets, queries))

            want = best_of(*HT.offset_masks(mask, offset))
            if got[:2] == want[:2] and close(got[2], want[2]):
                continue
            targets = HT.offset_masks(mask, offset)[0]
            wrapped = pair & (i[None, None, :] == (i[None, :, None] + offset) % n)
            inside = mask & (i + offset >= 0) & (i + offset < n)  # padding not checked

            def per_sentence(targets=targets):
                on = (w * targets[:, None]).sum(axis=-1)  # (layers, batch, heads, n_q)
                q = targets.any(axis=-1)  # (batch, n_q)
                mean = (on * q[:, None]).sum(axis=-1) / np.maximum(q.sum(axis=-1), 1)[:, None]
                return _best(mean[:, q.any(axis=-1)].mean(axis=1))

            diagnose(
                got,
                [
                    (
                        lambda o=offset: best_of(*HT.offset_masks(mask, -o)),
                        f"{name}: you found the head for offset {-offset:+d}: the target of "
                        "query i is key i + offset (offset -1 is the previous token).",
                    ),
                    (
                        (want[1], want[0], want[2]),
                        f"{name}: you returned (head, layer, ...); the layer comes first, as "
                        "in attentions[layer, batch, head].",
                    ),
                    (
                        (want[0] + 1, want[1] + 1, want[2]),
                        f"{name}: indices start at 0 in NumPy; you counted from 1.",
                    ),
                    (
                        lambda: best_of(wrapped, mask),
                        f"{name}: your targets wrap around the end of the sentence; a query "
                        "whose key i + offset falls outside the sentence has no target and is "
                        "left out.",
                    ),
                    (
                        lambda: best_of(wrapped, wrapped.any(axis=-1)),
                        f"{name}: your targets wrap around the end of the sentence; a query "
                        "whose key i + offset falls outside the sentence has no target and is "
                        "left out.",
                    ),
                    (
                        lambda: best_of(targets, mask),
                        f"{name}: you averaged over every real query, counting those without "
                        "a key i + offset as 0; average only over queries that have one.",
                    ),
                    (
                        lambda: best_of(targets, inside),
                        f"{name}: near the end of a short sentence, key i + offset is padding: "
                        "such a query has no target, so leave it out of the average.",
                    ),
                    (
                        per_sentence,
                        f"{name}: you averaged within each sentence first, so a short "
                        "sentence counts as much as a long one; average over all chosen "
                        "(sentence, query) pairs at once.",
                    ),
                ],
            )
            if got[:2] == want[:2]:
                raise CheckFailed(
                    f"{name}: the right head, but its score {got[2]:.4f} should be "
                    f"{want[2]:.4f}: the mean weight on key i + offset over the queries that "
                    "have such a key."
                )
            raise CheckFailed(
                f"{name}: ({got[0]}, {got[1]}) is not the head that puts the most weight on "
                f"key i + offset for offset {offset:+d}; score every head, then take the "
                "largest."
            )
    passed("find_offset_head: found the planted head for four offsets, with its score.")


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


@exercise
def check_coreference_accuracy(acc_fn: Callable[..., np.ndarray]) -> None:
    """Exercise (notebook 07): per head, how often the pronoun prefers its antecedent."""
    name = "coreference_accuracy"
    cases = ((73, 2, 3, [8, 6, 8, 7, 5]), (74, 3, 2, [6, 9, 7, 5, 8, 6]))
    for seed, layers, heads, lengths in cases:
        w, p, a, d = _coreference_case(seed, layers, heads, lengths)
        got = as_array(call(acc_fn, name, w.copy(), p.copy(), a.copy(), d.copy()), name)
        expect_shape(got, (w.shape[0], w.shape[2]), name, "one accuracy per head, (layers, heads)")
        if close(got, HT.coreference_accuracy(w, p, a, d)):
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
