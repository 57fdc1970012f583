"""Checks of notebook 03 (multi-head attention): splitting and merging heads, parameter count."""

import functools
import itertools
from collections.abc import Callable

import numpy as np

from ._core import CheckFailed, as_array, call, diagnose, exercise, expect_shape, hint, passed


def _leading_hint(name: str, shape: tuple[int, ...], layout: str):
    """An error raised on an input with another number of leading axes: say so."""
    advice = (
        f"x may have any number of leading axes in front of {layout} (none, one or several), so "
        "name the axes from the end (-1, -2, -3) instead of unpacking or transposing a fixed "
        "number of them."
    )
    return hint(ValueError, name, advice, f" for an input of shape {shape}")


def _front_axes(wrongs: dict, lead: list, axes: str) -> dict:
    """The mistake of swapping axes (0, 1) or (1, 2), counted from the front (right for 0 and
    1 leading axes respectively): ``wrongs`` holds what each returns."""
    leading = f"{len(lead)} leading " + ("axis" if len(lead) == 1 else "axes")
    return {
        f"you swapped axes {a} and {b}, counted from the front; with {leading}, {axes} "
        f"are axes {len(lead)} and {len(lead) + 1}: count from the end (-3 and -2).": wrong
        for (a, b), wrong in wrongs.items()
    }


@exercise
def check_split_heads(split_heads_fn: Callable[[np.ndarray, int], np.ndarray]) -> None:
    """Exercise (notebook 03): (..., seq, d_model) -> (..., heads, seq, d_k)."""
    name = "split_heads"
    float_hint = hint(
        TypeError,
        name,
        "shapes must be whole numbers, and d_model / n_heads is a float; use integer division.",
    )
    # One leading axis (the notebook's, where the classic mistakes differ), then none, then two.
    for shape, h in (((2, 3, 8), 4), ((3, 5, 6), 2), ((5, 6), 3), ((2, 3, 4, 6), 2)):
        *lead, seq, d_model = shape
        d_k = d_model // h
        x = np.arange(np.prod(shape), dtype=float).reshape(shape)
        hints = [float_hint, _leading_hint(name, shape, "(seq, d_model)")]
        got = as_array(call(split_heads_fn, name, x, h, hints=hints), name)
        reshaped = x.reshape(*lead, seq, h, d_k)
        expected = np.swapaxes(reshaped, -3, -2)
        if np.array_equal(got, expected):
            continue
        where = f"{name} on x of shape {shape}, n_heads={h}"
        mistakes = {
            "you split the features into (heads, d_k) but left the heads axis behind seq; it "
            "must come right before it: (..., heads, seq, d_k).": reshaped if x.ndim == 3 else None,
            "reshaping straight to (..., heads, seq, d_k) cuts the sequence into "
            "pieces; split the features into (heads, d_k) first, then move the "
            "heads axis in front of seq.": lambda: x.reshape(*lead, h, seq, d_k),
            "each head must get a contiguous block of d_k features; yours gets every "
            "n_heads-th feature.": lambda: np.moveaxis(x.reshape(*lead, seq, d_k, h), -1, -3),
        }
        front = {axes: lambda axes=axes: np.swapaxes(reshaped, *axes) for axes in ((0, 1), (1, 2))}
        diagnose(got, where, mistakes | _front_axes(front, lead, "seq and heads"), tol=0)
        expect_shape(got, expected.shape, name, "(..., heads, seq, d_k)")
        raise CheckFailed(
            f"{where}: wrong values: head h of token t should hold its features h*d_k:(h+1)*d_k."
        )
    passed("split_heads: head h gets features h*d_k:(h+1)*d_k of each token; 0 to 2 leading axes.")


