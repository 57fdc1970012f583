"""The exercise checks accept the reference answers and reject realistic wrong ones with a
message that names the mistake."""

import math

import numpy as np
import pytest
from helpers import attention_lists, lib_answers, lib_causal_mask, lib_padding_mask, rejects, stub

from lib import attention as A
from lib import checks, heads
from lib import lists as L

ANSWERS = lib_answers(A)  # lib's own answers, which the checks refuse, as references
# --------------------------------------------------------------------------- references
# Written here independently of the checks' own references.


def log_softmax_np(row):
    """log softmax with NumPy: masked (-inf) entries -inf, an all -inf row all -inf."""
    x = np.asarray(row, dtype=float)
    if np.isneginf(x).all():
        return x.copy()
    top = x[np.isfinite(x)].max()
    return x - top - np.log(np.exp(x - top).sum())


def window_mask_np(n, window):
    """Query i may attend to key j when 0 <= i - j < window."""
    i, j = np.indices((n, n))
    return ((i - j >= 0) & (i - j < window)).tolist()


def split_heads_any(x, n_heads):
    """(..., seq, d_model) -> (..., heads, seq, d_k): A.split_heads on a (batch, seq, d)
    view of every leading axis flattened into one."""
    *lead, seq, d = x.shape
    out = ANSWERS.split_heads(x.reshape(-1, seq, d), n_heads)
    return out.reshape(*lead, n_heads, seq, d // n_heads)


def merge_heads_any(x):
    *lead, h, seq, d_k = x.shape
    out = ANSWERS.merge_heads(x.reshape(-1, h, seq, d_k))
    return out.reshape(*lead, seq, h * d_k)


def param_count(d_model, d_source, n_heads, d_k, d_v, bias):
    """Counted from the arrays of a layer built with those shapes."""
    shapes = {
        "W_q": (d_model, n_heads * d_k),
        "W_k": (d_source, n_heads * d_k),
        "W_v": (d_source, n_heads * d_v),
        "W_o": (n_heads * d_v, d_model),
    }
    if bias:
        shapes |= {
            "b_q": (n_heads * d_k,),
            "b_k": (n_heads * d_k,),
            "b_v": (n_heads * d_v,),
            "b_o": (d_model,),
        }
    return sum(np.zeros(shape).size for shape in shapes.values())


# --------------------------------------------------------------------------- references pass


@pytest.mark.parametrize(
    "check, reference",
    [
        (checks.check_log_softmax_list, lambda row: log_softmax_np(row).tolist()),
        (checks.check_softmax, ANSWERS.softmax),
        (checks.check_sliding_window_mask_list, window_mask_np),
        (checks.check_causal_mask, lib_causal_mask),
        (checks.check_padding_mask, lib_padding_mask),
        (checks.check_attention_list, attention_lists),
        (checks.check_split_heads, split_heads_any),
        (checks.check_merge_heads, merge_heads_any),
        (checks.check_param_count, param_count),
    ],
)
def test_reference_passes_and_stub_is_reported(check, reference, capsys):
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    rejects(check, stub, "not implemented yet")


# --------------------------------------------------------------------------- softmax


def log_softmax_unshifted(row):
    total = sum(math.exp(x) for x in row)
    return [x - math.log(total) for x in row]


def log_of_softmax(row):
    return [math.log(w) for w in L.softmax(row)]


def log_softmax_zeros_when_all_masked(row):
    if all(x == -math.inf for x in row):
        return [0.0] * len(row)
    return log_softmax_np(row).tolist()


def test_log_softmax_list_mistakes():
    check = checks.check_log_softmax_list
    rejects(check, log_softmax_unshifted, "overflowed on scores near 1000")
    rejects(check, log_of_softmax, "log of 0.0")
    rejects(check, log_softmax_zeros_when_all_masked, "every log-weight is -inf", "[0.0, 0.0")
    rejects(check, L.softmax, "the weights themselves")
    rejects(check, lambda row: [1.0] * len(row), "should sum to 1, yours sum to 8.155")


def naive_softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def softmax_wrong_axis(x):
    e = np.exp(x - x.max(axis=-2, keepdims=True))
    return e / e.sum(axis=-2, keepdims=True)


def softmax_global_max(x):
    e = np.exp(x - x.max())
    return e / e.sum(axis=-1, keepdims=True)


def softmax_no_guard(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_softmax_mistakes():
    with np.errstate(all="ignore"):
        rejects(checks.check_softmax, naive_softmax, "subtract the largest score")
        rejects(checks.check_softmax, softmax_wrong_axis, "last axis")
        rejects(checks.check_softmax, softmax_global_max, "each row's own maximum")
        rejects(checks.check_softmax, softmax_no_guard, "entirely -inf")
        rejects(checks.check_softmax, lambda x: np.exp(x) / np.exp(x).sum(), "its own sum")


# --------------------------------------------------------------------------- masks


def test_sliding_window_mask_mistakes():
    check = checks.check_sliding_window_mask_list
    rejects(check, lambda n, w: L.causal_mask(n), "plain causal mask")
    rejects(check, lambda n, w: window_mask_np(n, w + 1), "window + 1 keys")
    rejects(check, lambda n, w: window_mask_np(n, w - 1), "only window - 1 keys")
    rejects(
        check,
        lambda n, w: [[int(0 <= i - j < w) for j in range(n)] for i in range(n)],
        "True/False",
    )
    rejects(check, lambda n, w: [[abs(i - j) < w for j in range(n)] for i in range(n)], "future")
    rejects(check, lambda n, w: [[True] * (i + 1) for i in range(n)], "rows have lengths")


def test_causal_mask_mistakes():
    check = checks.check_causal_mask
    rejects(check, lambda n_q, n_k: np.tri(n_q, n_k, dtype=bool), "LAST n_q positions")
    rejects(check, lambda n_q, n_k: lib_causal_mask(n_q, n_k).T, "one row per key", "(3, 7)")
    rejects(check, lambda n_q, n_k: lib_causal_mask(n_q, n_k).astype(int), "use booleans")
    rejects(check, lambda n_q, n_k: ~lib_causal_mask(n_q, n_k), "wrong way round")
    rejects(check, lambda n_q, n_k: np.tri(n_q, n_k, k=n_q - n_k, dtype=bool), "the wrong way")


def test_padding_mask_mistakes():
    def flat(lengths, n_k):
        return np.arange(n_k)[None, :] < np.asarray(lengths)[:, None]

    def inverted(lengths, n_k):
        return ~lib_padding_mask(lengths, n_k)

    def off_by_one(lengths, n_k):
        return (np.arange(n_k)[None, :] <= np.asarray(lengths)[:, None])[:, None, None, :]

    rejects(checks.check_padding_mask, flat, "(batch, 1, 1, n_k)", "(3, 5)")
    rejects(checks.check_padding_mask, inverted, "wrong way round")
    rejects(checks.check_padding_mask, off_by_one, "off by one")


# --------------------------------------------------------------------------- attention


def attention_factory(scale=None, axis=-1, invert_mask=False, ignore_mask=False, mask_after=False):
    """Build the wrong attentions students write (on lists, converted to arrays)."""

    def attention(q, k, v, mask=None):
        q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
        d_k = q.shape[-1]
        s = q @ np.swapaxes(k, -1, -2)
        s = s / (math.sqrt(d_k) if scale is None else scale(d_k))
        if mask is not None and not ignore_mask and not mask_after:
            m = np.asarray(mask)
            s = np.where(~m if invert_mask else m, s, -np.inf)
        e = np.exp(s - s.max(axis=axis, keepdims=True))
        w = e / e.sum(axis=axis, keepdims=True)
        if mask is not None and mask_after:
            w = w * np.asarray(mask)
        return w @ v, w

    return attention


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (attention_factory(scale=lambda d: 1.0), "did not scale"),
        (attention_factory(scale=lambda d: d), "divided the scores by d_k"),
        (attention_factory(axis=-2), "over the queries"),
        (attention_factory(invert_mask=True), "wrong way round"),
        (attention_factory(ignore_mask=True), "no effect"),
        (attention_factory(mask_after=True), "after the softmax"),
    ],
)
def test_list_attention_mistakes(wrong, fragment):
    with np.errstate(all="ignore"):
        rejects(checks.check_attention_list, wrong, fragment)


