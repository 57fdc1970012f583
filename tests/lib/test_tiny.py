"""The tiny model, its tasks, cross-entropy and Adam (lib.tiny, lib.tasks); their bad inputs
are in test_bad_inputs.py."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import log_softmax
from tolerances import (
    assert_gradient,
    assert_within,
    cross_entropy_error,
    tiny_logits_errors,
    tiny_loss_error,
)

from lib import attention as A
from lib import backprop as BP
from lib import positions as POS
from lib import rounding as R
from lib import tiny as T


def small_model(seed=0, n_heads=2, n_slots=2, d=8):
    rng = np.random.default_rng(seed)
    model = T.init_tiny_model(5, 7, d, n_heads, 4, rng, n_slots=n_slots)
    for name in ("b_q", "b_v", "b_o", "b_out"):  # non-zero biases, so their gradients show
        model.params[name] += rng.normal(0.0, 0.3, model.params[name].shape)
    return model


# --------------------------------------------------------------------------- tasks


def test_repeating_pattern_targets_are_the_next_token():
    ids, targets = T.repeating_pattern_task(20, 12, 5, 3, np.random.default_rng(0))
    assert ids.shape == targets.shape == (20, 12)
    np.testing.assert_array_equal(ids[:, 3:], ids[:, :-3])  # period 3
    np.testing.assert_array_equal(targets[:, 2:-1], ids[:, 3:])  # the next token...
    assert (targets[:, :2] == T.IGNORE).all()  # ...once the pattern has been seen
    assert (targets[:, 2:] >= 0).all()
    np.testing.assert_array_equal(targets[:, 2:], ids[:, :-2])  # = the token period-1 back


def test_copy_offsets_targets():
    ids, targets = T.copy_offsets_task(10, 9, 6, (1, 3), np.random.default_rng(1))
    assert targets.shape == (10, 9, 2)
    assert (targets[:, :3] == T.IGNORE).all()
    np.testing.assert_array_equal(targets[:, 3:, 0], ids[:, 2:-1])
    np.testing.assert_array_equal(targets[:, 3:, 1], ids[:, :-3])


# --------------------------------------------------------------------------- loss


@given(seed=st.integers(0, 2**16), classes=st.integers(2, 6))
def test_cross_entropy_matches_scipy_log_softmax(seed, classes):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 4, classes)) * 5
    targets = rng.integers(-1, classes, size=(2, 4))
    targets[0, 0] = 0  # at least one scored answer
    loss, _ = T.cross_entropy(logits, targets)
    scored = targets != -1
    picked = np.take_along_axis(log_softmax(logits, axis=-1), np.maximum(targets, 0)[..., None], -1)
    tol = 2 * cross_entropy_error(logits, 0.0, targets)
    assert abs(loss - -picked[..., 0][scored].mean()) <= tol


def test_cross_entropy_gradient_by_finite_differences():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 5))
    targets = np.array([[1, -1, 4], [0, 2, -1]])
    _, grad = T.cross_entropy(logits, targets)
    error = cross_entropy_error(logits, 0.0, targets)
    assert_gradient(grad, lambda: T.cross_entropy(logits, targets)[0], logits, error)
    assert (grad[0, 1] == 0).all() and (grad[1, 2] == 0).all()


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("n_heads, n_slots", [(1, 1), (4, 3)])
def test_model_gradients_match_finite_differences(n_heads, n_slots):
    """Every parameter, float64, against central differences (b_k: 0, see below), with
    learned positions (the default; the other schemes are tested below)."""
    model = small_model(n_heads=n_heads, n_slots=n_slots)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 5, size=(3, 6))
    targets = rng.integers(0, 4, size=(3, 6, n_slots))
    targets[:, 0] = -1
    ids[0, :] = 2  # a repeated token: its embedding's gradient is a sum over positions
    head_mask = np.linspace(1.0, 0.5, n_heads)

    def loss():
        return model.loss_and_grads(ids, targets, head_mask)[0]

    _, grads = model.loss_and_grads(ids, targets, head_mask)
    error = tiny_loss_error(model, ids, targets, head_mask)
    for name, array in model.params.items():
        _, tol = assert_gradient(grads[name], loss, array, error, name)
        if name == "b_k":  # shifts every score of a row equally: no effect on the loss
            assert_within(grads[name], 0.0, tol, "b_k is 0")
    assert_gradient(grads["head_mask"], loss, head_mask, error, "head_mask")
    assert set(grads) == set(model.params) | {"head_mask"}


def test_unused_positions_and_tokens_get_zero_gradient():
    model = small_model()
    ids = np.array([[0, 1, 0, 1]])  # tokens 2..4 unused; positions 4..6 unused
    targets = np.zeros((1, 4, 2), dtype=int)
    _, grads = model.loss_and_grads(ids, targets)
    assert (grads["tok_emb"][2:] == 0).all() and (grads["tok_emb"][:2] != 0).any()
    assert (grads["pos_emb"][4:] == 0).all()


def test_accuracy_needs_every_slot_right():
    model = small_model(n_slots=2)
    ids = np.random.default_rng(5).integers(0, 5, size=(4, 6))
    predicted = model.forward(ids)[0].argmax(axis=-1)  # (batch, n, slots)
    targets = predicted.copy()
    assert T.accuracy(model, ids, targets) == 1.0
    targets[:, :, 1] = (targets[:, :, 1] + 1) % 4  # second slot always wrong
    assert T.accuracy(model, ids, targets) == 0.0
    targets[:, :3] = -1  # unscored positions do not count
    targets[:, 3:] = predicted[:, 3:]
    assert T.accuracy(model, ids, targets) == 1.0


# --------------------------------------------------------------------------- Adam


def test_adam_first_step_moves_every_weight_by_lr_against_the_gradient_sign():
    """At t = 1 the bias-corrected m / sqrt(v) is g / |g|: a known property of Adam."""
    params = {"w": np.array([1.0, -2.0, 3.0])}
    grads = {"w": np.array([0.5, -1e-3, 40.0])}
    T.Adam(lr=0.1, eps=0.0).step(params, grads)
    # m, v, their corrections, sqrt, the ratio, lr and the step: R.FUNCTION_DEPTH + 8
    # roundings on |w| + lr; the decimal literals below are rounded once more
    tol = R.tolerance(np.float64, R.FUNCTION_DEPTH + 9, np.array([1.0, 2.0, 3.0]) + 0.1)
    assert_within(params["w"], [0.9, -1.9, 2.9], tol)


def test_adam_matches_algorithm_1_of_the_paper_over_several_steps():
    rng = np.random.default_rng(6)
    w = rng.normal(size=5)
    params = {"w": w.copy()}
    opt = T.Adam(lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6)
    m = v = np.zeros(5)
    scale = np.zeros(5)  # what each step's roundings act on: |w| and the step, added up
    for t in range(1, 6):
        g = rng.normal(size=5)
        opt.step(params, {"w": g})
        m = 0.8 * m + 0.2 * g
        v = 0.99 * v + 0.01 * g * g
        step = 0.01 * (m / (1 - 0.8**t)) / (np.sqrt(v / (1 - 0.99**t)) + 1e-6)
        w = w - step
        scale += np.abs(w) + np.abs(step)
    # per step, on those magnitudes: m and v (3 and 4 roundings, carried along: each step's
    # |step| bounds what they pass on), the corrections' powers, sqrt, the ratio, lr and
    # the subtraction: 3 R.FUNCTION_DEPTH + 12
    assert_within(params["w"], w, R.tolerance(np.float64, 3 * R.FUNCTION_DEPTH + 12, scale))


# --------------------------------------------------------------------------- training


def test_training_solves_the_repeating_pattern_task():
    rng = np.random.default_rng(0)
    model = T.init_tiny_model(5, 12, 16, 2, 5, rng)

    def batch(r):
        return T.repeating_pattern_task(32, 12, 5, 3, r)

    held_out = T.repeating_pattern_task(128, 12, 5, 3, np.random.default_rng(99))
    before = T.accuracy(model, *held_out)
    log = T.train(model, batch, held_out, 200, rng, eval_every=20, stop_at=1.0)
    assert before < 0.5
    assert log.accuracy[-1] == 1.0
    assert log.steps_to(1.0) == log.steps[-1] <= 200


# --------------------------------------------------------------------------- position schemes


@pytest.mark.parametrize("scheme", [s for s in POS.SCHEMES if s != "learned"])
def test_model_gradients_with_every_position_scheme(scheme):
    """Float64 gradients of every parameter, for each scheme (b_k: 0 unless RoPE turns it)."""
    rng = np.random.default_rng(11)
    model = T.init_tiny_model(5, 7, 8, 2, 4, rng, n_slots=2, positions=scheme)
    for name in ("b_q", "b_k", "b_v", "b_o", "b_out"):
        model.params[name] += rng.normal(0.0, 0.3, model.params[name].shape)
    ids = rng.integers(0, 5, size=(3, 6))
    targets = rng.integers(0, 4, size=(3, 6, 2))
    targets[:, 0] = -1

    def loss():
        return model.loss_and_grads(ids, targets)[0]

    _, grads = model.loss_and_grads(ids, targets)
    assert set(grads) == set(model.params) | {"head_mask"}
    assert ("pos_emb" in model.params) == (scheme == "learned")
    error = tiny_loss_error(model, ids, targets)
    for name, array in model.params.items():
        _, tol = assert_gradient(grads[name], loss, array, error, name)
        if name == "b_k" and scheme != "rope":
            assert_within(grads[name], 0.0, tol, "b_k is 0")


def test_the_default_scheme_is_learned_and_every_scheme_starts_from_the_same_weights():
    models = {
        s: T.init_tiny_model(6, 9, 8, 2, 4, np.random.default_rng(3), positions=s)
        for s in POS.SCHEMES
    }
    default = T.init_tiny_model(6, 9, 8, 2, 4, np.random.default_rng(3))
    assert default.positions == "learned" and default.max_len == 9
    for name, value in default.params.items():
        np.testing.assert_array_equal(models["learned"].params[name], value)
        for scheme, model in models.items():
            if name != "pos_emb":
                np.testing.assert_array_equal(model.params[name], value, err_msg=scheme)


@pytest.mark.parametrize("scheme", ["none", "sinusoidal", "rope", "alibi"])
def test_schemes_without_a_table_take_any_length(scheme):
    model = T.init_tiny_model(5, 4, 8, 2, 3, np.random.default_rng(0), positions=scheme)
    assert model.max_len is None
    logits, weights, _ = model.forward(np.zeros((2, 40), dtype=int))
    assert logits.shape == (2, 40, 1, 3) and weights.shape == (2, 2, 40, 40)


def test_the_schemes_compute_what_they_say():
    """x with sinusoidal positions is tok_emb + the table; with none, RoPE and ALiBi it is the
    tokens alone and the layer gets RoPE or ALiBi's bias; permuting the tokens of a model
    without positions leaves the last position's logits unchanged (a set, not a sequence)."""
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 5, size=(2, 6))
    m = {
        s: T.init_tiny_model(5, 6, 8, 2, 3, np.random.default_rng(4), positions=s)
        for s in POS.SCHEMES
    }
    tok = m["none"].params["tok_emb"][ids]
    cases = {
        "none": (tok, {}),
        "sinusoidal": (tok + POS.sinusoidal_table(6, 8), {}),
        "rope": (tok, {"rope": POS.RoPE()}),
        "alibi": (tok, {"score_bias": POS.alibi_bias(6, 6, POS.alibi_slopes(2))}),
    }
    for scheme, (x, extra) in cases.items():
        model = m[scheme]
        out, _, _ = BP.mha_forward(x, x, model.mha_params(), A.causal_mask(6), **extra)
        expected = out @ model.params["W_out"] + model.params["b_out"]
        tol = 2 * tiny_logits_errors(model, ids)[1][..., 0, :]
        assert_within(model.forward(ids)[0][..., 0, :], expected, tol, scheme)
    shuffled = np.concatenate([ids[:, [3, 0, 4, 1, 2]], ids[:, 5:]], axis=1)
    tol = 2 * tiny_logits_errors(m["none"], ids)[1][:, -1]  # the same numbers, reordered
    assert_within(m["none"].forward(shuffled)[0][:, -1], m["none"].forward(ids)[0][:, -1], tol)
    gap = np.abs(m["learned"].forward(shuffled)[0][:, -1] - m["learned"].forward(ids)[0][:, -1])
    tol = 2 * (
        tiny_logits_errors(m["learned"], shuffled)[1] + tiny_logits_errors(m["learned"], ids)[1]
    )
    assert (gap > tol[:, -1]).any()  # with positions, the order shows: beyond rounding


