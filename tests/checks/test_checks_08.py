"""The notebook 08 checks (NumPy -> PyTorch) accept the reference answers, report stubs and
name realistic mistakes."""

import numpy as np
import pytest
import torch
from helpers import rejects, stub, unrefused
from test_check_mutants import from_torch as from_torch_answer  # with switches for mistakes
from test_checks_robustness import to_torch_mask, torch_attention

from lib import attention as A
from lib import checks
from lib import torch_bridge as TB
from lib.checks.nb08_pytorch import attention_cases, mask_cases, torch_layers

FROM_TORCH = unrefused(TB.from_torch_mha)  # lib's answer to exercise 2, which its check refuses


@pytest.mark.parametrize(
    "check, reference",
    [
        (checks.check_torch_mask, to_torch_mask),
        (checks.check_from_torch, FROM_TORCH),
        (checks.check_torch_attention, torch_attention),
    ],
)
def test_reference_passes_and_stub_is_reported(check, reference, capsys):
    check(reference)
    assert capsys.readouterr().out.startswith("✓")
    rejects(check, stub, "not implemented yet")


def test_the_checks_inputs_are_what_they_claim():
    """Exercise 1 gets shared and per-head masks on three shapes; exercise 2 layers with and
    without (non-zero) biases; exercise 3 masks that leave some queries with no key, with
    and without biases. The checks do not touch the caller's torch random state."""
    shapes = [(m.shape, h) for m, h in mask_cases()]
    assert len({s for s, _ in shapes}) == 3
    assert {m.shape[1] for m, _ in mask_cases()} == {1, 2}
    state = torch.random.get_rng_state()
    layers = torch_layers()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert {m.in_proj_bias is None for m in layers} == {True, False}
    assert all(m.in_proj_bias.abs().min() > 0 for m in layers if m.in_proj_bias is not None)
    assert len({(m.embed_dim, m.num_heads) for m in layers}) == 2
    cases = attention_cases()
    assert {p.has_bias for p, *_ in cases} == {True, False}
    for _params, x_q, x_kv, mask in cases:
        assert mask.shape == (len(x_q), 1, x_q.shape[1], x_kv.shape[1])
        assert (~mask.any(axis=-1)).any()  # some query has nothing to attend to
        assert mask.all(axis=-1).any()  # and some query sees every key
    assert len({(p.d_model, p.n_heads) for p, *_ in cases}) >= 2


# --------------------------------------------------------------------------- exercise 1


def mask_answer(invert=True, head_major=False, first_head=False, transpose=False, repeat=True):
    def convert(mask, n_heads):
        b, _, n_q, n_k = mask.shape
        src = mask[:, :1] if first_head else mask
        full = np.broadcast_to(src, (b, n_heads, n_q, n_k))
        full = ~full if invert else full
        if transpose:
            full = full.swapaxes(-1, -2)
        if not repeat:
            return torch.from_numpy(np.ascontiguousarray(full[:, 0]))
        if head_major:
            full = full.transpose(1, 0, 2, 3)
        return torch.from_numpy(np.ascontiguousarray(full).reshape(b * n_heads, *full.shape[2:]))

    return convert


def test_torch_mask_mistakes():
    check = checks.check_torch_mask
    rejects(check, mask_answer(invert=False), "True means 'may NOT attend'")
    rejects(check, mask_answer(head_major=True), "ordered head by head", "sequence 0 first")
    rejects(check, mask_answer(first_head=True), "the first head's mask")
    rejects(check, mask_answer(transpose=True), "transposed")
    rejects(check, mask_answer(repeat=False), "per sequence *and head*")
    rejects(check, lambda m, h: to_torch_mask(m, h).numpy(), "torch.Tensor", "ndarray")
    rejects(
        check,
        lambda m, h: torch.zeros(to_torch_mask(m, h).shape, dtype=torch.float64).masked_fill(
            to_torch_mask(m, h), -torch.inf
        ),
        "additive float mask",
        "torch.bool",
    )
    rejects(check, lambda m, h: to_torch_mask(m, h).double(), "torch.bool", "added")
    rejects(
        check,
        lambda m, h: torch.from_numpy(~np.broadcast_to(m, (m.shape[0], h, *m.shape[2:])).copy()),
        "three axes",
    )
    rejects(check, lambda m, h: to_torch_mask(m, h).tril(), "wrong entries")


def test_torch_mask_transposed_square_masks_are_named():
    """On the square (causal) case, a transposed answer has the right shape: the values
    name the mistake."""

    def transposed_when_square(mask, n_heads):
        right = to_torch_mask(mask, n_heads)
        return right.transpose(-1, -2) if mask.shape[2] == mask.shape[3] else right

    rejects(checks.check_torch_mask, transposed_when_square, "transposed: row i must be query i")


# --------------------------------------------------------------------------- exercise 2


