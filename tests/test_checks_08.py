"""The notebook 08 checks (NumPy -> PyTorch) accept the reference answers, report stubs and
name realistic mistakes."""

import numpy as np
import pytest
import torch
from helpers import rejects, stub
from torch import nn

from lib import checks
from lib import torch_bridge as TB
from lib.checks.nb08_pytorch import bridge_params


@pytest.mark.parametrize(
    "check, reference",
    [
        (checks.check_torch_attn_mask, TB.to_torch_attn_mask),
        (checks.check_pack_in_proj, TB.pack_in_proj),
        (checks.check_load_into_torch, TB.to_torch_mha),
    ],
)
def test_reference_passes_and_stub_is_reported(check, reference, capsys):
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    rejects(check, stub, "not implemented yet")


# --------------------------------------------------------------------------- masks


def test_torch_mask_mistakes():
    check = checks.check_torch_attn_mask
    rejects(check, lambda m: torch.from_numpy(m), "unchanged", "NOT attend")
    rejects(check, lambda m: ~m, "torch.Tensor", "ndarray")
    rejects(check, lambda m: torch.from_numpy(~m.T.copy()), "transposed")
    rejects(
        check,
        lambda m: torch.zeros(m.shape, dtype=torch.float64).masked_fill(
            torch.from_numpy(~m), -torch.inf
        ),
        "additive float mask",
        "torch.bool",
    )
    rejects(check, lambda m: torch.from_numpy((~m).astype(float)), "torch.bool", "added")
    rejects(check, lambda m: torch.from_numpy(np.tril(~m)), "wrong entries")


# --------------------------------------------------------------------------- in_proj


def test_pack_in_proj_mistakes():
    check = checks.check_pack_in_proj

    def bias_of(p):
        return None if p.b_q is None else np.concatenate([p.b_q, p.b_k, p.b_v])

    rejects(
        check,
        lambda p: (np.concatenate([p.W_q, p.W_k, p.W_v], axis=1), bias_of(p)),
        "(out_features, in_features)",
    )
    rejects(
        check, lambda p: (np.concatenate([p.W_q, p.W_k, p.W_v]), bias_of(p)), "transpose of ours"
    )
    rejects(
        check,
        lambda p: (np.concatenate([p.W_k.T, p.W_q.T, p.W_v.T]), bias_of(p)),
        "wrong order",
    )
    rejects(
        check,
        lambda p: (np.concatenate([p.W_q, p.W_k, p.W_v], axis=1).reshape(-1, p.d_model), None),
        "reshaping does not transpose",
    )
    rejects(check, lambda p: (TB.pack_in_proj(p)[0], None), "in_proj_bias is None")
    rejects(
        check,
        lambda p: (TB.pack_in_proj(p)[0], np.zeros(3 * p.d_model)),
        "b_q, b_k, b_v one after another",
    )
    rejects(
        check,
        lambda p: (
            TB.pack_in_proj(p)[0],
            None if p.b_q is None else np.concatenate([p.b_k, p.b_q, p.b_v]),
        ),
        "biases are in the wrong order",
    )
    rejects(check, lambda p: TB.pack_in_proj(p)[0], "pair")


def test_pack_in_proj_accepts_tensors(capsys):
    def as_tensors(p):
        w, b = TB.pack_in_proj(p)
        return torch.from_numpy(w), None if b is None else torch.from_numpy(b)

    checks.check_pack_in_proj(as_tensors)
    assert capsys.readouterr().out.startswith("✓")


# --------------------------------------------------------------------------- loading


def load(params, *, transpose_in=True, transpose_out=True, bias=True, batch_first=True):
    """A hand-written loader with switches for the classic mistakes."""
    d = params.d_model
    m = nn.MultiheadAttention(
        d, params.n_heads, bias=params.has_bias, batch_first=batch_first, dtype=torch.float64
    )
    with torch.no_grad():
        W = np.concatenate([params.W_q, params.W_k, params.W_v], axis=1)
        m.in_proj_weight.copy_(torch.from_numpy(W.T.copy() if transpose_in else W.reshape(-1, d)))
        m.out_proj.weight.copy_(
            torch.from_numpy(params.W_o.T.copy() if transpose_out else params.W_o)
        )
        if params.has_bias and bias:
            m.in_proj_bias.copy_(
                torch.from_numpy(np.concatenate([params.b_q, params.b_k, params.b_v]))
            )
            m.out_proj.bias.copy_(torch.from_numpy(params.b_o))
        elif params.has_bias:
            m.in_proj_bias.zero_()
            m.out_proj.bias.zero_()
    return m.eval()


def test_load_into_torch_mistakes():
    check = checks.check_load_into_torch
    load(bridge_params(True))  # the helper itself runs
    rejects(check, lambda p: load(p, batch_first=False), "batch_first=True")
    rejects(check, lambda p: load(p, transpose_out=False), "W_o transposed")
    rejects(check, lambda p: load(p, bias=False), "biases are missing")
    rejects(
        check,
        lambda p: nn.MultiheadAttention(
            p.d_model, p.n_heads, batch_first=True, dtype=torch.float64
        ),
        "copy every one of our weights",
    )
    rejects(check, lambda p: TB.pack_in_proj(p), "should return an nn.MultiheadAttention")
    rejects(
        check,
        lambda p: nn.MultiheadAttention(p.d_model, 1, batch_first=True),
        "num_heads=1",
    )


def test_load_into_torch_names_untransposed_in_proj():
    def wrong(p):
        m = TB.to_torch_mha(p)
        with torch.no_grad():
            m.in_proj_weight.copy_(torch.from_numpy(np.concatenate([p.W_q, p.W_k, p.W_v], axis=0)))
        return m

    rejects(
        checks.check_load_into_torch, wrong, "in_proj_weight needs our W_q, W_k, W_v transposed"
    )


def test_load_into_torch_training_mode_with_dropout():
    def training(p):
        m = nn.MultiheadAttention(
            p.d_model,
            p.n_heads,
            bias=p.has_bias,
            dropout=0.1,
            batch_first=True,
            dtype=torch.float64,
        )
        m.load_state_dict(TB.to_torch_mha(p).state_dict())
        return m  # left in training mode

    rejects(checks.check_load_into_torch, training, "eval mode")


def test_load_into_torch_accepts_float32(capsys):
    checks.check_load_into_torch(lambda p: TB.to_torch_mha(p, torch.float32))
    assert capsys.readouterr().out.startswith("✓")
