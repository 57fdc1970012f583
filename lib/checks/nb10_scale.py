"""Checks of notebook 10 (attention at scale): online softmax, KV-cache decoding, grouped heads."""

import functools
import math
from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import blockwise as BW
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    diagnose,
    exercise,
    expect_shape,
    expect_tuple,
    passed,
)


def _wrong_update(m, l, acc, s, v, mistake: str):
    """The new (m, l, acc) of an online-softmax update made with one realistic mistake."""
    m_new = s.max(axis=-1) if mistake == "block max only" else np.maximum(m, s.max(axis=-1))
    shift = m_new if mistake == "no guard" else np.where(np.isneginf(m_new), 0.0, m_new)
    p = np.exp(s - shift[:, None])
    alpha = np.exp(shift - m) if mistake == "factor inverted" else np.exp(m - shift)
    l_alpha = 1.0 if mistake in ("sum not rescaled", "nothing rescaled") else alpha
    acc_alpha = 1.0 if mistake in ("output not rescaled", "nothing rescaled") else alpha[:, None]
    l = l_alpha * l + p.sum(axis=-1)
    acc = acc_alpha * acc + p @ v
    if mistake == "normalised":
        acc = acc / np.where(l > 0, l, 1.0)[:, None]
    return m_new, l, acc


# The NaN one first: its NaNs are its signature, and they make the others undefined.
_UPDATE_MISTAKES = {
    "no guard": "a row whose scores so far are all -inf (masked) gives NaN: exp(-inf - (-inf)) "
    "is NaN; for such rows use 0 as the shift, so that their exp(...) is 0.",
    "sum not rescaled": "you forgot to rescale the running sum: l was summed relative to the old "
    "maximum, so multiply it by exp(m - m_new) before adding this block's terms.",
    "output not rescaled": "you forgot to rescale the running output: acc was summed relative to "
    "the old maximum, so multiply it by exp(m - m_new) before adding this block's p @ v.",
    "nothing rescaled": "neither l nor acc is rescaled: when the maximum grows from m to m_new, "
    "both sums so far must be multiplied by exp(m - m_new).",
    "factor inverted": "the rescaling factor is upside down: it is exp(m - m_new) (at most 1), "
    "not exp(m_new - m).",
    "block max only": "m_new must be the maximum of the old m and this block's scores, not of "
    "this block alone; otherwise the max can shrink and the sums are rescaled the wrong way.",
    "normalised": "return the unnormalised running output; divide acc by l only once, after the "
    "last block.",
}


def _same_update(got, wrong) -> bool:
    return all(close(x, y, 1e-9, equal_nan=True) for x, y in zip(got, wrong, strict=True))


@exercise
def check_online_softmax_update(update_fn: Callable) -> None:
    """Exercise (notebook 10): one key block of the online softmax -> the new (m, l, acc)."""
    name = "online_softmax_update"
    for rows, b, d_v, seed in ((4, 5, 3, 10), (6, 3, 2, 11)):
        # Key blocks from the start (m = -inf), with a maximum that grows, a row masked in every
        # block so far (m still -inf) and one masked in this block.
        rng = np.random.default_rng(seed)
        blocks = [rng.normal(scale=2.0, size=(rows, b)) for _ in range(3)]
        blocks[0][0] = -np.inf  # row 0 sees nothing in block 1 ...
        blocks[1][1] += 6.0  # row 1's maximum grows a lot in block 2
        blocks[1][2] -= 6.0  # row 2's does not
        blocks[2][rows - 1] = -np.inf  # the last row sees nothing in block 3
        values = [rng.normal(size=(b, d_v)) for _ in range(3)]
        m, l, acc = np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, d_v))
        for step, (s, v) in enumerate(zip(blocks, values, strict=True), start=1):
            result = call(update_fn, name, m, l, acc, s, v)
            expect_tuple(result, 3, name, "the three running quantities (m, l, acc)")
            names = ("m", "l", "acc")
            got = [as_array(r, name, what) for r, what in zip(result, names, strict=True)]
            for g, want, what in zip(got, (m, l, acc), names, strict=True):
                expect_shape(g, want.shape, name, f"{what} shaped like the {what} it was given")
            expected = BW.online_softmax_update(m, l, acc, s, v)
            if all(close(g, e, 1e-9) for g, e in zip(got, expected, strict=True)):
                m, l, acc = expected  # the next block starts from lib's state
                continue
            mistakes = {
                message: functools.partial(_wrong_update, m, l, acc, s, v, mistake)
                for mistake, message in _UPDATE_MISTAKES.items()
            }
            diagnose(got, name, mistakes, same=_same_update)
            if any(np.isnan(g).any() for g in got):
                raise CheckFailed(
                    f"{name}: your result holds NaN (block {step}); a row whose scores are all "
                    "-inf must keep l = 0 and acc = 0."
                )
            which = [n for n, g, e in zip(names, got, expected, strict=True) if not close(g, e)]
            raise CheckFailed(
                f"{name}: wrong {', '.join(which)} after key block {step}; m_new = max(m, the "
                "block's row maxima), then rescale l and acc by exp(m - m_new) and add the "
                "block's terms."
            )
    passed("online_softmax_update: sums rescaled by exp(m - m_new); masked rows stay at 0.")