def test_attention_wrong_return_type_and_shape():
    rejects(
        checks.check_attention_list,
        lambda q, k, v, mask=None: attention_lists(q, k, v, mask)[0],
        "pair",
    )
    rejects(checks.check_attention_list, lambda q, k, v, mask=None: (v, v), "expected weights")


# --------------------------------------------------------------------------- heads


def test_split_heads_mistakes():
    def no_transpose(x, h):
        *lead, s, d = x.shape
        return x.reshape(*lead, h, s, d // h)

    def fixed_axes(x, h):  # written for (batch, seq, d_model) only
        b, s, d = x.shape
        return x.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)

    rejects(checks.check_split_heads, no_transpose, "cuts the sequence")
    rejects(checks.check_split_heads, fixed_axes, "any number of leading axes", "(5, 6)")
    rejects(
        checks.check_split_heads,
        lambda x, h: x,
        "expected (..., heads, seq, d_k) of shape (2, 4, 3, 2)",
    )


def test_merge_heads_mistakes():
    def no_transpose(x):
        *lead, h, s, d = x.shape
        return x.reshape(*lead, s, h * d)

    def fixed_axes(x):  # written for (batch, heads, seq, d_k) only
        b, h, s, d = x.shape
        return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)

    rejects(checks.check_merge_heads, no_transpose, "mixes tokens")
    rejects(checks.check_merge_heads, fixed_axes, "any number of leading axes", "(2, 5, 3)")
    rejects(checks.check_merge_heads, lambda x: x, "of shape (2, 3, 8)")


