"""Grouped-query attention and decoding with a KV cache (lib.kv_cache, notebook 10), against
lib's multi-head attention and against PyTorch: SDPA with ``enable_gqa=True``, the same with
the key/value heads repeat_interleave'd, and a torch decoder that concatenates its own
cache. Each within the tolerance the error model of lib/rounding.py gives for each entry
(tests/tolerances.py, mha_tolerances)."""

import dataclasses

import numpy as np
import pytest
import torch
from helpers import TINY_BLOCKS, kernel_sizes
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances
from torch.nn import functional as F

from lib import attention as A
from lib import blockwise as BW
from lib import kv_cache as KV
from lib import rounding as R

seeds = st.integers(min_value=0, max_value=2**32 - 1)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@st.composite
def cases(draw):
    n_kv = draw(st.sampled_from([1, 2, 3]))
    return dict(
        batch=draw(st.integers(1, 3)),
        n_kv=n_kv,
        group=draw(st.sampled_from([1, 2, 4])),
        d_k=draw(st.integers(1, 4)),
        n_q=draw(st.integers(1, 7)),
        n_k=draw(st.integers(1, 7)),
        self_attention=draw(st.booleans()),
        bias=draw(st.booleans()),
        mask=draw(st.sampled_from(["none", "causal", "padding", "per-head"])),
        dtype=draw(st.sampled_from([np.float64, np.float32])),
        seed=draw(seeds),
    )


def build(c):
    rng = np.random.default_rng(c["seed"])
    h = c["n_kv"] * c["group"]
    d = h * c["d_k"]
    n_q = c["n_q"]
    n_k = n_q if c["self_attention"] else c["n_k"]
    params = A.init_mha_params(d, h, rng, bias=c["bias"], dtype=c["dtype"], n_kv_heads=c["n_kv"])
    x_q = rng.normal(size=(c["batch"], n_q, d)).astype(c["dtype"])
    x_kv = x_q if c["self_attention"] else rng.normal(size=(c["batch"], n_k, d)).astype(c["dtype"])
    mask = {
        "none": lambda: None,
        "causal": lambda: A.causal_mask(n_q, n_k),
        "padding": lambda: A.padding_mask(rng.integers(1, n_k + 1, size=c["batch"]), n_k),
        "per-head": lambda: rng.random((c["batch"], h, n_q, n_k)) < 0.7,
    }[c["mask"]]()
    if mask is not None:  # torch gives NaN to a query with nothing to attend to
        mask = np.broadcast_to(mask, (c["batch"], h, n_q, n_k)).copy()
        mask[..., 0] = True
    return params, x_q, x_kv, mask


def expanded(p: A.MHAParams) -> A.MHAParams:
    """The same layer with one key/value head per query head: each key/value head's
    columns repeated for every query head of its group (repeat_interleave's order)."""

    def repeated(a):
        if a is None:
            return None
        heads = a.reshape(a.shape[:-1] + (p.n_kv_heads, p.d_k))
        return np.repeat(heads, p.group, axis=-2).reshape(a.shape[:-1] + (p.d_model,))

    return A.MHAParams(
        p.W_q, repeated(p.W_k), repeated(p.W_v), p.W_o, p.n_heads,
        p.b_q, repeated(p.b_k), repeated(p.b_v), p.b_o,
    )  # fmt: skip


