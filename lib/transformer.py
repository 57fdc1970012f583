"""An attention-only transformer in NumPy, forward and backward by hand (notebooks 09 and 11).

Token embeddings start a residual stream; each layer of causal multi-head attention adds its
output to it; a linear readout turns the last stream into logits::

    x = tok_emb[ids]                      # (batch, n, d)
    x = x + MHA_l(x)   for each layer l   # (batch, n, d): the residual stream
    logits = x @ W_out (+ b_out)          # (batch, n, vocab)

No MLP, no LayerNorm: whatever moves information between positions is a head. It has no
position embeddings: notebook 09 puts a BOS token in front, to show that two layers find
order; notebook 11 trains it, with RoPE, to copy and takes its heads apart. The parameters
are a plain dict of arrays (``W_q0`` is layer 0's W_q), so that ``lib.tiny.Adam`` walks over
them by name.
"""

import math
from dataclasses import dataclass

import numpy as np

from . import _validate as valid
from .attention import MHAParams, causal_mask, glorot
from .backprop import MHACache, mha_backward, mha_forward, weight_gradient
from .positions import RoPE
from .tiny import cross_entropy

LAYER = ("W_q", "W_k", "W_v", "W_o")  # one layer's matrices, named W_q0, W_k0, ... by layer
BIASES = ("b_q", "b_k", "b_v", "b_o")  # and its biases, when the model has them


@dataclass
class Run:
    """What one forward pass leaves for the backward pass and for taking the model apart."""

    ids: np.ndarray  # (batch, n') the tokens the layers saw, BOS included when there is one
    streams: list[np.ndarray]  # the residual stream before each layer and after the last
    layers: list[MHACache]  # per layer: its attention weights, heads' outputs, ...

    @property
    def patterns(self) -> list[np.ndarray]:
        """Each layer's attention weights, (batch, heads, n', n')."""
        return [cache.weights for cache in self.layers]


@dataclass
class Transformer:
    params: dict[str, np.ndarray]
    n_heads: int
    bos: int | None = None  # a token id put in front of every sequence, or None
    rope: RoPE | None = None  # rotary positions in every layer's queries and keys, or None

    @property
    def n_layers(self) -> int:
        return sum(name.startswith("W_q") for name in self.params)

    def layer(self, index: int) -> MHAParams:
        """Layer ``index``'s attention parameters."""
        p = self.params
        biases = [p.get(f"{name}{index}") for name in BIASES]
        return MHAParams(*(p[f"{name}{index}"] for name in LAYER), self.n_heads, *biases)

    def forward(self, ids, head_mask=None) -> tuple[np.ndarray, Run]:
        """Logits (batch, n, vocab) for token ids (batch, n), and the :class:`Run`.
        ``head_mask`` (n_layers, heads): one factor per head, 0 switches it off."""
        ids = valid.token_ids(ids, self.vocab_size, None)
        if head_mask is not None and np.shape(head_mask) != (self.n_layers, self.n_heads):
            raise ValueError(
                f"head_mask must have shape (n_layers, heads) = ({self.n_layers}, "
                f"{self.n_heads}), got {np.shape(head_mask)}"
            )
        if self.bos is not None:  # (batch, n'): BOS in front
            ids = np.concatenate([np.full((len(ids), 1), self.bos), ids], axis=1)
        p = self.params
        x = p["tok_emb"][ids]  # (batch, n', d)
        streams, layers, mask = [x], [], causal_mask(ids.shape[1])
        for index in range(self.n_layers):
            heads = None if head_mask is None else head_mask[index]
            a, _, cache = mha_forward(x, x, self.layer(index), mask, heads, rope=self.rope)
            x = x + a  # the residual connection
            streams.append(x)
            layers.append(cache)
        out = x if self.bos is None else x[:, 1:]  # (batch, n, d): no answer at BOS
        logits = out @ p["W_out"] + (p["b_out"] if "b_out" in p else 0.0)
        return logits, Run(ids, streams, layers)

    def backward(self, d_logits: np.ndarray, run: Run) -> dict[str, np.ndarray]:
        """The gradient of every parameter, given dL/dlogits (batch, n, vocab)."""
        p = self.params
        out = run.streams[-1] if self.bos is None else run.streams[-1][:, 1:]  # (batch, n, d)
        grads = {"W_out": weight_gradient(out, d_logits)}  # (d, vocab)
        if "b_out" in p:
            grads["b_out"] = d_logits.sum(axis=(0, 1))
        d_x = d_logits @ p["W_out"].T  # (batch, n, d)
        if self.bos is not None:  # BOS has no answer: no gradient enters there
            d_x = np.concatenate([np.zeros_like(d_x[:, :1]), d_x], axis=1)  # (batch, n', d)
        for index in reversed(range(self.n_layers)):
            g = mha_backward(d_x, run.layers[index])
            d_x = d_x + g.pop("x_q") + g.pop("x_kv")  # through the residual and the layer
            grads.update({f"{name}{index}": g[name] for name in LAYER + BIASES if name in g})
        # tok_emb[ids] is one_hot @ tok_emb: its gradient, one_hot^T @ d_x, sums a token's places
        one_hot = np.eye(len(p["tok_emb"]), dtype=d_x.dtype)[run.ids]  # (batch, n', vocab)
        grads["tok_emb"] = weight_gradient(one_hot, d_x)  # (vocab, d)
        return grads

    def loss_and_grads(self, ids, targets, head_mask=None):
        """Cross-entropy over the positions whose target is not -1, and its gradients."""
        logits, run = self.forward(ids, head_mask)
        loss, d_logits = cross_entropy(logits, targets)
        return loss, self.backward(d_logits, run)

    @property
    def vocab_size(self) -> int:
        """How many token ids a sequence may hold (BOS is added by the model, not given)."""
        return self.params["W_out"].shape[1]


def init_transformer(
    vocab_size: int,
    n_layers: int,
    n_heads: int,
    rng: np.random.Generator,
    d_model: int = 32,
    bos: bool = False,
    biases: bool = False,
    rope: bool = False,
) -> Transformer:
    """A freshly initialised :class:`Transformer`: embeddings N(0, 1), attention matrices
    Glorot-uniform, readout N(0, 1/d_model); biases 0. ``bos``: one more token id,
    ``vocab_size``, put in front of every sequence. ``rope``: rotary positions (notebook 09) in
    every layer."""
    valid.heads(d_model, n_heads)
    for name, value in dict(vocab_size=vocab_size, n_layers=n_layers).items():
        valid.integer(value, name, low=1)
    p = {"tok_emb": rng.normal(0.0, 1.0, (vocab_size + bos, d_model))}
    for index in range(n_layers):
        for name in LAYER:
            p[f"{name}{index}"] = glorot(rng, d_model, d_model)
        for name in BIASES if biases else ():
            p[f"{name}{index}"] = np.zeros(d_model)
    p["W_out"] = rng.normal(0.0, 1.0 / math.sqrt(d_model), (d_model, vocab_size))
    if biases:
        p["b_out"] = np.zeros(vocab_size)
    return Transformer(p, n_heads, vocab_size if bos else None, RoPE() if rope else None)
