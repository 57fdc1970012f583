"""From our NumPy attention to PyTorch's, and back (notebook 08).

The conventions that differ, all handled here:

- weights: we compute ``x @ W`` with ``W`` of shape (d_in, d_out); ``torch.nn.Linear`` and
  ``nn.MultiheadAttention`` compute ``x @ W.T`` with their weight stored as (d_out, d_in);
- ``nn.MultiheadAttention`` keeps W_q, W_k, W_v in one ``in_proj_weight`` of shape
  (3 d_model, d_model): rows 0..d-1 are W_q^T, then W_k^T, then W_v^T (and
  ``in_proj_bias`` likewise); W_o is ``out_proj``;
- masks: ours are boolean with True = "may attend". A boolean ``attn_mask`` of
  ``nn.MultiheadAttention`` means the opposite (True = "may NOT attend"), and so does its
  ``key_padding_mask`` (True = "this key is padding"). A boolean ``attn_mask`` of
  ``F.scaled_dot_product_attention`` means the same as ours (True = "takes part");
- biases: ``nn.MultiheadAttention(bias=True)`` has all four (in_proj_bias and out_proj.bias),
  ``bias=False`` none; :class:`lib.attention.MHAParams` has the same all-or-none rule.

torch is imported when these functions are first used, so ``import lib`` stays fast. The
inputs are checked as every attention function of lib checks them (:mod:`lib._validate`).
"""

from __future__ import annotations

import numpy as np

from . import _validate as V
from . import attention as A


def pack_in_proj(params: A.MHAParams) -> tuple[np.ndarray, np.ndarray | None]:
    """Our W_q, W_k, W_v (and biases) as torch's (in_proj_weight, in_proj_bias).

    in_proj_weight: (3 d_model, d_model) = [W_q | W_k | W_v]^T, so that
    ``x @ in_proj_weight.T`` is ``[x @ W_q, x @ W_k, x @ W_v]`` side by side.
    in_proj_bias: (3 d_model,) = [b_q, b_k, b_v], or None without biases.
    """
    A.check_params(params)
    weight = np.concatenate([params.W_q, params.W_k, params.W_v], axis=1).T
    if not params.has_bias:
        return np.ascontiguousarray(weight), None
    return np.ascontiguousarray(weight), np.concatenate([params.b_q, params.b_k, params.b_v])


def to_torch_attn_mask(mask: np.ndarray):
    """Our boolean mask (True = may attend) as a boolean ``attn_mask`` for
    ``nn.MultiheadAttention`` (True = may NOT attend): the same shape, inverted."""
    import torch

    return torch.from_numpy(~V.bool_mask(mask))


def to_torch_mha(params: A.MHAParams, dtype=None):
    """An ``nn.MultiheadAttention(batch_first=True)`` in eval mode holding our weights.

    ``module(x_q, x_kv, x_kv, attn_mask=to_torch_attn_mask(mask),
    average_attn_weights=False)`` then returns what ``A.multi_head_attention(x_q, x_kv,
    params, mask)`` returns (where at least one key is allowed in every row), as tensors.
    ``dtype`` defaults to the dtype of the parameters.
    """
    import torch
    from torch import nn

    weight, bias = pack_in_proj(params)  # checks params
    dtype = dtype or getattr(torch, np.dtype(params.W_q.dtype).name)
    module = nn.MultiheadAttention(
        params.d_model, params.n_heads, bias=params.has_bias, batch_first=True, dtype=dtype
    )
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.from_numpy(weight))
        module.out_proj.weight.copy_(torch.from_numpy(params.W_o.T.copy()))
        if bias is not None:
            module.in_proj_bias.copy_(torch.from_numpy(bias))
            module.out_proj.bias.copy_(torch.from_numpy(params.b_o))
    return module.eval()


def from_torch_mha(module) -> A.MHAParams:
    """Our MHAParams from an ``nn.MultiheadAttention`` with one packed in_proj_weight
    (the default, kdim = vdim = embed_dim) and no bias_k/bias_v."""
    if module.in_proj_weight is None or module.bias_k is not None:
        raise ValueError(
            "from_torch_mha needs an nn.MultiheadAttention with a packed in_proj_weight "
            "(kdim = vdim = embed_dim) and add_bias_kv=False"
        )
    d = module.embed_dim
    weight = module.in_proj_weight.detach().cpu().numpy()  # (3d, d)
    W_q, W_k, W_v = (weight[i * d : (i + 1) * d].T.copy() for i in range(3))
    W_o = module.out_proj.weight.detach().cpu().numpy().T.copy()
    biases = [None] * 4
    if module.in_proj_bias is not None:
        b = module.in_proj_bias.detach().cpu().numpy()
        biases = [b[:d].copy(), b[d : 2 * d].copy(), b[2 * d :].copy()]
        biases.append(module.out_proj.bias.detach().cpu().numpy().copy())
    return A.check_params(A.MHAParams(W_q, W_k, W_v, W_o, module.num_heads, *biases))
