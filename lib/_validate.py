"""The checks of lib's entry points: one function per rule, one wording per message, called at
the top of each entry point. Inputs are checked for NaN and inf before computing, so that a
NaN or inf in the result can only be an overflow (:func:`finite_output`).
"""

import numbers
from dataclasses import replace

import numpy as np

PARAM_NAMES = ("W_q", "W_k", "W_v", "W_o", "b_q", "b_k", "b_v", "b_o")
WEIGHT_NAMES = PARAM_NAMES[:4]
BIAS_NAMES = PARAM_NAMES[4:]


def integer(value, name: str, low: int | None = None) -> int:
    """A whole number (>= ``low`` unless it is None) as a Python int; bools and floats refused."""
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
    if not isinstance(value, str) or value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def heads(d_model, n_heads) -> int:
    """d_k = d_model / n_heads, for a d_model >= 1 and a head count that divides it."""
    d_model = integer(d_model, "d_model", low=1)
    n_heads = integer(n_heads, "n_heads", low=1)
    if d_model % n_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; valid head counts for "
            f"d_model={d_model} are {[h for h in range(1, d_model + 1) if d_model % h == 0]}"
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
            f"n_heads={n_heads} are {[h for h in range(1, n_heads + 1) if n_heads % h == 0]}"
        )
    return n_heads // n_kv_heads


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


def array(x, name: str, shapes=None, layout: str = "") -> np.ndarray:
    """``x`` as a real array (:func:`real_array`) without NaN or inf, of one of ``shapes`` (None:
    any shape; None in a shape: any size on that axis), which ``layout`` names for the message."""
    x = real_array(x, name)
    if shapes is not None and not any(_fits(x.shape, shape) for shape in shapes):
        raise ValueError(f"{name} must be {layout}, got shape {x.shape}")
    finite(x, name)
    return x


def _fits(shape: tuple, pattern: tuple) -> bool:
    """``shape`` has ``pattern``'s axes, each of its size or any size where it says None."""
    if len(shape) != len(pattern):
        return False
    return all(want in (None, size) for want, size in zip(pattern, shape, strict=True))


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
    return bool(np.isfinite(x).all())


def finite(x: np.ndarray, name: str, masked_ok: bool = False) -> None:
    """No NaN and no +-inf in ``x`` (with ``masked_ok``, -inf is allowed: in scores it means
    "masked"); the message gives the index of the first one."""
    ok = ~(np.isnan(x) | np.isposinf(x)) if masked_ok else np.isfinite(x)
    if not ok.all():
        where = tuple(int(i) for i in np.argwhere(~ok)[0])
        what = "NaN or +inf" if masked_ok else "NaN or inf"
        raise ValueError(f"{name} contains {what} (first at index {where}, shape {x.shape})")


def finite_all(arrays: dict[str, np.ndarray]) -> None:
    for name, a in arrays.items():
        finite(a, name)


def gradients(grads: dict[str, np.ndarray], d_out: np.ndarray) -> None:
    """Gradients computed from finite numbers can still overflow: refuse them, by name."""
    for name, g in grads.items():
        if not all_finite(g):
            raise overflow(f"the gradient of {name} (from d_out)", g.dtype, {"d_out": d_out})


def overflow(what: str, dtype, operands: dict[str, np.ndarray]) -> ValueError:
    """The error (returned, to raise) for finite numbers whose products overflow ``dtype``,
    naming the arrays involved and where their largest entries are."""
    parts, seen = [], []
    for name, a in operands.items():
        if a.size and not any(a is b for b in seen):  # self-attention: x_kv is x_q, named once
            seen.append(a)
            where = np.unravel_index(int(np.argmax(np.abs(a))), a.shape)
            biggest = float(np.abs(a[where]))
            parts.append(f"largest |{name}| = {biggest:.3g} at {tuple(int(i) for i in where)}")
    dtype = np.dtype(dtype)
    fix = "scale them down" + (", or compute in float64" if dtype.itemsize < 8 else "")
    return ValueError(f"{what} overflow {dtype.name} ({'; '.join(parts)}): {fix}")


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