def test_learned_rows_past_the_training_length_never_move():
    model = T.init_tiny_model(5, 12, 8, 2, 5, np.random.default_rng(0))
    start = model.params["pos_emb"].copy()
    held_out = T.repeating_pattern_task(8, 6, 5, 2, np.random.default_rng(1))
    T.train(
        model,
        lambda r: T.repeating_pattern_task(8, 6, 5, 2, r),
        held_out,
        5,
        np.random.default_rng(2),
    )
    assert (model.params["pos_emb"][6:] == start[6:]).all()
    assert (model.params["pos_emb"][:6] != start[:6]).all()


def test_last_marked_task_targets():
    ids, targets = T.last_marked_task(50, 10, 6, 2, np.random.default_rng(5))  # marked: 4, 5
    for seq, target in zip(ids, targets, strict=True):
        for i in range(10):
            marked = [t for t in seq[: i + 1] if t >= 4]
            assert target[i] == (marked[-1] if marked else -1)


def test_position_experiment_protocol():
    """Records per (scheme, seed, length), held-out sets shared, only unseen positions scored
    at longer lengths; the same call gives the same numbers."""

    def task(n, seq_len, r):
        return T.copy_offsets_task(n, seq_len, 5, (1,), r)

    kw = dict(vocab_size=5, n_classes=5, d_model=8, n_heads=2, batch=8, n_eval=16)
    records = T.position_experiment(task, ("none", "rope"), (0, 1), 3, 6, (6, 12), **kw)
    assert [(r["scheme"], r["seed"], r["length"]) for r in records] == [
        (s, seed, n) for s in ("none", "rope") for seed in (0, 1) for n in (6, 12)
    ]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in records)
    assert records == T.position_experiment(task, ("none", "rope"), (0, 1), 3, 6, (6, 12), **kw)
    # the score at length 12 counts positions 6..11 only: rebuild it by hand for one model
    rng = np.random.default_rng(0)
    model = T.init_tiny_model(5, 12, 8, 2, 5, rng, positions="rope")
    held_out = task(16, 6, np.random.default_rng(1006))
    T.train(model, lambda r: task(8, 6, r), held_out, 3, rng, lr=0.02, eval_every=3)
    ids, targets = task(16, 12, np.random.default_rng(1012))
    right = (model.forward(ids)[0].argmax(axis=-1)[..., 0] == targets[..., 0])[:, 6:]
    assert records[5]["accuracy"] == right.mean()  # rope, seed 0, length 12: k / n both ways