def _decode_reference(x_new, params, k_cache, v_cache, variant=None):
    """One step, or a realistic variant of it: (out, k_cache, v_cache)."""
    h = params.n_heads
    q = A.split_heads(x_new @ params.W_q + params.b_q, h)  # (batch, heads, 1, d_k)
    keys = np.concatenate([k_cache, A.split_heads(x_new @ params.W_k + params.b_k, h)], axis=2)
    values = np.concatenate([v_cache, A.split_heads(x_new @ params.W_v + params.b_v, h)], axis=2)
    if variant == "before appending":
        keys, values = k_cache, v_cache
    if variant == "dropped oldest":
        keys, values = keys[:, :, 1:], values[:, :, 1:]
    scale = 1.0 if variant == "no scale" else 1.0 / math.sqrt(params.d_k)
    scores = (q * scale) @ np.swapaxes(keys, -1, -2)  # (batch, heads, 1, L + 1)
    if variant == "top-left mask":
        scores = np.where(np.tri(1, keys.shape[2], dtype=bool), scores, -np.inf)
    concat = A.merge_heads(A.softmax(scores) @ values)  # (batch, 1, heads * d_k)
    out = concat if variant == "no W_o" else concat @ params.W_o + params.b_o
    return out, keys, values


_DECODE_MISTAKES = {
    "before appending": "the new token does not see itself: off by one, its query attended to "
    "the cache before its own key and value were appended; append first, then attend to all "
    "L + 1 keys.",
    "dropped oldest": "you dropped the oldest cached key: after the step the cache must hold all "
    "L earlier tokens plus the new one (L + 1 keys), none left out.",
    "top-left mask": "your query sees only the first key: a causal mask for the newest token "
    "must be aligned with the end of the cache (A.causal_mask(1, L + 1)), and then it masks "
    "nothing: no mask is needed.",
    "no scale": "you did not scale the scores: divide q k^T by sqrt(d_k).",
    "no W_o": "the heads are concatenated but not projected: apply W_o and b_o.",
}


@exercise
def check_decode_step(decode_fn: Callable) -> None:
    """Exercise (notebook 10): one decoding step with a KV cache -> (out, k_cache, v_cache)."""
    name = "decode_step"
    for batch, d, h, past, seed in ((2, 8, 2, 4, 20), (1, 12, 3, 6, 21), (2, 6, 3, 0, 22)):
        rng = np.random.default_rng(seed)
        params = A.init_mha_params(d, h, rng, bias=True)
        x_past, x_new = rng.normal(size=(batch, past, d)), rng.normal(size=(batch, 1, d))
        k_cache = A.split_heads(x_past @ params.W_k + params.b_k, h)  # (batch, heads, past, d_k)
        v_cache = A.split_heads(x_past @ params.W_v + params.b_v, h)
        result = call(decode_fn, name, x_new, params, k_cache, v_cache)
        expect_tuple(result, 3, name, "(out, k_cache, v_cache)")
        out = as_array(result[0], name, "out")
        expect_shape(out, (batch, 1, d), name, "an output (batch, 1, d_model)")
        x_all = np.concatenate([x_past, x_new], axis=1)
        want_out = A.multi_head_attention(x_all, x_all, params, A.causal_mask(past + 1))[0][:, -1:]
        _, want_k, want_v = _decode_reference(x_new, params, k_cache, v_cache)
        if not close(out, want_out, 1e-9):
            mistakes = {
                message: lambda v=variant: _decode_reference(x_new, params, k_cache, v_cache, v)[0]
                for variant, message in _DECODE_MISTAKES.items()
            }
            diagnose(out, name, mistakes, tol=1e-9)
            raise CheckFailed(
                f"{name}: the output differs from the full causal forward's last row (largest "
                f"difference {np.abs(out - want_out).max():.3g}); project the new token, "
                "append its key and value, attend to every cached key."
            )
        for r, want, what in ((result[1], want_k, "k_cache"), (result[2], want_v, "v_cache")):
            arr = as_array(r, name, what)
            if arr.shape == k_cache.shape:
                raise CheckFailed(
                    f"{name}: the {what} you return still has {past} tokens: return it with "
                    "the new token's entry appended (the next step needs it)."
                )
            expect_shape(arr, want.shape, name, f"a {what} with the new token appended")
            if close(arr, want, 1e-9):
                continue
            if past and close(arr[:, :, 0], want[:, :, -1], 1e-9):
                raise CheckFailed(
                    f"{name}: the new token's entry must go at the end of the {what} "
                    f"(position L = {past}), not the front: positions must stay in order."
                )
            raise CheckFailed(
                f"{name}: the {what} returned is not the old one with the new token's entry "
                "(x_new projected, split into heads) appended along the sequence axis."
            )
    passed("decode_step: new key and value appended; equals the full causal forward's last row.")


