"""The checks of notebook 10's exercises: the right answers pass, and realistic mistakes, written
as a student would write them, get their own messages. The references and mutants below are
also added to the tables of tests/checks/test_checks_robustness.py (wrong types and shapes, leaks of
solution code) and tests/checks/test_check_mutants.py (each mutant its own message; a hard-coded
answer fails)."""

import math

import numpy as np
from helpers import lib_answers, rejects, stub

from lib import attention as A
from lib import blockwise as BW
from lib import checks

# lib's answers, unrefused: the references of the checks that refuse them
BW = lib_answers(BW)

# --------------------------------------------------------------------------- references


def decode_step(x_new, params, k_cache, v_cache):
    h = params.n_heads
    q = A.split_heads(x_new @ params.W_q + params.b_q, h)
    k = np.concatenate([k_cache, A.split_heads(x_new @ params.W_k + params.b_k, h)], axis=2)
    v = np.concatenate([v_cache, A.split_heads(x_new @ params.W_v + params.b_v, h)], axis=2)
    heads, _ = A.scaled_dot_product_attention(q, k, v)
    return A.merge_heads(heads) @ params.W_o + params.b_o, k, v


def gqa_attention(q, k, v):
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    return A.scaled_dot_product_attention(q, k, v)[0]


NB10_REFERENCES = {
    "check_online_softmax_update": (checks.check_online_softmax_update, BW.online_softmax_update),
    "check_decode_step": (checks.check_decode_step, decode_step),
    "check_gqa_attention": (checks.check_gqa_attention, gqa_attention),
}

# --------------------------------------------------------------------------- mutants


def update(rescale_l=True, rescale_acc=True, inverted=False, block_max=False, guard=True,
           normalise=False):  # fmt: skip
    def online_softmax_update(m, l, acc, scores, v):
        top = scores.max(axis=-1)
        m_new = top if block_max else np.maximum(m, top)
        shift = np.where(np.isneginf(m_new), 0.0, m_new) if guard else m_new
        p = np.exp(scores - shift[:, None])
        alpha = np.exp(shift - m) if inverted else np.exp(m - shift)
        l_new = (alpha * l if rescale_l else l) + p.sum(axis=-1)
        acc_new = (alpha[:, None] * acc if rescale_acc else acc) + p @ v
        if normalise:
            acc_new = acc_new / np.where(l_new > 0, l_new, 1.0)[:, None]
        return m_new, l_new, acc_new

    return online_softmax_update


def decoder(mistake):
    def step(x_new, params, k_cache, v_cache):
        h = params.n_heads
        q = A.split_heads(x_new @ params.W_q + params.b_q, h)
        k_new = A.split_heads(x_new @ params.W_k + params.b_k, h)
        v_new = A.split_heads(x_new @ params.W_v + params.b_v, h)
        k = np.concatenate([k_cache, k_new], axis=2)
        v = np.concatenate([v_cache, v_new], axis=2)
        if mistake == "prepended":
            k, v = (
                np.concatenate([k_new, k_cache], axis=2),
                np.concatenate([v_new, v_cache], axis=2),
            )
        if mistake == "dropped oldest":
            k, v = k[:, :, 1:], v[:, :, 1:]
        mask = None
        if mistake == "top-left mask":
            mask = np.tri(1, k.shape[2], dtype=bool)
        if mistake == "before appending":
            heads, _ = A.scaled_dot_product_attention(q, k_cache, v_cache)
        elif mistake == "no scale":
            heads = A.softmax(q @ np.swapaxes(k, -1, -2)) @ v
        else:
            heads, _ = A.scaled_dot_product_attention(q, k, v, mask)
        out = A.merge_heads(heads)
        if mistake != "no W_o":
            out = out @ params.W_o + params.b_o
        if mistake == "old caches":
            return out, k_cache, v_cache
        return out, k, v

    return step


def grouped(mistake):
    def attention(q, k, v):
        group = q.shape[1] // k.shape[1]
        if mistake == "tile":  # torch's k.repeat(1, group, 1, 1)
            k, v = np.tile(k, (1, group, 1, 1)), np.tile(v, (1, group, 1, 1))
        elif mistake == "first":
            k, v = k[:, :1], v[:, :1]
        else:
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        s = q @ np.swapaxes(k, -1, -2)
        if mistake != "no scale":
            s = s / math.sqrt(q.shape[-1])
        if mistake == "no max shift":  # the textbook formula, exp overflows on large scores
            e = np.exp(s)
            return e / e.sum(axis=-1, keepdims=True) @ v
        return A.softmax(s, axis=-2 if mistake == "axis" else -1) @ v

    return attention


