"""Checks of notebook 08 (from NumPy to PyTorch). torch is imported inside the checks only, so
that importing lib.checks stays fast."""

from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import torch_bridge as TB
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    describe,
    diagnose,
    exercise,
    expect_shape,
    expect_tuple,
    passed,
)


def _to_numpy(value, name: str, what: str) -> np.ndarray:
    """A tensor (detached) or anything array-like as a NumPy array."""
    value = value.detach().cpu().numpy() if hasattr(value, "detach") else value
    return as_array(value, name, what)


def _torch_rows(mask: np.ndarray, n_heads: int, head_major: bool = False) -> np.ndarray:
    """Our mask (True = may attend) as torch's 3-axis ``attn_mask`` (True = may NOT attend): row
    b * n_heads + h is sequence b, head h (``head_major``: row h * batch + b, a mistake)."""
    b, _, n_q, n_k = mask.shape
    blocked = ~np.broadcast_to(mask, (b, n_heads, n_q, n_k))
    if head_major:
        blocked = blocked.transpose(1, 0, 2, 3)
    return blocked.reshape(b * n_heads, n_q, n_k)


def mask_cases() -> list[tuple[np.ndarray, int]]:
    """(mask, n_heads) that check_torch_mask tries: masks shared by the heads, or per head."""
    rng = np.random.default_rng(8)
    shared = rng.random((2, 1, 3, 4)) < 0.6  # (batch, 1, n_q, n_k): the same for every head
    per_head = rng.random((3, 2, 4, 5)) < 0.6  # (batch, heads, n_q, n_k)
    causal_padded = A.causal_mask(4) & A.padding_mask([4, 2], 4)  # (2, 1, 4, 4)
    return [(shared, 3), (per_head, 2), (causal_padded, 2)]


@exercise
def check_torch_mask(to_torch_mask_fn: Callable) -> None:
    """Exercise (notebook 08): our mask as the boolean ``attn_mask`` of nn.MultiheadAttention."""
    import torch

    name = "to_torch_mask"
    for mask, n_heads in mask_cases():
        b, _, n_q, n_k = mask.shape
        want = _torch_rows(mask, n_heads)
        got = call(to_torch_mask_fn, name, mask, n_heads)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(
                f"{name}: return a torch.Tensor, not {type(got).__name__}; "
                "nn.MultiheadAttention does not accept NumPy arrays."
            )
        arr = got.detach().cpu().numpy()
        if arr.shape == (b, n_q, n_k) and n_heads > 1:
            raise CheckFailed(
                f"{name}: torch wants one (n_q, n_k) mask per sequence *and head*, shape (batch "
                f"* n_heads, n_q, n_k) = {want.shape}; yours has one per sequence, {arr.shape}."
            )
        if arr.ndim == 4:
            raise CheckFailed(
                f"{name}: torch's attn_mask has three axes, (batch * n_heads, n_q, n_k) = "
                f"{want.shape}; yours has four, {arr.shape}: put the batch and head axes into one."
            )
        if arr.shape == (b * n_heads, n_k, n_q) and n_q != n_k:
            raise CheckFailed(
                f"{name}: your masks are transposed, {arr.shape}; each must be (n_q, n_k): "
                "row i is query i, column j key j."
            )
        expect_shape(arr, want.shape, name, "a mask (batch * n_heads, n_q, n_k)")
        if got.dtype != torch.bool:
            additive = got.dtype.is_floating_point and np.array_equal(np.isneginf(arr), want)
            if additive and np.all(arr[~want] == 0):
                raise CheckFailed(
                    f"{name}: that is a valid additive float mask (0 / -inf), but this exercise "
                    "asks for torch's boolean form: return a tensor of dtype torch.bool."
                )
            raise CheckFailed(
                f"{name}: return a boolean tensor (dtype torch.bool), got {got.dtype}; a float "
                "attn_mask is added to the scores, so 0/1 values would not block anything."
            )
        if np.array_equal(arr, want):
            continue
        mistakes = {
            "you kept our True = 'may attend', but in nn.MultiheadAttention True means 'may "
            "NOT attend': every True of ours must become False and the other way round.": ~want,
            "your rows are ordered head by head; torch reads them sequence by "
            "sequence: row b * n_heads + h is sequence b, head h (all heads of "
            "sequence 0 first).": _torch_rows(mask, n_heads, head_major=True),
            "you gave every head the first head's mask; a mask of shape (batch, n_heads, n_q, "
            "n_k) has a different one for each head: keep them.": _torch_rows(mask[:, :1], n_heads),
            "your masks are transposed: row i must be query i and column j "
            "key j, as in ours.": want.swapaxes(-1, -2) if n_q == n_k else None,
        }
        diagnose(arr, name, mistakes, tol=0)
        raise CheckFailed(
            f"{name}: wrong entries for a mask of shape {mask.shape} with n_heads={n_heads}; "
            "row b * n_heads + h must be True exactly where query i of sequence b may NOT "
            "attend to key j in head h."
        )
    passed("to_torch_mask: one inverted (n_q, n_k) mask per sequence and head, in torch's order.")


