"""The error model behind every tolerance of the suite (lib/rounding.py, tests/tolerances.py):
its bound holds, with room to spare, on inputs built to make rounding as bad as it gets, and
it is tight enough that a result off by 1000 ulps fails it.

"Holds" is checked against exact results: the products of two float32 numbers are exact in
float64, and math.fsum adds float64 numbers exactly before one final rounding, so the exact
value of a float32 sum or dot product is known to within float64's rounding."""

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import (
    RANDOM,
    WORST,
    assert_within,
    mha_tolerances,
    projection_errors,
    sdpa_tolerances,
)
from torch.nn import functional as F

from lib import attention as A
from lib import blockwise as BW
from lib import rounding as R
from lib import toy

seeds = st.integers(min_value=0, max_value=2**32 - 1)
DTYPES = [np.float32, np.float64]


def exact_dot(x, y) -> float:
    """sum_i x_i y_i exactly, rounded once (to float64)."""
    return float(sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(x, y, strict=True)))


def ulps(dtype, value: float) -> float:
    """The spacing of ``dtype``'s numbers at |value|: one ulp."""
    return float(np.spacing(np.abs(np.asarray(value, dtype))))


# --------------------------------------------------------------------------- the helper itself


def test_unit_roundoff_and_the_formula():
    assert R.unit_roundoff(np.float64) == 2.0**-53
    assert R.unit_roundoff(np.float32) == 2.0**-24
    u = 2.0**-24
    assert R.tolerance(np.float32, 10, 3.0) == pytest.approx(2 * 10 * u / (1 - 10 * u) * 3.0)
    assert R.tolerance(np.float64, 0, 5.0) == 0.0
    scales = np.array([0.0, 1.0, 2.0])
    np.testing.assert_array_equal(
        R.tolerance(np.float64, 4, scales), R.tolerance(np.float64, 4) * scales
    )


@pytest.mark.parametrize(
    ("depth", "scale", "message"),
    [
        (-1, 1.0, "depth must be an integer >= 0"),
        (2.5, 1.0, "depth must be an integer >= 0"),
        (3, -1.0, "scale must be finite and >= 0"),
        (3, np.nan, "scale must be finite and >= 0"),
        (3, [1.0, np.inf], "scale must be finite and >= 0"),
        (2**23, 1.0, "may lose every digit"),
    ],
)
def test_bad_arguments_are_refused(depth, scale, message):
    with pytest.raises(ValueError, match=message):
        R.tolerance(np.float32, depth, scale)


# --------------------------------------------------------------------------- it holds


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_sum_that_loses_u_at_every_step_stays_within_it(dtype):
    """1 + u + u + ... added left to right: each 1 + u is a tie that rounds back to 1, so the
    sum loses u at every step, the worst a sum can do. One computation must stay within half
    the tolerance (the tolerance covers two), and this one comes close to it: the bound is
    not loose for sums."""
    u = R.unit_roundoff(dtype)
    n = 4096
    x = np.full(n, u, dtype)
    x[0] = 1
    computed = Fraction(float(np.add.accumulate(x)[-1]))  # strictly left to right
    exact = 1 + (n - 1) * Fraction(u)
    error = abs(computed - exact)
    half = Fraction(R.tolerance(dtype, n - 1)) / 2 * exact  # scale: sum |x| = the sum
    assert Fraction(99, 100) * half < error <= half


@settings(max_examples=60)
@given(n=st.integers(1, 3000), cancel=st.booleans(), spread=st.integers(0, 30), seed=seeds)
def test_float32_dot_products_stay_within_it(n, cancel, spread, seed):
    """Dot products through NumPy's BLAS (whatever kernel it picked), with magnitudes spread
    over 2^spread and, with ``cancel``, terms that cancel to a result far below sum |x y|."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n) * 2.0 ** rng.integers(-spread, spread + 1, n)
    y = rng.normal(size=n)
    if cancel:  # every term followed by its near opposite
        x = np.repeat(x[: (n + 1) // 2], 2)[:n]
        y = np.repeat(y[: (n + 1) // 2], 2)[:n] * np.resize([1.0, -1.0], n) * (1 + 1e-3)
    x, y = x.astype(np.float32), y.astype(np.float32)
    exact = exact_dot(x, y)
    bound = np.abs(x).astype(np.float64) @ np.abs(y).astype(np.float64)
    half = R.tolerance(np.float32, n, bound) / 2
    for computed in (np.dot(x, y), (x[None] @ y[:, None])[0, 0], np.einsum("i,i->", x, y)):
        assert abs(float(computed) - exact) <= half


@settings(max_examples=30)
@given(m=st.integers(1, 70), k=st.integers(1, 400), n=st.integers(1, 70), seed=seeds)
def test_float32_matrix_products_stay_within_it_entry_by_entry(m, k, n, seed):
    """Every entry of A @ B (BLAS blocks the sums differently at each shape) within
    gamma(k) (|A| @ |B|) of the exact product, which float64 gives to within its own
    gamma(k) in float64."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    slack = R.tolerance(np.float32, k, bound) / 2 + R.tolerance(np.float64, k, bound) / 2
    assert_within(a @ b, exact, slack, "A @ B")


