"""Property tests: the list version agrees with the NumPy one on random shapes, and
attention has the invariances it must have (that every multi-head forward agrees with the
reference is test_contract.py's)."""

import dataclasses

import numpy as np
import scipy.special
from hypothesis import given
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances, sdpa_tolerances, softmax_tolerances

from lib import attention as A
from lib import lists as L
from lib import rounding as R

dims = st.integers(min_value=1, max_value=6)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def mha_cases(draw):
    """(batch, n_heads, d_k, n_q, n_k, bias, seed): batch 1, one head, d_k = 1 included."""
    return (
        draw(st.integers(1, 3)),
        draw(st.sampled_from([1, 2, 3, 4])),
        draw(st.integers(1, 4)),
        draw(dims),
        draw(dims),
        draw(st.booleans()),
        draw(seeds),
    )


def _inputs(case):
    batch, h, d_k, n_q, n_k, bias, seed = case
    rng = np.random.default_rng(seed)
    params = A.init_mha_params(h * d_k, h, rng, bias=bias)
    x_q = rng.normal(size=(batch, n_q, h * d_k))
    x_kv = rng.normal(size=(batch, n_k, h * d_k))
    return rng, params, x_q, x_kv


@given(st.integers(1, 5), st.integers(1, 7), seeds)
def test_softmax_matches_scipy(rows, cols, seed):
    x = np.random.default_rng(seed).normal(scale=30.0, size=(rows, cols))
    tol = softmax_tolerances(np.float64, x)
    assert_within(A.softmax(x), scipy.special.softmax(x, axis=-1), tol, "scipy")
    shifted = x + 123.0  # each score rounded once more, on |x| + 123
    tol = softmax_tolerances(np.float64, x, ds=R.tolerance(np.float64, 1, np.abs(x) + 123) / 2)
    assert_within(A.softmax(shifted), A.softmax(x), tol, "shifted")


@given(st.lists(st.floats(-50, 50), min_size=1, max_size=8), st.data())
def test_list_softmax_matches_numpy_with_masked_entries(row, data):
    masked = data.draw(st.lists(st.booleans(), min_size=len(row), max_size=len(row)))
    row = [float("-inf") if m else x for x, m in zip(row, masked, strict=True)]
    tol = softmax_tolerances(np.float64, np.array(row))
    assert_within(L.softmax(row), A.softmax(np.array(row)), tol)


@given(dims, dims, dims, dims, st.booleans(), seeds)
def test_list_attention_equals_numpy_attention(n_q, n_k, d_k, d_v, causal, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(n_q, d_k)), rng.normal(size=(n_k, d_k)), rng.normal(size=(n_k, d_v))
    mask = A.causal_mask(n_q, n_k) if causal else None
    out_l, w_l = L.attention(
        q.tolist(), k.tolist(), v.tolist(), None if mask is None else mask.tolist()
    )
    out_n, w_n = A.scaled_dot_product_attention(q, k, v, mask)
    w_tol, out_tol = sdpa_tolerances(np.float64, q, k, v, mask)
    assert_within(out_l, out_n, out_tol, "output")
    assert_within(w_l, w_n, w_tol, "weights")


@given(mha_cases(), st.booleans())
def test_the_list_version_agrees_with_the_numpy_one(case, causal):
    """lib.lists (no biases, one head at a time, one sequence) against the batched form."""
    _, params, x_q, x_kv = _inputs(case)
    params = dataclasses.replace(params, b_q=None, b_k=None, b_v=None, b_o=None)
    n_q, n_k = x_q.shape[1], x_kv.shape[1]
    mask = A.causal_mask(n_q, n_k) if causal else None
    out, w = A.multi_head_attention(x_q, x_kv, params, mask)
    w_tol, out_tol = mha_tolerances(np.float64, x_q, x_kv, params, mask)
    weights = [getattr(params, name).tolist() for name in ("W_q", "W_k", "W_v", "W_o")]
    for b in range(x_q.shape[0]):
        out_l, w_l = L.multi_head_attention(
            x_q[b].tolist(),
            x_kv[b].tolist(),
            *weights,
            params.n_heads,
            None if mask is None else mask.tolist(),
        )
        assert_within(out_l, out[b], out_tol[b], "lists")
        assert_within(w_l, w[b], w_tol[b], "lists, weights")


@given(mha_cases())
def test_batch_elements_are_independent(case):
    _, params, x_q, x_kv = _inputs(case)
    out, w = A.multi_head_attention(x_q, x_kv, params)
    w_tol, out_tol = mha_tolerances(np.float64, x_q, x_kv, params)
    for b in range(x_q.shape[0]):
        out_b, w_b = A.multi_head_attention(x_q[b : b + 1], x_kv[b : b + 1], params)
        assert_within(out_b[0], out[b], out_tol[b], "output")
        assert_within(w_b[0], w[b], w_tol[b], "weights")


@given(mha_cases(), st.data())
def test_causality_future_tokens_never_change_earlier_outputs(case, data):
    rng, params, x, _ = _inputs(case)
    n = x.shape[1]
    t = data.draw(st.integers(0, n - 1), label="last position kept")
    changed = x.copy()
    changed[:, t + 1 :] = rng.normal(scale=10.0, size=changed[:, t + 1 :].shape)
    out, w = A.multi_head_attention(x, x, params, A.causal_mask(n))
    out2, w2 = A.multi_head_attention(changed, changed, params, A.causal_mask(n))
    # positions up to t see the same numbers in both runs, so the same bounds
    w_tol, out_tol = mha_tolerances(np.float64, x, x, params, A.causal_mask(n))
    assert_within(out2[:, : t + 1], out[:, : t + 1], out_tol[:, : t + 1], "output")
    np.testing.assert_array_equal(w[..., :, t + 1 :][..., : t + 1, :], 0.0)
    assert_within(w2[..., : t + 1, :], w[..., : t + 1, :], w_tol[..., : t + 1, :], "weights")


@given(mha_cases(), st.data())
def test_padded_keys_never_change_any_output(case, data):
    rng, params, x_q, x_kv = _inputs(case)
    batch, n_k = x_kv.shape[0], x_kv.shape[1]
    lengths = data.draw(st.lists(st.integers(1, n_k), min_size=batch, max_size=batch))
    mask = A.padding_mask(lengths, n_k)
    changed = x_kv.copy()
    for b, length in enumerate(lengths):
        changed[b, length:] = rng.normal(scale=10.0, size=changed[b, length:].shape)
    out, w = A.multi_head_attention(x_q, x_kv, params, mask)
    out2, _ = A.multi_head_attention(x_q, changed, params, mask)
    # padded keys get weight 0, so their values enter neither output nor its bound
    w_tol, out_tol = mha_tolerances(np.float64, x_q, x_kv, params, mask)
    assert_within(out2, out, out_tol, "output")
    sum_tol = w_tol.sum(-1) + R.tolerance(np.float64, n_k)  # the weights' errors + n_k sums
    assert_within(w.sum(-1), 1.0, sum_tol, "row sums")


@given(mha_cases(), st.data())
def test_permuting_keys_permutes_weights_and_keeps_outputs(case, data):
    _, params, x_q, x_kv = _inputs(case)
    perm = np.array(data.draw(st.permutations(range(x_kv.shape[1]))))
    out, w = A.multi_head_attention(x_q, x_kv, params)
    out_p, w_p = A.multi_head_attention(x_q, x_kv[:, perm], params)
    w_tol, out_tol = mha_tolerances(np.float64, x_q, x_kv, params)
    assert_within(out_p, out, out_tol, "output")
    assert_within(w_p, w[..., perm], w_tol[..., perm], "weights")
