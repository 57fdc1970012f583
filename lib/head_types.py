"""What the heads of a pretrained model do, measured over padded batches (notebook 07).

The functions take attention weights (..., batch, heads, n_q, n_k), e.g. the (layers, batch,
heads, n, n) of :func:`lib.bert.bert_forward`, and the batch's ``attention_mask`` (batch, n),
True for real tokens: padded queries are left out of every average. A *head-type score*, in
[0, 1], is the mean weight a head's queries put on a set of target keys (:func:`target_masks`)."""

import json
from collections.abc import Sequence
from importlib import resources

import numpy as np

from . import _validate as valid
from . import heads as H

PROBE_SENTENCES = resources.files(__package__) / "data" / "probe_sentences.json"
PUNCTUATION = frozenset(".,;:!?")
HEAD_TYPES = ("previous", "next", "self", "[CLS]", "[SEP]", "punctuation")


def load_probe_sentences() -> dict:
    """{"sentences": [str], "coreference": [{text, pronoun, antecedent, distractor, cue}]}."""
    return json.loads(PROBE_SENTENCES.read_text(encoding="utf-8"))


def _check(weights, attention_mask) -> tuple[np.ndarray, np.ndarray]:
    weights = np.asarray(weights)
    mask = np.asarray(attention_mask, dtype=bool)
    if mask.ndim != 2:
        raise ValueError(f"attention_mask must be (batch, n), got shape {mask.shape}")
    batch, n = mask.shape
    if weights.ndim < 4 or weights.shape[-4] != batch or weights.shape[-2:] != (n, n):
        raise ValueError(
            f"weights of shape {weights.shape} do not fit attention_mask {mask.shape}: "
            f"expected (..., batch={batch}, heads, n={n}, n={n})"
        )
    return weights, mask


def target_masks(tokens: Sequence[Sequence[str]], n: int) -> dict:
    """For each head type: (targets (batch, n_q, n_k), queries (batch, n_q)), both boolean:
    whether key j is that type's target for query i of sentence b, and which real queries
    have such a key. ``tokens``: each sentence's [CLS] ... [SEP]."""
    lengths = np.array([len(t) for t in tokens])
    if len(tokens) == 0 or lengths.min() < 2 or lengths.max() > n:
        raise ValueError(f"each sentence needs 2..n={n} tokens ([CLS] ... [SEP]), got {lengths}")
    i = np.arange(n)
    real = i[None, :] < lengths[:, None]  # (batch, n)
    out = {name: offset_masks(real, o) for name, o in (("previous", -1), ("next", 1), ("self", 0))}
    punct = np.zeros((len(tokens), n), dtype=bool)
    for b, toks in enumerate(tokens):
        punct[b, : len(toks)] = [t in PUNCTUATION for t in toks]
    kinds = {"[CLS]": real & (i == 0), "[SEP]": i == lengths[:, None] - 1, "punctuation": punct}
    for name, keys in kinds.items():  # keys (batch, n_k): every real query's targets
        out[name] = (real[:, :, None] & keys[:, None, :], real & keys.any(axis=1)[:, None])
    return out