def torch_layers() -> list:
    """The nn.MultiheadAttention layers check_from_torch reads: initialised by torch (from a
    fixed seed, without touching the caller's random state), biases made non-zero."""
    import torch
    from torch import nn

    layers = []
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(80)
        for d_model, n_heads, bias in ((8, 2, True), (8, 2, False), (6, 3, True)):
            m = nn.MultiheadAttention(
                d_model, n_heads, bias=bias, batch_first=True, dtype=torch.float64
            )
            if bias:  # torch starts them at 0, which would hide a bias left out
                m.in_proj_bias.normal_(0.0, 0.1)
                m.out_proj.bias.normal_(0.0, 0.1)
            layers.append(m.eval())
    return layers


@exercise
def check_from_torch(from_torch_fn: Callable) -> None:
    """Exercise (notebook 08): an nn.MultiheadAttention's weights as our MHAParams."""
    name = "from_torch"
    for module in torch_layers():
        d = module.embed_dim
        want = TB.from_torch_mha(module)
        refuse = (("lib.torch_bridge", "from_torch_mha", "TB.from_torch_mha"),)
        got = call(from_torch_fn, name, module, refuse=refuse)
        if not isinstance(got, A.MHAParams):
            if isinstance(got, tuple | list):
                raise CheckFailed(
                    f"{name}: return one A.MHAParams(W_q, W_k, W_v, W_o, n_heads, b_q, b_k, "
                    f"b_v, b_o), not a {type(got).__name__} of {len(got)} items."
                )
            raise CheckFailed(f"{name}: return an A.MHAParams, got {describe(got)}.")
        if got.n_heads != module.num_heads:
            one_head = got.n_heads == d // module.num_heads
            head_size = " (that is the size of one head, d_model // n_heads)" * one_head
            raise CheckFailed(
                f"{name}: n_heads={got.n_heads}{head_size}; the layer has "
                f"num_heads={module.num_heads} heads."
            )
        if want.has_bias and not got.has_bias:
            raise CheckFailed(
                f"{name}: this layer has biases (in_proj_bias and out_proj.bias), but your "
                "params have none: copy them into b_q, b_k, b_v and b_o."
            )
        if got.has_bias and not want.has_bias:
            raise CheckFailed(
                f"{name}: this layer has no biases (in_proj_bias is None), so the params "
                "must have none either."
            )
        weight = module.in_proj_weight.detach().numpy()  # (3d, d)
        got_in = np.stack([got.W_q, got.W_k, got.W_v])
        if not close(got_in, np.stack([want.W_q, want.W_k, want.W_v])):
            blocks = np.stack(np.split(weight, 3))  # each (d_out, d_in)
            mistakes = {
                "torch stores each projection as (d_out, d_in) and computes x @ W.T; ours is x @ "
                "W with W of shape (d_in, d_out): transpose each block of in_proj_weight.": blocks,
                "the blocks are in the wrong order: in_proj_weight holds the queries' block "
                "first, then the keys', then the values'.": blocks[[1, 0, 2]].swapaxes(-1, -2),
                "reshaping does not transpose: the numbers end up in "
                "the wrong places; each block of in_proj_weight must be "
                "transposed.": np.stack(np.split(weight.reshape(d, 3 * d), 3, axis=1)),
            }
            diagnose(got_in, name, mistakes)
            raise CheckFailed(
                f"{name}: W_q, W_k, W_v have the right shapes but wrong values; x @ W_q must "
                "give the first d_model outputs of x @ in_proj_weight.T, and so on."
            )
        if not close(got.W_o, want.W_o):
            transposed = "W_o is out_proj.weight transposed: nn.Linear stores (d_out, d_in) too."
            diagnose(got.W_o, name, {transposed: module.out_proj.weight.detach().numpy()})
            raise CheckFailed(f"{name}: W_o has wrong values; it comes from out_proj.weight.")
        if not want.has_bias:
            continue
        got_b = np.stack([got.b_q, got.b_k, got.b_v])
        if not close(got_b, np.stack([want.b_q, want.b_k, want.b_v])):
            b = np.stack(np.split(module.in_proj_bias.detach().numpy(), 3))
            if close(got_b, b[[1, 0, 2]]):
                raise CheckFailed(
                    f"{name}: the biases are in the wrong order: in_proj_bias "
                    "holds b_q, then b_k, then b_v, like the weight's blocks."
                )
            raise CheckFailed(
                f"{name}: b_q, b_k, b_v have wrong values; they are the thirds of in_proj_bias."
            )
        if not close(got.b_o, want.b_o):
            raise CheckFailed(f"{name}: b_o has wrong values; it is out_proj.bias.")
    passed("from_torch: every weight transposed back to (d_in, d_out); biases and head count read.")