def test_split_and_merge_accept_every_number_of_leading_axes(capsys):
    """Also what the notebook's solution does: np.swapaxes on axes counted from the end."""

    def split(x, h):
        return np.swapaxes(x.reshape(*x.shape[:-1], h, x.shape[-1] // h), -3, -2)

    def merge(x):
        y = np.swapaxes(x, -3, -2)
        return y.reshape(*y.shape[:-2], -1)

    checks.check_split_heads(split)
    checks.check_merge_heads(merge)
    assert capsys.readouterr().out.count("✓") == 2


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (lambda d, s, h, k, v, bias: 4 * d * d + (4 * d if bias else 0), "standard layer"),
        (lambda d, s, h, k, v, bias: param_count(d, d, h, k, v, bias), "d_source"),
        (lambda d, s, h, k, v, bias: param_count(d, s, 1, k, v, bias), "one head"),
        (lambda d, s, h, k, v, bias: param_count(d, s, h, k, k, bias), "not d_k"),
        (lambda d, s, h, k, v, bias: param_count(d, s, h, k, v, False), "also has a bias"),
        (lambda d, s, h, k, v, bias: float(param_count(d, s, h, k, v, bias)), "whole number"),
    ],
)
def test_param_count_mistakes(wrong, fragment):
    rejects(checks.check_param_count, wrong, fragment)


# --------------------------------------------------------------------------- looking at heads


@pytest.mark.parametrize(
    "check, answer, label",
    [
        (checks.check_entropy, lambda w: heads.row_entropy(w), "H.row_entropy"),
        (checks.check_previous_token_score, lambda w: heads.offset_score(w, -1), "H.offset_score"),
    ],
)
def test_notebook_04_checks_refuse_lib_s_answer(check, answer, label):
    """lib's row_entropy and offset_score answer exercises 1 and 2 in one call: refused, and
    they work again once the check is done."""
    name = check.__name__.removeprefix("check_")
    message = rejects(check, answer)
    assert message == f"{name}: this exercise asks you to write it yourself, not to call {label}."
    w = np.full((1, 1, 2, 2), 0.5)  # (batch, heads, n, n): every row even
    assert np.allclose(heads.row_entropy(w), np.log(2)) and heads.offset_score(w, -1) == 0.5


def test_head_checks_accept_references_and_reject_stubs(capsys):
    from lib import heads

    H = lib_answers(heads)  # head_similarity's check refuses lib's own

    checks.check_entropy(H.row_entropy)
    checks.check_previous_token_score(lambda w: H.offset_score(w, -1))
    checks.check_head_similarity(H.head_similarity)
    assert capsys.readouterr().out.count("✓") == 3
    for check in (
        checks.check_entropy,
        checks.check_previous_token_score,
        checks.check_head_similarity,
    ):
        rejects(check, stub, "not implemented yet")


