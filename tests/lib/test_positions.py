"""Position schemes (lib.positions): the sinusoidal table and its shifts, RoPE in both pair
layouts, ALiBi's slopes and bias; each against an implementation nobody here wrote.

References, and where their values come from:

- **RoPE, half-split layout** (pairs (i, i + d_k/2)): Hugging Face ``transformers``' Llama,
  ``transformers.models.llama.modeling_llama.apply_rotary_pos_emb`` (with its ``rotate_half``)
  and the cos/sin of its ``LlamaRotaryEmbedding`` (default rope type, ``rope_theta`` = base).
- **RoPE, interleaved layout** (pairs (2i, 2i + 1)): ``transformers``' GPT-J,
  ``transformers.models.gptj.modeling_gptj.apply_rotary_pos_emb`` (with its
  ``rotate_every_two``) and its table ``create_sinusoidal_positions``.
- **Sinusoidal table**: Vaswani et al. (2017), section 3.5, PE(pos, 2i) = sin(pos /
  10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), written out entry by entry below;
  and GPT-J's ``create_sinusoidal_positions``, the same frequencies with the sines in the
  first half of the columns and the cosines in the second.
- **ALiBi slopes**: Press et al. (2022), section 3: for 8 heads 1/2^1 ... 1/2^8, for 16 heads
  1/2^0.5, 1/2^1, ..., 1/2^8 (the paper's own examples, typed in below), and in general
  2^(-8h/n) for n heads a power of two; for other head counts, ``transformers``' BLOOM
  ``_get_alibi_slopes`` (which follows the ALiBi authors' ``get_slopes``: the power of two
  below, then every other slope of the next power of two) and, for powers of two, MPT's
  ``build_mpt_alibi_tensor``.
- **ALiBi bias**: BLOOM's ``build_alibi_tensor``, which adds slope x key position; that
  differs from -slope x distance by slope x query position, a constant on each query row
  (the softmax ignores it), so the two must agree up to that constant and give the same
  attention weights.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tolerances import assert_within, rope_errors, softmax_tolerances

from lib import attention as A
from lib import positions as POS
from lib import rounding as R

FD = R.FUNCTION_DEPTH


def trig_error(dtype, angle):
    """One computation in ``dtype`` of sin or cos of p base^(-2i/d): the angle (a power, a
    division and the product: FD + 2 roundings on |angle|, carried through as an absolute
    error since |sin'|, |cos'| <= 1) and the function itself (FD roundings on 1)."""
    return R.tolerance(dtype, FD + 2, np.abs(angle)) / 2 + R.tolerance(dtype, FD) / 2


def scores_tolerance(rq, dq, rk, dk):
    """Tolerance of rq @ rk.T for turned queries and keys known to within dq, dk (float64),
    compared across two computations: each one's errors through the product, and d_k
    roundings on |rq| @ |rk|.T."""
    one = dq @ np.abs(rk).T + np.abs(rq) @ dk.T
    one = one + R.tolerance(np.float64, rq.shape[-1], np.abs(rq) @ np.abs(rk).T) / 2
    return 2 * one


# --------------------------------------------------------------------------- sinusoidal


def vaswani_entry(pos: int, column: int, d: int, base: float = 10000.0) -> float:
    """Section 3.5 of the paper, one entry at a time."""
    i = column // 2
    angle = pos / base ** (2 * i / d)
    return math.sin(angle) if column % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("n, d, base", [(50, 16, 10000.0), (7, 6, 100.0), (3, 2, 10.0)])
def test_sinusoidal_table_is_the_papers_formula(n, d, base):
    table = POS.sinusoidal_table(n, d, base)
    expected = np.array([[vaswani_entry(p, c, d, base) for c in range(d)] for p in range(n)])
    angle = np.arange(n)[:, None] * np.ones(d)  # at most p: every frequency is <= 1
    assert_within(table, expected, 2 * trig_error(np.float64, angle))


def test_sinusoidal_table_matches_gptj_with_its_columns_reordered():
    from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

    theirs = create_sinusoidal_positions(40, 16).double().numpy()  # [sin block | cos block]
    ours = POS.sinusoidal_table(40, 16)
    angle = np.arange(40)[:, None] * np.ones(8)
    tol = trig_error(np.float32, angle) + trig_error(np.float64, angle)  # float32 there
    assert_within(ours[:, 0::2], theirs[:, :8], tol, "sin")
    assert_within(ours[:, 1::2], theirs[:, 8:], tol, "cos")


def test_sinusoidal_table_keeps_the_dtype_and_allows_no_positions():
    assert POS.sinusoidal_table(5, 4, dtype=np.float32).dtype == np.float32
    assert POS.sinusoidal_table(0, 4).shape == (0, 4)


@settings(max_examples=25)
@given(k=st.integers(-30, 30), d=st.sampled_from([2, 4, 8, 16]), base=st.sampled_from([10.0, 1e4]))
def test_a_shift_of_position_is_one_linear_map(k, d, base):
    table = POS.sinusoidal_table(80, d, base)
    shift = POS.sinusoidal_shift(k, d, base)
    p = np.arange(max(0, -k), 80 - max(0, k))  # every p with p and p + k in the table
    # each entry of table[p] @ R: two products of a table entry (within trig_error(p)) and
    # a shift entry (within trig_error(|k|)), summed; of |.| <= 1 each
    table_p, shift_k = trig_error(np.float64, p[:, None]), trig_error(np.float64, abs(k))
    one = 2 * (table_p + shift_k) + R.tolerance(np.float64, 3, 2.0) / 2
    assert_within(table[p] @ shift, table[p + k], one + trig_error(np.float64, (p + k)[:, None]))
    assert_within(
        shift @ shift.T, np.eye(d), 2 * (4 * shift_k + R.tolerance(np.float64, 3, 2.0) / 2)
    )
    assert_within(POS.sinusoidal_shift(-k, d, base), shift.T, 2 * shift_k)


def test_shift_by_zero_is_the_identity_and_shifts_add_up():
    np.testing.assert_array_equal(POS.sinusoidal_shift(0, 8), np.eye(8))
    # two products of entries within trig_error(3) and trig_error(4), summed; and R_7's own
    one = (
        2 * (trig_error(np.float64, 3) + trig_error(np.float64, 4))
        + R.tolerance(np.float64, 3, 2.0) / 2
    )
    assert_within(
        POS.sinusoidal_shift(3, 8) @ POS.sinusoidal_shift(4, 8), POS.sinusoidal_shift(7, 8),
        one + trig_error(np.float64, 7),
    )  # fmt: skip


# --------------------------------------------------------------------------- RoPE


def llama_cos_sin(n: int, d_k: int, base: float, dtype=torch.float64):
    """cos and sin as transformers' Llama computes them (its own frequencies)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(
        hidden_size=d_k * 2, num_attention_heads=2, head_dim=d_k,
        rope_parameters={"rope_type": "default", "rope_theta": base},
    )  # fmt: skip
    rotary = LlamaRotaryEmbedding(config)
    return rotary(torch.zeros(1, n, d_k, dtype=dtype), torch.arange(n)[None])


