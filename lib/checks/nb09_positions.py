"""Checks of notebook 09 (positions): the sinusoidal shift matrix, RoPE's scores, ALiBi's bias."""

import functools
import math
from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import positions as POS
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


def _shift(k, d, base, *, two=True, sign=-1.0, layout="interleaved", cos_sin=True, freq=True):
    """A shift matrix built the right way (defaults) or with one realistic mistake."""
    i = np.arange(d // 2)
    w = base ** (sign * (2 * i if two else i) / d) if freq else np.ones(d // 2)
    c, s = np.cos(k * w), np.sin(k * w)
    if not cos_sin:
        c, s = s, c
    first, second = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
    R = np.zeros((d, d))
    R[first, first], R[first, second] = c, -s
    R[second, first], R[second, second] = s, c
    return R


@exercise
def check_sinusoidal_shift(shift_fn: Callable[[int, int, float], np.ndarray]) -> None:
    """Exercise (notebook 09): the matrix R_k with PE[p + k] = PE[p] @ R_k for every p."""
    name = "sinusoidal_shift"
    # With d_model = 64 the slowest pairs turn by 10000^(-62/64) radians a position, too slowly
    # for a least-squares fit on a table to pin them down: the exercise wants the closed form.
    for k, d, base in ((3, 8, 10000.0), (5, 6, 100.0), (-2, 4, 10.0), (3, 64, 10000.0)):
        got = as_array(call(shift_fn, name, k, d, base), name)
        expect_shape(got, (d, d), name, "a (d_model, d_model) matrix")
        expected = POS.sinusoidal_shift(k, d, base)
        if close(got, expected, 1e-9):
            continue
        at = f"(k={k}, d_model={d}, base={base:g})"
        shift = functools.partial(_shift, k=k, d=d, base=base)
        mistakes = {
            f"your matrix moves positions by -k {at}: it is the map for column vectors, R PE[p]; "
            "with row vectors, PE[p] @ R, the sines change sign (transpose it).": expected.T,
            "the frequencies are base^(-2i / d_model) for pair i, the exponent of the table's "
            f"columns 2i and 2i+1; yours use -i / d_model {at}.": shift(two=False),
            f"the exponent's sign is flipped {at}: frequencies fall from 1 radian per "
            "position, base^(-2i / d_model), they do not grow.": shift(sign=1.0),
            f"you used the base 10000 instead of the base passed in {at}.": shift(base=10000.0),
            f"your matrix shifts by k + 1 {at}; PE[p] @ R must be PE[p + k].": shift(k=k + 1),
            f"your matrix shifts by k - 1 {at}; PE[p] @ R must be PE[p + k].": shift(k=k - 1),
            "the table interleaves sin and cos (columns 2i and 2i+1 share a frequency); you "
            f"paired column i with i + d_model/2 {at}.": shift(layout="half"),
            f"cos(k w) and sin(k w) are swapped {at}: cos goes on the diagonal of each 2 x 2 "
            "block (for k = 0 the matrix must be the identity).": shift(cos_sin=False),
            f"every pair turns by the same angle k {at}; pair i turns by k "
            "times its own frequency w_i.": shift(freq=False),
        }
        diagnose(got, name, mistakes, tol=1e-9)
        # A fit to the table: right on the positions it saw, yet not the rotation matrix.
        blocks = np.kron(np.eye(d // 2), np.ones((2, 2))).astype(bool)
        seen = POS.sinusoidal_table(100 + abs(k), d, base)
        with np.errstate(all="ignore"):
            fits = close(seen[max(0, -k) :][:100] @ got, seen[max(0, k) :][:100], 1e-6)
        if fits and np.abs(got[~blocks]).max() > 1e-6:
            raise CheckFailed(
                f"{name}: your matrix has non-zero entries outside the 2 x 2 blocks of the "
                f"(sin, cos) pairs {at}, as a least-squares fit gives: the slowest pairs turn "
                "too little over a table to be pinned down that way; build each block in "
                "closed form from cos(k w_i) and sin(k w_i)."
            )
        p = max(0, -k)  # a position with p + k >= 0
        table = POS.sinusoidal_table(p + abs(k) + 1, d, base)
        off = np.abs(table[p] @ got - table[p + k]).max()
        raise CheckFailed(
            f"{name}: wrong values {at}: PE[p] @ R should equal PE[p + k]; for p = {p} it is "
            f"off by up to {off:.3g}."
        )
    passed("sinusoidal_shift: a turn by k w_i of each (sin, cos) pair; PE[p] @ R_k = PE[p + k].")


def _turn(x, base, start=0, direction=1.0, **mistake):
    """x (..., n, d_k) turned as RoPE does, or with one realistic mistake: the row at position
    p is turned by p steps, which is what the shift matrix by -p does to a row."""
    n, d = x.shape[-2:]
    turns = [_shift(-direction * (p + start), d, base, **mistake) for p in range(n)]
    return np.einsum("...pi,pij->...pj", x, np.stack(turns))


def _scores(q, k):
    return q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])


@exercise
def check_rope_scores(scores_fn: Callable[[np.ndarray, np.ndarray, float], np.ndarray]) -> None:
    """Exercise (notebook 09): RoPE with the interleaved layout, then q k^T / sqrt(d_k)."""
    name = "rope_scores"
    refuse = (
        ("lib.positions", "rope_rotate", "POS.rope_rotate"),
        ("lib.positions", "RoPE.rotate", "POS.RoPE"),
    )
    rng = np.random.default_rng(90)
    for shape, base in (((5, 6), 1000.0), ((2, 3, 7, 8), 100.0)):  # (n, d_k), (b, h, n, d_k)
        q, k = rng.normal(size=shape), rng.normal(size=shape)
        got = as_array(call(scores_fn, name, q, k, base, refuse=refuse), name)
        expect_shape(got, shape[:-1] + (shape[-2],), name, "scores (..., n, n)")
        turned_q, turned_k = _turn(q, base), _turn(k, base)
        expected = _scores(turned_q, turned_k)
        if close(got, expected, 1e-9):
            continue
        half_q, half_k = _turn(q, base, layout="half"), _turn(k, base, layout="half")
        at = f"(q and k of shape {q.shape}, base={base:g})"
        unscaled = expected * math.sqrt(shape[-1])

        def both(base=base, **mistake):  # q and k turned with the same mistake
            return _scores(_turn(q, base, **mistake), _turn(k, base, **mistake))

        mistakes = {
            "you paired coordinate i with i + d_k/2 (the half-split layout of Llama in "
            "transformers); this exercise pairs neighbours, 2i with 2i+1.": both(layout="half"),
            "q is turned with the half-split pairs and k with the interleaved "
            "ones; q and k must be paired the same way, or the scores stop "
            "depending on the offset alone.": _scores(half_q, turned_k),
            "k is turned with the half-split pairs and q with the interleaved "
            "ones; q and k must be paired the same way, or the scores stop "
            "depending on the offset alone.": _scores(turned_q, half_k),
            f"nothing is turned: these are the plain scores {at}; "
            "rotate q and k by their positions first.": _scores(q, k),
            "only q is turned; turn k by its positions too (the offset "
            "appears only when both are turned).": _scores(turned_q, k),
            "only k is turned; turn q by its positions too (the offset "
            "appears only when both are turned).": _scores(q, turned_k),
            "your rotation turns the wrong way: a pair (a, b) at angle t becomes "
            "(a cos t - b sin t, b cos t + a sin t).": both(direction=-1.0),
            "pair i turns at base^(-2i / d_k); your frequencies use -i / d_k.": both(two=False),
            f"you used the base 10000 instead of the base passed in {at}.": both(base=10000.0),
            "q's positions start at 1 and k's at 0; both count from 0 "
            "(an offset of one on both would change nothing, only the "
            "offset counts).": _scores(_turn(q, base, start=1), turned_k),
            "k's positions start at 1 and q's at 0; both count from 0 "
            "(an offset of one on both would change nothing, only the "
            "offset counts).": _scores(turned_q, _turn(k, base, start=1)),
            "the scores are not scaled; divide q k^T by sqrt(d_k) as usual.": unscaled,
        }
        diagnose(got, name, mistakes, tol=1e-9)
        raise CheckFailed(
            f"{name}: wrong values {at}; turn pair (2i, 2i+1) of the row at position p by "
            "p base^(-2i / d_k), in q and in k, then take q k^T / sqrt(d_k)."
        )
    passed("rope_scores: q and k turned pair by pair (2i, 2i+1); the scores match lib's.")


def _bias(n_q, n_k, slopes, *, offset=True, plus=0, absolute=True, reverse=False):
    """ALiBi's bias (heads, n_q, n_k), or one realistic mistake."""
    slopes = np.asarray(slopes, dtype=float)[::-1] if reverse else np.asarray(slopes, float)
    i = np.arange(n_q) + (n_k - n_q if offset else 0)
    d = i[:, None] - np.arange(n_k)[None, :]  # query position - key position
    return -slopes[:, None, None] * ((np.abs(d) if absolute else d) + plus)[None]


@exercise
def check_alibi_bias(bias_fn: Callable[[int, int, np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 09): ALiBi's bias (heads, n_q, n_k), queries the last n_q positions;
    only the entries a causal query may attend to are compared."""
    name = "alibi_bias"
    # (heads, n_q, n_k) = (3, 4, 6), (2, 5, 5), and one new query with six cached keys
    for n_q, n_k, slopes in (
        (4, 6, POS.alibi_slopes(3)),
        (5, 5, np.array([0.5, 0.1])),
        (1, 7, POS.alibi_slopes(4)),
    ):
        h = len(slopes)
        got = as_array(call(bias_fn, name, n_q, n_k, slopes), name)
        if got.shape == (n_q, n_k, h) != (h, n_q, n_k):
            raise CheckFailed(
                f"{name}: the heads axis comes first: expected (heads, n_q, n_k) = "
                f"{(h, n_q, n_k)}, got {got.shape}."
            )
        expect_shape(got, (h, n_q, n_k), name, "a bias (heads, n_q, n_k)")
        seen = np.broadcast_to(A.causal_mask(n_q, n_k), got.shape)  # what a causal query sees
        expected = POS.alibi_bias(n_q, n_k, slopes)
        if close(got[seen], expected[seen], 1e-12):
            continue
        at = f"(n_q={n_q}, n_k={n_k}, {h} heads)"
        bias = functools.partial(_bias, n_q, n_k, slopes)
        reverse = bias(reverse=True)
        mistakes = {
            "the sign is flipped: ALiBi lowers the score of far keys, "
            "-slope x distance, so that near keys win.": -expected,
            "your queries sit at positions 0..n_q-1; they are the last n_q positions, n_k - n_q "
            f"onwards (as in A.causal_mask(n_q, n_k)) {at}.": bias(offset=False),
            f"your bias differs from ALiBi's by a constant on each query row {at}, "
            "as if the queries started at position 0: the softmax would not notice, "
            "but a query's bias on itself must be 0, and the queries are the last "
            "n_q positions.": bias(offset=False, absolute=False),
            "off by one: a query's distance to itself is 0, so its own key gets bias "
            "0 and the key one step back -slope.": bias(plus=1),
            "the slopes go to the heads in reverse order; head h gets slopes[h].": reverse,
        }
        mistakes = {message: wrong[seen] for message, wrong in mistakes.items()}
        diagnose(got[seen], name, mistakes, tol=1e-12)
        rows = np.where(seen, got - expected, np.nan)  # the entries compared, row by row
        spread = np.nanmax(rows, -1) - np.nanmin(rows, -1)
        if np.isfinite(got[seen]).all() and np.all(spread < 1e-9):
            raise CheckFailed(
                f"{name}: your bias differs from ALiBi's by a constant on each query row {at}: "
                "the softmax would not notice, but this exercise asks for 0 on the query itself "
                "and -slope x distance before it."
            )
        raise CheckFailed(
            f"{name}: wrong values {at} where a causal query may attend; the bias of head h is "
            "-slopes[h] x (query position - key position)."
        )
    passed("alibi_bias: -slope x distance per head, queries at the last n_q positions.")
