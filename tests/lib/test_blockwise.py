"""Exact attention in blocks (lib.blockwise, notebook 10): the online softmax and the blocks
of query rows against the plain form of notebook 02 and against PyTorch's SDPA, on generated
shapes, masks and block sizes; the memory the blocks need; what skipping masked keys leaves
out; overflow reported as the plain form reports it."""

import tracemalloc

import numpy as np
import pytest
import torch
from helpers import kernel_sizes
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import assert_within, sdpa_tolerances, softmax_tolerances
from torch.nn import functional as F

from lib import attention as A
from lib import blockwise as BW

seeds = st.integers(min_value=0, max_value=2**32 - 1)


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
        row_bytes=draw(st.sampled_from([8, 64, 400, 8 << 20])),  # 8: a row per block
        scale=draw(st.sampled_from([1.0, 8.0])),  # 8: large scores
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
    with kernel_sizes(ROW_BLOCK_BYTES=c["row_bytes"]):
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
    with kernel_sizes(ROW_BLOCK_BYTES=37 * 8 * 5):  # blocks of 5 rows
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


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_blocks_need_one_block_of_scores_not_the_matrix():
    """Peak memory NumPy allocates beyond the output, measured by tracemalloc: one block of
    rows (ROW_BLOCK_BYTES of scores, with a boolean array or two of its shape) and a few
    (n, d) arrays, with or without a causal mask; the plain form needs the n x n matrix."""
    n, d = 4096, 16
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(3))
    matrix = n * n * 4  # the n x n float32 matrix: 64 MiB
    for scale in (1, 8):  # 8: large scores
        for causal in (False, True):
            extra = peak_bytes(lambda s=scale, c=causal: BW.attention(s * q, k, v, causal=c))
            assert extra - n * d * 4 <= 1.75 * BW.ROW_BLOCK_BYTES + 16 * n * d, (scale, causal)
            assert extra < 0.15 * matrix
    assert peak_bytes(lambda: A.scaled_dot_product_attention(q, k, v)) >= matrix


def count_scores(monkeypatch, k, call) -> int:
    """How many scores (q_i . k_j) ``call`` computes: the sizes of the products whose right
    factor is (a view of) k, transposed."""
    computed = 0
    matmul = np.matmul

    def counting(a, b, *args, **kwargs):
        nonlocal computed
        result = matmul(a, b, *args, **kwargs)
        if np.shares_memory(b, k):
            computed += result.size
        return result

    monkeypatch.setattr(np, "matmul", counting)
    call()
    monkeypatch.undo()
    return computed


@pytest.mark.parametrize("rows", [64, 100, 1024])
def test_a_block_of_rows_leaves_out_the_keys_none_of_its_rows_sees(monkeypatch, rows):
    """Causal: a block of rows r0 .. r1 - 1 computes keys 0 .. r1 - 1, about half of the
    scores when there are many blocks; without skipping, all of them."""
    n = 1024
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(n, 8)) for _ in range(3))
    with kernel_sizes(ROW_BLOCK_BYTES=rows * n * 8):
        skipped = count_scores(monkeypatch, k, lambda: BW.attention(q, k, v, causal=True))
        every = count_scores(
            monkeypatch, k, lambda: BW.attention(q, k, v, causal=True, skip_masked_blocks=False)
        )
    assert every == n * n
    assert skipped == sum(min(rows, n - r0) * min(n, r0 + rows) for r0 in range(0, n, rows))
    if rows == 64:
        assert skipped / n**2 < 0.54  # 16 blocks: (1 + 1/16) / 2 of the scores


def test_padding_leaves_out_the_keys_no_sequence_has(monkeypatch):
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(3, 20, 4)) for _ in range(3))
    padding = (np.arange(20) < np.array([5, 12, 0])[:, None])[:, None, :]  # (3, 1, 20)
    want, _ = A.scaled_dot_product_attention(q, k, v, padding)
    computed = count_scores(monkeypatch, k, lambda: BW.attention(q, k, v, padding))
    assert computed == 3 * 20 * 12  # the longest sequence's 12 keys, for every query
    assert_within(BW.attention(q, k, v, padding), want, sdpa_tolerances(np.float64, q, k, v)[1])


@pytest.mark.parametrize("row_bytes", [8, 8 << 20])
def test_queries_with_nothing_to_attend_to_get_zero(row_bytes):
    rng = np.random.default_rng(4)
    q, k, v = (rng.normal(size=(2, 6, 3)) for _ in range(3))
    mask = np.ones((2, 6, 6), bool)
    mask[0, 2] = False  # one query of the first sequence
    mask[1] = False  # every query of the second
    with kernel_sizes(ROW_BLOCK_BYTES=row_bytes):
        for got in (
            BW.attention(q, k, v, mask),
            BW.online_softmax_attention(q, k, v, mask, block_q=2, block_k=4),
        ):
            np.testing.assert_array_equal(got[0, 2], 0.0)
            np.testing.assert_array_equal(got[1], 0.0)
            assert np.isfinite(got).all()


def test_overflowing_scores_are_reported_as_the_plain_form_reports_them():
    """One key's score overflows float32 to -inf: it must not pass for a masked key, however
    finite the others are."""
    q = np.full((2, 4), 1e20, np.float32)
    k = np.ones((3, 4), np.float32)
    k[1] = -1e20  # q . k[1] = -4e40 / 2: -inf in float32
    v = np.ones((3, 2), np.float32)
    with pytest.raises(ValueError) as plain:
        A.scaled_dot_product_attention(q, k, v)
    for forward in (BW.attention, BW.online_softmax_attention):
        with pytest.raises(ValueError) as blocks:
            forward(q, k, v)
        assert str(blocks.value) == str(plain.value)
        assert "overflow float32" in str(blocks.value)


def test_values_whose_unnormalised_sum_overflows_are_reported():
    """The blocks divide by the sum of exp(score) after P @ V: values so huge that exp(score)
    * v summed over the keys overflows are reported as an overflow, naming the inputs, where
    the plain form (weights first) still finds their mean."""
    q = np.ones((2, 4), np.float32)
    k = np.ones((3, 4), np.float32)  # equal scores: weights 1/3
    v = np.full((3, 2), 3e38, np.float32)
    plain, _ = A.scaled_dot_product_attention(q, k, v)
    assert np.isfinite(plain).all()
    for forward in (BW.attention, BW.online_softmax_attention):
        with pytest.raises(
            ValueError, match=r"overflow float32 \(largest \|q\| = 1 .*\|v\| = 3e\+38"
        ):
            forward(q, k, v)


@pytest.mark.parametrize("n_k", [0, 3])
def test_empty_inputs(n_k):
    out = BW.attention(np.ones((2, 0, 4)), np.ones((2, n_k, 4)), np.ones((2, n_k, 5)))
    assert out.shape == (2, 0, 5)
    out = BW.attention(np.ones((3, 4)), np.ones((n_k, 4)), np.ones((n_k, 5)))
    assert out.shape == (3, 5) and (out == 0).all() == (n_k == 0)