def adversarial_attention(kind, rng, dtype):
    """q, k, v (2, 3, n, d) built to stress the rounding of attention."""
    n, d = (512, 8) if kind == "long rows" else (24, 16)
    q, k, v = (rng.normal(size=(2, 3, n, d)) for _ in range(3))
    if kind == "near overflow":  # scores up to about 80, close to float32's exp limit (88.7)
        q *= 80 / np.abs(q @ np.swapaxes(k, -1, -2) / math.sqrt(d)).max()
    elif kind == "cancelling scores":  # q . k sums large terms that cancel
        q[..., : d // 2] = 300.0
        q[..., d // 2 :] = -300.0
        k = np.round(k * 4) / 4
    elif kind == "ties":  # every key equal: the weights must come out exactly uniform-ish
        k[:] = k[..., :1, :]
    elif kind == "values of mixed size":
        v *= 10.0 ** rng.integers(-4, 5, v.shape)
    elif kind == "long rows":
        q *= 3
    return tuple(t.astype(dtype) for t in (q, k, v))


KINDS = ["near overflow", "cancelling scores", "ties", "values of mixed size", "long rows"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_stays_within_it_on_adversarial_inputs(kind, dtype):
    """lib's forms (the plain one, blocks of rows, tiles, the online softmax) and torch's
    SDPA, each within half the tolerance of the exact answer (float64 on the same numbers,
    whose own error is below float64's bound, included)."""
    rng = np.random.default_rng(KINDS.index(kind))
    q, k, v = adversarial_attention(kind, rng, dtype)
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    want_out, want_w = A.scaled_dot_product_attention(q64, k64, v64)
    w_tol, out_tol = sdpa_tolerances(dtype, q, k, v)
    w_slack, out_slack = sdpa_tolerances(np.float64, q, k, v)
    t = torch.from_numpy
    got = {
        "plain": A.scaled_dot_product_attention(q, k, v),
        "blocks": (BW.attention(q, k, v), None),
        "online": (BW.online_softmax_attention(q, k, v, block_q=7, block_k=5), None),
        "torch": (F.scaled_dot_product_attention(t(q), t(k), t(v)).numpy(), None),
    }
    for name, (out, w) in got.items():
        assert_within(out, want_out, out_tol / 2 + out_slack / 2, f"{kind}, {name}")
        if w is not None:
            assert_within(w, want_w, w_tol / 2 + w_slack / 2, f"{kind}, {name}, weights")


def test_notebook_02s_1e_12_covers_its_layer():
    """Notebook 02 compares its NumPy layer with the lists within 1e-12, saying the worst
    case for a layer that small stays under it: the toy model's two causal heads."""
    model = toy.make_toy_model()
    x = np.array(toy.embed(model))
    W = (np.array(w) for w in (model.W_q, model.W_k, model.W_v, model.W_o))
    params = A.MHAParams(*W, n_heads=model.n_heads)
    w_tol, out_tol = mha_tolerances(np.float64, x, x, params, A.causal_mask(len(x)))
    assert out_tol.max() < 1e-12 and w_tol.max() < 1e-12


# --------------------------------------------------------------------------- the random model


@settings(max_examples=30)
@given(m=st.integers(1, 40), k=st.integers(1, 2000), n=st.integers(1, 40), seed=seeds)
def test_the_random_model_holds_with_room_on_random_data(m, k, n, seed):
    """RANDOM (tests/tolerances.py), used for BERT's wide layers: float32 products of random
    matrices stay well within its bound (lambda sqrt(k) u sum |a b|), whatever the length."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    slack = RANDOM.rounding(np.float32, k, bound) / 2 + R.tolerance(np.float64, k, bound) / 2
    assert_within(a @ b, exact, slack, "half the random model's bound")


def test_the_random_model_holds_through_a_layer_and_fails_where_rounding_is_not_random():
    """Errors carried through a float32 layer x -> relu(x @ W1) @ W2 stay within RANDOM's
    bound; the sum 1 + u + u + ..., where every rounding goes the same way, breaks it (and
    stays within WORST's): the random model is for data like the models' own, not for
    inputs built against it."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 384))
    W1, W2 = rng.normal(size=(384, 1536)) / 20, rng.normal(size=(1536, 384)) / 40
    h, dh = projection_errors(np.float32, x, W1, errors=RANDOM)
    h = np.maximum(h, 0)  # relu moves nothing by more than it moved: dh carries over
    y, dy = projection_errors(np.float32, h, W2, dx=dh, errors=RANDOM)
    x32, W1_32, W2_32 = (t.astype(np.float32) for t in (x, W1, W2))
    # the float32 copies are the inputs; float64 on the same numbers is the reference
    want = np.maximum(x32.astype(np.float64) @ W1_32, 0) @ W2_32.astype(np.float64)
    assert_within(np.maximum(x32 @ W1_32, 0) @ W2_32, want, dy, "through the layer")
    u = R.unit_roundoff(np.float32)
    n = 4096
    ones = np.full(n, u, np.float32)
    ones[0] = 1
    error = float(np.add.accumulate(ones)[-1]) - (1 + (n - 1) * u)
    assert (
        RANDOM.rounding(np.float32, n - 1, 1.0)
        < abs(error)
        <= WORST.rounding(np.float32, n - 1, 1.0 + n * u)
    )


# --------------------------------------------------------------------------- it is tight


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", [1, 16, 128, 480])
def test_a_result_off_by_1000_ulps_fails_it(dtype, depth):
    """For sums and dot products up to length 480 whose result is as large as the terms
    (scale = |result|), the tolerance is under 1000 ulps of the result: a planted error of
    1000 ulps is caught."""
    rng = np.random.default_rng(depth)
    x = rng.uniform(0.5, 1.0, depth).astype(dtype)
    y = rng.uniform(0.5, 1.0, depth).astype(dtype)
    exact = exact_dot(x, y)
    tol = R.tolerance(dtype, depth, np.abs(x).astype(np.float64) @ np.abs(y))
    computed = float(np.dot(x, y))
    assert abs(computed - exact) <= tol  # the right answer passes ...
    planted = computed + 1000 * ulps(dtype, computed)
    assert abs(planted - exact) > tol  # ... and one 1000 ulps off fails


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_suites_small_attention_cases_catch_1000_ulps(dtype):
    """The contract's cases (tests/lib/test_contract.py) have d_model <= 12: there, the derived
    tolerance of a multi-head output entry is under 1000 ulps of that entry for most
    entries, so a result off by 1000 ulps in the largest entry fails."""
    rng = np.random.default_rng(1)
    caught = 0
    for _ in range(50):
        h, d_k, n = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 7))
        d = h * d_k
        W = {
            name: rng.uniform(-0.6, 0.6, (d, d)).astype(dtype)
            for name in ("W_q", "W_k", "W_v", "W_o")
        }
        params = A.MHAParams(**W, n_heads=h)
        x = rng.normal(size=(2, n, d)).astype(dtype)
        out, _ = A.multi_head_attention(x, x, params)
        _, out_tol = mha_tolerances(dtype, x, x, params)
        i = np.unravel_index(np.abs(out).argmax(), out.shape)
        caught += bool(1000 * ulps(dtype, out[i]) > out_tol[i])
    assert caught >= 40, caught


@pytest.mark.parametrize("dtype", DTYPES)
def test_realistic_mistakes_are_caught_even_in_float32(dtype):
    """A layer with one plausible bug, on a d_model = 64 layer where the float32 bound is at
    its loosest in the suite: each bug moves some output by more than the tolerance."""
    rng = np.random.default_rng(0)
    h, d, n = 8, 64, 16
    params = A.init_mha_params(d, h, rng, bias=True, dtype=dtype)
    x = rng.normal(size=(2, n, d)).astype(dtype)
    mask = A.causal_mask(n)
    want, want_w = A.multi_head_attention(x, x, params, mask)
    w_tol, out_tol = mha_tolerances(dtype, x, x, params, mask)
    assert_within(A.multi_head_attention(x, x, params, mask)[0], want, out_tol, "right")

    def bug(**change):
        p = dataclasses.replace(params, **change)
        return A.multi_head_attention(x, x, p, mask)

    mistakes = {
        "no b_o": bug(b_o=np.zeros(d, dtype))[0],
        "W_o transposed": bug(W_o=np.ascontiguousarray(params.W_o.T))[0],
        "scores scaled by 1/d_k": bug(W_q=params.W_q / np.sqrt(d / h).astype(dtype))[0],
        "mask shows the next key": A.multi_head_attention(
            x, x, params, np.tri(n, n, 1, dtype=bool)
        )[0],
        "no mask": A.multi_head_attention(x, x, params)[0],
    }
    for name, out in mistakes.items():
        assert (np.abs(out - want) > out_tol).any(), name
