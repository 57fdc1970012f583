"""The notebook 09 checks (positions) accept the reference answers, report stubs, and give
each realistic mistake its own message on at least two of their inputs (shapes)."""

import math

import numpy as np
import pytest
from helpers import rope_turn, stub, unrefused

from lib import checks
from lib import positions as POS
from lib.checks import CheckFailed

SHIFT = unrefused(POS.sinusoidal_shift)  # lib's answers, which the checks refuse
BIAS = unrefused(POS.alibi_bias)

# --------------------------------------------------------------------------- references


def rope_scores(q, k, base):
    """RoPE with the interleaved layout (written without lib's), then the scaled scores."""
    q, k = np.asarray(q, float), np.asarray(k, float)
    pos = np.arange(q.shape[-2])
    turned_q = rope_turn(q, pos, base, "interleaved")
    turned_k = rope_turn(k, pos, base, "interleaved")
    return turned_q @ np.swapaxes(turned_k, -1, -2) / math.sqrt(q.shape[-1])


REFERENCES = {
    "check_sinusoidal_shift": (checks.check_sinusoidal_shift, SHIFT),
    "check_rope_scores": (checks.check_rope_scores, rope_scores),
    "check_alibi_bias": (checks.check_alibi_bias, BIAS),
}


# --------------------------------------------------------------------------- mutants


