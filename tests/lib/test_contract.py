"""One reference, many agreements. ``lib.attention.multi_head_attention`` is the reference:
every other multi-head forward of lib gives its answer, for every combination of the
contract's options (README, "Conventions") that hypothesis generates: masks of any shape
that broadcasts, ``causal``, biases, float32, float64 and mixtures of both, lists,
unbatched inputs, ``need_weights``, cross-attention. Each within the tolerance
tests/tolerances.py derives for each entry, from the reference on float64 copies of the
same numbers.

The forwards: the per-head loop, lib.blockwise's fast path, lib.backprop.mha_forward,
lib.kv_cache's Decoder (a prompt, then token by token) and grouped_query_attention, and
nn.MultiheadAttention loaded by lib.torch_bridge. The reference itself is checked against
PyTorch by code written independently of lib in test_torch_reference.py; what each forward
does with bad input is in test_bad_inputs.py.
"""

import math

import numpy as np
import pytest
from helpers import TINY_BLOCKS, kernel_sizes
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import assert_within, mha_tolerances

from lib import _validate as valid
from lib import attention as A
from lib import backprop as BP
from lib import blockwise as BW
from lib import kv_cache as KV

seeds = st.integers(min_value=0, max_value=2**32 - 1)
dtypes = st.sampled_from([np.float64, np.float32])
ARRAYS = ("x_q", "x_kv") + valid.PARAM_NAMES
OTHER = {np.float64: np.float32, np.float32: np.float64}


def as_float64(p: A.MHAParams) -> A.MHAParams:
    """The same layer (GQAParams included) with float64 copies of its numbers."""
    arrays = {name: a.astype(np.float64) for name, a in p.arrays().items()}
    return type(p)(
        **arrays, **{f: getattr(p, f) for f in ("n_heads", "n_kv_heads") if hasattr(p, f)}
    )


def expanded(p: A.MHAParams) -> A.MHAParams:
    """A grouped layer as the multi-head layer it is, built here rather than by lib: each
    key/value head's columns repeated for every query head of its group (repeat_interleave's
    order: query head i reads key/value head i // group)."""
    group = p.n_heads // getattr(p, "n_kv_heads", p.n_heads)
    arrays = p.arrays()
    for name in ("W_k", "W_v", "b_k", "b_v"):
        if name in arrays:
            a = arrays[name]
            heads = a.reshape(a.shape[:-1] + (-1, p.d_k))
            arrays[name] = np.repeat(heads, group, axis=-2).reshape(a.shape[:-1] + (p.d_model,))
    return A.MHAParams(**arrays, n_heads=p.n_heads)


def with_causal(mask, causal: bool, n_q: int, n_k: int):
    """The mask a forward applies: ``mask``, and causal_mask(n_q, n_k) with ``causal``."""
    if not causal:
        return mask
    return A.causal_mask(n_q, n_k) if mask is None else mask & A.causal_mask(n_q, n_k)


# --------------------------------------------------------------------------- the options


@st.composite
def cases(draw, mixed=True):
    """One call of a multi-head forward: shapes (d_k = 1: as many heads as features), a mask
    with each axis of (batch, heads, n_q, n_k) full or 1 and leading 1s dropped or kept (some
    queries left with no key at all), and the arrays in one dtype or (``mixed``) with a few
    of them in the other."""
    c = dict(
        batch=draw(st.integers(1, 3)),
        h=draw(st.sampled_from([1, 2, 3, 4])),
        d_k=draw(st.sampled_from([1, 1, 2, 3])),
        n_q=draw(st.integers(1, 6)),
        n_k=draw(st.integers(1, 6)),
        self_attention=draw(st.booleans()),
        bias=draw(st.booleans()),
        causal=draw(st.booleans()),
        need_weights=draw(st.booleans()),
        dtype=draw(dtypes),
        other=frozenset(),
        contiguous=draw(st.booleans()),
        lists=draw(st.booleans()),  # inputs and weights as nested Python lists
        unbatched=draw(st.booleans()),  # (n, d_model) inputs, when batch is 1
        mask_shape=None,
        seed=draw(seeds),
    )
    if mixed:
        c["other"] = draw(st.one_of(st.just(frozenset()), st.frozensets(st.sampled_from(ARRAYS))))
    if c["self_attention"]:
        c["n_k"] = c["n_q"]
    if draw(st.booleans()):
        full = draw(st.tuples(*[st.booleans()] * 4))
        axes = (c["batch"], c["h"], c["n_q"], c["n_k"])
        shape = [n if f else 1 for n, f in zip(axes, full, strict=True)]
        ones = next((i for i, n in enumerate(shape) if n != 1), 4)
        c["mask_shape"] = tuple(shape[draw(st.integers(0, min(ones, 3))) :])
    return c