def test_from_torch_mistakes():
    check = checks.check_from_torch
    rejects(check, from_torch_answer(transpose=False), "transpose each block")
    rejects(check, from_torch_answer(order=(1, 0, 2)), "blocks are in the wrong order")
    rejects(check, from_torch_answer(reshape=True), "reshaping does not transpose")
    rejects(check, from_torch_answer(w_o_t=False), "W_o is out_proj.weight transposed")
    rejects(check, from_torch_answer(biases=False), "copy them into b_q, b_k, b_v and b_o")

    def bias_order(m):
        right = FROM_TORCH(m)
        if not right.has_bias:
            return right
        return A.MHAParams(
            right.W_q, right.W_k, right.W_v, right.W_o, right.n_heads,
            right.b_k, right.b_q, right.b_v, right.b_o,
        )  # fmt: skip

    rejects(check, bias_order, "biases are in the wrong order")

    def zero_biases(m):
        right = FROM_TORCH(m)
        z = np.zeros(m.embed_dim)
        return A.MHAParams(right.W_q, right.W_k, right.W_v, right.W_o, right.n_heads, z, z, z, z)

    rejects(check, zero_biases, "b_q, b_k, b_v have wrong values")

    def with_n_heads(n):
        def read(m):
            r = FROM_TORCH(m)
            return A.MHAParams(r.W_q, r.W_k, r.W_v, r.W_o, n(m), r.b_q, r.b_k, r.b_v, r.b_o)

        return read

    rejects(check, with_n_heads(lambda m: m.head_dim), "the size of one head", "num_heads=2")
    rejects(check, with_n_heads(lambda m: 1), "n_heads=1; the layer has num_heads=2")

    def not_detached(m):
        d = m.embed_dim
        w = m.in_proj_weight
        return A.MHAParams(w[:d].T, w[d : 2 * d].T, w[2 * d :].T, m.out_proj.weight.T, m.num_heads)

    rejects(check, not_detached, "raised RuntimeError", "detach()")
    rejects(check, lambda m: tuple(FROM_TORCH(m).__dict__.values()), "not a tuple")
    rejects(check, lambda m: FROM_TORCH(m).W_q, "return an A.MHAParams")


# --------------------------------------------------------------------------- exercise 3


def attention_answer(
    invert=True, fix=True, zero_weights=True, reset_output=True, output=None, head_major=False
):
    def run(module, x_q, x_kv, mask):
        b, _, n_q, n_k = mask.shape
        h = module.num_heads
        empty = ~mask.any(axis=-1, keepdims=True)
        full = np.broadcast_to(mask | empty if fix else mask, (b, h, n_q, n_k))
        full = ~full if invert else full
        full = full.transpose(1, 0, 2, 3) if head_major else full
        blocked = torch.from_numpy(np.ascontiguousarray(full).reshape(b * h, n_q, n_k))
        tq, tkv = torch.from_numpy(x_q), torch.from_numpy(x_kv)
        with torch.no_grad():
            out, w = module(tq, tkv, tkv, attn_mask=blocked, average_attn_weights=False)
        out, w = out.numpy(), w.numpy()
        if zero_weights:
            w = np.where(empty, 0.0, w)
        if reset_output:
            b_o = module.out_proj.bias
            fill = 0.0 if b_o is None or output == 0 else b_o.detach().numpy()
            out = np.where(empty[:, 0], fill, out)
        return out, w

    return run


def test_torch_attention_mistakes():
    check = checks.check_torch_attention
    rejects(
        check,
        attention_answer(fix=False, zero_weights=False, reset_output=False),
        "NaN for the queries with nothing",
    )
    rejects(check, attention_answer(invert=False), "NaN for queries that may attend", "exercise 1")
    rejects(check, attention_answer(zero_weights=False), "must get weights 0", "yours sum to 1")
    rejects(check, attention_answer(reset_output=False), "must be what lib gives")
    rejects(check, attention_answer(output=0), "is b_o, not 0")
    rejects(check, attention_answer(head_major=True), "the mask reached the wrong heads")
    rejects(
        check,
        lambda m, q, kv, mask: (
            torch_attention(m, q, kv, mask)[0],
            torch_attention(m, q, kv, mask)[1].mean(1),
        ),
        "average_attn_weights=False",
    )
    rejects(check, lambda *a: torch_attention(*a)[::-1], "in the order (output, weights)")
    rejects(check, lambda *a: torch_attention(*a)[0], "return a pair (output, weights)")
    rejects(
        check,
        lambda m, q, kv, mask: (
            torch_attention(m, q, kv, mask)[0] + 0.1,
            torch_attention(m, q, kv, mask)[1],
        ),
        "differ from lib's",
    )


def test_torch_attention_accepts_tensors(capsys):
    def as_tensors(*args):
        out, w = torch_attention(*args)
        return torch.from_numpy(out), torch.from_numpy(w)

    checks.check_torch_attention(as_tensors)
    assert capsys.readouterr().out.startswith("✓")


def test_from_torch_refuses_lib_s_answer():
    """lib's TB.from_torch_mha is exercise 2's answer, in use since section 2: calling it is
    refused while the answer runs, and it works again afterwards."""
    with pytest.raises(checks.CheckFailed) as info:
        checks.check_from_torch(lambda module: TB.from_torch_mha(module))
    assert str(info.value) == (
        "from_torch: this exercise asks you to write it yourself, not to call TB.from_torch_mha."
    )
    assert TB.from_torch_mha(torch_layers()[0]).n_heads == torch_layers()[0].num_heads


def test_torch_attention_refuses_lib_s_answer():
    """lib's multi_head_attention on the module's weights gives the answer without running the
    module, which is what the exercise is about: refused while the answer runs."""

    def without_torch(module, x_q, x_kv, mask):
        return A.multi_head_attention(x_q, x_kv, TB.from_torch_mha(module), mask)

    with pytest.raises(checks.CheckFailed) as info:
        checks.check_torch_attention(without_torch)
    assert str(info.value) == (
        "torch_attention: this exercise asks you to write it yourself, not to call "
        "A.multi_head_attention."
    )
