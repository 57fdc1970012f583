"""PyTorch as an independent reference for lib's attention.

nn.MultiheadAttention and F.scaled_dot_product_attention are loaded with lib's weights by
code written here (not by lib.torch_bridge, which has its own tests below) and must give
lib's outputs and per-head weights, within the tolerances the error model of lib/rounding.py
gives for each entry (tests/tolerances.py: mha_tolerances, sdpa_tolerances). Where the two
libraries define a case differently (a query with nothing to attend to) both behaviours are
pinned down.
"""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances, sdpa_tolerances
from torch import nn
from torch.nn import functional as F

from lib import attention as A
from lib import torch_bridge as TB

seeds = st.integers(min_value=0, max_value=2**32 - 1)
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def torch_mha(params: A.MHAParams, dtype) -> nn.MultiheadAttention:
    """nn.MultiheadAttention holding params: torch computes x @ W.T, we compute x @ W."""
    d, h = params.d_model, params.n_heads
    module = nn.MultiheadAttention(d, h, bias=params.has_bias, batch_first=True, dtype=dtype)
    with torch.no_grad():
        for i, W in enumerate((params.W_q, params.W_k, params.W_v)):
            module.in_proj_weight[i * d : (i + 1) * d] = torch.from_numpy(W.T.copy())
        module.out_proj.weight[:] = torch.from_numpy(params.W_o.T.copy())
        if params.has_bias:
            for i, b in enumerate((params.b_q, params.b_k, params.b_v)):
                module.in_proj_bias[i * d : (i + 1) * d] = torch.from_numpy(b)
            module.out_proj.bias[:] = torch.from_numpy(params.b_o)
    return module.eval()


@st.composite
def cases(draw):
    return dict(
        batch=draw(st.integers(1, 3)),
        h=draw(st.sampled_from([1, 2, 3, 4])),
        d_k=draw(st.integers(1, 5)),
        n_q=draw(st.integers(1, 8)),
        n_k=draw(st.integers(1, 8)),
        bias=draw(st.booleans()),
        self_attention=draw(st.booleans()),
        causal=draw(st.booleans()),
        padding=draw(st.booleans()),
        per_head=draw(st.booleans()),
        dtype=draw(st.sampled_from([np.float64, np.float32])),
        seed=draw(seeds),
    )


def build(c):
    """lib inputs, lib mask and the same masks in torch's conventions."""
    rng = np.random.default_rng(c["seed"])
    d = c["h"] * c["d_k"]
    n_q = c["n_q"]
    n_k = n_q if c["self_attention"] else c["n_k"]
    params = A.init_mha_params(d, c["h"], rng, bias=c["bias"], dtype=c["dtype"])
    x_q = rng.normal(size=(c["batch"], n_q, d)).astype(c["dtype"])
    x_kv = x_q if c["self_attention"] else rng.normal(size=(c["batch"], n_k, d)).astype(c["dtype"])
    mask = np.ones((c["batch"], c["h"], n_q, n_k), dtype=bool)
    attn_mask = key_padding_mask = None
    if c["causal"]:
        mask &= A.causal_mask(n_q, n_k)
    if c["per_head"]:  # a random (batch, heads, n_q, n_k) mask
        mask &= rng.random(mask.shape) < 0.7
    mask[..., 0] = True  # no query is left with nothing (see the fully-masked tests below)
    if c["causal"] or c["per_head"]:  # torch: (batch * heads, n_q, n_k), True = blocked
        attn_mask = torch.from_numpy(~mask.reshape(-1, n_q, n_k))
    if c["padding"]:  # at least one real key per sequence: no row is fully masked
        lengths = rng.integers(1, n_k + 1, size=c["batch"])
        real = A.padding_mask(lengths, n_k)  # (batch, 1, 1, n_k)
        mask &= real
        key_padding_mask = torch.from_numpy(~real[:, 0, 0, :])  # True = padding
    lib_mask = mask if (c["causal"] or c["per_head"] or c["padding"]) else None
    return params, x_q, x_kv, lib_mask, attn_mask, key_padding_mask