def non_contiguous(a: np.ndarray) -> np.ndarray:
    """The same numbers in a view that is not C-contiguous."""
    if a.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    padded = np.zeros(2 * a.size, a.dtype)
    padded[::2] = a
    return padded[::2]


def build(c):
    """(the arrays as the case passes them, by name; the mask; float64 copies of x_q, x_kv
    (batched) and of the layer)."""
    rng = np.random.default_rng(c["seed"])
    d = c["h"] * c["d_k"]
    arrays = {name: rng.uniform(-0.6, 0.6, (d, d)) for name in valid.WEIGHT_NAMES}
    if c["bias"]:
        arrays |= {name: rng.normal(0, 0.3, d) for name in valid.BIAS_NAMES}
    arrays["x_q"] = rng.normal(size=(c["batch"], c["n_q"], d))
    arrays["x_kv"] = rng.normal(size=(c["batch"], c["n_k"], d))
    mask = None if c["mask_shape"] is None else rng.random(c["mask_shape"]) < 0.7
    arrays = {
        name: a.astype(OTHER[c["dtype"]] if name in c["other"] else c["dtype"])
        for name, a in arrays.items()
    }
    if c["self_attention"]:  # one array, passed twice
        arrays["x_kv"] = arrays["x_q"]
    if not c["contiguous"]:
        arrays = {name: non_contiguous(a) for name, a in arrays.items()}
        mask = None if mask is None else non_contiguous(mask)
        if c["self_attention"]:
            arrays["x_kv"] = arrays["x_q"]
    x64 = arrays["x_q"].astype(np.float64)
    kv64 = x64 if c["self_attention"] else arrays["x_kv"].astype(np.float64)
    p64 = A.MHAParams(
        **{n: a.astype(np.float64) for n, a in arrays.items() if n in valid.PARAM_NAMES},
        n_heads=c["h"],
    )
    given_arrays = dict(arrays)
    if c["unbatched"] and c["batch"] == 1:
        given_arrays["x_q"] = arrays["x_q"][0]
        given_arrays["x_kv"] = given_arrays["x_q"] if c["self_attention"] else arrays["x_kv"][0]
    if c["lists"]:
        given_arrays = {name: a.tolist() for name, a in given_arrays.items()}
        if c["self_attention"]:
            given_arrays["x_kv"] = given_arrays["x_q"]
    return given_arrays, mask, x64, kv64, p64


# --------------------------------------------------------------------------- every forward