@exercise
def check_merge_heads(merge_heads_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 03): (..., heads, seq, d_k) -> (..., seq, heads * d_k)."""
    name = "merge_heads"
    for shape in ((2, 4, 3, 2), (3, 2, 5, 3), (2, 5, 3), (2, 3, 2, 4, 3)):
        *lead, h, seq, d_k = shape
        x = np.arange(np.prod(shape), dtype=float).reshape(shape)
        hints = [_leading_hint(name, shape, "(heads, seq, d_k)")]
        got = as_array(call(merge_heads_fn, name, x, hints=hints), name)
        swapped = np.swapaxes(x, -3, -2)  # (..., seq, heads, d_k)
        expected = swapped.reshape(*lead, seq, h * d_k)
        if np.array_equal(got, expected):
            continue
        where = f"{name} on x of shape {shape}"
        mistakes = {
            "the heads axis is in the right place, but (heads, d_k) must still become one axis "
            "of heads * d_k features: expected shape (..., seq, heads * d_k).": swapped,
            "reshaping without moving the heads axis back behind seq mixes tokens together; "
            "swap heads and seq before reshaping.": lambda: x.reshape(*lead, seq, h * d_k),
            "your concat interleaves the heads' features; each head's d_k features must stay "
            "together, head 0 first.": lambda: np.moveaxis(x, -3, -1).reshape(*lead, seq, h * d_k),
        }
        front = {
            axes: lambda axes=axes: np.swapaxes(x, *axes).reshape(*lead, seq, h * d_k)
            for axes in ((0, 1), (1, 2))
        }
        diagnose(got, where, mistakes | _front_axes(front, lead, "heads and seq"), tol=0)
        expect_shape(got, expected.shape, name, "(..., seq, heads * d_k)")
        raise CheckFailed(
            f"{where}: wrong values: token t should be its heads' d_k-vectors joined in head order."
        )
    passed("merge_heads: each token is head 0's d_k numbers, head 1's, ...; 0 to 2 leading axes.")


def _count(d, s, h, k, v, bias, w_o=None, biases=None) -> int:
    """Weights (and biases) of a layer reading queries of width d and keys/values of width s,
    with h heads of widths k and v; ``w_o``, ``biases``: other sizes, as mistakes count them."""
    weights = d * h * k + s * h * k + s * h * v  # W_q (d, h k), W_k (s, h k), W_v (s, h v)
    weights += h * v * d if w_o is None else w_o  # W_o (h v, d)
    b_q, b_k, b_v, b_o = (h * k, h * k, h * v, d) if biases is None else biases
    return weights + ((b_q + b_k + b_v + b_o) if bias else 0)


@exercise
def check_param_count(param_count_fn: Callable[..., int]) -> None:
    """Exercise (notebook 03): the learnable numbers of a multi-head attention layer."""
    name = "mha_param_count"
    # Shapes where every mistake below gives its own number; the last one is the standard
    # layer (d_source = d_model, d_k = d_v = d_model / heads): 4 d^2 (+ 4 d).
    shapes = ((12, 20, 3, 5, 7), (16, 10, 4, 3, 6), (8, 8, 2, 4, 4))
    for (d, s, h, k, v), bias in itertools.product(shapes, (True, False)):
        got = call(param_count_fn, name, d, s, h, k, v, bias)
        where = f"{name}(d_model={d}, d_source={s}, n_heads={h}, d_k={k}, d_v={v}, bias={bias})"
        if not isinstance(got, int | np.integer) or isinstance(got, bool):
            raise CheckFailed(f"{name}: return a whole number, got {type(got).__name__}.")
        count = functools.partial(_count, d=d, s=s, h=h, k=k, v=v, bias=bias)
        if got == count():
            continue
        if got in (4 * d * d + 4 * d * bias, 4 * d * d):
            raise CheckFailed(
                f"{where}: 4 d_model^2 (+ 4 d_model) holds only for the standard layer; here "
                "the keys' and values' source width and the heads' widths d_k, d_v all count."
            )
        hk, hv = h * k, h * v
        no_b_o = (hk, hk, hv, 0)
        bias_mistake = "with bias=True each of the four projections also has a bias vector."
        if not bias:
            bias_mistake = "with bias=False there are no bias vectors to count."
        mistakes = {
            "W_k and W_v multiply rows of the source sequence, which have d_source "
            "features, not d_model: their shapes are (d_source, ...).": count(s=d),
            "you counted one head; all n_heads heads together project to n_heads * d_k (queries, "
            "keys) and n_heads * d_v (values) columns.": count(h=1, biases=(k, k, v, d)),
            "values and the concat that W_o reads have d_v features per head, not d_k.": count(v=k),
            "W_o reads the concat of the heads, n_heads * d_v features, and writes d_model: "
            "its shape is (n_heads * d_v, d_model), not (d_model, d_model).": count(w_o=d * d),
            "you left out the output projection W_o (and its bias).": count(w_o=0, biases=no_b_o),
            "each bias has the length of its projection's output: n_heads * d_k for b_q "
            "and b_k, n_heads * d_v for b_v, d_model for b_o.": count(biases=(d, d, d, d)),
            "b_o is added to the layer's output, which has d_model "
            "features, not n_heads * d_v.": count(biases=(hk, hk, hv, hv)),
            "you left out the output projection's bias b_o.": count(biases=no_b_o),
            bias_mistake: count(bias=not bias),
        }
        diagnose(got, where, mistakes)
        raise CheckFailed(
            f"{where} returned {got}; count W_q, W_k, W_v, W_o "
            "from their shapes (and their biases when bias=True)."
        )
    passed("mha_param_count: right for other source and head widths, for 4 d^2 + 4 d, bias or not.")