def test_entropy_mistakes():
    with np.errstate(all="ignore"):
        rejects(checks.check_entropy, lambda w: -(w * np.log(w)).sum(-1), "0 * log(0)")
    rejects(checks.check_entropy, lambda w: (w * np.log(np.where(w > 0, w, 1))).sum(-1), "negative")
    rejects(checks.check_entropy, lambda w: -(w * np.log2(np.where(w > 0, w, 1))).sum(-1), "base 2")
    rejects(checks.check_entropy, lambda w: -(w * np.log(np.where(w > 0, w, 1))).sum(), "shape")
    # an answer written for (batch, heads, n, n) alone fails on (heads, n, n), naming the axis
    rejects(checks.check_entropy, lambda w: -(w * np.log(np.where(w > 0, w, 1))).sum(3), "axis 3")


def test_previous_token_score_mistakes():
    def diagonal(w):
        n = w.shape[-1]
        return np.mean([w[:, :, i, i] for i in range(n)], axis=(0, 1))

    def wraps(w):
        n = w.shape[-1]
        return np.mean([w[:, :, i, i - 1] for i in range(n)], axis=(0, 1))

    def next_token(w):
        n = w.shape[-1]
        return np.mean([w[:, :, i, i + 1] for i in range(n - 1)], axis=(0, 1))

    rejects(checks.check_previous_token_score, diagonal, "diagonal")
    rejects(checks.check_previous_token_score, wraps, "wrapped around")
    rejects(checks.check_previous_token_score, next_token, "next token")


def test_head_similarity_mistakes():
    def raw_dots(w):
        flat = np.moveaxis(w, 1, 0).reshape(w.shape[1], -1)
        return flat @ flat.T

    def per_batch_item(w):
        flat = w.reshape(w.shape[0], -1)
        flat = flat / np.linalg.norm(flat, axis=1, keepdims=True)
        return flat @ flat.T

    rejects(checks.check_head_similarity, raw_dots, "norms")
    rejects(checks.check_head_similarity, per_batch_item, "(heads, heads)", "(4, 4)")


# --------------------------------------------------------------------------- lib's own answer


def lists_attention_alias():
    """A submission that imported lib's function under its own name."""
    from lib.lists import attention as lib_attention

    return lambda Q, K, V, mask=None: lib_attention(Q, K, V, mask)


def numpy_attention(Q, K, V, mask=None):
    """A submission that hands the lists to lib's NumPy attention."""
    out, w = A.scaled_dot_product_attention(
        np.array(Q), np.array(K), np.array(V), None if mask is None else np.array(mask)
    )
    return out.tolist(), w.tolist()


@pytest.mark.parametrize(
    "answer, label",
    [
        (lambda Q, K, V, mask=None: L.attention(Q, K, V, mask), "lib.lists.attention"),
        (lists_attention_alias(), "lib.lists.attention"),
        (numpy_attention, "lib's scaled_dot_product_attention"),
    ],
)
def test_attention_list_refuses_lib_attention(answer, label):
    """Notebook 01 shows L.attention before exercise 3: calling it is not an answer."""
    message = rejects(checks.check_attention_list, answer)
    assert message == (
        f"attention: this exercise asks you to write it yourself, not to call {label}."
    )
    # lib's functions work again once the check is done
    out, w = L.attention([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0], [2.0]])
    assert len(out) == 1 and abs(sum(w[0]) - 1.0) < 1e-12
    assert A.scaled_dot_product_attention(np.ones((1, 2)), np.ones((2, 2)), np.ones((2, 1)))


def test_attention_list_may_use_the_helpers_it_names(capsys):
    """The exercise allows L.matmul, L.transpose and L.softmax (the notebook's answer)."""

    def attention(Q, K, V, mask=None):
        d = len(Q[0])
        scores = [[s / math.sqrt(d) for s in row] for row in L.matmul(Q, L.transpose(K))]
        if mask is not None:
            scores = [
                [s if ok else -math.inf for s, ok in zip(srow, mrow, strict=True)]
                for srow, mrow in zip(scores, mask, strict=True)
            ]
        weights = [L.softmax(row) for row in scores]
        return L.matmul(weights, V), weights

    checks.check_attention_list(attention)
    assert capsys.readouterr().out.startswith("✓")
