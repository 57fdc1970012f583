"""The checks lib's attention entry points share: one function per rule (the README's
"Conventions"), one wording per message, so the same mistake gets the same ``ValueError``
wherever it is made. A check with a single caller lives beside it.

Entry points check inputs and parameters for NaN and inf before computing, then the result
once: a NaN or inf there can only be an overflow, which :func:`mha_nonfinite` explains.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

PARAM_NAMES = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")
WEIGHT_NAMES = PARAM_NAMES[:4]
BIAS_NAMES = PARAM_NAMES[4:]

# --------------------------------------------------------------------------- counts


def integer(value, name: str, low: int | None = None) -> int:
    """A whole number (>= ``low`` unless it is None), as a Python int: an ``int`` or NumPy
    integer, not a bool or a float."""
    rule = f"{name} must be an integer" + ("" if low is None else f" >= {low}")
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{rule}, got {value!r} ({type(value).__name__})")
    if low is not None and value < low:
        raise ValueError(f"{rule}, got {value!r}")
    return int(value)


def even(value: int, name: str, why: str) -> None:
    """An even count; ``why`` says what needs it (e.g. 'sin and cos come in pairs')."""
    if value % 2:
        raise ValueError(f"{name} must be even ({why}), got {value}")


def one_of(value, name: str, options: tuple[str, ...]) -> str:
    """One of a few named options (strings)."""
    if not isinstance(value, str) or value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def divisors(n: int) -> list[int]:
    return [h for h in range(1, n + 1) if n % h == 0]


def heads(d_model, n_heads) -> int:
    """d_k = d_model / n_heads, for a d_model >= 1 and a head count that divides it."""
    d_model = integer(d_model, "d_model", low=1)
    n_heads = integer(n_heads, "n_heads", low=1)
    if d_model % n_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; "
            f"valid head counts for d_model={d_model} are {divisors(d_model)}"
        )
    return d_model // n_heads


def kv_heads(n_heads, n_kv_heads) -> int:
    """The group size n_heads / n_kv_heads, for a key/value head count that divides n_heads."""
    n_heads = integer(n_heads, "n_heads", low=1)
    n_kv_heads = integer(n_kv_heads, "n_kv_heads", low=1)
    if n_heads % n_kv_heads:
        raise ValueError(
            f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}: each key/value head "
            f"serves n_heads / n_kv_heads query heads; valid key/value head counts for "
            f"n_heads={n_heads} are {divisors(n_heads)}"
        )
    return n_heads // n_kv_heads


# --------------------------------------------------------------------------- arrays


def real_array(x, name: str) -> np.ndarray:
    """``x`` as a real NumPy array (lists converted; integers become float64)."""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except ValueError:  # ragged nested lists
            raise ValueError(
                f"{name} must be a rectangular array of real numbers; its rows have "
                "different lengths"
            ) from None
    kind = x.dtype.kind
    if kind == "f":
        return x
    if kind in "iu":
        return x.astype(np.float64)
    what = "booleans (is it a mask?)" if kind == "b" else f"dtype {x.dtype}"
    raise ValueError(f"{name} must hold real numbers, got {what}")


def rank(x: np.ndarray, name: str, ndims, layout: str) -> None:
    """``x.ndim`` is in ``ndims``; ``layout`` names the axes, e.g. '(batch, n, d_model)'."""
    if x.ndim not in ndims:
        raise ValueError(f"{name} must be {layout}, got shape {x.shape}")


def float_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise ValueError(f"dtype must be a floating-point dtype (float32, float64), got {dtype}")
    return dtype


def all_finite(x: np.ndarray) -> bool:
    """No NaN and no +-inf in ``x``."""
    return bool(np.logical_and.reduce(np.isfinite(x), axis=None))


def finite(x: np.ndarray, name: str) -> None:
    """No NaN and no +-inf in ``x``; the message gives the index of the first one."""
    if not all_finite(x):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])
        raise ValueError(nonfinite_message(name, where, x.shape))


def finite_all(arrays: dict[str, np.ndarray]) -> None:
    """:func:`finite` for several arrays, in one pass when together they are small."""
    if not _finite_together(list(arrays.values())):
        for name, a in arrays.items():
            finite(a, name)


def _finite_together(arrays: list[np.ndarray]) -> bool:
    """True when the arrays are small and all finite; False: look at each, to name it."""
    if sum(a.size for a in arrays) > _ONE_PASS:
        return False
    return all_finite(np.concatenate([a.ravel() for a in arrays]))


def gradients(grads: dict[str, np.ndarray], d_out: np.ndarray) -> None:
    """Gradients computed from finite numbers can still overflow: refuse them, by name."""
    if _finite_together(list(grads.values())):
        return
    for name, g in grads.items():
        if not all_finite(g):
            raise overflow(f"the gradient of {name} (from d_out)", g.dtype, {"d_out": d_out})


_ONE_PASS = 1 << 16  # numbers: below this, copying them into one array is the cheaper way


def nonfinite_message(name: str, where: tuple, shape: tuple) -> str:
    return f"{name} contains NaN or inf (first at index {where}, shape {tuple(shape)})"


def overflow(what: str, dtype, operands: dict[str, np.ndarray]) -> ValueError:
    """The error (returned, to raise) for finite numbers whose products overflow ``dtype``,
    naming the arrays involved and where their largest entries are."""
    parts = []
    for name, a in operands.items():
        a = np.asarray(a)
        if a.size:
            where = np.unravel_index(int(np.argmax(np.abs(a))), a.shape)
            biggest = float(np.abs(a[where]))
            parts.append(f"largest |{name}| = {biggest:.3g} at {tuple(int(i) for i in where)}")
    dtype = np.dtype(dtype)
    fix = "scale them down" + (", or compute in float64" if dtype.itemsize < 8 else "")
    return ValueError(f"{what} overflow {dtype.name} ({'; '.join(parts)}): {fix}")


def same_d_k(q_shape, k_shape, names=("q", "k")) -> None:
    """q and k share d_k >= 1 (their last axis)."""
    if q_shape[-1] != k_shape[-1] or q_shape[-1] < 1:
        a, b = names
        raise ValueError(
            f"{a} and {b} must share d_k >= 1 (last axis): {a} is {tuple(q_shape)}, "
            f"{b} is {tuple(k_shape)}"
        )


def leading_axes(shapes: dict[str, tuple]) -> tuple[int, ...]:
    """The leading (batch) axes of q, k, v, broadcast together."""
    try:
        return np.broadcast_shapes(*(s[:-2] for s in shapes.values()))
    except ValueError:
        listed = ", ".join(f"{name} is {tuple(s)}" for name, s in shapes.items())
        raise ValueError(
            f"the leading (batch) axes of {', '.join(shapes)} must broadcast together: {listed}"
        ) from None


def same_keys(k_shape, v_shape, names=("k", "v")) -> None:
    if k_shape[-2] != v_shape[-2]:
        a, b = names
        raise ValueError(
            f"{a} and {b} must have the same number of keys (axis -2): {a} is {tuple(k_shape)}, "
            f"{b} is {tuple(v_shape)}"
        )


def integers(values, name: str) -> np.ndarray:
    """A 1-D array (or list) of integers, any sign (``[]`` too, though NumPy makes it float)."""
    values = np.asarray(values)
    if values.ndim == 1 and values.size == 0:
        values = values.astype(np.int64)
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError(
            f"{name} must be a 1-D array of integers, got {values.dtype} {values.shape}"
        )
    return values


# --------------------------------------------------------------------------- masks

_CONVERT = {
    "array": (
        "An additive mask (0 = attend, -inf = blocked) converts with `mask == 0`; a boolean "
        "mask with True = blocked (torch's attn_mask, key_padding_mask) with `~mask`; a 0/1 "
        "mask with 1 = attend with `mask.astype(bool)`"
    ),
    "list": (
        "An additive mask (0 = attend, -inf = blocked) converts with "
        "`[[x == 0 for x in row] for row in mask]`; a 0/1 mask with 1 = attend with "
        "`[[x == 1 for x in row] for row in mask]`"
    ),
}


def not_boolean(got: str, kind: str) -> ValueError:
    return ValueError(f"mask must be boolean, True = may attend, got {got}. {_CONVERT[kind]}.")


def bool_mask(mask) -> np.ndarray:
    """``mask`` as a boolean array; any other dtype is refused, saying how to convert."""
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise not_boolean(f"dtype {mask.dtype}", "array")
    return mask


def mask(mask, scores_shape: tuple[int, ...], axes: str = "(..., n_q, n_k)") -> np.ndarray:
    """A boolean mask that broadcasts to the scores' shape without growing it."""
    mask = bool_mask(mask)
    fits_scores(mask.shape, "mask", scores_shape, axes)
    return mask