@pytest.mark.parametrize("d_k, base", [(8, 10000.0), (16, 500.0), (2, 10.0)])
def test_half_split_rope_equals_llamas_apply_rotary_pos_emb(d_k, base):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rng = np.random.default_rng(d_k)
    q, k = rng.normal(size=(2, 3, 11, d_k)), rng.normal(size=(2, 3, 11, d_k))  # (b, h, n, d_k)
    pos = np.arange(11)
    # 1. the rotation and the pairing alone, with cos and sin in float64 laid out as
    #    transformers lays them out: emb = cat(freqs, freqs)
    freqs = pos[:, None] * base ** (-np.arange(0, d_k, 2) / d_k)
    emb = np.concatenate([freqs, freqs], axis=-1)[None]  # (1, n, d_k)
    q_ref, k_ref = apply_rotary_pos_emb(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(np.cos(emb)),
        torch.from_numpy(np.sin(emb)),
    )  # fmt: skip
    rope = POS.RoPE(base, "half")
    for name, x, x_ref in (("q", q, q_ref), ("k", k, k_ref)):
        tol = 2 * rope_errors(np.float64, x, 0.0, pos, rope)[1]  # both turns in float64
        assert_within(POS.rope_rotate(x, pos, base, "half"), x_ref.numpy(), tol, name)
    # 2. with transformers' own frequencies, computed in float32 there: its cos and sin are
    #    within trig_error(float32) of the exact ones, and the turn mixes each pair
    cos, sin = llama_cos_sin(11, d_k, base)
    q_ref, _ = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    angle = pos[:, None] * np.ones(d_k)
    theirs = trig_error(np.float32, angle)
    pair = np.abs(q) + np.abs(q) @ np.abs(rope.partners(d_k))
    tol = rope_errors(np.float64, q, 0.0, pos, rope)[1] + pair * theirs
    assert_within(POS.rope_rotate(q, pos, base), q_ref.numpy(), tol, "q, float32 angles")
    ours_cos, ours_sin = rope.cos_sin(pos, d_k, np.float64)
    tol = theirs + trig_error(np.float64, angle)
    assert_within(ours_cos, cos[0].numpy(), tol, "cos")
    assert_within(ours_sin, sin[0].numpy(), tol, "sin")


