"""Exact attention in blocks (lib.blockwise, notebook 10): the online softmax and the blocked
kernel against the plain form of notebook 02 and against PyTorch's SDPA, on generated
shapes, masks and block sizes; the memory the kernel needs; what skipping masked blocks
leaves out."""

import math
import tracemalloc

import numpy as np
import pytest
import torch
from helpers import TINY_BLOCKS, kernel_sizes
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances, sdpa_tolerances, softmax_tolerances
from torch.nn import functional as F

from lib import attention as A
from lib import blockwise as BW

seeds = st.integers(min_value=0, max_value=2**32 - 1)


def row_block_bytes(size):
    """Blocks of query rows of `size` bytes, however few rows that is."""
    return kernel_sizes(ROW_BLOCK_BYTES=size, CAUSAL_MIN_ROWS=1)


@st.composite
def cases(draw):
    return dict(
        lead=draw(st.sampled_from([(), (2,), (2, 3), (1, 2)])),
        n_q=draw(st.integers(1, 12)),
        n_k=draw(st.integers(1, 12)),
        d_k=draw(st.integers(1, 6)),
        d_v=draw(st.integers(1, 5)),
        mask=draw(st.sampled_from(["none", "causal", "causal flag", "padding", "random", "both"])),
        block_q=draw(st.integers(1, 13)),
        block_k=draw(st.integers(1, 13)),
        row_bytes=draw(st.sampled_from([8, 64, 8 << 20])),
        scale=draw(st.sampled_from([1.0, 8.0])),  # 8: scores too large to skip the max
        dtype=draw(st.sampled_from([np.float64, np.float32])),
        seed=draw(seeds),
    )


def build(c):
    rng = np.random.default_rng(c["seed"])
    lead, n_q, n_k = c["lead"], c["n_q"], c["n_k"]
    q = (c["scale"] * rng.normal(size=lead + (n_q, c["d_k"]))).astype(c["dtype"])
    k = rng.normal(size=lead + (n_k, c["d_k"])).astype(c["dtype"])
    v = rng.normal(size=lead + (n_k, c["d_v"])).astype(c["dtype"])
    kind, mask, causal = c["mask"], None, False
    if kind in ("causal", "both"):
        mask = A.causal_mask(n_q, n_k)
    if kind == "causal flag":
        causal = True
    if kind == "padding":
        mask = np.arange(n_k) < rng.integers(0, n_k + 1)  # (n_k,): some queries see nothing
    if kind in ("random", "both"):
        random = rng.random(lead + (n_q, n_k)) < 0.6
        mask = random if mask is None else mask & random
    return q, k, v, mask, causal


@settings(max_examples=60)
@given(cases())
def test_blockwise_forms_equal_the_plain_one(c):
    q, k, v, mask, causal = build(c)
    full = A.causal_mask(c["n_q"], c["n_k"]) if causal else mask
    want, _ = A.scaled_dot_product_attention(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), full
    )
    tol = sdpa_tolerances(c["dtype"], q, k, v, full)[1]
    online = BW.online_softmax_attention(
        q, k, v, mask, causal=causal, block_q=c["block_q"], block_k=c["block_k"]
    )
    with row_block_bytes(c["row_bytes"]):
        fast = BW.attention(q, k, v, mask, causal=causal)
        unskipped = BW.attention(q, k, v, mask, causal=causal, skip_masked_blocks=False)
    for name, got in (("online", online), ("fast", fast), ("unskipped", unskipped)):
        assert got.dtype == c["dtype"], name
        assert_within(got, want, tol, name)


@settings(max_examples=40)
@given(cases())
def test_blockwise_forms_equal_torch_sdpa(c):
    q, k, v, mask, causal = build(c)
    full = A.causal_mask(c["n_q"], c["n_k"]) if causal else mask
    if full is not None:  # torch gives NaN to a query with nothing to attend to
        full = np.broadcast_to(full, c["lead"] + (c["n_q"], c["n_k"])).copy()
        full[..., 0] = True
        mask = full
        causal = False

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a))

    attn_mask = None if full is None else t(full)
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=attn_mask).numpy()
    tol = sdpa_tolerances(c["dtype"], q, k, v, full)[1]
    assert_within(BW.attention(q, k, v, mask), want, tol, "blocks")
    got = BW.online_softmax_attention(q, k, v, mask, block_q=c["block_q"], block_k=c["block_k"])
    assert_within(got, want, tol, "online")