def fits_scores(shape: tuple, name: str, scores_shape: tuple, axes: str) -> None:
    """An array of ``shape`` (a mask, a score bias) broadcasts to the scores' shape without
    growing it; ``axes`` names the scores' axes."""
    try:
        grown = np.broadcast_shapes(shape, scores_shape)
    except ValueError:
        grown = None
    if grown != tuple(scores_shape):
        raise ValueError(
            f"{name} of shape {shape} cannot broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} {axes}"
        )


def attention_inputs(q, k, v, attn_mask):
    """q, k, v, mask of scaled dot-product attention, checked (shapes agree, finite, the mask
    boolean and fitting the scores) and in their common dtype; and their leading axes."""
    q, k, v = real_array(q, "q"), real_array(k, "k"), real_array(v, "v")
    for name, a in (("q", q), ("k", k), ("v", v)):
        rank(a, name, range(2, 33), "(..., n, d), with at least 2 axes")
    same_d_k(q.shape, k.shape)
    same_keys(k.shape, v.shape)
    lead = leading_axes({"q": q.shape, "k": k.shape, "v": v.shape})
    finite_all({"q": q, "k": k, "v": v})
    if attn_mask is not None:
        attn_mask = mask(attn_mask, lead + (q.shape[-2], k.shape[-2]))
    # NumPy's promotion, before any step (lib.attention.promoted does the same for a layer)
    dtype = np.result_type(q, k, v)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    return q, k, v, attn_mask, lead


