"""Tests for lib.heads (entropy, similarity) and smoke tests for lib.plots."""

import math

import matplotlib
import numpy as np
import pytest
from tolerances import assert_within, weight_statistics_tolerance

from lib import attention as A
from lib import heads as H

matplotlib.use("Agg")

from lib import plots  # noqa: E402  (after choosing the non-interactive backend)


def test_row_entropy_uniform_one_hot_and_empty():
    w = np.array([[[0.25] * 4, [1.0, 0, 0, 0], [0.0] * 4]])  # (1 head, 3 queries, 4 keys)
    tol = weight_statistics_tolerance(w) * math.log(4)  # entropies up to log 4, not 1
    assert_within(H.row_entropy(w[None]), [[[math.log(4), 0.0, 0.0]]], tol)


def test_head_entropy_skips_queries_with_nothing_to_attend_to():
    uniform = np.full((2, 2), 0.5)
    w = np.stack([uniform, np.array([[1.0, 0.0], [0.0, 0.0]])])[None]  # (1, 2, 2, 2)
    tol = weight_statistics_tolerance(w) * math.log(2)
    assert_within(H.head_entropy(w), [math.log(2), 0.0], tol)


def test_head_entropy_matches_a_direct_loop():
    rng = np.random.default_rng(0)
    p = A.init_mha_params(8, 4, rng)
    x = rng.normal(size=(3, 5, 8))
    _, w = A.multi_head_attention(x, x, p, A.causal_mask(5))
    expected = [
        np.mean([-sum(a * math.log(a) for a in row if a > 0) for b in range(3) for row in w[b, h]])
        for h in range(4)
    ]
    tol = weight_statistics_tolerance(w) * math.log(5)  # entropies up to log n_k
    assert_within(H.head_entropy(w), expected, tol)


def test_normalised_entropy_is_one_for_uniform_over_allowed_keys():
    n = 5
    mask = A.causal_mask(n)
    w = mask / mask.sum(-1, keepdims=True)  # uniform over the allowed keys
    w = np.broadcast_to(w, (2, 3, n, n))
    assert_within(H.head_entropy_normalised(w, mask), 1.0, weight_statistics_tolerance(w))
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0  # previous-token head: query 0 can only look at itself
    np.testing.assert_array_equal(H.head_entropy_normalised(prev[None, None], mask), 0.0)


def test_head_similarity():
    a = np.eye(3)
    b = np.roll(np.eye(3), 1, axis=1)
    sim = H.head_similarity(np.stack([a, a, b])[None])
    assert_within(sim, [[1, 1, 0], [1, 1, 0], [0, 0, 1]], weight_statistics_tolerance(a) * 3)


def test_weights_are_accepted_as_far_from_summing_to_1_as_rounding_allows():
    """float32 softmax rows over 64 keys may sum to 1 within what lib.rounding allows
    (2 n_k + 10 + 9 n_k roundings, about 8.5e-5 here), not within a guessed 1e-6; 1% off is
    still refused."""
    w = np.full((1, 1, 2, 64), 1 / 64, np.float32)
    w[0, 0, 0, 0] += np.float32(5e-5)  # a row 5e-5 over: rounding could do that
    assert H.head_entropy(w).shape == (1,)
    w[0, 0, 1, 0] += np.float32(0.01)
    with pytest.raises(ValueError, match="sum to 1"):
        H.head_entropy(w)


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
    with pytest.raises(ValueError, match=r"\(4, 4\) do not match 3 labels"):
        plots.plot_attention(w[0], list("abc"))
    with pytest.raises(ValueError, match=r"got shape \(4, 4\)"):
        plots.plot_heads(w[0], list("abcd"))
    matplotlib.pyplot.close("all")


def test_offset_score():
    n = 4
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0
    w = np.stack([prev, np.eye(n)])[None]  # head 0: previous token, head 1: itself
    np.testing.assert_array_equal(H.offset_score(w, -1), [1.0, 0.0])  # sums of 0s and 1s
    np.testing.assert_array_equal(H.offset_score(w, 0), [0.25, 1.0])
    with pytest.raises(ValueError, match="offset=4"):
        H.offset_score(w, 4)
    for bad in (0.5, True):  # not an index NumPy would refuse in its own words, or accept
        with pytest.raises(ValueError, match=f"offset must be an integer, got {bad}"):
            H.offset_score(w, bad)


# --------------------------------------------------------------------------- head roles (06)


