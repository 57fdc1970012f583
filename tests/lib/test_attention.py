"""Unit tests for lib.attention (NumPy attention); its bad inputs are in test_bad_inputs.py."""

import dataclasses
import math

import numpy as np
import pytest
from tolerances import (
    assert_within,
    mha_tolerances,
    sdpa_tolerances,
    softmax_tolerances,
    weights_sum_tolerance,
)

from lib import attention as A
from lib import rounding as R

BIASES = ("b_q", "b_k", "b_v", "b_o")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --------------------------------------------------------------------------- softmax


def test_softmax_known_values():
    x = np.array([[0.0, math.log(3.0)], [2.0, 2.0]])  # log 3 rounded once: u on |x|
    tol = softmax_tolerances(np.float64, x, ds=R.tolerance(np.float64, 1, np.abs(x)) / 2)
    assert_within(A.softmax(x), [[0.25, 0.75], [0.5, 0.5]], tol)


def test_softmax_other_axis(rng):
    x = rng.normal(size=(3, 4))
    assert_within(A.softmax(x, axis=0), A.softmax(x.T).T, softmax_tolerances(np.float64, x.T).T)


def test_softmax_stable_for_huge_scores():
    x = np.array([1e4, 1e4 + 1.0, -1e4])
    w = A.softmax(x)
    assert np.isfinite(w).all()
    expected = [1 / (1 + math.e), math.e / (1 + math.e)]  # e rounded, a sum, a division: 3
    tol = softmax_tolerances(np.float64, x)[:2] + R.tolerance(np.float64, 3)
    assert_within(w[:2], expected, tol)


