"""From our NumPy attention to PyTorch's, and back (notebook 08). torch stores a weight as
(d_out, d_in) and computes ``x @ W.T``; ``nn.MultiheadAttention`` packs W_q, W_k, W_v into
one ``in_proj_weight``, and its boolean masks mean "may NOT attend", the opposite of ours
(and of ``F.scaled_dot_product_attention``'s). torch is imported only when a function is called.
"""

import numpy as np

from . import _validate as valid
from . import attention as A


def to_torch_attn_mask(mask: np.ndarray):
    """Our boolean mask (True = may attend) as a boolean ``attn_mask`` for
    ``nn.MultiheadAttention`` (True = may NOT attend): the same shape, inverted."""
    import torch

    return torch.from_numpy(~valid.bool_mask(mask))


def to_torch_mha(params: A.MHAParams):
    """An ``nn.MultiheadAttention(batch_first=True)`` in eval mode holding our weights, in
    their dtype, W_q, W_k, W_v packed into its in_proj_weight as [W_q | W_k | W_v]^T. Called
    with ``attn_mask=to_torch_attn_mask(mask)`` and ``average_attn_weights=False`` it returns
    what ``A.multi_head_attention`` does."""
    import torch
    from torch import nn

    valid.params(params)
    dtype = getattr(torch, np.dtype(params.W_q.dtype).name)
    module = nn.MultiheadAttention(
        params.d_model, params.n_heads, bias=params.has_bias, batch_first=True, dtype=dtype
    )
    in_proj = np.concatenate([params.W_q, params.W_k, params.W_v], axis=1).T  # (3 d, d)
    state = {"in_proj_weight": in_proj, "out_proj.weight": params.W_o.T}
    if params.has_bias:
        state["in_proj_bias"] = np.concatenate([params.b_q, params.b_k, params.b_v])  # (3 d,)
        state["out_proj.bias"] = params.b_o
    module.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    return module.eval()


def from_torch_mha(module) -> A.MHAParams:
    """Our MHAParams from an ``nn.MultiheadAttention`` with one packed in_proj_weight
    (the default, kdim = vdim = embed_dim) and no bias_k/bias_v."""
    if module.in_proj_weight is None or module.bias_k is not None:
        raise ValueError(
            "from_torch_mha needs an nn.MultiheadAttention with a packed in_proj_weight "
            "(kdim = vdim = embed_dim) and add_bias_kv=False"
        )
    weight = module.in_proj_weight.detach().cpu().numpy()  # (3d, d)
    W_q, W_k, W_v = (W.T.copy() for W in np.split(weight, 3))
    W_o = module.out_proj.weight.detach().cpu().numpy().T.copy()
    biases = [None] * 4
    if module.in_proj_bias is not None:
        b = module.in_proj_bias.detach().cpu().numpy().copy()  # (3d,): b_q, b_k, b_v
        biases = [*np.split(b, 3), module.out_proj.bias.detach().cpu().numpy().copy()]
    return valid.params(A.MHAParams(W_q, W_k, W_v, W_o, module.num_heads, *biases))
