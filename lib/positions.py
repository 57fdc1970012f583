"""Where word order comes from: the position schemes of attention (notebook 09).

Attention by itself ignores order: permute the keys and values and each query's output is
unchanged. The tiny model of :mod:`lib.tiny` learns order from one of :data:`SCHEMES`: a
learned table added to the token embeddings; Vaswani et al.'s fixed sinusoidal table
(:func:`sinusoidal_table`); RoPE, which turns each pair of coordinates of the queries and keys
by an angle proportional to their position, so that ``q_m . k_n`` depends on ``m - n`` only
(:func:`rope_rotate`); or ALiBi, which adds ``-slope * distance`` to each head's scores
(:func:`alibi_bias`)."""

import math
import numbers
from dataclasses import dataclass

import numpy as np

from . import _validate as valid

SCHEMES = ("none", "learned", "sinusoidal", "rope", "alibi")  # lib.tiny's positions=
BASE = 10000.0  # the frequency base of the sinusoidal table and of RoPE in both papers

# Which coordinates RoPE pairs is a convention: "half" pairs i with i + d_k / 2 (GPT-NeoX, Llama
# in transformers), "interleaved" 2i with 2i + 1 (the RoPE paper, GPT-J). The two differ by a
# permutation of W_q's and W_k's columns, so weights trained with one are wrong under the other.
LAYOUTS = ("half", "interleaved")


