"""lib.head_types: head-type scores over padded batches, against lib.heads on unpadded
input and against direct loops."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lib import attention as A
from lib import head_types as T
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
    scores = T.head_type_scores(w, mask, tokens_for(lengths))
    expect = {
        "previous": lambda i, L: [i - 1] if i >= 1 else [],
        "next": lambda i, L: [i + 1] if i + 1 < L else [],
        "self": lambda i, L: [i],
        "[CLS]": lambda i, L: [0],
        "[SEP]": lambda i, L: [L - 1],
    }
    for name, key_of in expect.items():
        np.testing.assert_allclose(scores[name], loop_score(w, lengths, key_of), atol=1e-12)
    assert np.isnan(scores["punctuation"]).all()  # no punctuation anywhere: undefined
    assert (T.classify_heads(scores) != "punctuation").all()


def test_unpadded_scores_equal_lib_heads():
    rng = np.random.default_rng(0)
    w, mask = random_weights(rng, [6, 6], 6)
    scores = T.head_type_scores(w, mask, tokens_for([6, 6]))
    np.testing.assert_allclose(scores["previous"], H.offset_score(w, -1), atol=1e-12)
    np.testing.assert_allclose(scores["next"], H.offset_score(w, +1), atol=1e-12)
    np.testing.assert_allclose(scores["self"], H.offset_score(w, 0), atol=1e-12)
    key_mask = mask[:, None, None, :]
    np.testing.assert_allclose(
        scores["entropy"], H.head_entropy_normalised(w, key_mask), atol=1e-12
    )


def test_padding_does_not_change_scores():
    rng = np.random.default_rng(1)
    w, mask = random_weights(rng, [5, 3], 5)
    padded = np.zeros(w.shape[:-2] + (8, 8))
    padded[..., :5, :5] = w
    padded[..., 5:, :5] = w[..., :1, :]  # padded queries: any distribution over real keys
    mask8 = np.pad(mask, ((0, 0), (0, 3)))
    toks = tokens_for([5, 3], punct_at=[(0, 2)])
    a = T.head_type_scores(w, mask, toks)
    b = T.head_type_scores(padded, mask8, toks)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], atol=1e-12, err_msg=name)


def test_leading_layer_axis():
    rng = np.random.default_rng(2)
    w, mask = random_weights(rng, [4, 6, 5], 6, lead=(2,))
    scores = T.head_type_scores(w, mask, tokens_for([4, 6, 5]))
    for layer in range(2):
        one = T.head_type_scores(w[layer], mask, tokens_for([4, 6, 5]))
        for name in scores:
            np.testing.assert_allclose(scores[name][layer], one[name], atol=1e-12)


def test_punctuation_score_and_queries():
    lengths = [5, 4]
    w = np.zeros((2, 1, 5, 5))
    w[..., 0] = 1.0  # every query looks at [CLS]
    w[0, 0, :, 2], w[0, 0, :, 0] = 0.5, 0.5  # sentence 0: half on its comma at position 2
    toks = tokens_for(lengths, punct_at=[(0, 2)])
    mask = A.padding_mask(np.asarray(lengths), 5)[:, 0, 0, :]
    targets, queries = T.target_masks(toks, 5)["punctuation"]
    assert queries.tolist() == [[True] * 5, [False] * 5]  # sentence 1 has no punctuation
    np.testing.assert_allclose(T.target_score(w, targets, queries), [0.5])
    scores = T.head_type_scores(w, mask, toks)
    np.testing.assert_allclose(scores["[CLS]"], [(5 * 0.5 + 4 * 1.0) / 9])


def test_classify_heads():
    scores = {name: np.array([[0.1, 0.1, 0.1, 0.9]]) for name in T.HEAD_TYPES}
    scores["previous"] = np.array([[0.8, 0.2, 0.2, 0.1]])
    scores["[SEP]"] = np.array([[0.1, 0.55, 0.2, 0.1]])
    scores["self"] = np.array([[0.1, 0.1, 0.2, 0.1]])
    scores["punctuation"] = np.array([[0.1, 0.1, 0.2, 0.95]])
    scores["entropy"] = np.array([[0.1, 0.9, 0.9, 0.2]])
    labels = T.classify_heads(scores)
    assert labels.tolist() == [["previous", "[SEP]", "broad", "punctuation"]]
    assert T.classify_heads(scores, threshold=0.99, broad=0.95).tolist() == [["mixed"] * 4]


def test_layer_diversity():
    rng = np.random.default_rng(3)
    w, mask = random_weights(rng, [5, 4], 5, heads=4, lead=(2,))
    same = w.copy()
    same[1] = w[1, :, :1]  # layer 1: four copies of one head
    div = T.layer_diversity(same, mask)
    assert div.shape == (2,)
    assert div[1] == pytest.approx(0.0, abs=1e-12)
    assert 0 < div[0] < 1
    one_hot = np.zeros((1, 1, 3, 3, 3))
    for h in range(3):
        one_hot[0, 0, h, :, h] = 1.0  # three heads looking at three different keys
    assert T.layer_diversity(one_hot, np.ones((1, 3), bool))[0] == pytest.approx(1.0)


def test_coreference_accuracy():
    w = np.full((1, 2, 2, 4, 4), 0.25)  # (layers, batch, heads, n, n)
    w[0, 0, 0, 3] = [0.1, 0.6, 0.2, 0.1]  # sentence 0, head 0: pronoun 3 -> key 1
    w[0, 1, 0, 3] = [0.1, 0.2, 0.6, 0.1]  # sentence 1, head 0: pronoun 3 -> key 2
    acc = T.coreference_accuracy(w, [3, 3], [1, 1], [2, 2])
    assert acc.tolist() == [[0.5, 0.0]]  # head 1: ties everywhere, never a win
    acc = T.coreference_accuracy(w, [3, 3], [1, 2], [2, 1])
    assert acc.tolist() == [[1.0, 0.0]]


def test_bad_inputs():
    w = np.full((2, 3, 4, 4), 0.25)
    mask = np.ones((2, 4), bool)
    with pytest.raises(ValueError, match=r"do not fit attention_mask \(2, 5\)"):
        T.head_type_scores(w, np.ones((2, 5), bool), tokens_for([4, 4]))
    with pytest.raises(ValueError, match=r"attention_mask must be \(batch, n\)"):
        T.normalised_entropy(w, np.ones(4, bool))
    with pytest.raises(ValueError, match="2..n=4 tokens"):
        T.target_masks([["[CLS]"]], 4)
    with pytest.raises(ValueError, match="2..n=4 tokens"):
        T.target_masks([["w"] * 5], 4)
    targets, queries = T.target_masks(tokens_for([4, 4]), 4)["previous"]
    with pytest.raises(ValueError, match=r"queries \(2, 3\) must be \(batch, n_q\)"):
        T.target_score(w, targets, queries[:, :3])
    with pytest.raises(ValueError, match=r"targets \(2, 4, 3\)"):
        T.target_score(w, targets[..., :3], queries)
    with pytest.raises(ValueError, match="no query"):
        T.target_score(w, targets, np.zeros_like(queries))
    with pytest.raises(ValueError, match=r"\(layers, batch, heads, n, n\)"):
        T.layer_diversity(w, mask)
    with pytest.raises(ValueError, match="three \\(batch,\\) index arrays"):
        T.coreference_accuracy(w, [1], [2, 2], [3, 3])