@settings(max_examples=150)
@given(cases())
def test_every_forward_gives_the_references_answer(c):
    """Each forward, given the case's arrays (lists, unbatched, mixed dtypes...) and
    ``causal``, against the reference on float64 copies with causal_mask written into the mask:
    the answer, in NumPy's promotion of every input, weight and bias."""
    given_arrays, mask, x64, kv64, p64 = build(c)
    g = dict(given_arrays)
    g_q, g_kv = g.pop("x_q"), g.pop("x_kv")
    params = A.MHAParams(**g, n_heads=c["h"])
    dtype = np.result_type(*(np.asarray(a) for a in given_arrays.values()))
    causal, need_weights = c["causal"], c["need_weights"]
    unbatched = c["unbatched"] and c["batch"] == 1

    applied = with_causal(mask, causal, c["n_q"], c["n_k"])
    want_out, want_w = A.multi_head_attention(x64, kv64, p64, applied)
    w_tol, out_tol = mha_tolerances(dtype, x64, kv64, p64, applied)  # two computations

    options = dict(causal=causal)
    bp_q = np.asarray(g_q)[None] if unbatched else g_q  # mha_forward: batched only
    bp_kv = bp_q if c["self_attention"] else (np.asarray(g_kv)[None] if unbatched else g_kv)
    results = {
        "reference": A.multi_head_attention(
            g_q, g_kv, params, mask, **options, need_weights=need_weights
        ),
        "per head": A.multi_head_attention_per_head(g_q, g_kv, params, mask, **options),
        "fast": BW.multi_head_attention(
            g_q, g_kv, params, mask, **options, need_weights=need_weights
        ),
        "mha_forward": BP.mha_forward(bp_q, bp_kv, params, mask, **options)[:2],
    }
    with kernel_sizes(**TINY_BLOCKS):  # a long sequence's blocks of rows, cut tiny
        results["fast, tiny blocks"] = BW.multi_head_attention(
            g_q, g_kv, params, mask, **options, need_weights=need_weights
        )
    if unbatched:
        results["mha_forward"] = tuple(a[0] for a in results["mha_forward"])
        want_out, want_w, w_tol, out_tol = want_out[0], want_w[0], w_tol[0], out_tol[0]
    for name, (out, w) in results.items():
        assert out.dtype == dtype, name
        assert_within(out, want_out, out_tol, name)
        if w is None:
            assert not need_weights and name.startswith(("reference", "fast")), name
        else:
            assert w.dtype == dtype, name
            assert_within(w, want_w, w_tol, name + ", weights")


@settings(max_examples=60)
@given(cases(mixed=False))
def test_nn_multihead_attention_from_the_bridge_gives_the_references_answer(c):
    """nn.MultiheadAttention built by lib.torch_bridge, its mask from to_torch_attn_mask, on
    every row where some key may be attended (torch gives NaN elsewhere, see
    test_torch_reference.py)."""
    torch = pytest.importorskip("torch")
    from lib import torch_bridge as TB

    given_arrays, mask, x64, kv64, p64 = build(c)
    arrays = {name: np.asarray(a) for name, a in given_arrays.items()}  # torch takes arrays
    params = A.MHAParams(**{n: arrays[n] for n in arrays if n in valid.PARAM_NAMES}, n_heads=c["h"])
    batch, n_q, n_k = c["batch"], c["n_q"], c["n_k"]
    applied = with_causal(mask, c["causal"], n_q, n_k)
    mask4 = np.ones((batch, c["h"], n_q, n_k), bool)
    if applied is not None:
        mask4 &= applied
    want_out, want_w = A.multi_head_attention(x64, kv64, p64, applied)
    w_tol, out_tol = mha_tolerances(params.W_q.dtype, x64, kv64, p64, applied)

    def tensor(a):
        return torch.from_numpy(np.ascontiguousarray(a).reshape((-1,) + a.shape[-2:]))

    tq = tensor(arrays["x_q"])
    tkv = tq if c["self_attention"] else tensor(arrays["x_kv"])
    attn_mask = TB.to_torch_attn_mask(mask4.reshape(-1, n_q, n_k))
    with torch.no_grad():
        t_out, t_w = TB.to_torch_mha(params)(
            tq, tkv, tkv, attn_mask=attn_mask, average_attn_weights=False
        )
    seen = mask4.any(axis=-1)  # (batch, h, n_q): the query sees some key in that head
    rows = seen.all(axis=1)  # (batch, n_q): ... in every head
    assert_within(t_out.numpy()[rows], want_out[rows], out_tol[rows], "output")
    assert_within(t_w.numpy()[seen], want_w[seen], w_tol[seen], "weights")


# --------------------------------------------------------------------------- grouped heads


