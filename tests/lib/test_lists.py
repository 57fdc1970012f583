"""Unit tests for lib.lists (attention on Python lists)."""

import math
import random

import numpy as np
import pytest
from tolerances import assert_within, sdpa_tolerances, softmax_tolerances

from lib import lists as L
from lib import rounding as R


def test_matmul_known_values():
    A = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]  # (3, 2)
    B = [[1.0, 0.0, -1.0], [2.0, 1.0, 0.5]]  # (2, 3)
    assert L.matmul(A, B) == [[5.0, 2.0, 0.0], [11.0, 4.0, -1.0], [17.0, 6.0, -2.0]]


def test_transpose_and_shape():
    A = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert L.transpose(A) == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert L.shape(L.transpose(A)) == (3, 2)


def test_matmul_rejects_mismatched_inner_dimensions_naming_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 2\)"):
        L.matmul([[1.0] * 3] * 2, [[1.0] * 2] * 2)


def test_ragged_matrix_is_rejected():
    with pytest.raises(ValueError, match="ragged"):
        L.shape([[1.0, 2.0], [3.0]])


def test_softmax_known_values_and_sum():
    x = np.array([0.0, math.log(3.0)])  # log 3 rounded once
    tol = softmax_tolerances(np.float64, x, ds=R.tolerance(np.float64, 1, np.abs(x)) / 2)
    assert_within(L.softmax(x.tolist()), [0.25, 0.75], tol)


def test_softmax_is_stable_for_large_scores():
    assert L.softmax([1000.0, 1000.0]) == [0.5, 0.5]  # exp(0) / (1 + 1): exact


def test_softmax_gives_masked_entries_zero_and_all_masked_row_zeros():
    w = L.softmax([1.0, float("-inf"), 1.0])
    assert w == [0.5, 0.0, 0.5]
    assert L.softmax([float("-inf")] * 3) == [0.0, 0.0, 0.0]


def test_softmax_of_no_keys_is_empty():
    assert L.softmax([]) == []


def test_causal_mask():
    assert L.causal_mask(3) == [[True, False, False], [True, True, False], [True, True, True]]


def test_attention_with_zero_query_averages_values():
    # q = 0 gives equal scores, so the output is the plain mean of the values.
    Q = [[0.0, 0.0]]
    K = [[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]
    V = [[3.0], [6.0], [9.0]]
    out, w = L.attention(Q, K, V)
    w_tol, out_tol = sdpa_tolerances(np.float64, Q, K, V)
    assert_within(w[0], [1 / 3] * 3, w_tol[0] + R.tolerance(np.float64, 1, 1 / 3))  # 1/3 rounded
    assert_within(out[0][0], 6.0, out_tol[0, 0])


def test_attention_hand_computed_scores():
    Q = [[1.0, 0.0]]
    K = [[2.0, 0.0], [0.0, 2.0]]
    V = [[1.0], [0.0]]
    _, w = L.attention(Q, K, V)
    s = 2.0 / math.sqrt(2.0)  # scaled score of key 0; key 1 scores 0
    expected = math.exp(s) / (math.exp(s) + 1.0)  # its own sqrt, division, exp, sum, division
    own = R.tolerance(np.float64, R.FUNCTION_DEPTH + 4, 1.0)
    assert_within(w[0][0], expected, sdpa_tolerances(np.float64, Q, K, V)[0][0, 0] + own)


def test_attention_rejects_mismatched_shapes():
    rng = random.Random(0)
    Q, K, V = L.random_matrix(2, 3, rng), L.random_matrix(4, 2, rng), L.random_matrix(4, 1, rng)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        L.attention(Q, K, V)
    with pytest.raises(ValueError, match=r"K and V must have the same number of keys.*\(3, 1\)"):
        L.attention(Q, L.random_matrix(4, 3, rng), L.random_matrix(3, 1, rng))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 2\) does not match.*\(2, 4\)"):
        L.attention(Q, L.random_matrix(4, 3, rng), V, mask=L.causal_mask(2))
    with pytest.raises(ValueError, match="ragged"):
        L.attention(Q, L.random_matrix(4, 3, rng), V, mask=[[True] * 4, [True] * 3])


def test_split_and_concat_columns_round_trip():
    A = [[float(i * 6 + j) for j in range(6)] for i in range(2)]
    parts = L.split_columns(A, 3)
    assert parts[1] == [[2.0, 3.0], [8.0, 9.0]]
    assert L.concat_columns(parts) == A
    with pytest.raises(ValueError, match="6 columns into 4"):
        L.split_columns(A, 4)


def test_multi_head_rejects_indivisible_heads():
    rng = random.Random(0)
    X = L.random_matrix(2, 6, rng)
    W = L.random_matrix(6, 6, rng)
    with pytest.raises(ValueError, match=r"divides d_model=6, got 4; valid .* \[1, 2, 3, 6\]"):
        L.multi_head_attention(X, X, W, W, W, W, 4)
    with pytest.raises(ValueError, match="divides d_model=6, got 3.0"):
        L.multi_head_attention(X, X, W, W, W, W, 3.0)


def test_multi_head_rejects_mismatched_widths():
    rng = random.Random(0)
    X, W = L.random_matrix(2, 6, rng), L.random_matrix(6, 6, rng)
    with pytest.raises(ValueError, match=r"W_o must be \(d_model, d_model\) = \(6, 6\)"):
        L.multi_head_attention(X, X, W, W, W, L.random_matrix(6, 5, rng), 2)
    with pytest.raises(ValueError, match=r"X_kv has d_model=5 \(shape \(2, 5\)\)"):
        L.multi_head_attention(X, L.random_matrix(2, 5, rng), W, W, W, W, 2)


@pytest.mark.parametrize("bad", [[[0.0, float("-inf")]], [[1, 0]]])
def test_non_boolean_masks_are_refused_with_the_conversion(bad):
    Q = K = V = [[1.0], [2.0]]
    with pytest.raises(ValueError, match=r"mask must be boolean.*\[\[x == 0 for x in row\]"):
        L.attention(Q[:1], K, V, bad)


def test_numpy_arrays_are_refused_with_tolist():
    np_Q = np.ones((1, 1))
    with pytest.raises(ValueError, match=r"Q must be a list of rows \(lists\).*Q.tolist\(\)"):
        L.attention(np_Q, [[1.0]], [[1.0]])


def test_random_matrix_is_reproducible():
    a = L.random_matrix(2, 3, random.Random(7))
    b = L.random_matrix(2, 3, random.Random(7))
    assert a == b and L.shape(a) == (2, 3)


def test_lists_is_pure_python():
    # Notebook 01 works with lists and math alone: importing lib.lists loads no NumPy.
    import subprocess
    import sys

    code = "import sys, lib.lists; print(sorted(m for m in sys.modules if m.startswith('numpy')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_no_queries_or_no_keys_give_empty_answers():
    # As in lib.attention: no query gives nothing, and a query with no keys attends to nothing.
    assert L.attention([], [[1.0]], [[2.0]]) == ([], [])
    W = [[1.0, 0.0], [0.0, 1.0]]
    assert L.multi_head_attention([[1.0, 2.0]], [], W, W, W, W, 2) == ([[0.0, 0.0]], [[[]]] * 2)
    assert L.multi_head_attention([], [[1.0, 2.0]], W, W, W, W, 1) == ([], [[]])