def test_causal_flag_matches_torch_is_causal_where_both_align():
    """lib's causal (like causal_mask) aligns the queries with the *last* keys; SDPA's
    is_causal aligns them with the first. With n_q == n_k both agree."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 4, 37, 8)) for _ in range(3))
    t = torch.from_numpy
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True).numpy()
    tol = sdpa_tolerances(np.float64, q, k, v, A.causal_mask(37))[1]
    assert_within(BW.attention(q, k, v, causal=True), want, tol, "blocks")
    with row_block_bytes(37 * 8 * 5):  # blocks of 5 rows
        assert_within(BW.attention(q, k, v, causal=True), want, tol, "blocks of 5 rows")
    got = BW.online_softmax_attention(q, k, v, causal=True, block_q=6, block_k=4)
    assert_within(got, want, tol, "online")


@settings(max_examples=40)
@given(
    st.integers(1, 6),
    st.integers(1, 20),
    st.integers(1, 4),
    st.lists(st.integers(1, 7), min_size=1, max_size=5),
    seeds,
)
def test_the_online_update_gives_the_softmax_however_the_keys_are_split(rows, n, d, cuts, seed):
    rng = np.random.default_rng(seed)
    s = 5 * rng.normal(size=(rows, n))
    s[rng.random(s.shape) < 0.3] = -np.inf  # masked keys, some rows entirely
    v = rng.normal(size=(n, d))
    m, l, acc = np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, d))
    edges = np.unique(np.clip(np.cumsum(cuts), 0, n))
    for j0, j1 in zip(np.r_[0, edges], np.r_[edges, n], strict=True):
        m, l, acc = BW.online_softmax_update(m, l, acc, s[:, j0:j1], v[j0:j1])
    assert np.isfinite(l).all() and np.isfinite(acc).all()
    out = np.divide(acc, l[:, None], where=l[:, None] > 0, out=np.zeros_like(acc))
    assert_within(out, A.softmax(s) @ v, softmax_tolerances(np.float64, s, v)[1], "online")
    np.testing.assert_array_equal(l == 0, np.isneginf(s).all(axis=1))


def test_the_blocked_kernel_needs_one_block_of_scores_not_the_matrix():
    """Peak memory NumPy allocates beyond the inputs and the output, measured by
    tracemalloc: one block of rows (ROW_BLOCK_BYTES), small scores or large, and a little
    more (the scaled q, the row sums...); the plain form needs the n x n matrix."""
    n, d = 4096, 16
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(3))
    out_bytes = n * d * 4
    for scale in (1, 8):  # 8: large scores, whose rows' maximum is subtracted
        for causal in (False, True):
            tracemalloc.start()
            BW.attention(scale * q, k, v, causal=causal)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert peak - out_bytes <= BW.ROW_BLOCK_BYTES + 16 * n * d + (1 << 16), (scale, causal)
            assert peak < 0.15 * n * n * 4  # the n x n float32 matrix: 64 MiB
    tracemalloc.start()
    A.scaled_dot_product_attention(q, k, v)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak >= n * n * 4


def count_scores(kernel, q, k, v, plan, **options):
    """How many scores (q_i . k_j products) a kernel computes, by spying on its products:
    those whose left factor is a block of q (d_k columns) and whose right factor has d_k
    rows (k transposed)."""
    d_k = q.shape[-1]
    computed = 0
    real_matmul = np.matmul

    def counting(a, b, out=None):
        nonlocal computed
        if a.shape[-1] == d_k and b.shape[-2] == d_k and out is not None:
            computed += out.size
        return real_matmul(a, b, out=out)

    BW.np.matmul = counting
    try:
        kernel(q, k, v, np.empty_like(q), plan=plan, **options)
    finally:
        BW.np.matmul = real_matmul
    return computed


def test_skipping_leaves_out_the_blocks_no_query_reaches():
    """With a causal mask and B blocks of rows, (1 + 1/B) / 2 of the scores are computed."""
    n = 1024
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(1, 1, n, 8)) for _ in range(3))
    computed = {
        skip: count_scores(
            BW.attend_in_blocks, q, k, v, BW.make_plan(None, True, n, n, np.float64), skip=skip
        )
        for skip in (True, False)
    }
    blocks = n // max(BW.CAUSAL_MIN_ROWS, -(-n // BW.CAUSAL_BLOCKS))
    assert computed[False] == n * n
    assert computed[True] == n * n * (1 + 1 / blocks) / 2


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ["none", "causal", "causal flag", "padding", "causal&padding"])
def test_small_scores_skip_the_maximum_and_agree_with_the_plain_form(dtype, kind):
    """When every score is small (BW.SAFE_SCORE) the kernel exponentiates without subtracting
    each row's maximum; in tiny blocks of rows that skip what the mask leaves out, it must
    still give the plain form's answer, with some queries that may attend to nothing."""
    rng = np.random.default_rng(7)
    n_q, n_k = 13, 17
    q, k, v = (rng.normal(size=(3, 2, n, 4)).astype(dtype) for n in (n_q, n_k, n_k))
    mask, causal = None, kind == "causal flag"
    if kind in ("causal", "causal&padding"):
        mask = A.causal_mask(n_q, n_k)
    if kind in ("padding", "causal&padding"):
        pad = (np.arange(n_k) < np.array([0, 5, 17])[:, None])[:, None, None, :]  # (3, 1, 1, n_k)
        mask = pad if mask is None else mask & pad
    full = A.causal_mask(n_q, n_k) if causal else mask
    want, _ = A.scaled_dot_product_attention(
        q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), full
    )
    norms = (float(np.linalg.norm(a, axis=-1).max()) for a in (q, k))
    assert math.prod(norms) <= BW.SAFE_SCORE[q.dtype]  # so the kernel skips the shift
    with kernel_sizes(**TINY_BLOCKS):
        got = {
            skip: BW.attention(q, k, v, mask, causal=causal, skip_masked_blocks=skip)
            for skip in (True, False)
        }
    tol = sdpa_tolerances(dtype, q, k, v, full)[1]
    for skip, out in got.items():
        assert out.dtype == dtype
        assert_within(out, want, tol, f"skip={skip}")