@st.composite
def gqa_cases(draw):
    return dict(
        batch=draw(st.integers(1, 2)),
        n_kv=draw(st.sampled_from([1, 2, 3])),
        group=draw(st.sampled_from([1, 2, 4])),
        d_k=draw(st.integers(1, 3)),
        n_q=draw(st.integers(1, 6)),
        n_k=draw(st.integers(1, 6)),
        self_attention=draw(st.booleans()),
        bias=draw(st.booleans()),
        mask=draw(st.sampled_from(["none", "causal", "padding", "per-head"])),
        need_weights=draw(st.booleans()),
        dtype=draw(dtypes),
        seed=draw(seeds),
    )


@settings(max_examples=60)
@given(gqa_cases())
def test_grouped_query_attention_is_the_repeated_layer_and_torchs(c):
    """KV.grouped_query_attention gives the answer of the multi-head layer whose key/value
    heads are repeated for their groups (built here) and of torch's SDPA with
    ``enable_gqa=True`` (where torch is present)."""
    rng = np.random.default_rng(c["seed"])
    h = c["n_kv"] * c["group"]
    d = h * c["d_k"]
    n_q = c["n_q"]
    n_k = n_q if c["self_attention"] else c["n_k"]
    p = KV.init_gqa_params(d, h, c["n_kv"], rng, bias=c["bias"], dtype=c["dtype"])
    x_q = rng.normal(size=(c["batch"], n_q, d)).astype(c["dtype"])
    x_kv = x_q if c["self_attention"] else rng.normal(size=(c["batch"], n_k, d)).astype(c["dtype"])
    mask, causal = None, c["mask"] == "causal"
    if c["mask"] == "padding":
        mask = A.padding_mask(rng.integers(0, n_k + 1, size=c["batch"]), n_k)
    elif c["mask"] == "per-head":
        mask = rng.random((c["batch"], h, n_q, n_k)) < 0.7
    out, w = KV.grouped_query_attention(
        x_q, x_kv, p, mask, causal=causal, need_weights=c["need_weights"]
    )
    applied = with_causal(mask, causal, n_q, n_k)
    w_tol, out_tol = mha_tolerances(c["dtype"], x_q, x_kv, p, applied)
    want_out, want_w = A.multi_head_attention(x_q, x_kv, expanded(p), applied)
    assert out.dtype == c["dtype"] and (w is None) == (not c["need_weights"])
    assert_within(out, want_out, out_tol, "the repeated layer")
    if w is not None:
        assert_within(w, want_w, w_tol, "the repeated layer's weights")

    torch = pytest.importorskip("torch")
    from torch.nn import functional as F

    def heads(x, W, b, count):  # (batch, n, count * d_k) -> (batch, count, n, d_k)
        y = torch.from_numpy(x) @ torch.from_numpy(W) + (0 if b is None else torch.from_numpy(b))
        return y.view(c["batch"], -1, count, c["d_k"]).transpose(1, 2)

    q = heads(x_q, p.W_q, p.b_q, h)
    k, v = heads(x_kv, p.W_k, p.b_k, c["n_kv"]), heads(x_kv, p.W_v, p.b_v, c["n_kv"])
    attn_mask = None if applied is None else torch.from_numpy(np.ascontiguousarray(applied))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=True)
    t_out = o.transpose(1, 2).reshape(c["batch"], n_q, d) @ torch.from_numpy(p.W_o)
    t_out = (t_out + (0 if p.b_o is None else torch.from_numpy(p.b_o))).numpy()
    seen = np.ones((c["batch"], h, n_q), bool)
    if applied is not None:  # torch may give NaN to a query with no key to attend to
        seen = np.broadcast_to(applied, (c["batch"], h, n_q, n_k)).any(axis=-1)
    rows = seen.all(axis=1)
    assert_within(out[rows], t_out[rows], out_tol[rows], "torch SDPA, enable_gqa=True")


# --------------------------------------------------------------------------- the decoder


@st.composite
def decoding_cases(draw):
    return dict(
        batch=draw(st.integers(1, 2)),
        heads=draw(st.sampled_from([(1, 1), (2, 2), (3, 3), (4, 2), (4, 1), (6, 3)])),
        d_k=draw(st.integers(1, 3)),
        steps=draw(st.lists(st.integers(0, 4), min_size=1, max_size=5)),  # tokens per call
        bias=draw(st.booleans()),
        dtype=draw(dtypes),  # the weights'
        token_dtype=draw(dtypes),
        unbatched=draw(st.booleans()),  # (t, d_model) tokens, when batch is 1
        seed=draw(seeds),
    )