def test_head_roles_names_the_offset_each_head_looks_at():
    n = 6
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0
    three = np.eye(n, k=-3)
    three[:3] = np.tril(np.ones((3, n)))[:3] / np.arange(1, 4)[:, None]  # no key 3 back yet
    mask = A.causal_mask(n)
    uniform = mask / mask.sum(-1, keepdims=True)
    split = 0.5 * np.eye(n, k=-1) + 0.5 * np.eye(n, k=-2)  # 1 and 2 back, 0.5 each
    split[0, 0] = 1.0
    split[1, 1] = 0.5  # query 1 has no key 2 back: half on itself
    w = np.stack([prev, three, uniform, split])[None]  # (1, 4, n, n)
    np.testing.assert_array_equal(H.head_roles(w, (1, 3)), [1, 3, 0, 1])  # 0.5 is enough
    np.testing.assert_array_equal(H.head_roles(w, (1, 2, 3)), [1, 3, 0, 1])  # a tie: first
    np.testing.assert_array_equal(H.head_roles(w, (2, 1, 3)), [1, 3, 0, 2])
    np.testing.assert_array_equal(H.head_roles(w, (1, 2, 3), threshold=0.6), [1, 3, 0, 0])
    np.testing.assert_array_equal(H.head_roles(w, (4,)), [0, 0, 0, 0])


@pytest.mark.parametrize(
    "offsets, match",
    [
        ((1, 0), "offset must be an integer >= 1, got 0"),
        ((1.5,), r"offset must be an integer >= 1, got 1.5 \(float\)"),
    ],
)
def test_head_roles_bad_offsets(offsets, match):
    w = np.broadcast_to(np.eye(3), (1, 2, 3, 3))
    with pytest.raises(ValueError, match=match):
        H.head_roles(w, offsets)


# --------------------------------------------------------------------------- the sweep (05)


def _sweep_parts(trained):
    """make_model that keeps every model it makes, a batch maker, and held-out data."""
    from lib import tiny as T

    def make_model(h, rng):
        trained.append(T.init_tiny_model(4, 6, 8, h, 4, rng, n_slots=2))
        return trained[-1]

    def make_batch(rng):
        return T.copy_offsets_task(16, 6, 4, (1, 2), rng)

    return make_model, make_batch, T.copy_offsets_task(32, 6, 4, (1, 2), np.random.default_rng(9))


def test_head_count_sweep_measures_each_seeded_run_on_the_held_out_data():
    from lib import tiny as T

    models = []
    make_model, make_batch, held_out = _sweep_parts(models)
    results = H.head_count_sweep(make_model, make_batch, held_out, [1, 2], [0, 1], 100, 0.8, 10)
    assert list(results) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    mask = A.causal_mask(6)
    for model, (key, run) in zip(models, results.items(), strict=True):
        assert model.n_heads == key[0]
        assert run["accuracy"] == T.accuracy(model, *held_out)  # held out, after training
        w = model.forward(held_out[0])[1]
        tol = weight_statistics_tolerance(w)
        assert_within(run["entropy"], H.head_entropy_normalised(w, mask), tol, "entropy")
        assert_within(run["mean_weights"], w.mean(axis=0), tol, "mean weights")
        assert (run["steps"] is not None) == (run["accuracy"] >= 0.8)  # it stopped there
        assert run["steps"] is None or run["steps"] % 10 == 0
    assert {r["steps"] for r in results.values()} - {None}, "no run reached the target"
    # A seed starts every head count from the same numbers (the parameters do not depend on
    # h), and the same seed gives the same run again.
    again = H.head_count_sweep(make_model, make_batch, held_out, [2, 1], [1, 0], 100, 0.8, 10)
    for key, run in results.items():
        assert again[key]["accuracy"] == run["accuracy"] and again[key]["steps"] == run["steps"]
    fresh = [T.init_tiny_model(4, 6, 8, h, 4, np.random.default_rng(0), 2) for h in (1, 2)]
    for name, value in fresh[0].params.items():
        np.testing.assert_array_equal(value, fresh[1].params[name])
    assert results[1, 0]["accuracy"] != results[1, 1]["accuracy"]  # seeds differ


def test_head_count_sweep_needs_a_budget():
    make_model, make_batch, held_out = _sweep_parts([])
    with pytest.raises(ValueError, match="budget must be an integer >= 1, got 0"):
        H.head_count_sweep(make_model, make_batch, held_out, [1], [0], 0, 0.9, 5)