def test_huge_values_give_their_weighted_mean_not_an_overflow():
    q = np.ones((2, 4), np.float32)
    v = np.full((3, 2), 3e38, np.float32)
    k = q[:1].repeat(3, 0)
    want = v[0, 0]  # every value is this float32 number
    assert_within(BW.attention(q, k, v), want, sdpa_tolerances(np.float32, q, k, v)[1], "blocks")
    got, tol = BW.online_softmax_attention(q, q, v[:2]), sdpa_tolerances(np.float32, q, q, v[:2])[1]
    assert_within(got, want, tol, "online")


@pytest.mark.parametrize("n_k", [0, 3])
def test_empty_inputs(n_k):
    out = BW.attention(np.ones((2, 0, 4)), np.ones((2, n_k, 4)), np.ones((2, n_k, 5)))
    assert out.shape == (2, 0, 5)
    out = BW.attention(np.ones((3, 4)), np.ones((n_k, 4)), np.ones((n_k, 5)))
    assert out.shape == (3, 5) and (out == 0).all() == (n_k == 0)


def test_large_weights_reuse_memory_only_once_nothing_refers_to_it():
    rng = np.random.default_rng(3)
    p = A.init_mha_params(16, 4, rng)
    x = rng.normal(size=(2, 750, 16))  # weights: 2 * 4 * 750^2 float64 = 36 MB
    want = A.multi_head_attention(x, x, p)[1]
    tol = mha_tolerances(np.float64, x, x, p)[0]
    BW.release_spare_weights()
    first = BW.multi_head_attention(x, x, p)[1]
    address = first.__array_interface__["data"][0]
    kept = first[1, 2]  # a view keeps the memory in use
    del first
    second = BW.multi_head_attention(x, x, p)[1]
    assert not np.shares_memory(second, kept)
    assert_within(kept, want[1, 2], tol[1, 2], "kept")  # not overwritten by the second call
    del kept, second
    third = BW.multi_head_attention(x, x, p)[1]  # nothing refers to the spare: reused
    assert third.__array_interface__["data"][0] != address  # the second call's memory ...
    fourth_address = third.__array_interface__["data"][0]
    del third
    fourth = BW.multi_head_attention(x, x, p)[1]
    assert fourth.__array_interface__["data"][0] == fourth_address  # ... is reused
    assert_within(fourth, want, tol, "fourth")
    assert fourth.flags.c_contiguous and fourth.flags.writeable
    small = BW.multi_head_attention(x[:, :10], x[:, :10], p)[1]  # small: a fresh array
    assert small.base is None
    BW.release_spare_weights()
