"""Backpropagation through multi-head attention (lib.backprop), checked in float64.

The reference for every gradient is a central finite difference of the loss, computed
element by element, within the tolerance tests/tolerances.py derives for it (gradient_tolerance:
the difference's truncation error, estimated, and its rounding error, from the loss's
rounding error, which mha_errors bounds).
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tolerances import (
    assert_gradient,
    assert_within,
    loss_error,
    mha_errors,
    mha_tolerances,
    softmax_errors,
)

from lib import attention as A
from lib import positions as POS
from lib import rounding as R
from lib.backprop import mha_backward, mha_forward, softmax_backward


def make_case(seed, batch=2, n_q=4, n_k=5, d=6, heads=2, bias=True, mask="causal"):
    rng = np.random.default_rng(seed)
    params = A.init_mha_params(d, heads, rng, bias=bias)
    x_q = rng.normal(size=(batch, n_q, d))
    x_kv = rng.normal(size=(batch, n_k, d))
    if mask == "causal":
        mask = A.causal_mask(n_q, n_k)
    elif mask == "padding":
        mask = A.padding_mask([n_k, 2][:batch], n_k)
    upstream = rng.normal(size=(batch, n_q, d))  # loss = sum(out * upstream)
    return params, x_q, x_kv, mask, upstream


def error_of_loss(x_q, x_kv, params, mask, upstream, **options):
    """How far one float64 evaluation of sum(out * upstream) may be from the exact value."""
    *_, out, dout = mha_errors(np.float64, x_q, x_kv, params, mask, **options)
    return loss_error(dout, out, upstream)


def check_all_gradients(params, x_q, x_kv, mask, upstream, head_mask):
    def loss():
        out, _, _ = mha_forward(x_q, x_kv, params, mask, head_mask)
        return float((out * upstream).sum())

    _, _, cache = mha_forward(x_q, x_kv, params, mask, head_mask)
    grads = mha_backward(upstream, cache)
    error = error_of_loss(x_q, x_kv, params, mask, upstream, head_mask=head_mask)
    names = ["W_q", "W_k", "W_v", "W_o"] + (["b_q", "b_v", "b_o"] if params.has_bias else [])
    arrays = {name: getattr(params, name) for name in names}
    arrays.update(x_q=x_q, x_kv=x_kv, head_mask=head_mask)
    for name, array in arrays.items():
        assert_gradient(grads[name], loss, array, error, name)
    if params.has_bias:
        # adding b_k moves every score of a row by the same q . b_k: no weight changes, so
        # the exact gradient is 0: both gradients are rounding noise around 0
        _, tol = assert_gradient(grads["b_k"], loss, params.b_k, error, "b_k")
        assert_within(grads["b_k"], 0.0, tol, "b_k is 0")
    return grads


@pytest.mark.parametrize("bias, mask", [(True, "causal"), (True, "padding"), (False, None)])
def test_gradients_match_finite_differences(bias, mask):
    params, x_q, x_kv, mask, upstream = make_case(0, bias=bias, mask=mask)
    head_mask = np.array([1.0, 0.6])
    grads = check_all_gradients(params, x_q, x_kv, mask, upstream, head_mask)
    assert ("b_q" in grads) == bias


def test_per_sequence_head_mask_gradient():
    params, x_q, x_kv, mask, upstream = make_case(1, batch=3, heads=3)
    head_mask = np.array([[1.0, 0.5, 0.0], [1.0, 1.0, 1.0], [0.2, 0.0, 1.0]])  # (batch, heads)
    grads = check_all_gradients(params, x_q, x_kv, mask, upstream, head_mask)
    assert grads["head_mask"].shape == (3, 3)


def test_self_attention_gradient_of_the_shared_input():
    """With x passed as both x_q and x_kv, dL/dx = grad x_q + grad x_kv."""
    params, x, _, _, upstream = make_case(2, n_q=5, n_k=5)
    mask = A.causal_mask(5)

    def loss():
        out, _, _ = mha_forward(x, x, params, mask)
        return float((out * upstream).sum())

    _, _, cache = mha_forward(x, x, params, mask)
    grads = mha_backward(upstream, cache)
    error = error_of_loss(x, x, params, mask, upstream)
    assert_gradient(grads["x_q"] + grads["x_kv"], loss, x, error, "x")


def test_a_query_with_nothing_to_attend_to_passes_no_gradient_to_the_keys():
    params, x_q, x_kv, _, upstream = make_case(3, n_q=3, n_k=4, mask=None)
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False  # query 1 sees nothing
    out, weights, cache = mha_forward(x_q, x_kv, params, mask)
    assert np.isfinite(out).all() and (weights[:, :, 1] == 0).all()
    only_row_1 = np.zeros_like(upstream)
    only_row_1[:, 1] = upstream[:, 1]
    grads = mha_backward(only_row_1, cache)
    assert np.abs(grads["x_kv"]).max() == 0.0
    assert np.abs(grads["W_q"]).max() == 0.0
    check_all_gradients(params, x_q, x_kv, mask, upstream, np.ones(2))


def test_head_mask_zero_removes_exactly_that_head():
    """Zeroing head h equals a layer whose W_o rows for head h are zero."""
    params, x_q, x_kv, mask, _ = make_case(4, heads=3)
    out, _, _ = mha_forward(x_q, x_kv, params, mask, head_mask=np.array([1.0, 0.0, 1.0]))
    W_o = params.W_o.copy()
    W_o[params.d_k : 2 * params.d_k] = 0.0
    cut = dataclasses.replace(params, W_o=W_o)
    ref, _ = A.multi_head_attention(x_q, x_kv, cut, mask)
    assert_within(out, ref, mha_tolerances(np.float64, x_q, x_kv, params, mask)[1])


# --------------------------------------------------------------------------- softmax backward


@given(seed=st.integers(0, 2**16), n=st.integers(1, 6), axis=st.sampled_from([-1, 0]))
def test_softmax_backward_equals_the_jacobian(seed, n, axis):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(n, n + 1)) * 3
    p = A.softmax(scores, axis=axis)
    g = rng.normal(size=p.shape)
    got = softmax_backward(p, g, axis=axis)
    # the explicit Jacobian J_ij = p_i (delta_ij - p_j), one slice at a time
    expected = np.zeros_like(p)
    moved_p, moved_g = np.moveaxis(p, axis, -1), np.moveaxis(g, axis, -1)
    moved_e = np.moveaxis(expected, axis, -1)
    for row in np.ndindex(moved_p.shape[:-1]):
        pr = moved_p[row]
        jac = np.diag(pr) - np.outer(pr, pr)
        moved_e[row] = jac.T @ moved_g[row]
    # each entry: a sum of n + 2 products of p, p and g (|J^T g| <= 2 |p| |g|-sums), in
    # either form: n + 3 roundings on sum_j (p_i delta_ij + p_i p_j) |g_j|
    p_abs, g_abs = np.moveaxis(p, axis, -1), np.moveaxis(np.abs(g), axis, -1)
    scale = p_abs * g_abs + p_abs * (p_abs * g_abs).sum(-1, keepdims=True)
    tol = R.tolerance(np.float64, p.shape[axis] + 3, np.moveaxis(scale, -1, axis))
    assert_within(got, expected, tol)


def test_softmax_backward_finite_differences_and_masked_keys():
    rng = np.random.default_rng(9)
    scores = rng.normal(size=(3, 5))
    scores[:, 4] = -np.inf  # a masked key
    g = rng.normal(size=(3, 5))

    def loss():
        return float((A.softmax(scores) * g).sum())

    got = softmax_backward(A.softmax(scores), g)
    w, dw, _, _ = softmax_errors(np.float64, scores, None)
    error = float(
        (dw * np.abs(g)).sum() + R.tolerance(np.float64, g.size + 1, np.abs(w * g).sum()) / 2
    )
    assert_gradient(got[:, :4], loss, scores[:, :4], error)
    assert (got[:, 4] == 0).all()


# ----------------------------------------------------------------- positions (notebook 09)


def check_gradients_with_positions(params, x_q, x_kv, mask, upstream, **positions):
    """Every gradient mha_backward returns, RoPE's and ALiBi's included, against central
    differences: W, b (b_k too: with RoPE its gradient is not 0), x_q, x_kv, score_bias."""
    head_mask = np.array([1.0, 0.7])

    def loss():
        out, _, _ = mha_forward(x_q, x_kv, params, mask, head_mask, **positions)
        return float((out * upstream).sum())

    _, _, cache = mha_forward(x_q, x_kv, params, mask, head_mask, **positions)
    grads = mha_backward(upstream, cache)
    error = error_of_loss(x_q, x_kv, params, mask, upstream, head_mask=head_mask, **positions)
    arrays = {name: getattr(params, name) for name in BP_NAMES if getattr(params, name) is not None}
    arrays.update(x_q=x_q, x_kv=x_kv, head_mask=head_mask)
    if positions.get("score_bias") is not None:
        arrays["score_bias"] = positions["score_bias"]
    for name, array in arrays.items():
        assert grads[name].shape == array.shape, name
        _, tol = assert_gradient(grads[name], loss, array, error, name)
        if name == "b_k" and "rope" not in positions:  # 0 without RoPE (see above)
            assert_within(grads[name], 0.0, tol, "b_k is 0")
    return grads


BP_NAMES = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")


@pytest.mark.parametrize(
    "layout, bias, mask",
    [("half", True, "causal"), ("interleaved", True, "padding"), ("half", False, None)],
)
def test_gradients_through_rope_match_finite_differences(layout, bias, mask):
    params, x_q, x_kv, mask, upstream = make_case(6, n_q=4, n_k=5, d=8, bias=bias, mask=mask)
    grads = check_gradients_with_positions(
        params, x_q, x_kv, mask, upstream, rope=POS.RoPE(base=30.0, layout=layout)
    )
    if bias:  # the key bias, turned by each key's position, now moves the scores of a row
        assert np.abs(grads["b_k"]).max() > 1e-3


SCORE_BIAS_SHAPES = {
    "(heads, n_q, n_k)": (2, 4, 5),
    "(1, heads, n_q, n_k)": (1, 2, 4, 5),
    "(batch, heads, n_q, n_k)": (2, 2, 4, 5),
    "(n_k,)": (5,),
    "(batch, 1, 1, n_k)": (2, 1, 1, 5),
}


@pytest.mark.parametrize("shape", SCORE_BIAS_SHAPES)
def test_gradients_through_a_score_bias_match_finite_differences(shape):
    params, x_q, x_kv, mask, upstream = make_case(7, n_q=4, n_k=5, d=8)
    bias = np.random.default_rng(8).normal(size=SCORE_BIAS_SHAPES[shape])
    check_gradients_with_positions(params, x_q, x_kv, mask, upstream, score_bias=bias)


def test_gradient_of_alibis_slopes_through_the_bias():
    """A slope's gradient is the bias's gradient times -distance, summed (chain rule), and
    equals the finite difference of the loss in that slope."""
    params, x, _, _, upstream = make_case(9, n_q=5, n_k=5, d=8)
    mask = A.causal_mask(5)
    slopes = POS.alibi_slopes(2)

    def loss():
        bias = POS.alibi_bias(5, 5, slopes)
        out, _, _ = mha_forward(x, x, params, mask, score_bias=bias)
        return float((out * upstream).sum())

    _, _, cache = mha_forward(x, x, params, mask, score_bias=POS.alibi_bias(5, 5, slopes))
    d_bias = mha_backward(upstream, cache)["score_bias"]  # (heads, n, n)
    distance = -POS.alibi_bias(5, 5, np.ones(1))[0]  # (n, n): |i - j|
    d_slopes = -(d_bias * distance).sum(axis=(1, 2))
    error = error_of_loss(x, x, params, mask, upstream, score_bias=POS.alibi_bias(5, 5, slopes))
    assert_gradient(d_slopes, loss, slopes, error, "slopes")


@pytest.mark.parametrize("layout", POS.LAYOUTS)
def test_rope_forward_equals_turning_q_and_k_by_hand(layout):
    params, x_q, x_kv, mask, _ = make_case(10, n_q=3, n_k=6, d=8)
    rope = POS.RoPE(layout=layout)
    out, weights, _ = mha_forward(x_q, x_kv, params, mask, rope=rope)

    def heads(x, W, b):
        return A.split_heads(x @ W + b, 2)  # (batch, heads, n, d_k)

    q = POS.rope_rotate(heads(x_q, params.W_q, params.b_q), np.arange(3, 6), layout=layout)
    k = POS.rope_rotate(heads(x_kv, params.W_k, params.b_k), np.arange(6), layout=layout)
    v = heads(x_kv, params.W_v, params.b_v)
    ref, ref_weights = A.scaled_dot_product_attention(q, k, v, mask)
    w_tol, out_tol = mha_tolerances(np.float64, x_q, x_kv, params, mask, rope=rope)
    assert_within(weights, ref_weights, w_tol, "weights")
    assert_within(out, A.merge_heads(ref) @ params.W_o + params.b_o, out_tol, "output")


@pytest.mark.parametrize("scheme", ["rope", "alibi"])
def test_the_last_queries_alone_get_the_same_outputs_as_in_the_whole_sequence(scheme):
    """Queries are the last n_q positions (a cache of earlier keys): computing only them
    gives the rows they get when the whole sequence is computed."""
    params, x, _, _, _ = make_case(11, n_q=6, n_k=6, d=8)
    slopes = POS.alibi_slopes(2)

    def extra(n_q):
        if scheme == "rope":
            return {"rope": POS.RoPE()}
        return {"score_bias": POS.alibi_bias(n_q, 6, slopes)}

    whole, _, _ = mha_forward(x, x, params, A.causal_mask(6), **extra(6))
    last, _, _ = mha_forward(x[:, -2:], x, params, A.causal_mask(2, 6), **extra(2))
    tol = mha_tolerances(np.float64, x, x, params, A.causal_mask(6), **extra(6))[1]
    assert_within(last, whole[:, -2:], tol[:, -2:])


def test_no_positions_is_the_plain_forward_exactly():
    params, x_q, x_kv, mask, _ = make_case(12)
    plain = mha_forward(x_q, x_kv, params, mask)[0]
    np.testing.assert_array_equal(mha_forward(x_q, x_kv, params, mask, rope=None)[0], plain)


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_float32_inputs_and_float64_params_are_computed_in_float64(positions):
    """NumPy's promotion holds with positions too: RoPE's angles and ALiBi's bias join the
    float64 computation (against the same numbers in float64, d_k = 2)."""
    params, x, _, _, _ = make_case(13, n_q=5, n_k=5, d=6, heads=3)
    x32 = x.astype(np.float32)
    extra = {
        "rope": {"rope": POS.RoPE()},
        "alibi": {"score_bias": POS.alibi_bias(5, 5, POS.alibi_slopes(3))},
    }[positions]
    mask = A.causal_mask(5)
    got = mha_forward(x32, x32, params, mask, **extra)[0]
    x64 = x32.astype(np.float64)
    want = mha_forward(x64, x64, params, mask, **extra)[0]
    assert got.dtype == np.float64
    assert_within(
        got, want, mha_tolerances(np.float64, x64, x64, params, mask, **extra)[1], positions
    )
