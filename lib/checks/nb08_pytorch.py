"""Checks of notebook 08 (from NumPy to PyTorch). torch is imported inside these checks
only, so that importing lib.checks stays fast for the notebooks that do not need it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import attention as A
from ._core import CheckFailed, as_array, call, close, diagnose, expect_shape, passed


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _to_numpy(value, name: str, what: str) -> np.ndarray:
    """A tensor (detached) or anything array-like as a NumPy array."""
    if _is_tensor(value):
        value = value.detach().cpu().numpy()
    return as_array(value, name, what)


def check_torch_attn_mask(to_torch_mask_fn: Callable) -> None:
    """Exercise (notebook 08): our boolean mask (True = may attend) -> nn.MultiheadAttention's
    boolean attn_mask (True = may NOT attend), as a torch tensor of the same shape."""
    import torch

    name = "to_torch_mask"
    rng = np.random.default_rng(8)
    masks = [A.causal_mask(4), rng.random((3, 5)) < 0.5, A.causal_mask(2, 6)]
    for mask in masks:
        got = call(to_torch_mask_fn, name, mask.copy())
        if not _is_tensor(got):
            raise CheckFailed(
                f"{name}: return a torch.Tensor, not {type(got).__name__}; "
                "nn.MultiheadAttention does not accept NumPy arrays."
            )
        arr = got.detach().cpu().numpy()
        if arr.shape == mask.shape[::-1] and arr.shape != mask.shape:
            raise CheckFailed(
                f"{name}: your mask has shape {arr.shape}, transposed; keep ours "
                f"{mask.shape}: row i is query i, column j is key j."
            )
        expect_shape(arr, mask.shape, name, "a mask of the same shape as ours")
        if got.dtype != torch.bool:
            if (
                got.dtype.is_floating_point
                and np.array_equal(np.isneginf(arr), ~mask)
                and np.all(arr[mask] == 0)
            ):
                raise CheckFailed(
                    f"{name}: that is a valid additive float mask (0 / -inf), but this "
                    "exercise asks for torch's boolean form: return a tensor of dtype torch.bool."
                )
            raise CheckFailed(
                f"{name}: return a boolean tensor (dtype torch.bool), got {got.dtype}; a float "
                "attn_mask is added to the scores, so 0/1 values would not block anything."
            )
        if np.array_equal(arr, ~mask):
            continue
        diagnose(
            arr,
            [
                (
                    mask,
                    f"{name}: you passed our mask through unchanged, but in "
                    "nn.MultiheadAttention True means 'may NOT attend': every True of ours must "
                    "become False and the other way round.",
                ),
                (
                    (~mask).T if mask.shape[0] == mask.shape[1] else None,
                    f"{name}: your mask is transposed: row i must be query i and column j key "
                    "j, as in ours.",
                ),
            ],
            same=lambda a, b: bool(np.array_equal(a, b)),
        )
        raise CheckFailed(
            f"{name}: wrong entries for the mask {mask.astype(int).tolist()}; torch's entry "
            "(i, j) must be True exactly where query i may NOT attend to key j."
        )
    passed("to_torch_mask: same shape, dtype torch.bool, True where a query may NOT attend.")


def bridge_params(bias: bool, d_model: int = 6, n_heads: int = 2, seed: int = 80) -> A.MHAParams:
    return A.init_mha_params(d_model, n_heads, np.random.default_rng(seed), bias=bias)


def _no_bias_hint(name: str, what: str):
    """Any error raised on params without biases, once the same answer worked with them."""
    return (
        Exception,
        lambda exc: (
            f"{name} works with biases but raised {type(exc).__name__} ({exc}) on params "
            f"without them: there params.b_q, b_k and b_v are None; {what}"
        ),
    )


def check_pack_in_proj(pack_fn: Callable) -> None:
    """Exercise (notebook 08): our W_q, W_k, W_v (+ biases) -> torch's in_proj_weight
    (3 d_model, d_model) and in_proj_bias (3 d_model,) or None."""
    from .. import torch_bridge as TB

    name = "pack_in_proj"
    for d_model, n_heads in ((6, 2), (8, 4)):
        for bias in (True, False):
            params = bridge_params(bias, d_model, n_heads)
            d = params.d_model
            hints = () if bias else [_no_bias_hint(name, "return None as in_proj_bias then.")]
            result = call(pack_fn, name, params, hints=hints)
            if not (isinstance(result, tuple | list) and len(result) == 2):
                raise CheckFailed(
                    f"{name} should return a pair (in_proj_weight, in_proj_bias), "
                    f"got {type(result).__name__}."
                )
            weight = _to_numpy(result[0], name, "in_proj_weight")
            want_w, want_b = TB.pack_in_proj(params)
            if weight.shape == (d, 3 * d):
                raise CheckFailed(
                    f"{name}: in_proj_weight has shape {weight.shape}, but torch stores a "
                    "projection as (out_features, in_features): it must be (3 d_model, "
                    f"d_model) = {(3 * d, d)}."
                )
            expect_shape(weight, (3 * d, d), name, "in_proj_weight (3 d_model, d_model)")
            if not close(weight, want_w):
                Ws = (params.W_q, params.W_k, params.W_v)
                diagnose(
                    weight,
                    [
                        (
                            np.concatenate(Ws, axis=0),
                            f"{name}: you stacked W_q, W_k, W_v as they are; torch computes "
                            "x @ W.T, so each block must be the transpose of ours.",
                        ),
                        (
                            np.concatenate([params.W_k.T, params.W_q.T, params.W_v.T]),
                            f"{name}: the blocks are in the wrong order: torch expects the "
                            "query block first, then the key block, then the value block.",
                        ),
                        (
                            np.concatenate(Ws, axis=1).reshape(3 * d, d),
                            f"{name}: reshaping does not transpose: the numbers end up in the "
                            "wrong places; each block must be the transpose of our matrix.",
                        ),
                    ],
                )
                raise CheckFailed(
                    f"{name}: in_proj_weight has the right shape but wrong values; "
                    "x @ in_proj_weight.T must give [x @ W_q, x @ W_k, x @ W_v] side by side."
                )
            got_b = result[1]
            if want_b is None:
                if got_b is not None:
                    raise CheckFailed(
                        f"{name}: these params have no biases (params.b_q is None), so "
                        "in_proj_bias must be None."
                    )
                continue
            if got_b is None:
                raise CheckFailed(
                    f"{name}: these params have biases, but your in_proj_bias is None: pack "
                    "b_q, b_k and b_v as well."
                )
            got_b = _to_numpy(got_b, name, "in_proj_bias")
            expect_shape(got_b, (3 * d,), name, "in_proj_bias (3 d_model,)")
            if close(got_b, want_b):
                continue
            diagnose(
                got_b,
                [
                    (
                        np.concatenate([params.b_k, params.b_q, params.b_v]),
                        f"{name}: the biases are in the wrong order: query, then key, "
                        "then value, as in the weight.",
                    ),
                ],
            )
            raise CheckFailed(f"{name}: in_proj_bias must hold b_q, b_k, b_v one after another.")
    passed(
        "pack_in_proj: (3 d_model, d_model), the q, k, v blocks transposed and in order; "
        "biases packed, or None."
    )


def check_load_into_torch(load_fn: Callable) -> None:
    """Exercise (notebook 08): an nn.MultiheadAttention(batch_first=True) that holds our
    params and gives our outputs and per-head weights."""
    import torch
    from torch import nn

    from .. import torch_bridge as TB

    name = "load_into_torch"
    rng = np.random.default_rng(81)
    for d_model, n_heads, bias in ((8, 2, True), (8, 2, False), (6, 3, True)):
        params = A.init_mha_params(d_model, n_heads, rng, bias=bias)
        x_q = rng.normal(size=(2, 3, d_model))
        x_kv = rng.normal(size=(2, 5, d_model))
        hints = (
            ()
            if bias
            else [
                _no_bias_hint(
                    name,
                    "create the module with bias=False then (params.has_bias), and copy no biases.",
                )
            ]
        )
        module = call(load_fn, name, params, hints=hints)
        if not isinstance(module, nn.MultiheadAttention):
            raise CheckFailed(
                f"{name} should return an nn.MultiheadAttention, got {type(module).__name__}."
            )
        if module.embed_dim != d_model or module.num_heads != n_heads:
            raise CheckFailed(
                f"{name}: the module has embed_dim={module.embed_dim}, "
                f"num_heads={module.num_heads}; it needs params.d_model={d_model} and "
                f"params.n_heads={n_heads}."
            )
        if not module.batch_first:
            raise CheckFailed(
                f"{name}: your module expects (seq, batch, embed), torch's default; our "
                "arrays are (batch, seq, d_model): create it with batch_first=True."
            )
        dtype = module.out_proj.weight.dtype
        want_out, want_w = A.multi_head_attention(x_q, x_kv, params)
        tol = 1e-10 if dtype == torch.float64 else 1e-5

        def run(m, dtype=dtype, x_q=x_q, x_kv=x_kv):
            tq, tkv = (torch.from_numpy(a).to(dtype) for a in (x_q, x_kv))
            with torch.no_grad():
                m_training = m.training
                m.eval()
                try:
                    out, w = m(tq, tkv, tkv, average_attn_weights=False)
                finally:
                    m.train(m_training)
            return out.double().numpy(), w.double().numpy()

        got_out, got_w = call(run, name, module)
        if close(got_out, want_out, tol) and close(got_w, want_w, tol):
            if module.training and module.dropout > 0:
                raise CheckFailed(
                    f"{name}: the weights are right, but the module is in training mode with "
                    "dropout, so its outputs would be random: switch it to eval mode."
                )
            continue

        def with_state(key, value, params=params, dtype=dtype):
            m = TB.to_torch_mha(params, dtype)
            state = {k: v.clone() for k, v in m.state_dict().items()}
            state[key] = value
            m.load_state_dict(state)
            return run(m)[0]

        def without_biases(params=params, dtype=dtype):
            bare = A.MHAParams(params.W_q, params.W_k, params.W_v, params.W_o, params.n_heads)
            return run(TB.to_torch_mha(bare, dtype))[0]

        diagnose(
            got_out,
            [
                (
                    lambda: with_state(
                        "in_proj_weight",
                        torch.cat(
                            [
                                torch.from_numpy(W).to(dtype)
                                for W in (params.W_q, params.W_k, params.W_v)
                            ]
                        ),
                    ),
                    f"{name}: your queries/keys/values are wrong: torch computes x @ W.T, so "
                    "in_proj_weight needs our W_q, W_k, W_v transposed (rows = output features).",
                ),
                (
                    lambda: with_state("out_proj.weight", torch.from_numpy(params.W_o).to(dtype)),
                    f"{name}: the output projection is wrong: out_proj computes x @ W.T, so it "
                    "needs W_o transposed.",
                ),
                (
                    without_biases if bias else None,
                    f"{name}: the biases are missing: copy b_q, b_k, b_v into in_proj_bias and "
                    "b_o into out_proj.bias.",
                ),
            ],
            tol=tol,
        )
        raise CheckFailed(
            f"{name}: the module's outputs differ from A.multi_head_attention's (largest "
            f"difference {np.abs(got_out - want_out).max():.3g}); copy every one of our "
            "weights into the module's parameters."
        )
    passed(
        "load_into_torch: nn.MultiheadAttention gives our outputs and per-head weights, "
        "with and without biases, for cross-attention."
    )
