"""lib's fast multi-head attention (blocks, fused QKV, skipped max, skipped masked keys)
against the plain reshape version notebook 03 derives."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import kernel_sizes
from hypothesis import given
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances

from lib import attention as A
from lib import blockwise as BW
from lib import rounding as R

seeds = st.integers(min_value=0, max_value=2**32 - 1)


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def block_bytes(rows, group=None):
    """Make the blocks tiny, so that a small problem is cut into many blocks: blocks of
    query rows of `rows` bytes, groups of whole score matrices of `group` bytes."""
    group = rows if group is None else group
    return kernel_sizes(ROW_BLOCK_BYTES=rows, GROUP_BYTES=group)


def random_mask(rng, kind, batch, h, n_q, n_k):
    if kind == "none":
        return None
    if kind == "causal":
        return A.causal_mask(n_q, n_k)
    if kind == "padding":
        return A.padding_mask(rng.integers(0, n_k + 1, size=batch), n_k)
    if kind == "causal&padding":
        return A.causal_mask(n_q, n_k) & A.padding_mask(rng.integers(0, n_k + 1, size=batch), n_k)
    shape = {"per-head": (batch, h, n_q, n_k), "per-query": (n_q, 1), "keys": (n_k,)}[kind]
    return rng.random(shape) < 0.6  # some rows end up fully masked


@st.composite
def cases(draw):
    return dict(
        batch=draw(st.integers(1, 3)),
        h=draw(st.sampled_from([1, 2, 3, 4])),
        d_k=draw(st.integers(1, 5)),
        n_q=draw(st.integers(1, 9)),
        n_k=draw(st.integers(1, 9)),
        bias=draw(st.booleans()),
        self_attention=draw(st.booleans()),
        mask=draw(
            st.sampled_from(
                ["none", "causal", "padding", "causal&padding", "per-head", "per-query", "keys"]
            )
        ),
        scale=draw(st.sampled_from([1.0, 30.0])),  # 30: scores too big to skip the max
        block=draw(st.sampled_from([8, 40, 200, 2 << 20])),
        group=draw(st.sampled_from([8, 40, 200, 1000, 2 << 20])),
        dtype=draw(st.sampled_from([np.float64, np.float32])),
        seed=draw(seeds),
    )


@given(cases())
def test_fast_version_equals_the_readable_version(c):
    rng = np.random.default_rng(c["seed"])
    d = c["h"] * c["d_k"]
    n_k = c["n_q"] if c["self_attention"] else c["n_k"]
    params = A.init_mha_params(d, c["h"], rng, bias=c["bias"], dtype=c["dtype"])
    x_q = (c["scale"] * rng.normal(size=(c["batch"], c["n_q"], d))).astype(c["dtype"])
    x_kv = x_q if c["self_attention"] else rng.normal(size=(c["batch"], n_k, d)).astype(c["dtype"])
    mask = random_mask(rng, c["mask"], c["batch"], c["h"], c["n_q"], n_k)
    want_out, want_w = A.multi_head_attention(x_q, x_kv, params, mask)
    with block_bytes(c["block"], c["group"]):
        out, w = BW.multi_head_attention(x_q, x_kv, params, mask)
        out_only, none = BW.multi_head_attention(x_q, x_kv, params, mask, need_weights=False)
    w_tol, out_tol = mha_tolerances(c["dtype"], x_q, x_kv, params, mask)
    assert out.dtype == w.dtype == out_only.dtype == c["dtype"] and none is None
    assert_within(w, want_w, w_tol, "weights")
    assert_within(out, want_out, out_tol, "output")
    assert_within(out_only, want_out, out_tol, "output without weights")


def test_huge_scores_take_the_stable_path_and_stay_finite(rng):
    params = A.init_mha_params(8, 2, rng)
    x = 1e3 * rng.normal(size=(2, 5, 8))  # scores of order 1e5: exp would overflow
    out, w = BW.multi_head_attention(x, x, params, A.causal_mask(5))
    want_out, want_w = A.multi_head_attention(x, x, params, A.causal_mask(5))
    assert np.isfinite(out).all() and np.isfinite(w).all()
    w_tol, out_tol = mha_tolerances(np.float64, x, x, params, A.causal_mask(5))
    assert_within(w, want_w, w_tol, "weights")
    assert_within(out, want_out, out_tol, "output")


def test_causal_with_padding_builds_no_n_by_n_mask(rng, monkeypatch):
    """Two prefix masks (causal, padding) combine as the shorter reach of each row: the plan
    holds (batch, 1, n_q) numbers and no (n_q, n_k) array is made, yet the answer is the same
    as the readable form's with both masks."""
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(3, 7, 8))
    padding = A.padding_mask([7, 4, 0], 7)  # (3, 1, 1, 7); the last row sees nothing
    want_out, want_w = A.multi_head_attention(x, x, params, padding, causal=True)
    plan = BW.make_plan(padding, True, 7, 7, np.float64)
    assert plan.add is None and plan.reach.shape == (3, 1, 7)
    assert plan.reach[1, 0].tolist() == [1, 2, 3, 4, 4, 4, 4]

    def refuse(*args):
        raise AssertionError("the fast path built an (n_q, n_k) mask")

    monkeypatch.setattr(A, "with_causal", refuse)
    monkeypatch.setattr(A, "causal_mask", refuse)
    out, w = BW.multi_head_attention(x, x, params, padding, causal=True)
    w_tol, out_tol = mha_tolerances(np.float64, x, x, params, None)
    assert_within(w, want_w, w_tol, "weights")
    assert_within(out, want_out, out_tol, "output")


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_and_blocks_give_zero(rng, need_weights):
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(2, 6, 8))
    mask = np.ones((2, 1, 6, 6), dtype=bool)
    mask[0, :, 1] = False  # one row of sequence 0
    mask[1] = False  # all of sequence 1: every block of it is empty
    with block_bytes(2 * 6 * 8):  # two query rows per block
        out, w = BW.multi_head_attention(x, x, params, mask, need_weights=need_weights)
    np.testing.assert_array_equal(out[0, 1], params.b_o)  # 0 @ W_o + b_o: exact
    np.testing.assert_array_equal(out[1], np.broadcast_to(params.b_o, (6, 8)))
    if need_weights:
        np.testing.assert_array_equal(w[0, :, 1], 0.0)
        np.testing.assert_array_equal(w[1], 0.0)
        w_tol = mha_tolerances(np.float64, x, x, params, mask)[0]  # each weight's ...
        sum_tol = np.delete(w_tol[0], 1, axis=1).sum(-1) + R.tolerance(
            np.float64, 6
        )  # ... + 6 sums
        assert_within(np.delete(w[0], 1, axis=1).sum(-1), 1.0, sum_tol, "row sums")