def _gqa_reference(q, k, v, mapping="interleave", scale=True, axis=-1):
    h, kv = q.shape[1], k.shape[1]
    heads = np.arange(h)
    kv_of = {"interleave": heads // (h // kv), "tile": heads % kv, "first": 0 * heads}[mapping]
    s = q @ np.swapaxes(k[:, kv_of], -1, -2)
    if scale:
        s = s / math.sqrt(q.shape[-1])
    return A.softmax(s, axis=axis) @ v[:, kv_of]


@exercise
def check_gqa_attention(gqa_fn: Callable) -> None:
    """Exercise (notebook 10): attention where query head i reads key/value head i // group."""
    name = "gqa_attention"
    rng = np.random.default_rng(30)
    for batch, h, kv, n_q, n_k, d_k, d_v in (
        (2, 4, 2, 3, 5, 4, 2),
        (1, 6, 3, 4, 2, 3, 5),
        (2, 6, 2, 2, 4, 2, 3),
        (1, 4, 1, 3, 4, 2, 2),
        (1, 3, 3, 2, 3, 4, 3),
    ):
        q = rng.normal(size=(batch, h, n_q, d_k))
        k = rng.normal(size=(batch, kv, n_k, d_k))
        v = rng.normal(size=(batch, kv, n_k, d_v))
        got = as_array(call(gqa_fn, name, q, k, v), name)
        expect_shape(got, (batch, h, n_q, d_v), name, "an output (batch, heads, n_q, d_v)")
        want = _gqa_reference(q, k, v)
        if close(got, want, 1e-9):
            continue
        unscaled = _gqa_reference(q, k, v, scale=False)
        mistakes = {
            "query head i must read key/value head i // group (heads 0..group-1 share kv "
            "head 0); you paired it with kv head i % n_kv_heads, which is what np.tile "
            "and torch's .repeat give: use np.repeat (torch's .repeat_interleave) "
            "along the heads axis.": _gqa_reference(q, k, v, "tile") if kv > 1 else None,
            f"every query head read key/value head 0: there are {kv} "
            "key/value heads, each shared by a group of consecutive query "
            "heads.": _gqa_reference(q, k, v, "first") if kv > 1 else None,
            "you did not scale the scores: divide q k^T by sqrt(d_k).": unscaled,
            "the softmax ran over the queries (axis -2); it normalises each query's "
            "scores over the keys, the last axis.": _gqa_reference(q, k, v, axis=-2),
        }
        diagnose(got, name, mistakes, tol=1e-9)
        raise CheckFailed(
            f"{name}: wrong values for {h} query heads and {kv} key/value heads (largest "
            f"difference {np.abs(got - want).max():.3g})."
        )
    # Scores near 2000, spread by a few units: exp overflows unless each row is shifted by
    # its maximum first (A.softmax does it); the weights are still far from one-hot.
    rng = np.random.default_rng(31)
    q = 32.0 * (1.0 + 1e-3 * rng.normal(size=(1, 4, 3, 4)))
    k = 32.0 * (1.0 + 1e-3 * rng.normal(size=(1, 2, 5, 4)))
    v = rng.normal(size=(1, 2, 5, 3))
    got = as_array(call(gqa_fn, name, q, k, v), name)
    expect_shape(got, (1, 4, 3, 3), name, "an output (batch, heads, n_q, d_v)")
    if not close(got, _gqa_reference(q, k, v), 1e-9):
        top = (q @ np.swapaxes(k[:, [0, 0, 1, 1]], -1, -2)).max() / 2.0
        raise CheckFailed(
            f"{name}: wrong values for scores near {top:.0f} (exp overflows there): subtract "
            "each row's largest score before exponentiating, as A.softmax does."
        )
    passed("gqa_attention: query head i reads key/value head i // group, for every group size.")