# --------------------------------------------------------------------------- multi-head


def width(shape: tuple, name: str, d_model: int) -> None:
    """An input's last axis is the parameters' d_model."""
    if shape[-1] != d_model:
        raise ValueError(
            f"{name} has d_model={shape[-1]} (shape {tuple(shape)}) but the parameters "
            f"have d_model={d_model}"
        )


def square(shape: tuple, name: str, d: int) -> None:
    """A projection's weight is (d_model, d_model)."""
    if tuple(shape) != (d, d):
        raise ValueError(f"{name} must be (d_model, d_model) = ({d}, {d}), got {tuple(shape)}")


def stage(part: str, x_name: str, bias: bool) -> str:
    """How overflow messages name a projection: 'the queries x_q @ W_q + b_q'."""
    what = {"q": "queries", "k": "keys", "v": "values"}[part]
    return f"the {what} {x_name} @ W_{part}" + (f" + b_{part}" if bias else "")


SCORES = "the scores q k^T / sqrt(d_k)"
OUTPUT = "the output (the weighted sums of the values, then @ W_o + b_o)"


def largest_row_norm(x: np.ndarray) -> float:
    """max over the rows (last axis) of |x_row| (NaN or inf when x holds them)."""
    if x.size == 0:
        return 0.0
    return math.sqrt(float(np.einsum("...d,...d->...", x, x).max()))


def scores_fit(q: np.ndarray, k: np.ndarray, q_norm: float, k_norm: float) -> bool:
    """Whether every score q_i . k_j (q already scaled, masked or not) is finite. By
    Cauchy-Schwarz |q_i . k_j| <= |q_i| |k_j|, so the scores are computed only when the
    largest norms say they might overflow."""
    limit = 0.25 * float(np.finfo(np.result_type(q, k)).max)
    if q_norm * k_norm <= limit:
        return True
    with np.errstate(all="ignore"):
        return all_finite(q @ np.swapaxes(k, -1, -2))


def mha_nonfinite(p, x_q: np.ndarray, x_kv: np.ndarray, *, scores_of=None, cache=None):
    """Raise the ValueError that explains a NaN or inf met in a multi-head forward with
    finite inputs: the first stage (projections, scores, output) that overflowed.

    x_q, x_kv: (batch, n, d_model). ``scores_of``: for scores with positions (RoPE, a bias),
    (name, function of the scaled q and k that computes them, arrays it adds). ``cache``: a
    decoder's (keys, values) (batch, n_kv_heads, n_k, d_k), its new tokens named x_new.
    """
    dtype = np.result_type(x_q, x_kv, *p.arrays().values())
    x_names = ("x_new", "x_new") if cache is not None else ("x_q", "x_kv")
    inputs = {"q": (x_q, x_names[0]), "k": (x_kv, x_names[1]), "v": (x_kv, x_names[1])}
    with np.errstate(all="ignore"):
        heads = {}
        for part, (x, x_name) in inputs.items():
            W, b = getattr(p, "W_" + part), getattr(p, "b_" + part)
            y = x @ W if b is None else x @ W + b
            if not all_finite(y):
                names = {x_name: x, f"W_{part}": W} | ({} if b is None else {f"b_{part}": b})
                raise overflow(stage(part, x_name, b is not None), dtype, names)
            heads[part] = y.reshape(*y.shape[:2], -1, p.d_k).swapaxes(1, 2)
        k, v = cache if cache is not None else (heads["k"], heads["v"])
        k, v = np.repeat(k, p.group, axis=1), np.repeat(v, p.group, axis=1)
        q = heads["q"] * (1.0 / math.sqrt(p.d_k))
        if not all_finite(q @ k.swapaxes(-1, -2)):
            raise overflow(SCORES, dtype, {"q": q, "k": k})
        if scores_of is not None:
            what, scores, added = scores_of
            if not all_finite(scores(q, k)):
                raise overflow(what, dtype, {"q": q, "k": k} | added)
    output = {"v": v, "W_o": p.W_o} | ({} if p.b_o is None else {"b_o": p.b_o})
    raise overflow(OUTPUT, dtype, output)
