"""Checks of notebook 03 (multi-head attention): splitting and merging heads, and the
parameter count of one layer."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import attention as A
from ._core import (
    CheckFailed,
    as_array,
    call,
    diagnose,
    expect_shape,
    passed,
    same_array,
    same_value,
)


def check_split_heads(split_heads_fn: Callable[[np.ndarray, int], np.ndarray]) -> None:
    """Exercise (notebook 03): (batch, seq, d_model) -> (batch, heads, seq, d_k)."""
    name = "split_heads"
    float_hint = (
        TypeError,
        lambda exc: (
            f"{name} raised TypeError ({exc}): shapes must be whole numbers, and "
            "d_model / n_heads is a float; use integer division."
        ),
    )
    for batch, seq, d_model, h in ((2, 3, 8, 4), (3, 5, 6, 2)):
        d_k = d_model // h
        x = np.arange(batch * seq * d_model, dtype=float).reshape(batch, seq, d_model)
        got = as_array(call(split_heads_fn, name, x.copy(), h, hints=[float_hint]), name)
        if got.shape == (batch, seq, h, d_k) and np.array_equal(got, x.reshape(batch, seq, h, d_k)):
            raise CheckFailed(
                f"{name}: you split the features into (heads, d_k) but left the heads axis "
                "behind seq; it must come right after batch: (batch, heads, seq, d_k)."
            )
        expect_shape(got, (batch, h, seq, d_k), name, "(batch, heads, seq, d_k)")
        if np.array_equal(got, A.split_heads(x, h)):
            continue
        diagnose(
            got,
            [
                (
                    x.reshape(batch, h, seq, d_k),
                    f"{name}: reshaping straight to (batch, heads, seq, d_k) cuts the "
                    "sequence into pieces; split the features into (heads, d_k) first, then "
                    "move the heads axis in front of seq.",
                ),
                (
                    x.reshape(batch, seq, d_k, h).transpose(0, 3, 1, 2),
                    f"{name}: each head must get a contiguous block of d_k features; yours "
                    "gets every n_heads-th feature.",
                ),
            ],
            same=same_array,
        )
        raise CheckFailed(
            f"{name}: wrong values: head h of token t should hold x[b, t, h*d_k:(h+1)*d_k]."
        )
    passed("split_heads: head h gets features h*d_k:(h+1)*d_k of every token.")


def check_merge_heads(merge_heads_fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 03): (batch, heads, seq, d_k) -> (batch, seq, heads * d_k)."""
    name = "merge_heads"
    for batch, h, seq, d_k in ((2, 4, 3, 2), (3, 2, 5, 3)):
        x = np.arange(batch * h * seq * d_k, dtype=float).reshape(batch, h, seq, d_k)
        got = as_array(call(merge_heads_fn, name, x.copy()), name)
        if got.shape == (batch, seq, h, d_k) and np.array_equal(
            got, A.merge_heads(x).reshape(got.shape)
        ):
            raise CheckFailed(
                f"{name}: the heads axis is in the right place, but (heads, d_k) must still "
                "become one axis of heads * d_k features: expected shape "
                "(batch, seq, heads * d_k)."
            )
        expect_shape(got, (batch, seq, h * d_k), name, "(batch, seq, heads * d_k)")
        if np.array_equal(got, A.merge_heads(x)):
            continue
        diagnose(
            got,
            [
                (
                    x.reshape(batch, seq, h * d_k),
                    f"{name}: reshaping without moving the heads axis back behind seq mixes "
                    "tokens together; transpose to (batch, seq, heads, d_k) before reshaping.",
                ),
                (
                    x.transpose(0, 2, 3, 1).reshape(batch, seq, h * d_k),
                    f"{name}: your concat interleaves the heads' features; each head's d_k "
                    "features must stay together, head 0 first.",
                ),
            ],
            same=same_array,
        )
        raise CheckFailed(
            f"{name}: wrong values: token t should be the heads' d_k-vectors for t, "
            "joined in head order."
        )
    passed("merge_heads: token t's vector is head 0's output, then head 1's, ... (the concat).")


def check_param_count(param_count_fn: Callable[[int, int, bool], int]) -> None:
    """Exercise (notebook 03): parameters of one multi-head attention layer."""
    name = "mha_param_count"
    for d, h in ((512, 8), (64, 4), (12, 3)):
        for bias in (False, True):
            got = call(param_count_fn, name, d, h, bias)
            if not isinstance(got, int | np.integer):
                raise CheckFailed(f"{name}: return a whole number, got {type(got).__name__}.")
            expected = 4 * d * d + (4 * d if bias else 0)
            if got == expected:
                continue
            b = 4 * d if bias else 0
            where = f"{name}(d_model={d}, n_heads={h}, bias={bias})"
            diagnose(
                got,
                [
                    (
                        3 * d * d + (3 * d if bias else 0),
                        f"{where}: you left out the output projection W_O (and its bias).",
                    ),
                    (
                        4 * d * d if bias else None,
                        f"{where}: you left out the biases: one vector of d_model per projection.",
                    ),
                    (
                        4 * d * d + d if bias else None,
                        f"{where}: only one bias counted: each of W_Q, W_K, W_V, W_O has its own.",
                    ),
                    (
                        4 * d * d + 3 * d if bias else None,
                        f"{where}: you left out the bias of the output projection W_O.",
                    ),
                    (
                        h * 4 * d * d + b,
                        f"{where}: you gave every head full d_model x d_model matrices; each "
                        "head projects to d_k = d_model / heads columns.",
                    ),
                    (
                        4 * d * (d // h) + b,
                        f"{where}: you counted one head's W_Q/W_K/W_V only; all heads together "
                        "fill d_model columns, and W_O is d_model x d_model.",
                    ),
                ],
                same=same_value,
            )
            raise CheckFailed(
                f"{where} returned {got}; count W_Q, W_K, W_V, W_O (and their biases when "
                "bias=True)."
            )
    passed("mha_param_count: right for three shapes, with and without biases.")