def token_ids(ids, vocab_size: int, max_len: int | None) -> np.ndarray:
    """Token ids: integers of shape (batch, n), each in 0..vocab_size-1, n at most max_len
    (None: any length)."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be integers of shape (batch, n), got {ids.dtype} {ids.shape}")
    if max_len is not None and ids.shape[1] > max_len:
        raise ValueError(
            f"sequences of length {ids.shape[1]} are longer than the model's max_len={max_len}"
        )
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"token ids must be in 0..{vocab_size - 1}, got values from {ids.min()} to {ids.max()}"
        )
    return ids


def bool_mask(mask) -> np.ndarray:
    """``mask`` as a boolean array; any other dtype is refused, saying how to convert."""
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise ValueError(
            f"mask must be boolean, True = may attend, got dtype {mask.dtype}. An additive "
            "mask (0 = attend, -inf = blocked) converts with `mask == 0`; a boolean mask with "
            "True = blocked (torch's attn_mask, key_padding_mask) with `~mask`; a 0/1 mask "
            "with 1 = attend with `mask.astype(bool)`."
        )
    return mask


def fits_scores(shape: tuple, name: str, scores_shape: tuple, axes: str) -> None:
    """An array of ``shape`` (a mask, a score bias) broadcasts to the scores' shape without
    growing it: no more axes, each of size 1 or the scores'. ``axes`` names the scores' axes."""
    tail = zip(reversed(shape), reversed(scores_shape), strict=False)  # the trailing axes
    if len(shape) > len(scores_shape) or any(size not in (1, full) for size, full in tail):
        raise ValueError(
            f"{name} of shape {shape} cannot broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} {axes}"
        )


def attention_inputs(q, k, v, attn_mask):
    """q, k, v, mask of scaled dot-product attention, checked (shapes agree, finite, the mask
    boolean and fitting the scores) and in their common dtype; and their leading axes."""
    q, k, v = array(q, "q"), array(k, "k"), array(v, "v")
    for name, a in (("q", q), ("k", k), ("v", v)):
        rank(a, name, range(2, 33), "(..., n, d), with at least 2 axes")
    shapes = f"q is {q.shape}, k is {k.shape}, v is {v.shape}"
    if q.shape[-1] != k.shape[-1] or q.shape[-1] < 1:
        raise ValueError(f"q and k must share d_k >= 1 (last axis): {shapes}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys (axis -2): {shapes}")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the leading (batch) axes of q, k, v must broadcast together: {shapes}"
        ) from None
    if attn_mask is not None:
        attn_mask = bool_mask(attn_mask)
        fits_scores(attn_mask.shape, "mask", lead + (q.shape[-2], k.shape[-2]), "(..., n_q, n_k)")
    dtype = np.result_type(q, k, v)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    return q, k, v, attn_mask, lead


def mha_params(p) -> None:
    """The arrays of a freshly built MHAParams (or lib.kv_cache.GQAParams) made NumPy arrays
    and checked: W_q, W_o (d_model, d_model); W_k, W_v (d_model, n_kv_heads * d_k) (n_kv_heads
    is n_heads except in a GQAParams); all four biases or none, each as wide as its weight."""
    arrays = {name: getattr(p, name) for name in PARAM_NAMES}
    arrays = {name: None if a is None else real_array(a, name) for name, a in arrays.items()}
    d = arrays["W_q"].shape[0] if arrays["W_q"].ndim else 0
    d_k = heads(d, p.n_heads)
    n_kv = getattr(p, "n_kv_heads", p.n_heads)
    kv_heads(p.n_heads, n_kv)
    kv = ("d_model", d) if n_kv == p.n_heads else ("n_kv_heads * d_k", n_kv * d_k)
    widths = {"q": ("d_model", d), "k": kv, "v": kv, "o": ("d_model", d)}  # of W_ and b_
    given = [name for name in BIAS_NAMES if arrays[name] is not None]
    if given and len(given) != len(BIAS_NAMES):
        missing = [name for name in BIAS_NAMES if name not in given]
        raise ValueError(
            f"MHAParams takes all four biases or none, got {', '.join(given)} without "
            f"{', '.join(missing)}: pass zeros for a bias the layer does not have "
            "(a zero bias is the same as no bias)"
        )
    for part, (what, size) in widths.items():
        W, b = arrays["W_" + part], arrays["b_" + part]
        if W.shape != (d, size):
            raise ValueError(f"W_{part} must be (d_model, {what}) = ({d}, {size}), got {W.shape}")
        if b is not None and b.shape != (size,):
            raise ValueError(f"b_{part} must have shape ({what},) = ({size},), got {b.shape}")
    for name, a in arrays.items():
        object.__setattr__(p, name, a)  # frozen: the checked arrays stay its fields
    object.__setattr__(p, "n_heads", int(p.n_heads))


def params(p, ungrouped: str | None = None):
    """``p`` is an MHAParams (or anything with its fields and ``arrays()``) without NaN or inf
    (arrays can change in place after the shapes were checked); with ``ungrouped`` (what needs
    it), one with a key/value head per query head."""
    if not (callable(getattr(p, "arrays", None)) and hasattr(p, "n_heads")):
        raise ValueError(
            f"params must be an MHAParams (see lib.attention.init_mha_params) or a GQAParams "
            f"(lib.kv_cache.init_gqa_params), got {type(p).__name__}"
        )
    finite_all({f"params.{name}": a for name, a in p.arrays().items()})
    if ungrouped and getattr(p, "n_kv_heads", p.n_heads) != p.n_heads:
        raise ValueError(
            f"params has grouped key/value heads (n_kv_heads={p.n_kv_heads} for "
            f"n_heads={p.n_heads}): {ungrouped}"
        )
    return p


def mha_inputs(x_q, x_kv, p, mask, causal: bool = False, unbatched_ok: bool = True):
    """Everything a multi-head forward checks: the parameters, x_q and x_kv (real, finite,
    (batch, n, d_model), or both (n, d_model) when ``unbatched_ok``) and the mask. Returns x_q,
    x_kv (batch, n, d_model) and the parameters in their common dtype, the mask with four axes
    and ``causal`` folded in (None: every key) and whether the inputs came unbatched."""
    params(p, ungrouped="run it with lib.kv_cache.grouped_query_attention")
    same = x_kv is x_q  # self-attention stays one array
    x_q = array(x_q, "x_q")
    x_kv = x_q if same else array(x_kv, "x_kv")
    layouts = (
        "both (batch, n, d_model) or both (n, d_model)" if unbatched_ok else "(batch, n, d_model)"
    )
    if x_q.ndim not in ((2, 3) if unbatched_ok else (3,)) or x_kv.ndim != x_q.ndim:
        raise ValueError(
            f"x_q and x_kv must be {layouts}, got x_q {x_q.shape} and x_kv {x_kv.shape}"
        )
    unbatched = x_q.ndim == 2
    if unbatched:
        x_q = x_q[None]
        x_kv = x_q if same else x_kv[None]
    for name, x in (("x_q", x_q), ("x_kv", x_kv)):
        if x.shape[-1] != p.d_model:
            raise ValueError(
                f"{name} has d_model={x.shape[-1]} (shape {x.shape}) but the parameters have "
                f"d_model={p.d_model}"
            )
    if x_q.shape[0] != x_kv.shape[0]:
        raise ValueError(f"x_q and x_kv have different batch sizes: {x_q.shape} and {x_kv.shape}")
    batch, n_q, n_k = x_q.shape[0], x_q.shape[1], x_kv.shape[1]
    if mask is not None:
        mask = bool_mask(mask)
        fits_scores(mask.shape, "mask", (batch, p.n_heads, n_q, n_k), "(batch, heads, n_q, n_k)")
        mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if causal:  # query i sees keys 0 .. i + (n_k - n_q), as lib.attention.causal_mask
        rule = np.tri(n_q, n_k, k=n_k - n_q, dtype=bool)
        mask = rule[None, None] if mask is None else mask & rule
    dtype = np.result_type(x_q, x_kv, *p.arrays().values())
    changed = {name: a.astype(dtype) for name, a in p.arrays().items() if a.dtype != dtype}
    if changed:
        p = replace(p, **changed)
    x_q = x_q.astype(dtype, copy=False)
    x_kv = x_q if same else x_kv.astype(dtype, copy=False)
    return x_q, x_kv, p, mask, unbatched


def finite_output(out: np.ndarray, inputs: dict[str, np.ndarray]) -> None:
    """After a forward of finite inputs, a NaN or inf in ``out`` can only be an overflow: one
    error naming the inputs' largest magnitudes and what to do."""
    if not all_finite(out):
        raise overflow("numbers in the output", out.dtype, inputs)
