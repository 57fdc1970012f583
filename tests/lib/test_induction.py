"""lib.induction: notebook 11's task and the scores that find an induction circuit.

The scores are compared with brute-force loops written here, and with lib.heads' offset score;
the chance baselines with the scores of an evenly spread causal head.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib import attention as A
from lib import heads as H
from lib import induction as IND
from lib import transformer as TR


def causal_patterns(seed, batch=3, heads=2, n=9):
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=2.0, size=(batch, heads, n, n))
    return A.softmax(np.where(A.causal_mask(n), scores, -np.inf))


def test_the_segment_appears_twice_at_places_that_vary():
    ids, targets, repeated = IND.repeated_segment_task(200, 25, 24, 8, np.random.default_rng(0))
    starts = []
    for row in range(200):
        places = np.flatnonzero(repeated[row])
        assert len(places) == 7 and np.all(np.diff(places) == 1)  # one run of segment - 1
        second = places[0]
        copy = ids[row, second : second + 8]
        earlier = [s for s in range(second - 7) if np.array_equal(ids[row, s : s + 8], copy)]
        assert earlier, row  # the copy appeared before, without overlapping
        starts.append((earlier[-1], second))
    gaps = {second - first for first, second in starts}
    assert len({second for _, second in starts}) > 5 and len(gaps) > 5
    np.testing.assert_array_equal(targets[:, :-1], ids[:, 1:])
    assert (targets[:, -1] == -1).all()


def test_a_segment_too_long_for_two_copies_is_refused():
    with pytest.raises(ValueError, match=r"segment must be in 2..seq_len // 2 = 5, got 6"):
        IND.repeated_segment_task(1, 10, 5, 6, np.random.default_rng(0))


def brute_prefix_matching(pattern, ids):
    values = []
    batch, n = ids.shape
    for b in range(batch):
        for i in range(n):
            earlier = [j for j in range(i) if ids[b, j] == ids[b, i]]
            if earlier:
                values.append(pattern[b, :, i, earlier[-1] + 1])
    return np.mean(values, axis=0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**16), st.integers(2, 6))
def test_prefix_matching_score_is_the_brute_force_mean(seed, vocab):
    pattern = causal_patterns(seed)
    ids = np.random.default_rng(seed + 1).integers(0, vocab, (3, 9))
    if not (IND.previous_occurrence(ids) >= 0).any():
        return
    np.testing.assert_allclose(
        IND.prefix_matching_score(pattern, ids), brute_prefix_matching(pattern, ids), rtol=1e-12
    )


def test_the_baselines_are_the_scores_of_an_even_spread():
    n = 9
    even = A.softmax(np.where(A.causal_mask(n), 0.0, -np.inf))[None, None]  # (1, 1, n, n)
    ids = np.random.default_rng(4).integers(0, 3, (1, n))
    assert H.offset_score(even, -1)[0] == pytest.approx(IND.uniform_previous_token(n))
    even_batch = np.broadcast_to(even, (1, 1, n, n))
    assert IND.prefix_matching_score(even_batch, ids)[0] == pytest.approx(
        IND.uniform_prefix_matching(ids)
    )


def test_a_perfect_induction_pattern_scores_1_and_predicts_the_copy():
    # a vocabulary so large that no token repeats by chance: only the copy matches
    ids, targets, repeated = IND.repeated_segment_task(5, 20, 10**6, 6, np.random.default_rng(2))
    found = IND.previous_occurrence(ids)
    pattern = np.zeros((5, 1, 20, 20))
    for b in range(5):
        for i in range(20):
            pattern[b, 0, i, found[b, i] + 1 if found[b, i] >= 0 else i] = 1.0
    assert IND.prefix_matching_score(pattern, ids)[0] == 1.0
    predicted = IND.predict_from_pattern(ids, pattern[:, 0])
    np.testing.assert_array_equal(predicted[repeated], targets[repeated])


def test_a_head_whose_ov_circuit_is_the_identity_copies_every_token():
    model = TR.init_transformer(6, 1, 2, np.random.default_rng(0), d_model=8)
    p = model.params
    p["tok_emb"] = np.eye(6, 8)  # token t is the unit vector e_t
    p["W_v0"], p["W_o0"] = np.eye(8), np.eye(8)  # head 0: e_t -> its first 4 coordinates
    p["W_out"] = np.eye(8, 6)
    assert IND.copying_score(model, 0, 0) == pytest.approx(4 / 6)  # tokens 0..3 pass through
    p["W_v0"][:, :4] = np.eye(8)[:, :4] * -1.0  # a head that writes minus its token
    assert IND.copying_score(model, 0, 0) < 0.5


def test_ablation_losses_switch_off_one_head_at_a_time():
    model = TR.init_transformer(6, 2, 2, np.random.default_rng(1), d_model=8, rope=True)
    ids, targets, repeated = IND.repeated_segment_task(4, 10, 6, 3, np.random.default_rng(3))
    losses = IND.ablation_losses(model, ids, targets, repeated)
    assert losses.shape == (2, 2)
    from lib.tiny import cross_entropy

    mask = np.ones((2, 2))
    mask[1, 0] = 0.0
    scored = np.where(repeated, targets, -1)
    expected = cross_entropy(model.forward(ids, mask)[0], scored)[0]
    assert losses[1, 0] == pytest.approx(expected, rel=1e-12)