@settings(max_examples=60)
@given(decoding_cases())
def test_decoding_gives_the_references_answer(c):
    """KV.Decoder fed a sequence in pieces (a prompt, then a few tokens at a time, or one)
    gives the causal self-attention of the whole sequence, row by row, for an MHAParams and
    a GQAParams (n_kv_heads < n_heads), in NumPy's promotion of the tokens and weights."""
    rng = np.random.default_rng(c["seed"])
    h, kv = c["heads"]
    d, n, batch = h * c["d_k"], sum(c["steps"]), c["batch"]
    if kv == h:
        p = A.init_mha_params(d, h, rng, bias=c["bias"], dtype=c["dtype"])
    else:
        p = KV.init_gqa_params(d, h, kv, rng, bias=c["bias"], dtype=c["dtype"])
    x = rng.normal(size=(batch, n, d)).astype(c["token_dtype"])
    unbatched = c["unbatched"] and batch == 1
    decoder = KV.Decoder(p, batch=batch, max_len=max(n, 1))
    outs, start = [], 0
    for step in c["steps"]:
        got = decoder(x[0, start : start + step] if unbatched else x[:, start : start + step])
        outs.append(got[None] if unbatched else got)
        start += step
    got = np.concatenate(outs, axis=1)
    dtype = np.result_type(x, p.W_q)
    assert got.shape == (batch, n, d) and got.dtype == dtype
    assert decoder.length == n and decoder.keys.shape == (batch, kv, n, c["d_k"])
    x64, p64 = x.astype(np.float64), as_float64(p)
    want = A.multi_head_attention(x64, x64, expanded(p64), causal=True)[0]
    tol = mha_tolerances(dtype, x64, x64, p64, A.causal_mask(n))[1]
    assert_within(got, want, tol, "decoded")


# --------------------------------------------------------------------------- edge cases


@st.composite
def empty_cases(draw):
    empty = draw(st.sampled_from(["batch", "n_q", "n_k", "n_q and n_k"]))
    return dict(
        batch=0 if empty == "batch" else draw(st.integers(1, 3)),
        n_q=0 if "n_q" in empty else draw(st.integers(1, 4)),
        n_k=0 if "n_k" in empty else draw(st.integers(1, 4)),
        h=draw(st.sampled_from([1, 2, 4])),
        bias=draw(st.booleans()),
        causal=draw(st.booleans()),
        dtype=draw(dtypes),
        seed=draw(seeds),
    )


@settings(max_examples=30)
@given(empty_cases())
def test_empty_sequences_have_a_defined_answer(c):
    """n_k = 0: every query attends to nothing (weights (..., n_q, 0), output b_o); n_q = 0 or
    batch = 0: empty outputs of the right shape. The same in every forward and the backward."""
    rng = np.random.default_rng(c["seed"])
    d = 2 * c["h"]
    params = A.init_mha_params(d, c["h"], rng, bias=c["bias"], dtype=c["dtype"])
    x_q = rng.normal(size=(c["batch"], c["n_q"], d)).astype(c["dtype"])
    x_kv = rng.normal(size=(c["batch"], c["n_k"], d)).astype(c["dtype"])
    causal = c["causal"]
    want_out = np.zeros((c["batch"], c["n_q"], d)) + (params.b_o if c["bias"] else 0)
    want_w = np.zeros((c["batch"], c["h"], c["n_q"], c["n_k"]))
    results = {
        "reference": A.multi_head_attention(x_q, x_kv, params, causal=causal),
        "per head": A.multi_head_attention_per_head(x_q, x_kv, params, causal=causal),
        "fast": BW.multi_head_attention(x_q, x_kv, params, causal=causal),
        "fast, no weights": BW.multi_head_attention(
            x_q, x_kv, params, causal=causal, need_weights=False
        ),
        "mha_forward": BP.mha_forward(x_q, x_kv, params, causal=causal)[:2],
    }
    for name, (out, w) in results.items():
        assert out.shape == want_out.shape and out.dtype == c["dtype"], name
        np.testing.assert_array_equal(out, want_out.astype(c["dtype"]), err_msg=name)
        if w is not None:
            assert w.shape == want_w.shape and w.dtype == c["dtype"], name
            np.testing.assert_array_equal(w, want_w, err_msg=name)
    _, _, cache = BP.mha_forward(x_q, x_kv, params, causal=causal)
    grads = BP.mha_backward(np.ones_like(want_out), cache)
    assert all(np.isfinite(g).all() for g in grads.values())
    assert grads["x_q"].shape == x_q.shape and grads["x_kv"].shape == x_kv.shape