def attention_cases() -> list:
    """(params, x_q, x_kv, mask) for check_torch_attention, each with queries that see no key."""
    rng = np.random.default_rng(81)
    params = A.init_mha_params(8, 2, rng, bias=True)
    x_q, x_kv = rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8))
    mask = rng.random((2, 1, 3, 5)) < 0.6  # (batch, 1, n_q, n_k)
    mask[0, 0, 1] = False  # sequence 0, query 1: no key at all
    mask[1, 0, 2] = True
    cases = [(params, x_q, x_kv, mask)]
    for lengths, bias in (([4, 0, 2], False), ([4, 0], True)):  # sequence 1: no real token
        params = A.init_mha_params(6, 3, rng, bias=bias)
        x = rng.normal(size=(len(lengths), 4, 6))
        cases.append((params, x, x, A.causal_mask(4) & A.padding_mask(lengths, 4)))
    return cases


@exercise
def check_torch_attention(attention_fn: Callable) -> None:
    """Exercise (notebook 08): nn.MultiheadAttention run so that it answers as
    A.multi_head_attention, queries with nothing to attend to included (weights 0, output b_o)."""
    import torch

    name = "torch_attention"
    refuse = (("lib.attention", "multi_head_attention", "A.multi_head_attention"),)  # not torch's
    for params, x_q, x_kv, mask in attention_cases():
        module = TB.to_torch_mha(params)
        want_out, want_w = A.multi_head_attention(x_q, x_kv, params, mask)
        result = call(attention_fn, name, module, x_q, x_kv, mask, refuse=refuse)
        expect_tuple(result, 2, name, "a pair (output, weights)")
        out = _to_numpy(result[0], name, "the output")
        w = _to_numpy(result[1], name, "the weights")
        if out.shape == want_w.shape and w.shape == want_out.shape:
            raise CheckFailed(
                f"{name}: return the pair in the order (output, weights), as "
                "A.multi_head_attention does."
            )
        if w.shape == (want_w.shape[0],) + want_w.shape[2:]:
            raise CheckFailed(
                f"{name}: your weights {w.shape} are averaged over the heads (torch's "
                "default); ask the module for per-head weights with average_attn_weights=False."
            )
        expect_shape(out, want_out.shape, name, "an output (batch, n_q, d_model)")
        expect_shape(w, want_w.shape, name, "weights (batch, heads, n_q, n_k)")
        empty = ~mask[:, 0].any(axis=-1)  # (batch, n_q): queries with nothing to attend to
        seq, query = np.argwhere(empty)[0]
        w_rows = w.transpose(0, 2, 1, 3)  # (batch, n_q, heads, n_k)
        want_rows = want_w.transpose(0, 2, 1, 3)
        if np.isnan(out[~empty]).any() or np.isnan(w_rows[~empty]).any():
            raise CheckFailed(
                f"{name}: NaN for queries that may attend to some keys: torch's boolean attn_mask "
                "is True where a query may NOT attend, the opposite of ours (exercise 1)."
            )
        if np.isnan(out).any() or np.isnan(w).any():
            raise CheckFailed(
                f"{name}: NaN for the queries with nothing to attend to (sequence {seq}, query "
                f"{query}, for one): that is what torch gives them; lib gives weights 0 and the "
                "output b_o. Let torch see a key for those queries, then put lib's answer in "
                "their rows."
            )
        ok = ~empty
        if not (close(out[ok], want_out[ok]) and close(w_rows[ok], want_rows[ok])):
            # a mask every query can use (an empty one sees all), rows head by head: the mistake
            blocked = _torch_rows(mask | empty[:, None, :, None], params.n_heads, head_major=True)
            with torch.no_grad():
                tq, tkv = torch.from_numpy(x_q), torch.from_numpy(x_kv)
                wrong = module(tq, tkv, tkv, attn_mask=torch.from_numpy(blocked))[0].numpy()
            if close(out[ok], wrong[ok]):
                raise CheckFailed(
                    f"{name}: the mask reached the wrong heads: torch reads a 3-axis "
                    "attn_mask sequence by sequence, row b * n_heads + h (exercise 1)."
                )
            raise CheckFailed(
                f"{name}: for queries that may attend to some keys, your output or weights "
                f"differ from lib's (largest output difference "
                f"{np.abs(out[ok] - want_out[ok]).max():.3g}); give the module our inputs "
                "and our mask in torch's convention (exercise 1)."
            )
        if not close(w_rows[empty], np.zeros_like(want_rows[empty])):
            sums = w_rows[empty].sum(axis=-1)
            detail = " yours sum to 1" if close(sums, np.ones_like(sums)) else " yours do not"
            raise CheckFailed(
                f"{name}: a query with nothing to attend to (sequence {seq}, query {query}) "
                f"must get weights 0 from every head, as in lib;{detail}."
            )
        if close(out[empty], want_out[empty]):
            continue
        if params.has_bias and close(out[empty], np.zeros_like(want_out[empty])):
            raise CheckFailed(
                f"{name}: the output of a query with nothing to attend to is b_o, not 0: its "
                "attention output is 0, then the output projection adds its bias (out_proj.bias)."
            )
        raise CheckFailed(
            f"{name}: the output of a query with nothing to attend to (sequence {seq}, query "
            f"{query}) must be what lib gives: the attention output 0 projected, i.e. b_o "
            "(out_proj.bias), or 0 without biases."
        )
    passed(
        "torch_attention: torch gives lib's answers, queries with nothing to attend to included."
    )
