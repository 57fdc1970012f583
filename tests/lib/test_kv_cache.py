"""Grouped-query attention and decoding with a KV cache (lib.kv_cache, notebook 10): how the
heads are grouped, pooled and counted, and what the Decoder keeps between calls. That both
give lib.attention.multi_head_attention's answer, and torch's, is in test_contract.py."""

import dataclasses

import numpy as np
import pytest
from tolerances import assert_within, mha_tolerances

from lib import attention as A
from lib import kv_cache as KV
from lib import rounding as R


def test_query_heads_of_a_group_share_their_key_value_head():
    """Zero the values of key/value head 1: with 4 query heads and 2 key/value heads, query
    heads 2 and 3 then output 0 and heads 0 and 1 do not: repeat_interleave's order, not
    repeat's (which would pair query heads 0, 2 with kv head 0 and 1, 3 with kv head 1)."""
    rng = np.random.default_rng(3)
    p = KV.init_gqa_params(8, 4, 2, rng)
    assert (p.n_heads, p.n_kv_heads, p.W_k.shape) == (4, 2, (8, 4))
    x = rng.normal(size=(1, 5, 8))
    zeroed = dataclasses.replace(p, W_v=np.where(np.arange(4) < 2, 1.0, 0.0) * p.W_v)
    heads = KV.grouped_query_attention(x, x, dataclasses.replace(zeroed, W_o=np.eye(8)))[0]
    assert np.abs(heads[..., :4]).min() > 0  # query heads 0, 1: key/value head 0
    np.testing.assert_array_equal(heads[..., 4:], 0.0)  # query heads 2, 3: kv head 1, zeroed
    full = KV.repeat_kv_heads(zeroed)
    assert type(full) is A.MHAParams and full.W_v.shape == (8, 8)
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
        KV.grouped_query_attention(x, x, same)[0], A.multi_head_attention(x, x, p)[0], out_tol
    )

    def mean_tol(a, axis):  # a mean of m numbers: m - 1 sums and a division
        return R.tolerance(np.float64, a.shape[axis], np.abs(a).mean(axis=axis))

    g = KV.gqa_from_mha(p, 2)  # groups of three heads: 0-2 and 3-5
    assert isinstance(g, KV.GQAParams) and (g.n_heads, g.n_kv_heads) == (6, 2)
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
            p = KV.init_gqa_params(d, h, kv, rng, bias=bias)
            width = kv * (d // h)
            assert A.count_params(p) == 2 * d * d + 2 * d * width + bias * (2 * d + 2 * width)
    assert A.count_params(A.init_mha_params(d, h, rng, bias=True)) == 4 * d * d + 4 * d
    # Llama 3.1 8B: 32 layers, 8 key/value heads of 128, bfloat16: 128 KiB per token
    assert KV.cache_bytes_per_token(32, 8, 128, 2) == 128 * 1024


# --------------------------------------------------------------------------- decoding


def test_reset_forgets_the_tokens():
    rng = np.random.default_rng(6)
    p = A.init_mha_params(16, 4, rng, bias=True)
    x = rng.normal(size=(16, 16))
    decoder = KV.Decoder(p, max_len=16)
    prompt = decoder(x[:10])
    decoder(x[10:])
    assert decoder.cache_bytes == 2 * 16 * 16 * 8  # keys and values: 16 tokens x d = 16, float64
    decoder.reset()
    assert decoder.length == 0 and decoder.cache_bytes == 0
    np.testing.assert_array_equal(decoder(x[:10]), prompt)  # the same computation again


def test_a_failed_step_leaves_the_cache_as_it_was():
    rng = np.random.default_rng(7)
    p = KV.init_gqa_params(8, 4, 2, rng, dtype=np.float32)
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
    p = KV.init_gqa_params(8, 2, 1, rng)
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
    p = KV.init_gqa_params(12, 6, 2, rng, dtype=np.float32)  # d_k = 2
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
    want = KV.grouped_query_attention(whole, whole, p, causal=True)[0]
    tol = mha_tolerances(np.float32, whole, whole, p, A.causal_mask(6))[1]
    assert_within(rest, want[:, 3:], tol[:, 3:], "float64 steps after float32 ones")
    decoder.reset()
    again = decoder(x32)
    assert again.dtype == decoder.keys.dtype == np.float32
    want32 = KV.grouped_query_attention(x32, x32, p, causal=True)[0]
    tol = mha_tolerances(np.float32, x32, x32, p, A.causal_mask(6))[1]
    assert_within(again, want32, tol, "float32 again")


def test_a_loaded_cache_decodes_as_if_its_tokens_had_been_decoded():
    rng = np.random.default_rng(10)
    p = KV.init_gqa_params(12, 6, 3, rng, bias=True)
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