def one_head(dtype, score, value):
    """d = 1, one head: W_q = W_k = sqrt(score) (so x = 1 gives that score), W_v = value."""
    w = np.array([[math.sqrt(score)]], dtype)
    return A.MHAParams(w, w.copy(), np.array([[value]], dtype), np.ones((1, 1), dtype), 1)


def decoded(p, x, prompt: bool):
    """KV.Decoder on the whole of x (causal self-attention): as one prompt, or token by token."""
    decoder = KV.Decoder(p, batch=x.shape[0], max_len=x.shape[1])
    if prompt:
        return decoder(x)
    return np.concatenate([decoder(x[:, i : i + 1]) for i in range(x.shape[1])], axis=1)


CAUSAL_FORWARDS = {  # causal self-attention of x with params p -> the output
    "reference": lambda x, p: A.multi_head_attention(x, x, p, causal=True)[0],
    "per head": lambda x, p: A.multi_head_attention_per_head(x, x, p, causal=True)[0],
    "fast": lambda x, p: BW.multi_head_attention(x, x, p, causal=True)[0],
    "fast, no weights": lambda x, p: BW.multi_head_attention(
        x, x, p, causal=True, need_weights=False
    )[0],
    "mha_forward": lambda x, p: BP.mha_forward(x, x, p, causal=True)[0],
    "Decoder, prompt": lambda x, p: decoded(p, x, prompt=True),
    "Decoder, token by token": lambda x, p: decoded(p, x, prompt=False),
}
SUMS_BEFORE_DIVIDING = {"fast", "fast, no weights"}  # rows normalised after P @ V
HUGE = {  # (dtype, score, value, keys): the answer, `value`, is finite; exp(score) * value not
    "float32, score 29.9, values 1e26": (np.float32, 29.9, 1e26, 1),
    "float64, score 299, values 1e180": (np.float64, 299.0, 1e180, 1),
    "float32, 100 equal keys, values 1e37": (np.float32, 1.0, 1e37, 100),
}


@pytest.mark.parametrize("case", HUGE)
@pytest.mark.parametrize("forward", CAUSAL_FORWARDS)
def test_huge_values_whose_mean_fits_are_not_an_overflow(case, forward):
    """A query's output is a weighted mean of the values: it fits the dtype whenever they do,
    and every forward gives it, but for one documented exception: lib's fast path sums
    exp(score) * v before dividing by the sum of exp(score) (d_v divisions per row, not n_k),
    so when that sum, at most n_keys * |v| after its shift, exceeds the dtype it reports an
    overflow, in the same words as the others."""
    dtype, score, value, n = HUGE[case]
    p = one_head(dtype, score, value)
    x = np.ones((1, n, 1), dtype)
    if forward in SUMS_BEFORE_DIVIDING and n * value > float(np.finfo(dtype).max):
        with pytest.raises(ValueError, match=f"numbers in the output overflow {np.dtype(dtype)}"):
            CAUSAL_FORWARDS[forward](x, p)
        return
    got = CAUSAL_FORWARDS[forward](x, p)
    assert got.dtype == dtype
    x64, p64 = x.astype(np.float64), as_float64(p)
    tol = mha_tolerances(dtype, x64, x64, p64, A.causal_mask(n))[1]
    assert_within(got, float(np.asarray(value, dtype)), tol, forward)  # a mean of equal values