def _base(value) -> float:
    """The base of the frequencies ``base^(-2i / d)``, as a float: only above 1 do they fall
    from 1 radian per position towards 1 / base (below 1 they grow without bound)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if not (number and math.isfinite(value) and value > 1):
        raise ValueError(f"base must be a finite number > 1, got {value!r}")
    return float(value)


def query_positions(n_q: int, n_k: int) -> np.ndarray:
    """Positions of the n_q queries against keys at 0..n_k-1: the last n_q, ``n_k - n_q + i``
    (negative when n_q > n_k: those queries see no key under a causal mask)."""
    n_q = valid.integer(n_q, "n_q", low=0)
    n_k = valid.integer(n_k, "n_k", low=0)
    return np.arange(n_q) + (n_k - n_q)


def frequencies(d: int, base: float = BASE) -> np.ndarray:
    """The d / 2 angular frequencies ``base^(-2i / d)``, i = 0 .. d/2 - 1 (float64)."""
    return _base(base) ** (-np.arange(0, d, 2) / d)


def sinusoidal_table(n: int, d_model: int, base: float = BASE, dtype=np.float64) -> np.ndarray:
    """Vaswani et al.'s table, (n, d_model): ``PE[p, 2i] = sin(p w_i)``,
    ``PE[p, 2i + 1] = cos(p w_i)``, ``w_i = base^(-2i / d_model)``."""
    n = valid.integer(n, "n", low=0)
    d_model = valid.integer(d_model, "d_model", low=1)
    valid.even(d_model, "d_model", "sin and cos come in pairs")
    dtype = valid.float_dtype(dtype)
    angles = np.arange(n)[:, None] * frequencies(d_model, base)[None, :]  # (n, d/2)
    table = np.empty((n, d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table.astype(dtype)


def sinusoidal_shift(k: int, d_model: int, base: float = BASE) -> np.ndarray:
    """The (d_model, d_model) matrix R_k with ``PE[p + k] = PE[p] @ R_k`` for every p: the
    angle-addition formulas on each pair (2i, 2i + 1). R_{-k} is its transpose and inverse."""
    k = valid.integer(k, "k")
    d_model = valid.integer(d_model, "d_model", low=1)
    valid.even(d_model, "d_model", "sin and cos come in pairs")
    angle = k * frequencies(d_model, base)
    c, s = np.cos(angle), np.sin(angle)
    R = np.zeros((d_model, d_model))
    i = np.arange(0, d_model, 2)
    R[i, i], R[i, i + 1] = c, -s
    R[i + 1, i], R[i + 1, i + 1] = s, c
    return R


@dataclass(frozen=True)
class RoPE:
    """RoPE's settings, checked when built: the frequency base and the pairs' :data:`LAYOUTS`."""

    base: float = BASE
    layout: str = "half"

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", _base(self.base))
        valid.one_of(self.layout, "layout", LAYOUTS)

    def cos_sin(self, positions: np.ndarray, d_k: int, dtype) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of ``p theta_i``, (n, d_k): entry (p, j) for the pair that coordinate j
        belongs to, at position p. Computed in float64, returned in ``dtype``; unchecked."""
        angles = np.asarray(positions, dtype=np.float64)[:, None] * frequencies(d_k, self.base)
        # pair i is coordinates (i, i + d_k/2) in the "half" layout, (2i, 2i + 1) "interleaved"
        angles = np.tile(angles, 2) if self.layout == "half" else np.repeat(angles, 2, axis=-1)
        return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)

    def partners(self, d_k: int, dtype=np.float64) -> np.ndarray:
        """The (d_k, d_k) matrix P with ``x @ P`` a quarter turn of every pair: (a, b) ->
        (-b, a); transformers' ``rotate_half`` or GPT-J's ``rotate_every_two``."""
        P = np.zeros((d_k, d_k), dtype)
        i = np.arange(d_k // 2)
        first, second = (i, i + d_k // 2) if self.layout == "half" else (2 * i, 2 * i + 1)
        P[second, first] = -1.0  # a pair's first coordinate gets minus its second
        P[first, second] = 1.0  # and the second gets the first
        return P

    def rotate(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x (..., n, d_k) with every pair (a, b) turned: ``(a cos - b sin, b cos + a sin)``,
        i.e. ``x * cos + (x @ P) * sin``. Pass ``-sin`` to turn back. Unchecked."""
        out = x @ self.partners(x.shape[-1], x.dtype)  # one small matrix product: faster
        out *= sin  # than slicing the halves of a strided view
        out += x * cos
        return out


def rope_rotate(x, positions, base: float = BASE, layout: str = "half") -> np.ndarray:
    """RoPE: pair i of the row of x (..., n, d_k) at position p (positions: (n,) integers)
    turned by ``p theta_i``, ``theta_i = base^(-2i / d_k)``; ``-positions`` turns it back."""
    rope = RoPE(base, layout)
    x = valid.real_array(x, "x")
    valid.rank(x, "x", range(2, 33), "(..., n, d_k), with at least 2 axes")
    valid.even(x.shape[-1], "d_k", "RoPE turns pairs of coordinates")
    positions = valid.integers(positions, "positions")
    if len(positions) != x.shape[-2]:
        raise ValueError(
            f"positions has {len(positions)} entries but there are {x.shape[-2]} tokens (axis -2)"
        )
    valid.finite(x, "x")
    with np.errstate(over="ignore", invalid="ignore"):  # a turn keeps a pair's length,
        out = rope.rotate(x, *rope.cos_sin(positions, x.shape[-1], x.dtype))  # which may not fit
    if not valid.all_finite(out):
        raise valid.overflow("x turned by RoPE", x.dtype, {"x": x})
    return out


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi's fixed slope of every head: ``2^(-8 (h + 1) / n)`` (8 heads: 1/2 ... 1/256) for n a
    power of two; else, as the authors' code, the lower power's slopes, then ones halfway."""
    n_heads = valid.integer(n_heads, "n_heads", low=1)
    below = 2 ** int(math.floor(math.log2(n_heads)))
    twice = 2.0 ** (-8.0 * np.arange(1, 2 * below + 1) / (2 * below))  # for 2 * below heads
    # every second of those is the slope for `below` heads; the others fill the extra heads
    return np.concatenate([twice[1::2], twice[0::2][: n_heads - below]])


def alibi_bias(n_q: int, n_k: int, slopes) -> np.ndarray:
    """ALiBi's bias on each head's scores, (heads, n_q, n_k): ``-slopes[h] * |i - j|`` for query
    i and key j, keys after the query too (as bidirectional uses do; the paper is causal)."""
    queries = query_positions(n_q, n_k)  # (n_q,), checking n_q and n_k
    slopes = valid.real_array(slopes, "slopes")
    valid.rank(slopes, "slopes", (1,), "(heads,)")
    valid.finite(slopes, "slopes")
    distance = np.abs(queries[:, None] - np.arange(n_k)[None, :])  # (n_q, n_k)
    with np.errstate(over="ignore"):
        bias = -slopes[:, None, None] * distance.astype(slopes.dtype)[None]  # (heads, n_q, n_k)
    if not valid.all_finite(bias):
        raise valid.overflow("ALiBi's bias -slopes * |i - j|", slopes.dtype, {"slopes": slopes})
    return bias
