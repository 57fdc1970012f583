"""The exercise checks accept the reference answers and reject realistic wrong ones with a
message that names the mistake."""

import math

import numpy as np
import pytest
from helpers import rejects, stub

from lib import attention as A
from lib import checks
from lib import lists as L

# --------------------------------------------------------------------------- references pass


@pytest.mark.parametrize(
    "check, reference",
    [
        (checks.check_softmax_list, L.softmax),
        (checks.check_softmax, A.softmax),
        (checks.check_causal_mask_list, L.causal_mask),
        (checks.check_padding_mask, A.padding_mask),
        (checks.check_attention_list, L.attention),
        (checks.check_attention, A.scaled_dot_product_attention),
        (checks.check_split_heads, A.split_heads),
        (checks.check_merge_heads, A.merge_heads),
        (checks.check_param_count, lambda d, h, bias: 4 * d * d + (4 * d if bias else 0)),
    ],
)
def test_reference_passes_and_stub_is_reported(check, reference, capsys):
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    rejects(check, stub, "not implemented yet")


# --------------------------------------------------------------------------- softmax


def naive_softmax_list(row):
    exps = [math.exp(x) for x in row]
    return [e / sum(exps) for e in exps]


def softmax_list_nan_on_all_masked(row):
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


def test_softmax_list_mistakes():
    rejects(checks.check_softmax_list, naive_softmax_list, "subtract the row's largest score")
    rejects(checks.check_softmax_list, softmax_list_nan_on_all_masked, "all zeros")
    rejects(checks.check_softmax_list, lambda row: [x / sum(row) for x in row], "exponentiate")


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


def test_causal_mask_mistakes():
    rejects(
        checks.check_causal_mask_list,
        lambda n: [[j < i for j in range(n)] for i in range(n)],
        "itself",
    )
    rejects(
        checks.check_causal_mask_list,
        lambda n: [[j > i for j in range(n)] for i in range(n)],
        "wrong way round",
    )
    rejects(
        checks.check_causal_mask_list,
        lambda n: [[j >= i for j in range(n)] for i in range(n)],
        "after it",
    )
    rejects(
        checks.check_causal_mask_list,
        lambda n: [[j <= i + 1 for j in range(n)] for i in range(n)],
        "off by one",
    )
    rejects(
        checks.check_causal_mask_list,
        lambda n: [[int(j <= i) for j in range(n)] for i in range(n)],
        "True/False",
    )


def test_padding_mask_mistakes():
    def flat(lengths, n_k):
        return np.arange(n_k)[None, :] < np.asarray(lengths)[:, None]

    def inverted(lengths, n_k):
        return ~A.padding_mask(lengths, n_k)

    def off_by_one(lengths, n_k):
        return (np.arange(n_k)[None, :] <= np.asarray(lengths)[:, None])[:, None, None, :]

    rejects(checks.check_padding_mask, flat, "(batch, 1, 1, n_k)", "(3, 5)")
    rejects(checks.check_padding_mask, inverted, "wrong way round")
    rejects(checks.check_padding_mask, off_by_one, "off by one")


# --------------------------------------------------------------------------- attention


def attention_factory(
    scale=None, axis=-1, invert_mask=False, ignore_mask=False, mask_after=False, kT=False
):
    """Build the wrong attentions students write, on NumPy arrays."""

    def attention(q, k, v, mask=None):
        q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
        d_k = q.shape[-1]
        kt = k.T if kT else np.swapaxes(k, -1, -2)
        s = q @ kt
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
        (attention_factory(kT=True), "k.T"),
    ],
)
def test_attention_mistakes(wrong, fragment):
    with np.errstate(all="ignore"):
        rejects(checks.check_attention, wrong, fragment)


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (attention_factory(scale=lambda d: 1.0), "did not scale"),
        (attention_factory(axis=-2), "over the queries"),
        (attention_factory(invert_mask=True), "wrong way round"),
    ],
)
def test_list_attention_mistakes(wrong, fragment):
    with np.errstate(all="ignore"):
        rejects(checks.check_attention_list, wrong, fragment)


def test_attention_wrong_return_type_and_shape():
    rejects(
        checks.check_attention,
        lambda q, k, v, mask=None: A.scaled_dot_product_attention(q, k, v, mask)[0],
        "pair",
    )
    rejects(checks.check_attention, lambda q, k, v, mask=None: (v, v), "expected weights")


# --------------------------------------------------------------------------- heads


def test_split_heads_mistakes():
    def no_transpose(x, h):
        b, s, d = x.shape
        return x.reshape(b, h, s, d // h)

    def interleaved(x, h):
        b, s, d = x.shape
        return x.reshape(b, s, d // h, h).transpose(0, 3, 1, 2)

    rejects(checks.check_split_heads, no_transpose, "cuts the sequence")
    rejects(checks.check_split_heads, interleaved, "contiguous block")
    rejects(
        checks.check_split_heads,
        lambda x, h: x,
        "expected (batch, heads, seq, d_k) of shape (2, 4, 3, 2)",
    )


def test_merge_heads_mistakes():
    def no_transpose(x):
        b, h, s, d = x.shape
        return x.reshape(b, s, h * d)

    rejects(checks.check_merge_heads, no_transpose, "mixes tokens")
    rejects(checks.check_merge_heads, lambda x: x, "of shape (2, 3, 8)")


@pytest.mark.parametrize(
    "wrong, fragment",
    [
        (lambda d, h, bias: 3 * d * d + (3 * d if bias else 0), "W_O"),
        (lambda d, h, bias: 4 * d * d, "left out the biases"),
        (lambda d, h, bias: h * 4 * d * d + (4 * d if bias else 0), "every head"),
        (lambda d, h, bias: 4.0 * d * d, "whole number"),
    ],
)
def test_param_count_mistakes(wrong, fragment):
    rejects(checks.check_param_count, wrong, fragment)


# --------------------------------------------------------------------------- looking at heads


def test_head_checks_accept_references_and_reject_stubs(capsys):
    from lib import heads as H

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
