"""lib's fast multi-head attention (lib.blockwise.multi_head_attention: the heads attended to
in blocks of query rows that skip the keys they cannot reach) against the plain reshape
version notebook 03 derives: the same results, the same errors."""

from dataclasses import replace

import numpy as np
import pytest
from helpers import kernel_sizes
from hypothesis import given
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances, weights_sum_tolerance

from lib import attention as A
from lib import blockwise as BW

seeds = st.integers(min_value=0, max_value=2**32 - 1)


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def random_mask(rng, kind, batch, h, n_q, n_k):
    if kind in ("none", "causal flag"):
        return None
    if kind == "causal":
        return A.causal_mask(n_q, n_k)
    padding = A.padding_mask(rng.integers(0, n_k + 1, size=batch), n_k)
    if kind in ("padding", "causal flag&padding"):
        return padding
    if kind == "causal&padding":
        return A.causal_mask(n_q, n_k) & padding
    shape = {"per-head": (batch, h, n_q, n_k), "per-query": (n_q, 1), "keys": (n_k,)}[kind]
    return rng.random(shape) < 0.6  # some rows end up fully masked


MASKS = ["none", "causal", "causal flag", "padding", "causal&padding", "causal flag&padding"]
MASKS += ["per-head", "per-query", "keys"]


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
        mask=draw(st.sampled_from(MASKS)),
        scale=draw(st.sampled_from([1.0, 30.0])),  # 30: scores too big to exponentiate as such
        block=draw(st.sampled_from([8, 40, 200, 1000, 2 << 20])),  # 8: one row per block
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
    causal = "flag" in c["mask"]
    want_out, want_w = A.multi_head_attention(x_q, x_kv, params, mask, causal=causal)
    with kernel_sizes(ROW_BLOCK_BYTES=c["block"]):
        out, w = BW.multi_head_attention(x_q, x_kv, params, mask, causal=causal)
        out_only, none = BW.multi_head_attention(
            x_q, x_kv, params, mask, causal=causal, need_weights=False
        )
    full = A.causal_mask(c["n_q"], n_k) & (True if mask is None else mask) if causal else mask
    w_tol, out_tol = mha_tolerances(c["dtype"], x_q, x_kv, params, full)
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


def test_causal_builds_no_n_by_n_mask(rng, monkeypatch):
    """``causal=True``, alone or with a padding mask, is applied block by block: no (n_q,
    n_k) array is made, yet the answer is the readable form's."""
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(3, 7, 8))
    padding = A.padding_mask([7, 4, 0], 7)  # (3, 1, 1, 7); the last sequence sees nothing
    want = A.multi_head_attention(x, x, params, padding, causal=True)
    tols = mha_tolerances(np.float64, x, x, params, A.causal_mask(7) & padding)[::-1]

    def refuse(*args, **kwargs):
        raise AssertionError("the fast path built an (n_q, n_k) mask")

    monkeypatch.setattr(np, "tri", refuse)
    monkeypatch.setattr(A, "causal_mask", refuse)
    got = BW.multi_head_attention(x, x, params, padding, causal=True)
    for a, b, tol, name in zip(got, want, tols, ("output", "weights"), strict=True):
        assert_within(a, b, tol, name)


@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_rows_and_blocks_give_zero(rng, need_weights):
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(2, 6, 8))
    mask = np.ones((2, 1, 6, 6), dtype=bool)
    mask[0, :, 1] = False  # one row of sequence 0
    mask[1] = False  # all of sequence 1: every block of it is empty
    with kernel_sizes(ROW_BLOCK_BYTES=2 * 6 * 8):  # two query rows per block
        out, w = BW.multi_head_attention(x, x, params, mask, need_weights=need_weights)
    np.testing.assert_array_equal(out[0, 1], params.b_o)  # 0 @ W_o + b_o: exact
    np.testing.assert_array_equal(out[1], np.broadcast_to(params.b_o, (6, 8)))
    if need_weights:
        np.testing.assert_array_equal(w[0, :, 1], 0.0)
        np.testing.assert_array_equal(w[1], 0.0)
        w_tol = mha_tolerances(np.float64, x, x, params, mask)[0]
        kept = np.delete(w[0], 1, axis=1)  # (heads, the 5 rows with keys, 6)
        sum_tol = weights_sum_tolerance(np.float64, np.delete(w_tol[0], 1, axis=1))
        assert_within(kept.sum(-1), 1.0, sum_tol, "row sums")


def test_unbatched_without_weights(rng):
    params = A.init_mha_params(6, 3, rng)
    x = rng.normal(size=(4, 6))
    out, w = BW.multi_head_attention(x, x, params, need_weights=False)
    assert w is None and out.shape == (4, 6)
    want = A.multi_head_attention(x, x, params)[0]
    assert_within(out, want, mha_tolerances(np.float64, x, x, params)[1])


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


def overflows(rng):
    """(name, x_q, x_kv, params, mask) whose numbers overflow float32 somewhere inside."""
    x = 1.0 + rng.uniform(size=(1, 3, 8)).astype(np.float32)  # all positive: sums can't cancel
    big_v = A.init_mha_params(8, 2, rng, dtype=np.float32)
    big_v.W_v[:] = 1e38  # every value is 8 * 1e38 * x > float32's max; queries, keys small
    big_o = A.init_mha_params(8, 2, rng, dtype=np.float32)
    big_o.W_v[:] = np.abs(big_o.W_v)  # positive head outputs, so each output sums
    big_o.W_o[:] = 3e38  # 8 positive terms of about 3e38: finite heads, overflowing output
    big_q = A.init_mha_params(8, 2, rng, dtype=np.float32)
    big_q.W_q[:] = big_q.W_k[:] = 1e30  # queries and keys of about 1e31: scores inf
    unread = A.init_mha_params(8, 2, rng, dtype=np.float32)
    x_kv = x.copy()
    x_kv[0, 2] = 1e37  # its value overflows; the padding mask lets no query read key 2
    padding = A.padding_mask([2], 3)
    return [
        ("values", x, x, big_v, None),
        ("output", x, x, big_o, None),
        ("scores", x, x, big_q, None),
        ("an unread value", x, x_kv, replace(unread, W_v=unread.W_v + 10), padding),
    ]


@pytest.mark.parametrize("need_weights", [True, False])
def test_overflow_is_reported_as_the_readable_version_reports_it(rng, need_weights):
    """Finite inputs and weights whose products overflow float32 (in V, the scores, the
    output, or a value no query reads, which the readable form weighs by 0): the same error,
    naming the inputs and the dtype, never an output holding inf or NaN."""
    for name, x_q, x_kv, params, mask in overflows(rng):
        with pytest.raises(ValueError) as readable:
            A.multi_head_attention(x_q, x_kv, params, mask)
        with pytest.raises(ValueError) as fast:
            BW.multi_head_attention(x_q, x_kv, params, mask, need_weights=need_weights)
        assert str(fast.value) == str(readable.value), name
        assert "overflow float32" in str(fast.value), name


def test_bad_parameters_are_reported(rng):
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(1, 3, 8))
    params.b_v[5] = np.nan
    with pytest.raises(ValueError, match=r"params.b_v contains NaN or inf \(first at index \(5,\)"):
        BW.multi_head_attention(x, x, params)