@pytest.mark.parametrize("d_k", [4, 8, 16])
def test_interleaved_rope_equals_gptjs_apply_rotary_pos_emb(d_k):
    from transformers.models.gptj.modeling_gptj import (
        apply_rotary_pos_emb,
        create_sinusoidal_positions,
    )

    rng = np.random.default_rng(d_k)
    x = rng.normal(size=(2, 9, 3, d_k))  # GPT-J's layout: (batch, n, heads, d_k)
    pos = np.arange(9)
    ours = POS.rope_rotate(x.transpose(0, 2, 1, 3), pos, layout="interleaved").transpose(0, 2, 1, 3)
    # 1. GPT-J's rotation with sin and cos in float64 (its table: [sin | cos] per position)
    freqs = pos[:, None] * 10000.0 ** (-np.arange(0, d_k, 2) / d_k)
    sin, cos = (torch.from_numpy(f(freqs)[None]) for f in (np.sin, np.cos))
    theirs = apply_rotary_pos_emb(torch.from_numpy(x), sin, cos).numpy()
    rope = POS.RoPE(layout="interleaved")
    one = rope_errors(np.float64, x.transpose(0, 2, 1, 3), 0.0, pos, rope)[1].transpose(0, 2, 1, 3)
    assert_within(ours, theirs, 2 * one, "float64 table")
    # 2. with GPT-J's own table (float32): within trig_error(float32), mixed in each pair
    table = create_sinusoidal_positions(9, d_k)[None]  # (1, n, d_k)
    sin, cos = torch.split(table.double(), d_k // 2, dim=-1)
    theirs = apply_rotary_pos_emb(torch.from_numpy(x), sin, cos).numpy()
    pair = np.abs(x) + np.abs(x) @ np.abs(rope.partners(d_k))
    tol = one + pair * trig_error(np.float32, pos[:, None, None] * np.ones(d_k))
    assert_within(ours, theirs, tol, "float32 table")


@pytest.mark.parametrize("layout", POS.LAYOUTS)
@settings(max_examples=25)
@given(seed=st.integers(0, 2**16), shift=st.integers(-20, 20), d_k=st.sampled_from([2, 4, 6, 8]))
def test_rope_scores_depend_on_the_offset_only(layout, seed, shift, d_k):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(5, d_k)), rng.normal(size=(5, d_k))
    m, n = rng.integers(0, 30, size=5), rng.integers(0, 30, size=5)
    turn = POS.RoPE(layout=layout)

    def scores(qp, kp):  # and their error bound, one computation
        rq, dq = rope_errors(np.float64, q, 0.0, qp, turn)
        rk, dk = rope_errors(np.float64, k, 0.0, kp, turn)
        error = np.einsum("id,id->i", dq, np.abs(rk)) + np.einsum("id,id->i", np.abs(rq), dk)
        error += R.tolerance(np.float64, d_k, np.einsum("id,id->i", np.abs(rq), np.abs(rk))) / 2
        return np.einsum("id,id->i", turn.rotate(q, *turn.cos_sin(qp, d_k, q.dtype)),
                         turn.rotate(k, *turn.cos_sin(kp, d_k, k.dtype))), error  # fmt: skip

    (before, e1), (after, e2) = scores(m, n), scores(m + shift, n + shift)
    assert_within(after, before, e1 + e2)