NB10_MUTANTS = {
    "check_online_softmax_update": [
        ("sum not rescaled", update(rescale_l=False), "forgot to rescale the running sum"),
        ("output not rescaled", update(rescale_acc=False), "forgot to rescale the running output"),
        ("nothing rescaled", update(rescale_l=False, rescale_acc=False), "neither l nor acc"),
        ("inverted", update(inverted=True), "upside down"),
        ("block max only", update(block_max=True), "not of this block alone"),
        ("no guard", update(guard=False), "exp(-inf - (-inf)) is NaN"),
        ("normalised", update(normalise=True), "unnormalised running output"),
    ],
    "check_decode_step": [
        ("before appending", decoder("before appending"), "does not see itself: off by one"),
        ("dropped oldest", decoder("dropped oldest"), "dropped the oldest cached key"),
        ("top-left mask", decoder("top-left mask"), "aligned with the end of the cache"),
        ("no scale", decoder("no scale"), "did not scale the scores"),
        ("no W_o", decoder("no W_o"), "apply W_o and b_o"),
        ("prepended", decoder("prepended"), "at the end of the k_cache"),
        ("old caches", decoder("old caches"), "still has 4 tokens"),
    ],
    "check_gqa_attention": [
        ("tile", grouped("tile"), "use np.repeat (torch's .repeat_interleave)"),
        ("first head", grouped("first"), "every query head read key/value head 0"),
        ("no scale", grouped("no scale"), "did not scale the scores"),
        ("axis", grouped("axis"), "the softmax ran over the queries"),
        ("no max shift", grouped("no max shift"), "subtract each row's largest score"),
    ],
}

# --------------------------------------------------------------------------- specific cases


def test_the_references_pass(capsys):
    for check, reference in NB10_REFERENCES.values():
        check(reference)
    assert capsys.readouterr().out.count("✓") == 3


def test_stubs_are_reported():
    for check, _ in NB10_REFERENCES.values():
        rejects(check, stub, "not implemented yet")


def test_a_guard_that_zeroes_the_nan_rows_after_the_fact_passes():
    """Any correct way of keeping fully masked rows at 0 is accepted, not just lib's."""

    def online_softmax_update(m, l, acc, scores, v):
        m_new = np.maximum(m, scores.max(axis=-1))
        with np.errstate(invalid="ignore"):
            p = np.nan_to_num(np.exp(scores - m_new[:, None]))
            alpha = np.nan_to_num(np.exp(m - m_new))
        return m_new, alpha * l + p.sum(axis=-1), alpha[:, None] * acc + p @ v

    checks.check_online_softmax_update(online_softmax_update)


def test_a_cache_grown_with_the_unchecked_helpers_passes():
    def step(x_new, params, k_cache, v_cache):
        qkv = x_new @ np.concatenate([params.W_q, params.W_k, params.W_v], axis=1)
        qkv = qkv + np.concatenate([params.b_q, params.b_k, params.b_v])
        q, k, v = (A.split_heads(a, params.n_heads) for a in np.split(qkv, 3, axis=-1))
        k, v = np.concatenate([k_cache, k], axis=2), np.concatenate([v_cache, v], axis=2)
        heads, _ = A.scaled_dot_product_attention(q, k, v, A.causal_mask(1, k.shape[2]))
        return A.merge_heads(heads) @ params.W_o + params.b_o, k, v

    checks.check_decode_step(step)


def test_grouping_by_reshaping_the_queries_passes():
    """The group's query heads stacked against one key/value head, no copies of k or v."""

    def attention(q, k, v):
        b, h, n_q, d_k = q.shape
        kv = k.shape[1]
        qg = q.reshape(b, kv, (h // kv) * n_q, d_k)  # heads j*g .. j*g+g-1 are consecutive
        out, _ = A.scaled_dot_product_attention(qg, k, v)
        return out.reshape(b, h, n_q, v.shape[-1])

    checks.check_gqa_attention(attention)


def test_the_wrong_order_of_returned_values_is_named():
    def swapped(m, l, acc, scores, v):
        new = BW.online_softmax_update(m, l, acc, scores, v)
        return new[1], new[0], new[2]

    rejects(checks.check_online_softmax_update, swapped, "online_softmax_update")


def test_a_tensor_that_requires_grad_gets_one_sentence():
    """torch refuses numpy() on such a tensor with a RuntimeError: the check says what to do
    instead of letting the traceback out (as_array is shared by every array check)."""
    import torch

    def attention(q, k, v):
        out = torch.tensor(gqa_attention(q, k, v), requires_grad=True)
        return out * 1.0

    message = rejects(checks.check_gqa_attention, attention, "requires grad", ".detach()")
    assert "\n" not in message
