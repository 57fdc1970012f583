"""Head importance, pruning and rank correlation (lib.pruning)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import spearmanr
from tolerances import assert_within, gradient_tolerance, tiny_loss_error

from lib import pruning as PR
from lib import rounding as R
from lib import tiny as T


@pytest.fixture(scope="module")
def trained():
    """4 heads trained on the two-lookup task (it needs at least two of them)."""
    rng = np.random.default_rng(0)
    task = dict(seq_len=8, vocab_size=5, offsets=(1, 3))
    model = T.init_tiny_model(5, 8, 16, 4, 5, rng, n_slots=2)
    select = T.copy_offsets_task(128, rng=np.random.default_rng(1), **task)
    test = T.copy_offsets_task(256, rng=np.random.default_rng(2), **task)
    T.train(model, lambda r: T.copy_offsets_task(32, rng=r, **task), select, 300, rng, stop_at=1.0)
    return model, select, test


def test_ablation_drops_match_switching_each_head_off(trained):
    model, (ids, targets), _ = trained
    drops = PR.ablation_drops(model, ids, targets)
    base = T.accuracy(model, ids, targets)
    assert base == 1.0
    for h in range(4):
        mask = np.ones(4)
        mask[h] = 0
        assert drops[h] == base - T.accuracy(model, ids, targets, mask)  # the same numbers
    assert drops.max() > 0.1  # some head matters on a task that needs two


def test_a_head_that_is_already_off_has_no_drop(trained):
    model, select, _ = trained
    drops = PR.ablation_drops(model, *select, head_mask=np.array([1.0, 0.0, 1.0, 1.0]))
    assert drops[1] == 0.0


def test_gradient_importance_is_the_mean_abs_per_sequence_derivative(trained):
    """Checked against finite differences of each sequence's loss, one head at a time."""
    model, (ids, targets), _ = trained
    ids, targets = ids[:6], targets[:6]
    got = PR.gradient_importance(model, ids, targets)
    per_sequence, tolerances = np.zeros((6, 4)), np.zeros((6, 4))
    for b in range(6):
        mask = np.ones(4)

        def loss(b=b, mask=mask):
            return T.cross_entropy(model.forward(ids[b : b + 1], mask)[0], targets[b : b + 1])[0]

        # each sequence's own mean loss: the batch loss gradient times the batch size
        # (every sequence here has the same number of scored positions)
        error = tiny_loss_error(model, ids[b : b + 1], targets[b : b + 1], mask)
        per_sequence[b], tolerances[b] = gradient_tolerance(loss, mask, error)
    # | |a| - |b| | <= |a - b|: the mean of absolute values moves by at most the mean tolerance
    assert_within(got, np.abs(per_sequence).mean(axis=0), tolerances.mean(axis=0))


def test_a_head_whose_output_is_cut_has_zero_importance(trained):
    model, select, _ = trained
    cut = T.TinyModel({k: v.copy() for k, v in model.params.items()}, 4, 2)
    d_k = cut.d_model // 4
    cut.params["W_o"][2 * d_k : 3 * d_k] = 0.0  # head 2 writes nothing
    assert PR.gradient_importance(cut, *select)[2] == 0.0
    assert PR.ablation_drops(cut, *select)[2] == 0.0


@pytest.mark.parametrize("score", ["ablation", "gradient"])
def test_prune_iteratively_stops_before_losing_more_than_a_point(trained, score):
    model, select, _ = trained
    steps = PR.prune_iteratively(model, select, score=score, max_drop=0.01)
    start = steps[0].accuracy
    assert steps[0].removed is None and steps[0].head_mask.tolist() == [1.0] * 4
    for before, after in zip(steps, steps[1:], strict=False):
        assert after.head_mask.sum() == before.head_mask.sum() - 1
        assert before.head_mask[after.removed] == 1 and after.head_mask[after.removed] == 0
        assert start - after.accuracy <= 0.01
        assert after.accuracy == T.accuracy(model, *select, after.head_mask)
    last = steps[-1].head_mask
    if last.sum() > 1:  # stopped because every next removal costs more than a point...
        drops = PR.ablation_drops(model, *select, head_mask=last)
        accs = T.accuracy(model, *select, last) - drops
        alive = np.flatnonzero(last)
        assert (start - accs[alive]).max() > 0.01  # ...at least the one that was tried
    assert last.sum() >= 2  # the task needs two lookups


def test_prune_iteratively_bad_arguments(trained):
    model, select, _ = trained
    with pytest.raises(
        ValueError, match="score must be one of 'ablation', 'gradient', got 'random'"
    ):
        PR.prune_iteratively(model, select, score="random")
    with pytest.raises(ValueError, match=r"max_drop must be in \[0, 1\)"):
        PR.prune_iteratively(model, select, max_drop=1.0)
    with pytest.raises(ValueError, match=r"head_mask must have shape \(heads,\) = \(4,\)"):
        PR.ablation_drops(model, *select, head_mask=np.ones(3))


# --------------------------------------------------------------------------- ranks


@given(st.lists(st.integers(-3, 3), min_size=2, max_size=12), st.integers(0, 2**16))
def test_spearman_matches_scipy(values, seed):
    a = np.array(values, dtype=float)
    b = np.random.default_rng(seed).permutation(a) + np.random.default_rng(seed).normal(size=len(a))
    if np.ptp(a) == 0:
        with pytest.raises(ValueError, match="constant"):
            PR.spearman(a, b)
        return
    # ranks are exact (halves at ties); their correlation: centring, three sums of n
    # products, a square root and a division, each rounding worth at most u of the result's
    # scale 1 (Cauchy-Schwarz: sum |x y| <= sqrt(sum x^2 sum y^2), the denominator)
    tol = R.tolerance(np.float64, 3 * len(a) + R.FUNCTION_DEPTH + 4)
    assert abs(PR.spearman(a, b) - spearmanr(a, b).statistic) <= tol


def test_ranks_average_ties():
    np.testing.assert_array_equal(PR.ranks([0.3, 0.0, 0.0, 0.5]), [3.0, 1.5, 1.5, 4.0])


def test_ranks_and_spearman_refuse_nan():
    # np.unique groups NaNs as one value: without the check they would share the top rank
    with pytest.raises(ValueError, match=r"NaN at index \[1, 3\]"):
        PR.ranks([1.0, np.nan, 0.5, np.nan])
    with pytest.raises(ValueError, match=r"NaN at index \[2\]"):
        PR.spearman([1.0, 2.0, np.nan, 4.0], [1.0, 2.0, 3.0, 4.0])


def test_spearman_bad_input():
    with pytest.raises(ValueError, match=r"same length >= 2, got \(3,\) and \(2,\)"):
        PR.spearman([1, 2, 3], [1, 2])