def shift(k, d, base, exponent=-2.0, pairs="neighbours", diagonal="cos", frequency=True):
    """A shift matrix written from scratch, with the choices a student can get wrong."""
    R = np.zeros((d, d))
    for i in range(d // 2):
        w = base ** (exponent * i / d) if frequency else 1.0
        c, s = math.cos(k * w), math.sin(k * w)
        if diagonal == "sin":
            c, s = s, c
        a, b = (2 * i, 2 * i + 1) if pairs == "neighbours" else (i, i + d // 2)
        R[a, a], R[a, b], R[b, a], R[b, b] = c, -s, s, c
    return R


def rope_with(q_layout="interleaved", k_layout="interleaved", turn_q=True, turn_k=True,
              q_start=0, k_start=0, direction=1, base_of=lambda b: b, scale=True):  # fmt: skip
    def scores(q, k, base):
        n = q.shape[-2]
        pos = np.arange(n) * direction
        b = base_of(base)
        if turn_q:
            q = rope_turn(q, pos + q_start, b, q_layout)
        if turn_k:
            k = rope_turn(k, pos + k_start, b, k_layout)
        s = q @ np.swapaxes(k, -1, -2)
        return s / math.sqrt(q.shape[-1]) if scale else s

    return scores


def alibi_with(query_start="last", signed=False, plus=0):
    def bias(n_q, n_k, slopes):
        i = np.arange(n_q) + (n_k - n_q if query_start == "last" else 0)
        d = i[:, None] - np.arange(n_k)[None, :]
        d = d if signed else np.abs(d)
        return -np.asarray(slopes)[:, None, None] * (d + plus)

    return bias


def least_squares_shift(k, d, base):
    """What the exercise forbids: R fitted by least squares on a long table, as the notebook
    does before the exercise (positions 0 to 1999 of a table of 4000)."""
    table = POS.sinusoidal_table(4000, d, base)
    first = max(0, -k)
    return np.linalg.lstsq(table[first : first + 2000], table[first + k : first + k + 2000])[0]


NB09_MUTANTS = {
    "check_sinusoidal_shift": [
        ("transposed", lambda k, d, b: SHIFT(k, d, b).T, "moves positions by -k"),
        ("exponent -i/d", lambda k, d, b: shift(k, d, b, exponent=-1.0), "use -i / d_model"),
        ("exponent +2i/d", lambda k, d, b: shift(k, d, b, exponent=2.0), "exponent's sign"),
        ("base 10000", lambda k, d, b: SHIFT(k, d, 10000.0), "base 10000"),
        ("k + 1", lambda k, d, b: SHIFT(k + 1, d, b), "shifts by k + 1"),
        ("k - 1", lambda k, d, b: SHIFT(k - 1, d, b), "shifts by k - 1"),
        ("half-split pairs", lambda k, d, b: shift(k, d, b, pairs="halves"), "interleaves"),
        ("sin on the diagonal", lambda k, d, b: shift(k, d, b, diagonal="sin"), "swapped"),
        ("no frequencies", lambda k, d, b: shift(k, d, b, frequency=False), "same angle k"),
    ],
    "check_rope_scores": [
        ("half-split", rope_with("half", "half"), "the half-split layout"),
        ("q half, k interleaved", rope_with(q_layout="half"), "q is turned with the half-split"),
        ("k half, q interleaved", rope_with(k_layout="half"), "k is turned with the half-split"),
        ("not turned", rope_with(turn_q=False, turn_k=False), "nothing is turned"),
        ("only q", rope_with(turn_k=False), "only q is turned"),
        ("only k", rope_with(turn_q=False), "only k is turned"),
        ("wrong way", rope_with(direction=-1), "turns the wrong way"),
        ("exponent -i/d", rope_with(base_of=math.sqrt), "your frequencies use -i / d_k"),
        ("base 10000", rope_with(base_of=lambda b: 10000.0), "base 10000"),
        ("q from 1", rope_with(q_start=1), "q's positions start at 1"),
        ("k from 1", rope_with(k_start=1), "k's positions start at 1"),
        ("not scaled", rope_with(scale=False), "not scaled"),
    ],
    "check_alibi_bias": [
        ("sign", lambda q, k, s: -BIAS(q, k, s), "the sign is flipped"),
        ("queries from 0", alibi_with(query_start="first"), "your queries sit at positions 0"),
        (
            "queries from 0, signed",
            alibi_with(query_start="first", signed=True),
            "as if the queries started at position 0",
        ),
        ("distance + 1", alibi_with(plus=1), "off by one"),
        ("slopes reversed", lambda q, k, s: BIAS(q, k, s[::-1]), "reverse order"),
        (
            "heads last",
            lambda q, k, s: BIAS(q, k, s).transpose(1, 2, 0),
            "the heads axis comes first",
        ),
        (
            "a constant per row",
            lambda q, k, s: BIAS(q, k, s) + np.arange(q)[None, :, None],
            "asks for 0 on the query itself",
        ),
    ],
}
CASES = [(n, label, fn, frag) for n, ms in NB09_MUTANTS.items() for label, fn, frag in ms]


@pytest.mark.parametrize("name", list(REFERENCES))
def test_reference_passes_and_stub_is_reported(name, capsys):
    check, reference = REFERENCES[name]
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    with pytest.raises(CheckFailed, match="is not implemented yet"):
        check.__wrapped__(stub)  # as a grader calls it


def on_one_input(reference, mutant, index):
    """An answer that is the reference on every call but call ``index``, where it is the
    mutant: the check then sees the mistake on that one of its inputs only."""
    calls = []

    def answer(*args):
        calls.append(None)
        return (mutant if len(calls) - 1 == index else reference)(*args)

    return answer


@pytest.mark.parametrize(
    "name, label, mutant, fragment", CASES, ids=[f"{n}-{label}" for n, label, _, _ in CASES]
)
def test_each_mistake_gets_its_message_on_two_inputs(name, label, mutant, fragment):
    check, reference = REFERENCES[name]
    cases = {"check_sinusoidal_shift": 3, "check_rope_scores": 2, "check_alibi_bias": 3}[name]
    named = []
    for index in range(cases):
        try:
            with np.errstate(all="ignore"):
                check(on_one_input(reference, mutant, index))
        except CheckFailed as failed:
            assert fragment in str(failed), (index, str(failed))
            named.append(index)
    assert len(named) >= 2, f"{label}: named on inputs {named} only"


def test_a_mistake_on_both_q_and_k_positions_is_no_mistake(capsys):
    """Turning q and k both from position 1 changes no score: RoPE sees offsets only."""
    checks.check_rope_scores(rope_with(q_start=1, k_start=1))
    assert capsys.readouterr().out.startswith("✓")


def test_alibi_entries_a_causal_query_cannot_see_are_not_checked(capsys):
    def masked(n_q, n_k, slopes):
        bias = BIAS(n_q, n_k, slopes)
        keys_after = np.arange(n_k)[None, :] > POS.query_positions(n_q, n_k)[:, None]
        return np.where(keys_after, -np.inf, bias)

    checks.check_alibi_bias(masked)
    checks.check_alibi_bias(alibi_with(signed=True))  # +slope x distance after the query
    assert capsys.readouterr().out.count("✓") == 2


def test_a_least_squares_fit_is_rejected_though_it_fits_small_tables():
    """It is right to 1e-9 for d_model 8 and below, so only the check's d_model = 64 case
    (slow pairs a fit cannot pin down) tells it from the closed form."""
    for k, d, base in ((3, 8, 10000.0), (5, 6, 100.0), (-2, 4, 10.0)):
        assert np.allclose(least_squares_shift(k, d, base), SHIFT(k, d, base))
    with pytest.raises(CheckFailed, match="outside the 2 x 2 blocks .* least-squares fit"):
        checks.check_sinusoidal_shift(least_squares_shift)


# --------------------------------------------------------------------------- lib's own answer


def rope_scores_from_lib(q, k, base):
    """What section 4 shows: lib's RoPE with the interleaved layout, then the scores."""
    pos = np.arange(q.shape[-2])
    turned_q = POS.rope_rotate(q, pos, base, "interleaved")
    turned_k = POS.rope_rotate(k, pos, base, "interleaved")
    return turned_q @ np.swapaxes(turned_k, -1, -2) / math.sqrt(q.shape[-1])


def rope_scores_from_lib_class(q, k, base):
    """The same through POS.RoPE's methods."""
    rope = POS.RoPE(base, "interleaved")
    cos, sin = rope.cos_sin(np.arange(q.shape[-2]), q.shape[-1], q.dtype)
    turned_q, turned_k = rope.rotate(q, cos, sin), rope.rotate(k, cos, sin)
    return turned_q @ np.swapaxes(turned_k, -1, -2) / math.sqrt(q.shape[-1])


@pytest.mark.parametrize(
    "answer, label",
    [(rope_scores_from_lib, "POS.rope_rotate"), (rope_scores_from_lib_class, "POS.RoPE")],
)
def test_rope_scores_refuses_lib_rope(answer, label):
    """Exercise 2 asks for the turn itself: lib's RoPE is refused while the answer runs."""
    with pytest.raises(CheckFailed) as info:
        checks.check_rope_scores(answer)
    assert str(info.value) == (
        f"rope_scores: this exercise asks you to write it yourself, not to call {label}."
    )
    x = np.ones((3, 4))  # lib's RoPE works again once the check is done
    assert np.allclose(
        POS.rope_rotate(x, np.arange(3)),
        POS.RoPE().rotate(x, *POS.RoPE().cos_sin(np.arange(3), 4, x.dtype)),
    )