@given(cases())
def test_multi_head_attention_matches_torch(c):
    params, x_q, x_kv, mask, attn_mask, key_padding_mask = build(c)
    out, weights = A.multi_head_attention(x_q, x_kv, params, mask)
    module = torch_mha(params, TORCH_DTYPE[c["dtype"]])
    tq = torch.from_numpy(x_q)
    tkv = tq if x_kv is x_q else torch.from_numpy(x_kv)
    masks = dict(attn_mask=attn_mask, key_padding_mask=key_padding_mask)
    t_out, t_weights = module(tq, tkv, tkv, **masks, average_attn_weights=False)
    w_tol, out_tol = mha_tolerances(c["dtype"], x_q, x_kv, params, mask)
    assert t_out.dtype == TORCH_DTYPE[c["dtype"]] and out.dtype == c["dtype"]
    assert_within(out, t_out.detach().numpy(), out_tol, "output")
    assert_within(weights, t_weights.detach().numpy(), w_tol, "weights")
    t_only, none = module(tq, tkv, tkv, **masks, need_weights=False)  # torch's SDPA route
    assert none is None
    assert_within(out, t_only.detach().numpy(), out_tol, "output without weights")


@given(cases())
def test_torch_fast_path_matches_lib_in_inference(c):
    """In eval mode without autograd, self-attention with an even head count takes torch's
    fused 'fast path' (a different kernel): it must agree too."""
    c = {**c, "self_attention": True, "h": 2 * (c["h"] % 2 + 1)}
    params, x, _, mask, attn_mask, key_padding_mask = build(c)
    module = torch_mha(params, TORCH_DTYPE[c["dtype"]])
    tx = torch.from_numpy(x)
    masks = dict(attn_mask=attn_mask, key_padding_mask=key_padding_mask)
    with torch.inference_mode():
        t_out, t_weights = module(tx, tx, tx, **masks, average_attn_weights=False)
    out, weights = A.multi_head_attention(x, x, params, mask)
    w_tol, out_tol = mha_tolerances(c["dtype"], x, x, params, mask)
    assert_within(out, t_out.numpy(), out_tol, "output")
    assert_within(weights, t_weights.numpy(), w_tol, "weights")