def test_unbatched_without_weights(rng):
    params = A.init_mha_params(6, 3, rng)
    x = rng.normal(size=(4, 6))
    out, w = BW.multi_head_attention(x, x, params, need_weights=False)
    assert w is None and out.shape == (4, 6)
    want = A.multi_head_attention(x, x, params)[0]
    assert_within(out, want, mha_tolerances(np.float64, x, x, params)[1])


def test_self_attention_by_identity_and_by_equal_copies_agree(rng):
    """x_q is x_kv takes the fused [W_q | W_k | W_v] path; a copy takes the separate one."""
    params = A.init_mha_params(8, 4, rng, bias=True)
    x = rng.normal(size=(2, 5, 8))
    fused = BW.multi_head_attention(x, x, params)
    separate = BW.multi_head_attention(x, x.copy(), params)
    tols = mha_tolerances(np.float64, x, x, params)[::-1]  # (output, weights), as returned
    for a, b, tol, name in zip(fused, separate, tols, ("output", "weights"), strict=True):
        assert_within(a, b, tol, name)


def test_bad_parameters_and_overflow_are_reported(rng):
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(1, 3, 8))
    params.b_v[5] = np.nan
    with pytest.raises(ValueError, match=r"params.b_v contains NaN or inf \(first at index \(5,\)"):
        BW.multi_head_attention(x, x, params)
    params = A.init_mha_params(8, 2, rng, dtype=np.float32)
    huge = np.full((1, 3, 8), 1e30, np.float32)
    with pytest.raises(ValueError, match=r"the queries x_q @ W_q overflow float32"):
        BW.multi_head_attention(huge, x.astype(np.float32), replace(params, W_q=params.W_q * 1e10))


def test_huge_queries_whose_scores_fit_are_not_an_error(rng):
    """|q|^2 overflows float32 here, but every score q . k is finite: a valid input (the
    softmax is one-hot), which the reshape version computes the same."""
    params = A.init_mha_params(8, 2, rng, dtype=np.float32)
    x = rng.normal(size=(1, 3, 8)).astype(np.float32)
    huge = np.full((1, 3, 8), 1e30, np.float32)
    out, w = BW.multi_head_attention(huge, x, params)
    want_out, want_w = A.multi_head_attention(huge, x, params)
    assert np.isfinite(out).all()
    w_tol, out_tol = mha_tolerances(np.float32, huge, x, params)
    assert_within(w, want_w, w_tol, "weights")
    assert_within(out, want_out, out_tol, "output")


def test_overflow_in_the_values_or_output_is_reported(rng):
    """Finite inputs and weights whose products overflow float32 in V or in W_o: an error
    naming the arrays and the dtype, never an output holding inf or NaN."""
    x = 1.0 + rng.uniform(size=(1, 3, 8)).astype(np.float32)  # all positive: sums can't cancel
    params = A.init_mha_params(8, 2, rng, dtype=np.float32)
    params.W_v[:] = 1e38  # every value is 8 * 1e38 * x > float32's max; queries, keys small
    with pytest.raises(
        ValueError, match=r"the values x_kv @ W_v overflow float32.*\|W_v\| = 1e\+38"
    ):
        BW.multi_head_attention(x, x, params)
    params = A.init_mha_params(8, 2, rng, dtype=np.float32)
    params.W_v[:] = np.abs(params.W_v)  # positive head outputs, so each output sums
    params.W_o[:] = 3e38  # 8 positive terms of about 3e38: finite heads, overflowing output
    with pytest.raises(ValueError, match=r"the output .* overflow float32.*\|W_o\| = 3e\+38"):
        BW.multi_head_attention(x, x, params)
