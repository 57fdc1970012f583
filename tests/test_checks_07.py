"""The notebook 07 checks accept the reference answers and name realistic mistakes."""

import numpy as np
import pytest
from helpers import rejects, stub

from lib import checks
from lib import head_types as T


def find_previous_token_head(attentions, attention_mask, offset=-1):
    """Reference: score every head with lib's target_score, then take the largest."""
    batch, n = attention_mask.shape
    tokens = [["t"] * int(k) for k in attention_mask.sum(axis=1)]
    targets, queries = T.target_masks(tokens, n)["previous" if offset == -1 else "next"]
    scores = T.target_score(attentions, targets, queries)  # (layers, heads)
    layer, head = np.unravel_index(np.argmax(scores), scores.shape)
    return int(layer), int(head)


@pytest.mark.parametrize(
    "check, reference",
    [
        (checks.check_target_score, T.target_score),
        (checks.check_find_previous_token_head, find_previous_token_head),
        (checks.check_coreference_accuracy, T.coreference_accuracy),
    ],
)
def test_reference_passes_and_stub_is_reported(check, reference, capsys):
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    rejects(check, stub, "not implemented yet")


# --------------------------------------------------------------------------- target_score


def on_target(w, targets):
    return (w * targets[:, None]).sum(axis=-1)  # (batch, heads, n_q)


def score_all_queries(w, targets, queries):
    return on_target(w, targets).mean(axis=(0, 2))


def score_summed(w, targets, queries):
    return (on_target(w, targets) * queries[:, None, :]).sum(axis=(0, 2))


def score_per_sentence(w, targets, queries):
    q = queries[:, None, :]
    per = (on_target(w, targets) * q).sum(axis=-1) / np.maximum(q.sum(axis=-1), 1)
    return per[queries.any(axis=1)].mean(axis=0)


def score_columns(w, targets, queries):
    return score_summed(np.swapaxes(w, -1, -2), targets, queries) / queries.sum()


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (score_all_queries, "only where `queries` is True"),
        (score_summed, "divide by the number of chosen queries"),
        (score_per_sentence, "averaged within each sentence first"),
        (score_columns, "column-wise"),
        (lambda w, t, q: on_target(w, t).mean(axis=2), "shape (heads,)"),
        (lambda w, t, q: np.zeros(w.shape[1]), "wrong values"),
    ],
)
def test_target_score_mistakes(wrong, fragment):
    rejects(checks.check_target_score, wrong, fragment)


# --------------------------------------------------------------------------- find head


def test_find_previous_token_head_mistakes():
    rejects(
        checks.check_find_previous_token_head,
        lambda w, m: find_previous_token_head(w, m)[::-1],
        "(head, layer)",
    )
    rejects(
        checks.check_find_previous_token_head,
        lambda w, m: find_previous_token_head(w, m, offset=+1),
        "next-token head",
    )
    rejects(
        checks.check_find_previous_token_head,
        lambda w, m: tuple(i + 1 for i in find_previous_token_head(w, m)),
        "counted from 1",
    )

    def flat(w, m):
        layer, head = find_previous_token_head(w, m)
        return layer * w.shape[2] + head

    rejects(checks.check_find_previous_token_head, flat, "flat index")
    rejects(checks.check_find_previous_token_head, lambda w, m: (0, 0), "is not the head")
    rejects(checks.check_find_previous_token_head, lambda w, m: "layer 2", "pair (layer, head)")


# --------------------------------------------------------------------------- coreference


def pair_weights(w, p, a, d, transpose=False):
    b = np.arange(len(p))
    wh = np.moveaxis(w, 2, -1)  # (layers, batch, n, n, heads)
    if transpose:
        return wh[:, b, a, p], wh[:, b, d, p]
    return wh[:, b, p, a], wh[:, b, p, d]


def coref_ties_win(w, p, a, d):
    to_a, to_d = pair_weights(w, p, a, d)
    return (to_a >= to_d).mean(axis=1)


def coref_transposed(w, p, a, d):
    to_a, to_d = pair_weights(w, p, a, d, transpose=True)
    return (to_a > to_d).mean(axis=1)


def coref_mean_difference(w, p, a, d):
    to_a, to_d = pair_weights(w, p, a, d)
    return (to_a - to_d).mean(axis=1)


def coref_counts(w, p, a, d):
    to_a, to_d = pair_weights(w, p, a, d)
    return (to_a > to_d).sum(axis=1)


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (coref_ties_win, "a tie is not a win"),
        (coref_transposed, "the pronoun's row"),
        (coref_mean_difference, "averaged the weight differences"),
        (coref_counts, "divide by the number of sentences"),
        (lambda w, p, a, d: pair_weights(w, p, a, d)[0].mean(axis=2), "(layers, heads)"),
        (lambda w, p, a, d: np.full((w.shape[0], w.shape[2]), 0.5), "wrong values"),
    ],
)
def test_coreference_accuracy_mistakes(wrong, fragment):
    rejects(checks.check_coreference_accuracy, wrong, fragment)