@pytest.mark.parametrize("layout", POS.LAYOUTS)
def test_rope_keeps_lengths_and_turning_back_undoes_it(layout):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 7, 6))
    pos = np.array([0, 4, -2, 9, 100, 3, 3])  # any integers, in any order
    turned = POS.rope_rotate(x, pos, layout=layout)
    rope = POS.RoPE(layout=layout)
    _, error = rope_errors(np.float64, x, 0.0, pos, rope)
    # a norm moves by at most the norm of the errors; its own d + 1 roundings (and sqrt)
    norm_tol = np.linalg.norm(error, axis=-1) + R.tolerance(
        np.float64, x.shape[-1] + FD + 1, np.linalg.norm(x, axis=-1)
    )
    assert_within(np.linalg.norm(turned, axis=-1), np.linalg.norm(x, axis=-1), norm_tol, "norm")
    _, back_error = rope_errors(np.float64, turned, error, -pos, rope)  # turned back, errors too
    assert_within(POS.rope_rotate(turned, -pos, layout=layout), x, back_error, "back")
    np.testing.assert_array_equal(POS.rope_rotate(x, np.zeros(7, int), layout=layout), x)


def test_the_two_layouts_are_one_model_up_to_a_permutation_and_differ_otherwise():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(6, 8)), rng.normal(size=(6, 8))
    pos = np.arange(6)
    to_half = np.r_[0:8:2, 1:8:2]  # interleaved pairs (2i, 2i+1) -> half-split (i, i+4)
    inter = (
        POS.rope_rotate(q, pos, layout="interleaved")
        @ POS.rope_rotate(k, pos, layout="interleaved").T
    )
    half = POS.rope_rotate(q[:, to_half], pos) @ POS.rope_rotate(k[:, to_half], pos).T
    rq, dq = rope_errors(np.float64, q[:, to_half], 0.0, pos, POS.RoPE())
    rk, dk = rope_errors(np.float64, k[:, to_half], 0.0, pos, POS.RoPE())
    assert_within(inter, half, scores_tolerance(rq, dq, rk, dk))
    # without the permutation the two layouts turn different pairs: far beyond rounding
    turned = {
        lay: rope_errors(np.float64, q, 0.0, pos, POS.RoPE(layout=lay)) for lay in POS.LAYOUTS
    }
    gap = np.abs(turned["interleaved"][0] - turned["half"][0])
    assert (gap > 2 * (turned["interleaved"][1] + turned["half"][1])).any()


def test_rope_keeps_float32():
    x = np.ones((4, 6), np.float32)
    assert POS.rope_rotate(x, np.arange(4)).dtype == np.float32


# --------------------------------------------------------------------------- ALiBi


def test_alibi_slopes_are_the_papers_for_8_and_16_heads():
    np.testing.assert_array_equal(POS.alibi_slopes(8), [1 / 2**h for h in range(1, 9)])  # exact
    sixteen = np.array([1 / 2 ** (h / 2) for h in range(1, 17)])  # 1/2^0.5, 1/2^1, ..., 1/2^8
    # a power of two with a fractional exponent: the exponent's division and the power
    assert_within(POS.alibi_slopes(16), sixteen, R.tolerance(np.float64, FD + 2, sixteen))


@pytest.mark.parametrize("n_heads", range(1, 41))
def test_alibi_slopes_equal_blooms_for_every_head_count(n_heads):
    # BLOOM's public build_alibi_tensor (a helper computing the slopes alone exists in some
    # transformers releases only): (heads, 1, n) holding slope * j, so position 1 is the slope.
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    bias = build_alibi_tensor(torch.ones(1, 2), n_heads, torch.float64).numpy()  # float32 inside
    # float32 there: a base rounded once, raised to powers up to 2 n_heads (its error times
    # the power), then the power itself and the product: 2 n_heads + FD + 2 roundings
    slopes = POS.alibi_slopes(n_heads)
    assert_within(slopes, bias[:, 0, 1], R.tolerance(np.float32, 2 * n_heads + FD + 2, slopes))


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8, 16, 32])
def test_alibi_slopes_equal_mpts_for_powers_of_two(n_heads):
    from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

    bias = build_mpt_alibi_tensor(n_heads, 4).double().numpy()  # (heads, 1, n): slope * (j - 3)
    # float32 there: the exponent's product, the power, 1 / it and the product with -3,
    # then our division by 3: FD + 4 roundings on the slope
    slopes = POS.alibi_slopes(n_heads)
    assert_within(slopes, -bias[:, 0, 0] / 3, R.tolerance(np.float32, FD + 4, slopes))