def test_softmax_masked_and_fully_masked_rows():
    x = np.array([[1.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    np.testing.assert_array_equal(A.softmax(x), [[0.5, 0.0, 0.5], [0.0, 0.0, 0.0]])


def test_softmax_does_not_modify_its_input(rng):
    x = rng.normal(size=(2, 3))
    before = x.copy()
    A.softmax(x)
    np.testing.assert_array_equal(x, before)


def test_softmax_keeps_float32():
    assert A.softmax(np.ones(3, dtype=np.float32)).dtype == np.float32


# --------------------------------------------------------------------------- masks


def test_causal_mask_square_and_rectangular():
    np.testing.assert_array_equal(A.causal_mask(3), np.tril(np.ones((3, 3), dtype=bool)))
    # 2 new queries at the end of 4 keys: positions 2 and 3.
    np.testing.assert_array_equal(
        A.causal_mask(2, 4), [[True, True, True, False], [True, True, True, True]]
    )
    assert A.causal_mask(0).shape == (0, 0) and A.causal_mask(2, 0).shape == (2, 0)


def test_padding_mask_shape_and_values():
    m = A.padding_mask([2, 0, 3], 3)
    assert m.shape == (3, 1, 1, 3) and m.dtype == bool
    np.testing.assert_array_equal(m[:, 0, 0], [[1, 1, 0], [0, 0, 0], [1, 1, 1]])


def test_combined_mask_broadcasts():
    m = A.causal_mask(4) & A.padding_mask([4, 2], 4)
    assert m.shape == (2, 1, 4, 4)
    assert not m[1, 0, 3, 2] and m[1, 0, 3, 1] and not m[0, 0, 1, 2]


# --------------------------------------------------------------------------- attention


def test_sdpa_hand_computed():
    q = np.array([[1.0, 0.0]])
    k = np.array([[2.0, 0.0], [0.0, 2.0]])
    v = np.array([[10.0], [20.0]])
    out, w = A.scaled_dot_product_attention(q, k, v)
    p = 1 / (1 + math.exp(-math.sqrt(2.0)))  # softmax([sqrt 2, 0])[0], its own error below
    own = R.tolerance(np.float64, R.FUNCTION_DEPTH + 4)  # sqrt, exp, a sum, a division
    w_tol, out_tol = sdpa_tolerances(np.float64, q, k, v)
    assert_within(w, [[p, 1 - p]], w_tol + own)
    assert_within(
        out, [[10 * p + 20 * (1 - p)]], out_tol + R.tolerance(np.float64, 4, 20) + 20 * own
    )


def test_sdpa_fully_masked_row_gives_zero_weights_and_output(rng):
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False
    out, w = A.scaled_dot_product_attention(q, k, v, mask)
    assert np.isfinite(out).all() and np.isfinite(w).all()
    np.testing.assert_array_equal(w[1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    tol = weights_sum_tolerance(np.float64, sdpa_tolerances(np.float64, q, k, v, mask)[0])
    assert_within(w[[0, 2]].sum(-1), 1.0, tol[[0, 2]])


def test_sdpa_float32_stays_float32(rng):
    q = rng.normal(size=(2, 3, 4)).astype(np.float32)
    out, w = A.scaled_dot_product_attention(q, q, q, A.causal_mask(3))
    assert out.dtype == np.float32 and w.dtype == np.float32


def test_sdpa_promotes_as_numpy_does(rng):
    """Integers become float64; float32 with float64 is computed in float64 (exactly the
    answer on float64 copies)."""
    q = np.array([[1, 0], [0, 1]])
    assert A.scaled_dot_product_attention(q, q, q)[0].dtype == np.float64
    q = rng.normal(size=(3, 2)).astype(np.float32)
    k, v = rng.normal(size=(4, 2)), rng.normal(size=(4, 3))
    out, w = A.scaled_dot_product_attention(q, k, v)
    assert out.dtype == w.dtype == np.float64
    want = A.scaled_dot_product_attention(q.astype(np.float64), k, v)[0]
    np.testing.assert_array_equal(out, want)


def test_a_query_with_no_keys():
    out, w = A.scaled_dot_product_attention(
        np.ones((2, 3, 4)), np.ones((2, 0, 4)), np.ones((2, 0, 5))
    )
    assert out.shape == (2, 3, 5) and w.shape == (2, 3, 0)
    np.testing.assert_array_equal(out, 0.0)
    assert A.softmax(np.zeros((3, 0))).shape == (3, 0)


# --------------------------------------------------------------------------- heads


def test_split_heads_layout():
    x = np.arange(2 * 3 * 6).reshape(2, 3, 6)
    s = A.split_heads(x, 3)  # (2, 3 heads, 3 seq, 2)
    assert s.shape == (2, 3, 3, 2)
    np.testing.assert_array_equal(s[1, 2, 0], x[1, 0, 4:6])
    np.testing.assert_array_equal(A.merge_heads(s), x)


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("d, h", [(8, 1), (8, 2), (512, 8)])
@pytest.mark.parametrize("bias", [False, True])
def test_count_params(d, h, bias):
    p = A.init_mha_params(d, h, np.random.default_rng(0), bias=bias)
    assert A.count_params(p) == 4 * d * d + (4 * d if bias else 0)


def test_has_bias_cannot_disagree_with_the_fields():
    rng = np.random.default_rng(0)
    with_b, without = A.init_mha_params(4, 2, rng, bias=True), A.init_mha_params(4, 2, rng)
    assert with_b.has_bias and all(getattr(with_b, n) is not None for n in BIASES)
    assert not without.has_bias and all(getattr(without, n) is None for n in BIASES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        with_b.b_k = None
    with pytest.raises(ValueError, match="without b_k: pass zeros"):
        dataclasses.replace(with_b, b_k=None)


def test_init_is_seeded_and_typed():
    a = A.init_mha_params(8, 2, np.random.default_rng(3), dtype=np.float32)
    b = A.init_mha_params(8, 2, np.random.default_rng(3), dtype=np.float32)
    np.testing.assert_array_equal(a.W_o, b.W_o)
    assert a.W_q.dtype == np.float32 and a.b_q is None


# --------------------------------------------------------------------------- multi-head


def test_mha_shapes_cross_attention(rng):
    p = A.init_mha_params(12, 3, rng, bias=True)
    x_q, x_kv = rng.normal(size=(2, 4, 12)), rng.normal(size=(2, 7, 12))
    out, w = A.multi_head_attention(x_q, x_kv, p)
    assert out.shape == (2, 4, 12) and w.shape == (2, 3, 4, 7)
    tol = weights_sum_tolerance(np.float64, mha_tolerances(np.float64, x_q, x_kv, p)[0])
    assert_within(w.sum(-1), 1.0, tol)


def test_mha_unbatched_equals_batch_of_one(rng):
    p = A.init_mha_params(8, 2, rng)
    x = rng.normal(size=(5, 8))
    out, w = A.multi_head_attention(x, x, p, A.causal_mask(5))
    out_b, w_b = A.multi_head_attention(x[None], x[None], p, A.causal_mask(5))
    np.testing.assert_array_equal(out, out_b[0])
    assert w.shape == (2, 5, 5)


def test_mha_single_head_is_plain_attention(rng):
    p = A.init_mha_params(6, 1, rng)
    x = rng.normal(size=(1, 4, 6))
    out, _ = A.multi_head_attention(x, x, p)
    heads, _ = A.scaled_dot_product_attention(x @ p.W_q, x @ p.W_k, x @ p.W_v)
    assert_within(out, heads @ p.W_o, mha_tolerances(np.float64, x, x, p)[1])


def test_mha_fully_masked_query_outputs_the_output_bias(rng):
    p = A.init_mha_params(8, 2, rng, bias=True)
    x = rng.normal(size=(1, 3, 8))
    mask = np.ones((3, 3), dtype=bool)
    mask[0] = False
    for fn in (A.multi_head_attention, A.multi_head_attention_per_head):
        out, w = fn(x, x, p, mask)
        np.testing.assert_array_equal(out[0, 0], p.b_o)  # 0 @ W_o + b_o: exact
        np.testing.assert_array_equal(w[0, :, 0], 0.0)
