"""lib.head_types: head-type scores over padded batches, against lib.heads on unpadded
input and against direct loops."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tolerances import assert_within, weight_statistics_tolerance

from lib import attention as A
from lib import head_types as HT
from lib import heads as H


def random_weights(rng, lengths, n, heads=3, lead=()):
    mask = A.padding_mask(np.asarray(lengths), n)[:, 0, 0, :]  # (batch, n)
    scores = rng.normal(scale=2.0, size=lead + (len(lengths), heads, n, n))
    return A.softmax(np.where(mask[:, None, None, :], scores, -np.inf)), mask


def tokens_for(lengths, punct_at=()):
    out = []
    for b, length in enumerate(lengths):
        toks = ["[CLS]"] + ["w"] * (length - 2) + ["[SEP]"]
        for bb, pos in punct_at:
            if bb == b:
                toks[pos] = ","
        out.append(toks)
    return out


def loop_score(w, lengths, key_of):
    """Mean over (sentence, real query with a target) of the weight on key_of(i, length)."""
    heads = w.shape[1]
    total, count = np.zeros(heads), 0
    for b, length in enumerate(lengths):
        for i in range(length):
            keys = key_of(i, length)
            if not keys:
                continue
            total += sum(w[b, :, i, j] for j in keys)
            count += 1
    return total / count


@given(
    lengths=st.lists(st.integers(min_value=2, max_value=7), min_size=1, max_size=4),
    seed=st.integers(0, 1000),
)
def test_scores_match_direct_loops(lengths, seed):
    n = max(lengths) + 1  # at least one padded column
    w, mask = random_weights(np.random.default_rng(seed), lengths, n)
    scores = HT.head_type_scores(w, mask, tokens_for(lengths))
    expect = {
        "previous": lambda i, L: [i - 1] if i >= 1 else [],
        "next": lambda i, L: [i + 1] if i + 1 < L else [],
        "self": lambda i, L: [i],
        "[CLS]": lambda i, L: [0],
        "[SEP]": lambda i, L: [L - 1],
    }
    for name, key_of in expect.items():
        assert_within(scores[name], loop_score(w, lengths, key_of), weight_statistics_tolerance(w))
    assert np.isnan(scores["punctuation"]).all()  # no punctuation anywhere: undefined
    assert (HT.classify_heads(scores) != "punctuation").all()


@given(
    lengths=st.lists(st.integers(min_value=2, max_value=7), min_size=1, max_size=4),
    offset=st.integers(-4, 4),
    seed=st.integers(0, 1000),
)
def test_offset_scores_match_direct_loops(lengths, offset, seed):
    n = max(lengths) + 1  # at least one padded column
    w, mask = random_weights(np.random.default_rng(seed), lengths, n)
    targets, queries = HT.offset_masks(mask, offset)
    expected_queries = [0 <= i + offset < L for L in lengths for i in range(n) if i < L]
    assert queries[mask].tolist() == expected_queries
    assert not queries[~mask].any() and not targets[~mask].any()  # padding is never a query
    if not queries.any():
        return
    score = HT.target_score(w, targets, queries)
    expected = loop_score(w, lengths, lambda i, L: [i + offset] if 0 <= i + offset < L else [])
    assert_within(score, expected, weight_statistics_tolerance(w))


def test_offset_masks_are_the_previous_and_next_masks():
    lengths = [5, 3, 6]
    mask = A.padding_mask(np.asarray(lengths), 7)[:, 0, 0, :]
    by_type = HT.target_masks(tokens_for(lengths), 7)
    for offset, name in ((-1, "previous"), (1, "next"), (0, "self")):
        for got, want in zip(HT.offset_masks(mask, offset), by_type[name], strict=True):
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        HT.offset_masks(mask.astype(int), 2)[0], HT.offset_masks(mask, 2)[0]
    )


def test_offset_masks_bad_input():
    mask = np.ones((2, 4), bool)
    with pytest.raises(ValueError, match=r"\(batch, n\) array of booleans"):
        HT.offset_masks(mask[0], 1)
    with pytest.raises(ValueError, match=r"\(batch, n\) array of booleans"):
        HT.offset_masks(np.full((2, 4), 0.5), 1)
    with pytest.raises(ValueError, match="offset must be an integer, got 1.0"):
        HT.offset_masks(mask, 1.0)
    with pytest.raises(ValueError, match="offset must be an integer, got True"):
        HT.offset_masks(mask, True)


def test_unpadded_scores_equal_lib_heads():
    rng = np.random.default_rng(0)
    w, mask = random_weights(rng, [6, 6], 6)
    scores = HT.head_type_scores(w, mask, tokens_for([6, 6]))
    tol = weight_statistics_tolerance(w)
    assert_within(scores["previous"], H.offset_score(w, -1), tol, "previous")
    assert_within(scores["next"], H.offset_score(w, +1), tol, "next")
    assert_within(scores["self"], H.offset_score(w, 0), tol, "self")
    key_mask = mask[:, None, None, :]
    assert_within(scores["entropy"], H.head_entropy_normalised(w, key_mask), tol, "entropy")


def test_padding_does_not_change_scores():
    rng = np.random.default_rng(1)
    w, mask = random_weights(rng, [5, 3], 5)
    padded = np.zeros(w.shape[:-2] + (8, 8))
    padded[..., :5, :5] = w
    padded[..., 5:, :5] = w[..., :1, :]  # padded queries: any distribution over real keys
    mask8 = np.pad(mask, ((0, 0), (0, 3)))
    toks = tokens_for([5, 3], punct_at=[(0, 2)])
    a = HT.head_type_scores(w, mask, toks)
    b = HT.head_type_scores(padded, mask8, toks)
    for name in a:
        assert_within(a[name], b[name], weight_statistics_tolerance(padded), name)


def test_leading_layer_axis():
    rng = np.random.default_rng(2)
    w, mask = random_weights(rng, [4, 6, 5], 6, lead=(2,))
    scores = HT.head_type_scores(w, mask, tokens_for([4, 6, 5]))
    for layer in range(2):
        one = HT.head_type_scores(w[layer], mask, tokens_for([4, 6, 5]))
        for name in scores:
            assert_within(scores[name][layer], one[name], weight_statistics_tolerance(w), name)


def test_punctuation_score_and_queries():
    lengths = [5, 4]
    w = np.zeros((2, 1, 5, 5))
    w[..., 0] = 1.0  # every query looks at [CLS]
    w[0, 0, :, 2], w[0, 0, :, 0] = 0.5, 0.5  # sentence 0: half on its comma at position 2
    toks = tokens_for(lengths, punct_at=[(0, 2)])
    mask = A.padding_mask(np.asarray(lengths), 5)[:, 0, 0, :]
    targets, queries = HT.target_masks(toks, 5)["punctuation"]
    assert queries.tolist() == [[True] * 5, [False] * 5]  # sentence 1 has no punctuation
    tol = weight_statistics_tolerance(w)
    assert_within(HT.target_score(w, targets, queries), [0.5], tol)
    scores = HT.head_type_scores(w, mask, toks)
    assert_within(scores["[CLS]"], [(5 * 0.5 + 4 * 1.0) / 9], tol)


def test_classify_heads():
    scores = {name: np.array([[0.1, 0.1, 0.1, 0.9]]) for name in HT.HEAD_TYPES}
    scores["previous"] = np.array([[0.8, 0.2, 0.2, 0.1]])
    scores["[SEP]"] = np.array([[0.1, 0.55, 0.2, 0.1]])
    scores["self"] = np.array([[0.1, 0.1, 0.2, 0.1]])
    scores["punctuation"] = np.array([[0.1, 0.1, 0.2, 0.95]])
    scores["entropy"] = np.array([[0.1, 0.9, 0.9, 0.2]])
    labels = HT.classify_heads(scores)
    assert labels.tolist() == [["previous", "[SEP]", "broad", "punctuation"]]
    assert HT.classify_heads(scores, threshold=0.99, broad=0.95).tolist() == [["mixed"] * 4]


def test_layer_diversity():
    rng = np.random.default_rng(3)
    w, mask = random_weights(rng, [5, 4], 5, heads=4, lead=(2,))
    same = w.copy()
    same[1] = w[1, :, :1]  # layer 1: four copies of one head
    div = HT.layer_diversity(same, mask)
    assert div.shape == (2,)
    assert_within(div[1], 0.0, weight_statistics_tolerance(same))
    assert 0 < div[0] < 1
    one_hot = np.zeros((1, 1, 3, 3, 3))
    for h in range(3):
        one_hot[0, 0, h, :, h] = 1.0  # three heads looking at three different keys
    got = HT.layer_diversity(one_hot, np.ones((1, 3), bool))[0]
    assert_within(got, 1.0, weight_statistics_tolerance(one_hot))


def test_coreference_accuracy():
    w = np.full((1, 2, 2, 4, 4), 0.25)  # (layers, batch, heads, n, n)
    w[0, 0, 0, 3] = [0.1, 0.6, 0.2, 0.1]  # sentence 0, head 0: pronoun 3 -> key 1
    w[0, 1, 0, 3] = [0.1, 0.2, 0.6, 0.1]  # sentence 1, head 0: pronoun 3 -> key 2
    acc = HT.coreference_accuracy(w, [3, 3], [1, 1], [2, 2])
    assert acc.tolist() == [[0.5, 0.0]]  # head 1: ties everywhere, never a win
    acc = HT.coreference_accuracy(w, [3, 3], [1, 2], [2, 1])
    assert acc.tolist() == [[1.0, 0.0]]
    wins = HT.coreference_wins(w, [3, 3], [1, 1], [2, 2])  # (layers, sentences, heads)
    assert wins.dtype == bool
    assert wins.tolist() == [[[True, False], [False, False]]]


def test_bad_inputs():
    w = np.full((2, 3, 4, 4), 0.25)
    mask = np.ones((2, 4), bool)
    with pytest.raises(ValueError, match=r"do not fit attention_mask \(2, 5\)"):
        HT.head_type_scores(w, np.ones((2, 5), bool), tokens_for([4, 4]))
    with pytest.raises(ValueError, match=r"attention_mask must be \(batch, n\)"):
        HT.head_type_scores(w, np.ones(4, bool), tokens_for([4, 4]))
    with pytest.raises(ValueError, match="2..n=4 tokens"):
        HT.target_masks([["[CLS]"]], 4)
    with pytest.raises(ValueError, match="2..n=4 tokens"):
        HT.target_masks([["w"] * 5], 4)
    targets, queries = HT.target_masks(tokens_for([4, 4]), 4)["previous"]
    with pytest.raises(ValueError, match=r"queries \(2, 3\) must be \(batch, n_q\)"):
        HT.target_score(w, targets, queries[:, :3])
    with pytest.raises(ValueError, match=r"targets \(2, 4, 3\)"):
        HT.target_score(w, targets[..., :3], queries)
    with pytest.raises(ValueError, match="no query"):
        HT.target_score(w, targets, np.zeros_like(queries))
    with pytest.raises(ValueError, match=r"\(layers, batch, heads, n, n\)"):
        HT.layer_diversity(w, mask)
    with pytest.raises(ValueError, match="three \\(batch,\\) index arrays"):
        HT.coreference_accuracy(w, [1], [2, 2], [3, 3])
