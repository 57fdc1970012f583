"""The notebook 07 checks accept the reference answers and name realistic mistakes."""

import numpy as np
import pytest
from helpers import lib_answers, rejects, stub
from test_checks_robustness import find_offset_head

from lib import checks, head_types
from lib import head_types as HT

# lib's answers, unrefused: the references of the checks that refuse them
HT = lib_answers(HT)


@pytest.mark.parametrize(
    "check, reference",
    [
        (checks.check_target_score, HT.target_score),
        (checks.check_find_offset_head, find_offset_head),
        (checks.check_coreference_accuracy, HT.coreference_accuracy),
    ],
)
def test_reference_passes_and_stub_is_reported(check, reference, capsys):
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    rejects(check, stub, "not implemented yet")


@pytest.mark.parametrize(
    "check, answer, label",
    [
        (
            checks.check_find_offset_head,
            lambda w, m, o: head_types.offset_masks(m, o),
            "offset_masks",
        ),
        (
            checks.check_coreference_accuracy,
            lambda w, p, a, d: head_types.coreference_wins(w, p, a, d).mean(axis=1),
            "coreference_wins",
        ),
    ],
)
def test_lib_s_parts_of_the_answer_are_refused(check, answer, label):
    """HT.offset_masks builds exercise 2's targets, HT.coreference_wins is exercise 3 but for
    a mean: refused while the answer runs, and they work again once the check is done."""
    name = check.__name__.removeprefix("check_")
    message = rejects(check, answer)
    assert (
        message == f"{name}: this exercise asks you to write it yourself, not to call HT.{label}."
    )
    targets, queries = head_types.offset_masks(np.ones((1, 3), dtype=bool), -1)
    assert targets.shape == (1, 3, 3) and queries.tolist() == [[False, True, True]]


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


def offset_head(wrap=False, queries="with target", sign=1, per_sentence=False):
    """find_offset_head with switches for the classic mistakes."""

    def find(w, mask, offset):
        n = mask.shape[1]
        i = np.arange(n)
        pair = mask[:, :, None] & mask[:, None, :]
        key = (i[:, None] + sign * offset) % n if wrap else i[:, None] + sign * offset
        targets = pair & (i[None, None, :] == key[None])
        q = {
            "with target": targets.any(axis=-1),
            "all real": mask,
            "inside": mask & (i + offset >= 0) & (i + offset < n),
        }[queries]
        if per_sentence:
            on = (w * targets[:, None]).sum(axis=-1) * q[:, None]  # (layers, batch, heads, n)
            s = (on.sum(axis=-1) / np.maximum(q.sum(axis=-1), 1)[:, None])[:, q.any(1)].mean(1)
        else:
            s = HT.target_score(w, targets, q)
        layer, head = np.unravel_index(np.argmax(s), s.shape)
        return int(layer), int(head), float(s[layer, head])

    return find


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (offset_head(sign=-1), "the target of query i is key i + offset"),
        (
            lambda w, m, o: find_offset_head(w, m, o)[1::-1] + (find_offset_head(w, m, o)[2],),
            "(head, layer",
        ),
        (
            lambda w, m, o: (
                tuple(v + 1 for v in find_offset_head(w, m, o)[:2])
                + (find_offset_head(w, m, o)[2],)
            ),
            "counted from 1",
        ),
        (offset_head(wrap=True, queries="all real"), "wrap around"),
        (offset_head(wrap=True), "wrap around"),
        (offset_head(queries="all real"), "counting those without a key i + offset as 0"),
        (offset_head(queries="inside"), "key i + offset is padding"),
        (offset_head(per_sentence=True), "averaged within each sentence first"),
        (lambda w, m, o: find_offset_head(w, m, o)[:2], "return the winning head's score as well"),
        (lambda w, m, o: find_offset_head(w, m, o)[0] * w.shape[2], "flat index"),
        (lambda w, m, o: (0, 0, 0.5), "is not the head"),
        (lambda w, m, o: find_offset_head(w, m, o)[:2] + (0.5,), "the right head, but its score"),
        (lambda w, m, o: (*find_offset_head(w, m, o)[:2], np.zeros((2, 3))), "one number"),
        (lambda w, m, o: ("layer", 2, 0.5), "two integers"),
        (lambda w, m, o: "layer 2", "three values"),
    ],
)
def test_find_offset_head_mistakes(wrong, fragment):
    rejects(checks.check_find_offset_head, wrong, fragment)


def test_find_offset_head_accepts_numpy_integers(capsys):
    def numpy_types(w, m, o):
        layer, head, score = find_offset_head(w, m, o)
        return np.int64(layer), np.int64(head), np.float32(score)

    checks.check_find_offset_head(numpy_types)
    assert capsys.readouterr().out.startswith("✓")


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