def torch_gqa(params: A.MHAParams, x_q, x_kv, mask, repeat: bool):
    """The layer in torch: projections, then SDPA with enable_gqa=True, or with the
    key/value heads repeat_interleave'd to one per query head."""
    b, n_q, d = x_q.shape
    h, kv, d_k = params.n_heads, params.n_kv_heads, params.d_k

    def heads(x, W, bias, n_heads):
        y = t(x) @ t(W) + (0 if bias is None else t(bias))
        return y.view(b, -1, n_heads, d_k).transpose(1, 2)

    q = heads(x_q, params.W_q, params.b_q, h)
    k = heads(x_kv, params.W_k, params.b_k, kv)
    v = heads(x_kv, params.W_v, params.b_v, kv)
    attn_mask = None if mask is None else t(mask)
    if repeat:
        k, v = (a.repeat_interleave(params.group, dim=1) for a in (k, v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    else:
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)
    out = o.transpose(1, 2).reshape(b, n_q, d) @ t(params.W_o)
    return (out + (0 if params.b_o is None else t(params.b_o))).numpy()


@settings(max_examples=60)
@given(cases())
def test_gqa_matches_torch_and_the_same_layer_as_multi_head(c):
    params, x_q, x_kv, mask = build(c)
    out, weights = BW.multi_head_attention(x_q, x_kv, params, mask)
    with kernel_sizes(**TINY_BLOCKS):  # a long sequence's blocks, cut tiny
        out_only, none = BW.multi_head_attention(x_q, x_kv, params, mask, need_weights=False)
    w_tol, out_tol = mha_tolerances(c["dtype"], x_q, x_kv, params, mask)
    assert out.dtype == weights.dtype == c["dtype"] and none is None
    assert weights.shape == (c["batch"], params.n_heads, x_q.shape[1], x_kv.shape[1])
    for repeat in (False, True):
        want = torch_gqa(params, x_q, x_kv, mask, repeat)
        assert_within(out, want, out_tol, f"torch, repeat={repeat}")
        assert_within(out_only, want, out_tol, f"no weights, torch, repeat={repeat}")
    mha_out, mha_w = A.multi_head_attention(x_q, x_kv, expanded(params), mask)
    assert_within(out, mha_out, out_tol, "multi-head")
    assert_within(weights, mha_w, w_tol, "multi-head weights")
    readable_out, readable_w = A.multi_head_attention(x_q, x_kv, params, mask)  # grouped
    assert_within(readable_out, mha_out, out_tol, "readable form, grouped")
    assert_within(readable_w, mha_w, w_tol, "readable form's weights, grouped")
    # query head i reads key/value head i // group: heads of one group see the same keys
    per_head = A.multi_head_attention_per_head(x_q, x_kv, expanded(params), mask)[1]
    assert_within(weights, per_head, w_tol, "per head")


def test_query_heads_of_a_group_share_their_key_value_head():
    """Zero the values of key/value head 1: with 4 query heads and 2 key/value heads, query
    heads 2 and 3 then output 0 and heads 0 and 1 do not: repeat_interleave's order, not
    repeat's (which would pair query heads 0, 2 with kv head 0 and 1, 3 with kv head 1)."""
    rng = np.random.default_rng(3)
    p = A.init_mha_params(8, 4, rng, n_kv_heads=2)
    x = rng.normal(size=(1, 5, 8))
    zeroed = dataclasses.replace(p, W_v=np.where(np.arange(4) < 2, 1.0, 0.0) * p.W_v)
    heads = BW.multi_head_attention(x, x, dataclasses.replace(zeroed, W_o=np.eye(8)))[0]
    assert np.abs(heads[..., :4]).min() > 0  # query heads 0, 1: key/value head 0
    np.testing.assert_array_equal(heads[..., 4:], 0.0)  # query heads 2, 3: kv head 1, zeroed
    full = expanded(zeroed)
    np.testing.assert_array_equal(full.W_v[:, 2:4], zeroed.W_v[:, 0:2])  # head 1: kv 0
    np.testing.assert_array_equal(full.W_v[:, 4:6], zeroed.W_v[:, 2:4])  # head 2: kv 1
    np.testing.assert_array_equal(full.W_v[:, 4:], 0.0)


def test_mean_pooling_a_trained_layer():
    rng = np.random.default_rng(4)
    p = A.init_mha_params(12, 6, rng, bias=True)
    same = KV.gqa_from_mha(p, 6)
    x = rng.normal(size=(2, 4, 12))
    out_tol = mha_tolerances(np.float64, x, x, p)[1]
    assert_within(
        BW.multi_head_attention(x, x, same)[0], A.multi_head_attention(x, x, p)[0], out_tol
    )

    def mean_tol(a, axis):  # a mean of m numbers: m - 1 sums and a division
        return R.tolerance(np.float64, a.shape[axis], np.abs(a).mean(axis=axis))

    g = KV.gqa_from_mha(p, 2)  # groups of three heads: 0-2 and 3-5
    assert (g.n_heads, g.n_kv_heads, g.group) == (6, 2, 3)
    groups = p.W_k[:, :6].reshape(12, 3, 2)
    assert_within(g.W_k[:, :2], groups.mean(axis=1), mean_tol(groups, 1), "W_k")
    groups = p.b_v[6:].reshape(3, 2)
    assert_within(g.b_v[2:], groups.mean(axis=0), mean_tol(groups, 0), "b_v")
    assert g.W_q is p.W_q and g.W_o is p.W_o
    mqa = KV.gqa_from_mha(p, 1)
    groups = p.W_v.reshape(12, 6, 2)
    assert_within(mqa.W_v, groups.mean(axis=1), mean_tol(groups, 1), "W_v, one group")


def test_parameter_and_cache_counts():
    rng = np.random.default_rng(5)
    d, h = 16, 8
    for kv in (8, 4, 1):
        for bias in (False, True):
            p = A.init_mha_params(d, h, rng, bias=bias, n_kv_heads=kv)
            width = kv * (d // h)
            assert A.count_params(p) == 2 * d * d + 2 * d * width + bias * (2 * d + 2 * width)
    assert A.count_params(A.init_mha_params(d, h, rng, bias=True)) == 4 * d * d + 4 * d
    # Llama 3.1 8B: 32 layers, 8 key/value heads of 128, bfloat16: 128 KiB per token
    assert KV.cache_bytes_per_token(32, 8, 128, 2) == 128 * 1024


# --------------------------------------------------------------------------- decoding


class TorchDecoder:
    """A decoder in torch that keeps its own cache by concatenation (torch.cat)."""

    def __init__(self, params: A.MHAParams):
        self.p, self.k, self.v = params, None, None

    def __call__(self, x):
        p = self.p
        b, n, d = x.shape

        def heads(W, bias, count):
            y = t(x) @ t(W) + (0 if bias is None else t(bias))
            return y.view(b, n, count, p.d_k).transpose(1, 2)

        q = heads(p.W_q, p.b_q, p.n_heads)
        k, v = heads(p.W_k, p.b_k, p.n_kv_heads), heads(p.W_v, p.b_v, p.n_kv_heads)
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        mask = t(A.causal_mask(n, self.k.shape[2]))  # the new queries are the last n
        o = F.scaled_dot_product_attention(q, self.k, self.v, attn_mask=mask, enable_gqa=True)
        out = o.transpose(1, 2).reshape(b, n, d) @ t(p.W_o)
        return (out + (0 if p.b_o is None else t(p.b_o))).numpy()


@settings(max_examples=40)
@given(
    st.integers(1, 2),
    st.sampled_from([(2, 2), (4, 2), (4, 1), (3, 3)]),
    st.integers(1, 3),
    st.lists(st.integers(0, 4), min_size=1, max_size=5),  # tokens added per call
    st.booleans(),
    st.sampled_from([np.float64, np.float32]),
    seeds,
    st.booleans(),
)
def test_decoding_with_a_cache_equals_recomputing_and_torch(
    batch, heads, d_k, steps, bias, dtype, seed, tiles
):
    with kernel_sizes(**(TINY_BLOCKS if tiles else {})):  # tiny blocks: prompts use them
        decode_and_compare(batch, heads, d_k, steps, bias, dtype, seed)


def decode_and_compare(batch, heads, d_k, steps, bias, dtype, seed):
    h, kv = heads
    rng = np.random.default_rng(seed)
    d = h * d_k
    params = A.init_mha_params(d, h, rng, bias=bias, dtype=dtype, n_kv_heads=kv)
    n = sum(steps)
    x = rng.normal(size=(batch, n, d)).astype(dtype)
    decoder, reference = KV.Decoder(params, batch=batch, max_len=max(n, 1)), TorchDecoder(params)
    outs = []
    start = 0
    for step in steps:
        got = decoder(x[:, start : start + step])
        assert got.shape == (batch, step, d) and got.dtype == dtype
        if step:
            seen = x[:, : start + step]
            tol = mha_tolerances(dtype, seen, seen, params, A.causal_mask(start + step))[1]
            assert_within(got, reference(x[:, start : start + step]), tol[:, start:], "torch")
        outs.append(got)
        start += step
    assert decoder.length == n and decoder.keys.shape == (batch, kv, n, d_k)
    want = BW.multi_head_attention(x, x, params, A.causal_mask(n))[0]
    tol = mha_tolerances(dtype, x, x, params, A.causal_mask(n))[1]
    assert_within(np.concatenate(outs, axis=1), want, tol, "recomputed")


def test_a_multi_head_layer_decodes_as_its_own_forward():
    rng = np.random.default_rng(6)
    p = A.init_mha_params(16, 4, rng, bias=True)
    x = rng.normal(size=(16, 16))
    decoder = KV.Decoder(p, max_len=16)
    prompt = decoder(x[:10])
    steps = [decoder(x[i : i + 1]) for i in range(10, 16)]
    got = np.concatenate([prompt, *steps])
    want = A.multi_head_attention(x, x, p, A.causal_mask(16))[0]
    assert_within(got, want, mha_tolerances(np.float64, x, x, p, A.causal_mask(16))[1])
    assert decoder.cache_bytes == 2 * 16 * 16 * 8  # keys and values: 16 tokens x d = 16, float64
    decoder.reset()
    assert decoder.length == 0 and decoder.cache_bytes == 0
    np.testing.assert_array_equal(decoder(x[:10]), prompt)  # the same computation again


def test_a_failed_step_leaves_the_cache_as_it_was():
    rng = np.random.default_rng(7)
    p = A.init_mha_params(8, 4, rng, dtype=np.float32, n_kv_heads=2)
    decoder = KV.Decoder(p, max_len=4)
    decoder(np.ones((2, 8), np.float32))
    keys = decoder.keys.copy()
    with pytest.raises(ValueError, match="x_new contains NaN"):
        decoder(np.full((1, 8), np.nan, np.float32))
    with pytest.raises(ValueError, match="overflow float32"):
        decoder(np.full((1, 8), 3e38, np.float32))
    with pytest.raises(ValueError, match="has 2: 3 more do not fit"):
        decoder(np.ones((3, 8), np.float32))
    assert decoder.length == 2
    np.testing.assert_array_equal(decoder.keys, keys)
    decoder(np.ones((2, 8), np.float32))
    assert decoder.length == 4


def test_the_decoder_keeps_its_own_copy_of_the_weights():
    rng = np.random.default_rng(8)
    p = A.init_mha_params(8, 2, rng, n_kv_heads=1)
    decoder = KV.Decoder(p)
    x = rng.normal(size=(3, 8))
    before = decoder(x)
    p.W_q[:] = np.nan  # changed in place after the decoder was built
    decoder.reset()
    np.testing.assert_array_equal(decoder(x), before)


def test_wider_tokens_widen_the_cache_until_reset():
    """float32 weights, then float64 tokens: computed in float64 (NumPy's promotion), with the
    keys cached so far widened; a step that fails leaves the cache as it was, dtype included;
    reset() goes back to the weights' float32."""
    rng = np.random.default_rng(9)
    p = A.init_mha_params(12, 6, rng, dtype=np.float32, n_kv_heads=2)  # d_k = 2
    x = rng.normal(size=(1, 6, 12))
    x32 = x.astype(np.float32)
    decoder = KV.Decoder(p, max_len=6)
    first = decoder(x32[:, :3])
    assert first.dtype == decoder.keys.dtype == np.float32
    keys = decoder.keys.copy()
    with pytest.raises(ValueError, match="overflow float64"):
        decoder(np.full((1, 1, 12), 1e307))
    assert decoder.keys.dtype == np.float32 and decoder.length == 3
    np.testing.assert_array_equal(decoder.keys, keys)
    rest = decoder(x[:, 3:])
    assert rest.dtype == decoder.keys.dtype == np.float64
    np.testing.assert_array_equal(decoder.keys[:, :, :3], keys)  # widened exactly
    # the first three keys were computed in float32: float32's accuracy for the rest
    whole = np.concatenate([x32[:, :3].astype(np.float64), x[:, 3:]], axis=1)
    want = BW.multi_head_attention(whole, whole, p, A.causal_mask(6))[0]
    tol = mha_tolerances(np.float32, whole, whole, p, A.causal_mask(6))[1]
    assert_within(rest, want[:, 3:], tol[:, 3:], "float64 steps after float32 ones")
    decoder.reset()
    again = decoder(x32)
    assert again.dtype == decoder.keys.dtype == np.float32
    want32 = BW.multi_head_attention(x32, x32, p, A.causal_mask(6))[0]
    tol = mha_tolerances(np.float32, x32, x32, p, A.causal_mask(6))[1]
    assert_within(again, want32, tol, "float32 again")


def test_a_loaded_cache_decodes_as_if_its_tokens_had_been_decoded():
    rng = np.random.default_rng(10)
    p = A.init_mha_params(12, 6, rng, bias=True, n_kv_heads=3)
    x = rng.normal(size=(2, 9, 12))
    decoded = KV.Decoder(p, batch=2, max_len=9)
    decoded(x[:, :7])
    loaded = KV.Decoder(p, batch=2, max_len=9)
    loaded.load(decoded.keys, decoded.values)
    assert loaded.length == 7 and loaded.cache_bytes == decoded.cache_bytes
    np.testing.assert_array_equal(loaded.keys, decoded.keys)
    np.testing.assert_array_equal(loaded(x[:, 7:]), decoded(x[:, 7:]))  # the same computation
    loaded.load(np.zeros((2, 3, 0, 2)), np.zeros((2, 3, 0, 2)))  # an empty cache: a reset
    assert loaded.length == 0


def test_load_names_what_does_not_fit():
    p = A.init_mha_params(8, 4, np.random.default_rng(11), n_kv_heads=2)  # d_k = 2
    decoder = KV.Decoder(p, max_len=5)
    good = np.ones((1, 2, 3, 2))
    with pytest.raises(ValueError, match=r"keys must be \(batch, n_kv_heads, L, d_k\) = "
                       r"\(1, 2, L, 2\), got shape \(1, 4, 3, 2\)"):  # fmt: skip
        decoder.load(np.ones((1, 4, 3, 2)), good)
    with pytest.raises(ValueError, match=r"values must be .* got shape \(1, 2, 3\)"):
        decoder.load(good, np.ones((1, 2, 3)))
    with pytest.raises(ValueError, match=r"keys \(1, 2, 3, 2\) and values \(1, 2, 4, 2\)"):
        decoder.load(good, np.ones((1, 2, 4, 2)))
    with pytest.raises(ValueError, match="at most max_len=5 tokens, got 6"):
        decoder.load(np.ones((1, 2, 6, 2)), np.ones((1, 2, 6, 2)))
    with pytest.raises(ValueError, match="values contains NaN"):
        decoder.load(good, np.full((1, 2, 3, 2), np.nan))
    assert decoder.length == 0