@given(
    batch=st.integers(1, 3),
    n_q=st.integers(1, 7),
    n_k=st.integers(1, 7),
    d_k=st.integers(1, 5),
    d_v=st.integers(1, 5),
    masked=st.booleans(),
    dtype=st.sampled_from([np.float64, np.float32]),
    seed=seeds,
)
def test_sdpa_matches_torch(batch, n_q, n_k, d_k, d_v, masked, dtype, seed):
    """F.scaled_dot_product_attention's boolean mask means what ours means (True = attend)."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, n_q, d_k)).astype(dtype)
    k = rng.normal(size=(batch, n_k, d_k)).astype(dtype)
    v = rng.normal(size=(batch, n_k, d_v)).astype(dtype)
    mask = None
    if masked:
        mask = rng.random((batch, n_q, n_k)) < 0.6  # fully masked rows included
    out, _ = A.scaled_dot_product_attention(q, k, v, mask)
    t_out = F.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)),
        attn_mask=None if mask is None else torch.from_numpy(mask),
    )
    assert_within(out, t_out.numpy(), sdpa_tolerances(dtype, q, k, v, mask)[1], "output")


def test_causal_flag_equals_causal_mask():
    rng = np.random.default_rng(3)
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(2, 5, 8))
    module = torch_mha(params, torch.float64)
    tx = torch.from_numpy(x)
    blocked = torch.from_numpy(~A.causal_mask(5))
    t_out, _ = module(tx, tx, tx, attn_mask=blocked, is_causal=True, need_weights=False)
    out, _ = A.multi_head_attention(x, x, params, A.causal_mask(5))
    _, out_tol = mha_tolerances(np.float64, x, x, params, A.causal_mask(5))
    assert_within(out, t_out.detach().numpy(), out_tol, "output")


@pytest.mark.parametrize(("n_q", "n_k"), [(1, 1), (2, 4), (3, 7), (5, 5)])
def test_causal_lower_right_gives_our_causal_masks_answer(n_q, n_k):
    # Notebook 08 names torch.nn.attention.bias.causal_lower_right as torch's spelling of our
    # causal mask for n_q <= n_k (queries the last n_q of n_k positions); here it is checked.
    from torch.nn.attention.bias import causal_lower_right

    rng = np.random.default_rng(n_q * 10 + n_k)
    q = rng.normal(size=(2, 3, n_q, 4))  # (batch, heads, n_q, d_k)
    k, v = rng.normal(size=(2, 2, 3, n_k, 4))  # each (batch, heads, n_k, d_k)
    mask = A.causal_mask(n_q, n_k)
    ours, _ = A.scaled_dot_product_attention(q, k, v, mask)
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    theirs = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=causal_lower_right(n_q, n_k))
    assert_within(ours, theirs.numpy(), sdpa_tolerances(np.float64, q, k, v, mask)[1], "output")


# --------------------------------------------------------------------------- fully masked


@pytest.fixture
def fully_masked():
    """Query 0 may attend to nothing (row 0 of the mask is all False)."""
    rng = np.random.default_rng(7)
    params = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(1, 3, 8))
    mask = np.ones((3, 3), dtype=bool)
    mask[0] = False
    return params, x, mask


def test_fully_masked_row_torch_mha_with_weights_gives_nan(fully_masked):
    """nn.MultiheadAttention (torch 2.13) returns NaN weights and a NaN output for that
    query, in its general path and in its inference fast path; other rows are unaffected."""
    params, x, mask = fully_masked
    module = torch_mha(params, torch.float64)
    tx = torch.from_numpy(x)
    blocked = torch.from_numpy(~mask)
    t_out, t_w = module(tx, tx, tx, attn_mask=blocked, average_attn_weights=False)
    with torch.inference_mode():
        f_out, f_w = module(tx, tx, tx, attn_mask=blocked, average_attn_weights=False)
    out, w = A.multi_head_attention(x, x, params, mask)
    w_tol, out_tol = mha_tolerances(np.float64, x, x, params, mask)
    for o, ww in ((t_out.detach(), t_w.detach()), (f_out, f_w)):
        assert torch.isnan(o[0, 0]).all() and torch.isnan(ww[0, :, 0]).all()
        assert_within(o[0, 1:].numpy(), out[0, 1:], out_tol[0, 1:], "output")
        assert_within(ww[0, :, 1:].numpy(), w[0, :, 1:], w_tol[0, :, 1:], "weights")


def test_fully_masked_row_torch_without_weights_depends_on_the_route(fully_masked):
    """need_weights=False with autograd on goes through SDPA, which gives that query a zero
    attention output (so the layer outputs b_o, like lib); the inference fast path gives
    NaN."""
    params, x, mask = fully_masked
    module = torch_mha(params, torch.float64)
    tx = torch.from_numpy(x)
    blocked = torch.from_numpy(~mask)
    t_out, _ = module(tx, tx, tx, attn_mask=blocked, need_weights=False)
    _, out_tol = mha_tolerances(np.float64, x, x, params, mask)
    assert_within(t_out[0, 0].detach().numpy(), params.b_o, out_tol[0, 0], "output")
    with torch.inference_mode():
        f_out, _ = module(tx, tx, tx, attn_mask=blocked, need_weights=False)
    assert torch.isnan(f_out[0, 0]).all()


def test_fully_masked_row_sdpa_gives_zero():
    rng = np.random.default_rng(8)
    q = torch.from_numpy(rng.normal(size=(1, 3, 4)))
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[0] = False
    for m in (mask, torch.zeros(3, 3, dtype=torch.float64).masked_fill(~mask, -torch.inf)):
        out = F.scaled_dot_product_attention(q, q, q, attn_mask=m)
        assert torch.equal(out[0, 0], torch.zeros(4, dtype=torch.float64))


# --------------------------------------------------------------------------- lib.torch_bridge


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bridge_round_trip_and_equal_modules(bias, dtype):
    rng = np.random.default_rng(11)
    params = A.init_mha_params(12, 3, rng, bias=bias, dtype=dtype)
    module = TB.to_torch_mha(params)
    reference = torch_mha(params, TORCH_DTYPE[dtype])
    for (name, a), (_, b) in zip(
        module.state_dict().items(), reference.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    back = TB.from_torch_mha(module)
    for name in ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o"):
        a, b = getattr(back, name), getattr(params, name)
        assert (a is None and b is None) or np.array_equal(a, b), name
    assert back.n_heads == 3


def test_bridge_mask():
    mask = A.causal_mask(3)
    assert torch.equal(TB.to_torch_attn_mask(mask), torch.from_numpy(~mask))
