"""Tests for lib.heads (entropy, similarity) and smoke tests for lib.plots."""

import math

import matplotlib
import numpy as np
import pytest

from lib import attention as A
from lib import heads as H

matplotlib.use("Agg")

from lib import plots  # noqa: E402  (after choosing the non-interactive backend)


def test_row_entropy_uniform_one_hot_and_empty():
    w = np.array([[[0.25] * 4, [1.0, 0, 0, 0], [0.0] * 4]])  # (1 head, 3 queries, 4 keys)
    np.testing.assert_allclose(H.row_entropy(w[None]), [[[math.log(4), 0.0, 0.0]]])


def test_head_entropy_skips_queries_with_nothing_to_attend_to():
    uniform = np.full((2, 2), 0.5)
    w = np.stack([uniform, np.array([[1.0, 0.0], [0.0, 0.0]])])[None]  # (1, 2, 2, 2)
    np.testing.assert_allclose(H.head_entropy(w), [math.log(2), 0.0])


def test_head_entropy_matches_a_direct_loop():
    rng = np.random.default_rng(0)
    p = A.init_mha_params(8, 4, rng)
    x = rng.normal(size=(3, 5, 8))
    _, w = A.multi_head_attention(x, x, p, A.causal_mask(5))
    expected = [
        np.mean([-sum(a * math.log(a) for a in row if a > 0) for b in range(3) for row in w[b, h]])
        for h in range(4)
    ]
    np.testing.assert_allclose(H.head_entropy(w), expected)


def test_normalised_entropy_is_one_for_uniform_over_allowed_keys():
    n = 5
    mask = A.causal_mask(n)
    w = mask / mask.sum(-1, keepdims=True)  # uniform over the allowed keys
    w = np.broadcast_to(w, (2, 3, n, n))
    np.testing.assert_allclose(H.head_entropy_normalised(w, mask), 1.0)
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0  # previous-token head: query 0 can only look at itself
    np.testing.assert_allclose(H.head_entropy_normalised(prev[None, None], mask), 0.0)


def test_head_similarity():
    a = np.eye(3)
    b = np.roll(np.eye(3), 1, axis=1)
    sim = H.head_similarity(np.stack([a, a, b])[None])
    np.testing.assert_allclose(sim, [[1, 1, 0], [1, 1, 0], [0, 0, 1]])


@pytest.mark.parametrize(
    "weights, match",
    [
        (np.ones((2, 2)), r"\(\.\.\., heads, n_q, n_k\), got shape \(2, 2\)"),
        (np.full((1, 2, 2), 0.6), "sum to 1.*1.2"),
        (np.array([[[1.5, -0.5]]]), ">= 0"),
        (np.array([[[np.nan, 1.0]]]), "NaN"),
    ],
)
def test_bad_weights_are_rejected(weights, match):
    with pytest.raises(ValueError, match=match):
        H.head_entropy(weights)


def test_similarity_of_an_all_zero_head_is_an_error():
    w = np.stack([np.eye(2), np.zeros((2, 2))])
    with pytest.raises(ValueError, match="all-zero"):
        H.head_similarity(w)


def test_plots_draw_and_check_labels():
    w = A.softmax(np.random.default_rng(1).normal(size=(3, 4, 4)))
    fig = plots.plot_heads(w, list("abcd"), ncols=2, title="t")
    assert len([ax for ax in fig.axes if ax.get_visible()]) >= 3
    ax = plots.plot_attention(w[0], list("abcd"), annotate=True)
    assert ax.get_xlabel() == "key (attended to)"
    plots.plot_head_entropy(H.head_entropy(w[None]), max_entropy=math.log(4))
    plots.plot_head_similarity(H.head_similarity(w[None]))
    with pytest.raises(ValueError, match=r"\(4, 4\) do not match 3 query labels"):
        plots.plot_attention(w[0], list("abc"))
    with pytest.raises(ValueError, match=r"got shape \(4, 4\)"):
        plots.plot_heads(w[0], list("abcd"))
    matplotlib.pyplot.close("all")


def test_offset_score():
    n = 4
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0
    w = np.stack([prev, np.eye(n)])[None]  # head 0: previous token, head 1: itself
    np.testing.assert_allclose(H.offset_score(w, -1), [1.0, 0.0])
    np.testing.assert_allclose(H.offset_score(w, 0), [0.25, 1.0])
    with pytest.raises(ValueError, match="offset=4"):
        H.offset_score(w, 4)
