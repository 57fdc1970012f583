"""The toy example that runs through notebooks 01-03: every number drawn from
``random.Random(seed)`` in a fixed order. Notebook 01 builds it by hand on Python lists and
checks it equals :func:`make_toy_model`; later notebooks import it.
"""

import math
import random
from dataclasses import dataclass

import numpy as np

from . import _validate as valid
from . import lists as L
from .attention import MHAParams

VOCAB = ["<bos>", "the", "cat", "sat", "on", "mat"]
SENTENCE = ["<bos>", "the", "cat", "sat", "on", "the", "mat"]
D_MODEL = 8
N_HEADS = 2
MAX_LEN = 8
SEED = 0


@dataclass
class ToyModel:
    """Embeddings and attention weights, all as lists of lists (row-vector convention)."""

    token_emb: L.Matrix  # (vocab, d_model)
    pos_emb: L.Matrix  # (max_len, d_model)
    W_q: L.Matrix  # (d_model, d_model); head h owns columns h*d_k:(h+1)*d_k
    W_k: L.Matrix
    W_v: L.Matrix
    W_o: L.Matrix  # (d_model, d_model)
    n_heads: int = N_HEADS

    def params(self, dtype=np.float64) -> MHAParams:
        """The same weights as NumPy arrays, for lib.attention."""
        weights = [np.array(W, dtype) for W in (self.W_q, self.W_k, self.W_v, self.W_o)]
        return MHAParams(*weights, n_heads=self.n_heads)


def make_toy_model(seed: int = SEED) -> ToyModel:
    """Draw, in this order: token embeddings, position embeddings, W_q, W_k, W_v, W_o.
    Embeddings are N(0, 1); weights N(0, 1/d_model), which keeps x @ W at unit scale."""
    rng = random.Random(seed)
    token_emb = L.random_matrix(len(VOCAB), D_MODEL, rng)
    pos_emb = L.random_matrix(MAX_LEN, D_MODEL, rng)
    w_scale = 1.0 / math.sqrt(D_MODEL)
    weights = [L.random_matrix(D_MODEL, D_MODEL, rng, scale=w_scale) for _ in range(4)]
    return ToyModel(token_emb, pos_emb, *weights)  # W_q, W_k, W_v, W_o


def head_weights(model: ToyModel, h: int) -> tuple[L.Matrix, L.Matrix, L.Matrix]:
    """Head h's own query, key and value projections, each (d_model, d_k). The model keeps
    its heads' side by side in W_q, W_k and W_v: head h's are columns h*d_k:(h+1)*d_k."""
    if valid.integer(h, "h", low=0) >= model.n_heads:
        raise ValueError(f"the toy model has heads 0 to {model.n_heads - 1}, not {h!r}")
    return tuple(L.split_columns(W, model.n_heads)[h] for W in (model.W_q, model.W_k, model.W_v))


def embed(model: ToyModel, sentence: list[str] = SENTENCE) -> L.Matrix:
    """X[i] = token embedding of word i + position embedding of position i: (n, d_model)."""
    unknown = [w for w in sentence if w not in VOCAB]
    if unknown:
        raise ValueError(f"words not in the toy vocabulary {VOCAB}: {unknown}")
    if len(sentence) > len(model.pos_emb):
        raise ValueError(f"sentence of {len(sentence)} tokens is longer than MAX_LEN={MAX_LEN}")
    tokens = [model.token_emb[VOCAB.index(w)] for w in sentence]
    return L.add(tokens, model.pos_emb[: len(sentence)])