def test_alibi_bias_equals_blooms_up_to_a_constant_per_query():
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    n, h = 7, 6
    theirs = build_alibi_tensor(torch.ones(1, n), h, torch.float64).numpy()  # (h, 1, n): m j
    ours = POS.alibi_bias(n, n, POS.alibi_slopes(h))  # (h, n, n): -m |i - j|
    m = POS.alibi_slopes(h)[:, None, None]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    causal = A.causal_mask(n)
    shifted = np.where(causal, ours + m * i, 0.0)
    # theirs: float32 slopes (2 h + FD + 2 roundings, as above) times j, one more; ours:
    # -m |i - j| + m i, two roundings on m (|i - j| + i)
    theirs_error = R.tolerance(np.float32, 2 * h + FD + 3, m * j) / 2
    tol = theirs_error + R.tolerance(np.float64, 2, m * (np.abs(i - j) + i)) / 2
    assert_within(
        shifted, np.where(causal, np.broadcast_to(theirs, ours.shape), 0), np.where(causal, tol, 0)
    )
    weights = A.softmax(np.where(causal, ours, -np.inf))
    theirs_weights = A.softmax(np.where(causal, np.broadcast_to(theirs, ours.shape), -np.inf))
    # the same softmax of scores that differ by a constant per row, each within its error
    s = np.where(causal, ours, -np.inf)
    assert_within(weights, theirs_weights, softmax_tolerances(np.float64, s, ds=tol))
    assert (ours[:, i[:, 0], i[:, 0]] == 0).all() and (ours[:, causal] <= 0).all()


def test_alibi_bias_with_cached_keys_is_the_last_rows():
    slopes = POS.alibi_slopes(3)
    full = POS.alibi_bias(9, 9, slopes)
    np.testing.assert_array_equal(POS.alibi_bias(4, 9, slopes), full[:, -4:])
    np.testing.assert_array_equal(POS.alibi_bias(1, 9, slopes)[:, 0, -1], 0.0)
    assert POS.alibi_bias(0, 5, slopes).shape == (3, 0, 5)
    assert POS.alibi_bias(2, 2, np.array([0.5], np.float32)).dtype == np.float32


def test_query_positions_follow_causal_masks_convention():
    """Query i of n_q sees keys 0 .. query_positions[i] under A.causal_mask(n_q, n_k)."""
    for n_q, n_k in ((3, 3), (2, 7), (1, 1), (4, 6), (5, 3)):
        mask = A.causal_mask(n_q, n_k)
        positions = POS.query_positions(n_q, n_k)
        sees = mask.any(axis=1)  # with n_q > n_k the first queries see no key
        np.testing.assert_array_equal(positions[sees], mask.sum(axis=1)[sees] - 1)
        assert (positions[~sees] < 0).all()


@pytest.mark.parametrize(
    "base", [math.nextafter(1.0, 2.0), 1.5, 1e4, 1e300, 1.7976931348623157e308]
)
def test_every_accepted_base_gives_finite_positions(base):
    """Any finite base > 1 (the range lib.positions accepts) keeps every frequency in
    (0, 1], so every angle p * theta_i is finite for any int64 position p: tables, shifts
    and turns stay finite. Below 1 they grow past 1 radian per position without bound."""
    far = np.array([0, 1, -(2**62), 2**62])
    assert np.isfinite(POS.rope_rotate(np.ones((4, 512)), far, base=base)).all()
    assert np.isfinite(POS.sinusoidal_table(3, 512, base)).all()
    assert np.isfinite(POS.sinusoidal_shift(2**62, 512, base)).all()
    theta = POS.frequencies(512, base)
    assert theta[0] == 1.0 and (theta > 0).all() and (theta <= 1.0).all()
    with pytest.raises(ValueError, match="base must be a finite number > 1"):
        POS.RoPE(math.nextafter(1.0, 0.0))
