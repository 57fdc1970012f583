"""Checks of notebook 03 (multi-head attention): splitting and merging heads for any number
of leading axes, and the parameter count of a layer whose heads have their own widths."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._core import (
    CheckFailed,
    as_array,
    call,
    diagnose,
    exercise,
    expect_shape,
    passed,
    same_array,
    same_value,
)

# --------------------------------------------------------------------------- split and merge


def split_heads_reference(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(..., seq, d_model) -> (..., heads, seq, d_k), for any number of leading axes."""
    x = np.asarray(x)
    *lead, seq, d_model = x.shape
    return np.swapaxes(x.reshape(*lead, seq, n_heads, d_model // n_heads), -3, -2)


def merge_heads_reference(x: np.ndarray) -> np.ndarray:
    """(..., heads, seq, d_k) -> (..., seq, heads * d_k), for any number of leading axes."""
    x = np.asarray(x)
    *lead, heads, seq, d_k = x.shape
    return np.swapaxes(x, -3, -2).reshape(*lead, seq, heads * d_k)


def _leading(lead) -> str:
    return f"{len(lead)} leading axis" if len(lead) == 1 else f"{len(lead)} leading axes"


def _leading_hint(name: str, shape: tuple[int, ...], layout: str):
    """An error raised on an input with another number of leading axes: say so."""
    return (
        ValueError,
        lambda exc: (
            f"{name} raised ValueError ({exc}) for an input of shape {shape}: x may have any "
            f"number of leading axes in front of {layout} (none, one or several), so name the "
            "axes from the end (-1, -2, -3) instead of unpacking or transposing a fixed "
            "number of them."
        ),
    )


@exercise
def check_split_heads(split_heads_fn: Callable[[np.ndarray, int], np.ndarray]) -> None:
    """Exercise (notebook 03): (..., seq, d_model) -> (..., heads, seq, d_k)."""
    name = "split_heads"
    float_hint = (
        TypeError,
        lambda exc: (
            f"{name} raised TypeError ({exc}): shapes must be whole numbers, and "
            "d_model / n_heads is a float; use integer division."
        ),
    )
    # One leading axis first (the notebook's case, where the classic mistakes are told
    # apart), then none, then two.
    for shape, h in (((2, 3, 8), 4), ((3, 5, 6), 2), ((5, 6), 3), ((2, 3, 4, 6), 2)):
        *lead, seq, d_model = shape
        d_k = d_model // h
        x = np.arange(np.prod(shape), dtype=float).reshape(shape)
        hints = [float_hint, _leading_hint(name, shape, "(seq, d_model)")]
        got = as_array(call(split_heads_fn, name, x.copy(), h, hints=hints), name)
        expected = split_heads_reference(x, h)
        if got.shape == expected.shape and np.array_equal(got, expected):
            continue
        where = f"{name} on x of shape {shape}, n_heads={h}"
        if len(shape) == 3 and got.shape == (*lead, seq, h, d_k):
            if np.array_equal(got, x.reshape(*lead, seq, h, d_k)):
                raise CheckFailed(
                    f"{where}: you split the features into (heads, d_k) but left the heads "
                    "axis behind seq; it must come right before it: (..., heads, seq, d_k)."
                )
        mistakes = [
            (
                lambda: x.reshape(*lead, h, seq, d_k),
                f"{where}: reshaping straight to (..., heads, seq, d_k) cuts the sequence "
                "into pieces; split the features into (heads, d_k) first, then move the "
                "heads axis in front of seq.",
            ),
            (
                lambda: np.swapaxes(x.reshape(*lead, seq, d_k, h), -1, -3).swapaxes(-1, -2),
                f"{where}: each head must get a contiguous block of d_k features; yours gets "
                "every n_heads-th feature.",
            ),
        ]
        reshaped = x.reshape(*lead, seq, h, d_k)
        for axes in ((0, 1), (1, 2)):  # right for 0 and 1 leading axes respectively
            mistakes.append(
                (
                    lambda axes=axes: np.swapaxes(reshaped, *axes),
                    f"{where}: you swapped axes {axes[0]} and {axes[1]}, counted from the "
                    f"front; with {_leading(lead)}, seq and heads are axes "
                    f"{len(lead)} and {len(lead) + 1}: count from the end (-3 and -2).",
                )
            )
        diagnose(got, mistakes, same=same_array)
        expect_shape(got, expected.shape, name, "(..., heads, seq, d_k)")
        raise CheckFailed(
            f"{where}: wrong values: head h of token t should hold features "
            "h*d_k:(h+1)*d_k of token t."
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
        got = as_array(call(merge_heads_fn, name, x.copy(), hints=hints), name)
        expected = merge_heads_reference(x)
        if got.shape == expected.shape and np.array_equal(got, expected):
            continue
        where = f"{name} on x of shape {shape}"
        if got.shape == (*lead, seq, h, d_k) and np.array_equal(got, expected.reshape(got.shape)):
            raise CheckFailed(
                f"{where}: the heads axis is in the right place, but (heads, d_k) must still "
                "become one axis of heads * d_k features: expected shape "
                "(..., seq, heads * d_k)."
            )
        mistakes = [
            (
                lambda: x.reshape(*lead, seq, h * d_k),
                f"{where}: reshaping without moving the heads axis back behind seq mixes "
                "tokens together; swap heads and seq before reshaping.",
            ),
            (
                lambda: np.moveaxis(x, -3, -1).reshape(*lead, seq, h * d_k),
                f"{where}: your concat interleaves the heads' features; each head's d_k "
                "features must stay together, head 0 first.",
            ),
        ]
        for axes in ((0, 1), (1, 2)):  # right for 0 and 1 leading axes respectively
            mistakes.append(
                (
                    lambda axes=axes: np.swapaxes(x, *axes).reshape(*lead, seq, h * d_k),
                    f"{where}: you swapped axes {axes[0]} and {axes[1]}, counted from the "
                    f"front; with {_leading(lead)}, heads and seq are axes "
                    f"{len(lead)} and {len(lead) + 1}: count from the end (-3 and -2).",
                )
            )
        diagnose(got, mistakes, same=same_array)
        expect_shape(got, expected.shape, name, "(..., seq, heads * d_k)")
        raise CheckFailed(
            f"{where}: wrong values: token t should be the heads' d_k-vectors for t, "
            "joined in head order."
        )
    passed("merge_heads: each token is head 0's d_k numbers, head 1's, ...; 0 to 2 leading axes.")


# --------------------------------------------------------------------------- parameter count


def param_count_reference(
    d_model: int, d_source: int, n_heads: int, d_k: int, d_v: int, bias: bool
) -> int:
    """Weights (and biases) of multi-head attention whose queries come from rows of d_model
    features and keys and values from rows of d_source features, with n_heads heads of
    query/key width d_k and value width d_v; the output has d_model features."""
    weights = (
        d_model * n_heads * d_k  # W_q (d_model, heads * d_k)
        + d_source * n_heads * d_k  # W_k (d_source, heads * d_k)
        + d_source * n_heads * d_v  # W_v (d_source, heads * d_v)
        + n_heads * d_v * d_model  # W_o (heads * d_v, d_model)
    )
    biases = 2 * n_heads * d_k + n_heads * d_v + d_model  # b_q, b_k, b_v, b_o
    return weights + (biases if bias else 0)


# Shapes where every mistake below gives its own number; the last one is the standard layer
# (d_source = d_model, d_k = d_v = d_model / heads), where the answer is 4 d^2 (+ 4 d).
_COUNT_SHAPES = ((12, 20, 3, 5, 7), (16, 10, 4, 3, 6), (8, 8, 2, 4, 4))


def _count_mistakes(d, s, h, k, v, bias, where):
    """(wrong count, message) of each realistic mistake, for these sizes."""

    def count(wq, wk, wv, wo, bq, bk, bv, bo):
        return wq + wk + wv + wo + ((bq + bk + bv + bo) if bias else 0)

    right_biases = (h * k, h * k, h * v, d)
    standard = (
        f"{where}: 4 d_model^2 (+ 4 d_model) holds only for the standard layer; here the "
        "keys' and values' source width and the heads' widths d_k, d_v all count."
    )
    return [
        (4 * d * d + (4 * d if bias else 0), standard),
        (4 * d * d if bias else None, standard),
        (
            count(d * h * k, d * h * k, d * h * v, h * v * d, *right_biases),
            f"{where}: W_k and W_v multiply rows of the source sequence, which have d_source "
            "features, not d_model: their shapes are (d_source, ...).",
        ),
        (
            count(d * k, s * k, s * v, v * d, k, k, v, d),
            f"{where}: you counted one head; all n_heads heads together project to "
            "n_heads * d_k (queries, keys) and n_heads * d_v (values) columns.",
        ),
        (
            count(d * h * k, s * h * k, s * h * k, h * k * d, h * k, h * k, h * k, d),
            f"{where}: values and the concat that W_o reads have d_v features per head, not d_k.",
        ),
        (
            count(d * h * k, s * h * k, s * h * v, d * d, *right_biases),
            f"{where}: W_o reads the concat of the heads, n_heads * d_v features, and "
            "writes d_model: its shape is (n_heads * d_v, d_model), not (d_model, d_model).",
        ),
        (
            count(d * h * k, s * h * k, s * h * v, 0, h * k, h * k, h * v, 0),
            f"{where}: you left out the output projection W_o (and its bias).",
        ),
        (
            count(d * h * k, s * h * k, s * h * v, h * v * d, d, d, d, d),
            f"{where}: each bias has the length of its projection's output: n_heads * d_k "
            "for b_q and b_k, n_heads * d_v for b_v, d_model for b_o.",
        ),
        (
            count(d * h * k, s * h * k, s * h * v, h * v * d, h * k, h * k, h * v, h * v),
            f"{where}: b_o is added to the layer's output, which has d_model features, "
            "not n_heads * d_v.",
        ),
        (
            count(d * h * k, s * h * k, s * h * v, h * v * d, h * k, h * k, h * v, 0),
            f"{where}: you left out the output projection's bias b_o.",
        ),
        (
            param_count_reference(d, s, h, k, v, False) if bias else None,
            f"{where}: with bias=True each of the four projections also has a bias vector.",
        ),
        (
            param_count_reference(d, s, h, k, v, True) if not bias else None,
            f"{where}: with bias=False there are no bias vectors to count.",
        ),
    ]


@exercise
def check_param_count(param_count_fn: Callable[..., int]) -> None:
    """Exercise (notebook 03): learnable numbers of a multi-head attention layer with its
    own head widths d_k, d_v and a source of d_source features for the keys and values."""
    name = "mha_param_count"
    for sizes in _COUNT_SHAPES:
        for bias in (True, False):
            got = call(param_count_fn, name, *sizes, bias)
            d, s, h, k, v = sizes
            where = f"{name}(d_model={d}, d_source={s}, n_heads={h}, d_k={k}, d_v={v}, bias={bias})"
            if not isinstance(got, int | np.integer) or isinstance(got, bool):
                raise CheckFailed(f"{name}: return a whole number, got {type(got).__name__}.")
            if got == param_count_reference(*sizes, bias):
                continue
            diagnose(got, _count_mistakes(d, s, h, k, v, bias, where), same=same_value)
            raise CheckFailed(
                f"{where} returned {got}; count W_q, W_k, W_v, W_o from their shapes (and "
                "their biases when bias=True)."
            )
    passed("mha_param_count: right for other source and head widths, for 4 d^2 + 4 d, bias or not.")