def offset_masks(attention_mask, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(targets, queries) as in :func:`target_masks` for the key ``offset`` places from each
    query, among real tokens only (nothing wraps around): -1 is "previous", +1 "next"."""
    mask = np.asarray(attention_mask)
    if mask.ndim != 2 or not (mask.dtype == bool or np.isin(mask, (0, 1)).all()):
        raise ValueError(
            f"attention_mask must be a (batch, n) array of booleans (or 0/1), got "
            f"{mask.dtype} {mask.shape}"
        )
    mask = mask.astype(bool)
    offset = valid.integer(offset, "offset")
    targets = mask[:, :, None] & mask[:, None, :] & np.eye(mask.shape[1], k=offset, dtype=bool)
    return targets, targets.any(axis=-1)


def target_score(weights, targets, queries) -> np.ndarray:
    """Mean weight on the target keys (batch, n_q, n_k) over the chosen queries (batch, n_q),
    both boolean: (..., heads) from weights (..., batch, heads, n_q, n_k)."""
    weights = np.asarray(weights)
    targets = np.asarray(targets, dtype=bool)
    queries = np.asarray(queries, dtype=bool)
    if weights.ndim < 4 or targets.shape != weights.shape[-4:-3] + weights.shape[-2:]:
        raise ValueError(
            f"targets {targets.shape} must be (batch, n_q, n_k) of weights {weights.shape}"
        )
    if queries.shape != targets.shape[:2]:
        raise ValueError(f"queries {queries.shape} must be (batch, n_q) = {targets.shape[:2]}")
    if not queries.any():
        raise ValueError("no query to average over")
    on_target = (weights * targets[:, None]).sum(axis=-1)  # (..., batch, heads, n_q)
    picked = on_target * queries[:, None, :]
    return picked.sum(axis=(-3, -1)) / queries.sum()


def head_type_scores(attentions, attention_mask, tokens) -> dict[str, np.ndarray]:
    """Every head-type score, (..., heads) each, and "entropy": the mean over real queries of
    entropy / log(sentence length). A type no query of the batch has (punctuation, say) is NaN."""
    weights, mask = _check(attentions, attention_mask)
    nan = np.full(weights.shape[:-4] + weights.shape[-3:-2], np.nan)  # (..., heads)
    scores = {}
    for name, (targets, queries) in target_masks(tokens, mask.shape[1]).items():
        scores[name] = target_score(weights, targets, queries) if queries.any() else nan.copy()
    allowed = mask[:, None, :, None] & mask[:, None, None, :]  # (batch, 1, n_q, n_k)
    flat = weights.reshape((-1,) + weights.shape[-4:])  # leading axes (e.g. layers) in one
    entropy = np.stack([H.head_entropy_normalised(w * allowed, allowed) for w in flat])
    scores["entropy"] = entropy.reshape(nan.shape)
    return scores


def classify_heads(scores: dict, threshold: float = 0.5, broad: float = 0.75) -> np.ndarray:
    """A label per head: the head type with the largest score if it is at least
    ``threshold``; else "broad" if the normalised entropy is at least ``broad``; else "mixed"."""
    stacked = np.stack([scores[name] for name in HEAD_TYPES])  # (types, ...)
    stacked = np.nan_to_num(stacked, nan=0.0)  # an undefined score never wins
    labels = np.array(HEAD_TYPES, dtype=object)[stacked.argmax(axis=0)]
    labels = np.where(stacked.max(axis=0) >= threshold, labels, "mixed")
    labels = np.where((labels == "mixed") & (scores["entropy"] >= broad), "broad", labels)
    return labels.astype(str)


def layer_diversity(attentions, attention_mask) -> np.ndarray:
    """How different a layer's heads are, 1 - mean cosine similarity of distinct heads:
    (layers, batch, heads, n, n) -> (layers,); 0: all heads look at the same keys."""
    weights, mask = _check(attentions, attention_mask)
    if weights.ndim != 5:
        raise ValueError(f"expected (layers, batch, heads, n, n), got {weights.shape}")
    h = weights.shape[-3]
    sims = [H.head_similarity(w * mask[:, None, :, None]) for w in weights]  # (heads, heads) each
    return np.array([1.0 - (s.sum() - np.trace(s)) / (h * (h - 1)) for s in sims])


def coreference_wins(attentions, pronoun, antecedent, distractor) -> np.ndarray:
    """Whether the pronoun's query weighs its antecedent strictly above the distractor:
    (..., batch, heads) from attentions (..., batch, heads, n, n) and three (batch,) positions."""
    weights = np.asarray(attentions)
    p, a, d = (np.asarray(i, dtype=int) for i in (pronoun, antecedent, distractor))
    if weights.ndim < 4 or any(i.shape != weights.shape[-4:-3] for i in (p, a, d)):
        raise ValueError(
            f"expected weights (..., batch, heads, n, n) and three (batch,) index arrays, got "
            f"{weights.shape} and {[i.shape for i in (p, a, d)]}"
        )
    b = np.arange(weights.shape[-4])
    w = np.moveaxis(weights, -3, -1)  # (..., batch, n_q, n_k, heads)
    return w[..., b, p, a, :] > w[..., b, p, d, :]  # (..., batch, heads)


def coreference_accuracy(attentions, pronoun, antecedent, distractor) -> np.ndarray:
    """:func:`coreference_wins` averaged over the sentences: (..., heads) in [0, 1]."""
    return coreference_wins(attentions, pronoun, antecedent, distractor).mean(axis=-2)
