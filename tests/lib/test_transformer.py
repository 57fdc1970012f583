"""lib.transformer: the attention-only transformer of notebooks 09 and 11.

Its gradients are checked twice: against central finite differences, and against PyTorch's
autograd on the same model written here in torch (float64 both). Error model: a central
difference with step eps has truncation error ~eps**2 * |f'''| and rounding error
~u * |f| / eps (u = 2**-53), so with eps = 1e-6 and O(1) losses both are far below 1e-6 of
the gradient's size; autograd and the hand-written backward differ only in summation order,
a few u times the depth (layers x products), far below 1e-9. Gradients that are exactly 0
(a key bias shifts every score of a query alike) are compared with an absolute tolerance.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lib import attention as A
from lib import backprop as BP
from lib import transformer as TR

VOCAB = 7


def small_model(seed=0, **options):
    defaults = dict(d_model=8)
    return TR.init_transformer(VOCAB, 2, 2, np.random.default_rng(seed), **(defaults | options))


def batch(seed=1, n=6, size=3):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (size, n))
    targets = rng.integers(0, VOCAB, (size, n))
    targets[:, 0] = -1  # a position without a target
    return ids, targets


MODELS = {
    "plain": dict(),
    "BOS and biases": dict(bos=True, biases=True),
}


@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS.keys())
def test_gradients_match_finite_differences(options):
    model = small_model(**options)
    ids, targets = batch()
    _, grads = model.loss_and_grads(ids, targets)
    assert grads.keys() == model.params.keys()
    for name, value in model.params.items():
        numeric = BP.numeric_gradient(value, lambda: model.loss_and_grads(ids, targets)[0])
        # atol: the differences' rounding, u |loss| / eps ~ 1e-10, for gradients that are 0
        # (b_k shifts every score of a query alike, which softmax ignores)
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-6, atol=1e-8, err_msg=name)


def torch_loss(params: dict, ids, targets, n_heads: int, bos) -> torch.Tensor:
    """The same model, written directly in torch (x @ W convention, as lib)."""
    if bos is not None:
        ids = np.concatenate([np.full((len(ids), 1), bos), ids], axis=1)
    ids = torch.from_numpy(ids)
    x = params["tok_emb"][ids]
    n, d = ids.shape[1], x.shape[-1]
    d_k = d // n_heads
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in range(sum(name.startswith("W_q") for name in params)):

        def proj(name, x=x, layer=layer):
            y = x @ params[f"W_{name}{layer}"]
            return y + params[f"b_{name}{layer}"] if f"b_{name}{layer}" in params else y

        def split(y):  # (batch, n, d) -> (batch, heads, n, d_k)
            return y.reshape(len(y), n, n_heads, d_k).transpose(1, 2)

        q, k, v = split(proj("q")), split(proj("k")), split(proj("v"))
        scores = (q @ k.transpose(-1, -2)) / d_k**0.5
        weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        concat = (weights @ v).transpose(1, 2).reshape(len(x), n, d)
        x = x + proj("o", concat)
    if bos is not None:
        x = x[:, 1:]
    logits = x @ params["W_out"] + (params["b_out"] if "b_out" in params else 0)
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.from_numpy(targets).reshape(-1), ignore_index=-1
    )


@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS.keys())
def test_loss_and_gradients_match_torch_autograd(options):
    model = small_model(seed=4, **options)
    ids, targets = batch(seed=5, n=8, size=4)
    loss, grads = model.loss_and_grads(ids, targets)
    params = {k: torch.tensor(v, requires_grad=True) for k, v in model.params.items()}
    reference = torch_loss(params, ids, targets, model.n_heads, model.bos)
    reference.backward()
    assert loss == pytest.approx(reference.item(), rel=1e-12)
    for name, tensor in params.items():
        np.testing.assert_allclose(grads[name], tensor.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_one_layer_is_multi_head_attention_on_the_embeddings_plus_a_residual():
    model = TR.init_transformer(VOCAB, 1, 2, np.random.default_rng(2), d_model=8)
    ids, _ = batch(n=6)
    logits, run = model.forward(ids)
    p = model.params
    x = p["tok_emb"][ids]
    expected = (x + A.multi_head_attention(x, x, model.layer(0), causal=True)[0]) @ p["W_out"]
    np.testing.assert_allclose(logits, expected, rtol=1e-12, atol=1e-12)
    assert len(run.streams) == 2 and run.patterns[0].shape == (3, 2, 6, 6)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 5))
def test_no_position_sees_a_later_token(seed, where):
    model = small_model(seed)
    ids, _ = batch(seed, n=6)
    changed = ids.copy()
    changed[:, where] = (changed[:, where] + 1) % VOCAB
    before, after = model.forward(ids)[0], model.forward(changed)[0]
    np.testing.assert_array_equal(before[:, :where], after[:, :where])
    assert not np.allclose(before[:, where:], after[:, where:])


def test_switching_every_head_off_leaves_the_embeddings_alone():
    model = small_model()
    ids, _ = batch()
    logits, _ = model.forward(ids, head_mask=np.zeros((2, 2)))
    p = model.params
    np.testing.assert_allclose(logits, p["tok_emb"][ids] @ p["W_out"])


def test_a_head_switched_off_adds_nothing_to_the_stream():
    model = small_model()
    ids, _ = batch()
    mask = np.ones((2, 2))
    mask[0, 1] = 0.0
    _, run = model.forward(ids, head_mask=mask)
    d_k = 4
    heads = run.layers[0].heads  # (batch, heads, n, d_k), before the mask
    W_o = model.params["W_o0"]
    only_head_0 = heads[:, 0] @ W_o[:d_k]  # head 0's share of layer 0's output
    np.testing.assert_allclose(run.streams[1] - run.streams[0], only_head_0, atol=1e-12)


@pytest.mark.parametrize(
    "ids, head_mask, message",
    [
        (np.array([[0, 7]]), None, r"token ids must be in 0..6, got values from 0 to 7"),
        (np.array([[0.0, 1.0]]), None, r"ids must be integers of shape \(batch, n\), got float64"),
        (
            np.zeros((1, 3), int),
            np.ones(2),
            r"head_mask must have shape \(n_layers, heads\) = \(2, 2\)",
        ),
    ],
)
def test_bad_inputs_are_named(ids, head_mask, message):
    with pytest.raises(ValueError, match=message):
        small_model().forward(ids, head_mask)


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=4"):
        TR.init_transformer(VOCAB, 2, 4, np.random.default_rng(0), d_model=10)
    with pytest.raises(ValueError, match="n_layers must be an integer >= 1, got 0"):
        TR.init_transformer(VOCAB, 0, 2, np.random.default_rng(0))


def test_bos_is_put_in_front_and_has_no_answer():
    model = small_model(bos=True)
    ids, _ = batch(n=6)
    logits, run = model.forward(ids)
    assert logits.shape == (3, 6, VOCAB) and run.ids.shape == (3, 7)
    assert (run.ids[:, 0] == VOCAB).all()
