"""Induction heads (notebook 11): the copying task, and the scores that find the circuit.

Having seen ``... A B ... A``, an induction circuit predicts ``B``: a head in layer 0 writes
"my previous token was A" into each position; a head in layer 1, at the second ``A``, matches
its query against those keys, attends to the ``B`` that followed the first ``A``, and copies
it. The scores here measure each half on a model's attention weights, with the value a head
that spreads its weight evenly would get, as notebook 04 does.
"""

import numpy as np

from .tasks import IGNORE
from .tiny import cross_entropy


def repeated_segment_task(n_seqs: int, seq_len: int, vocab_size: int, segment: int, rng):
    """Random tokens in which a segment of ``segment`` tokens appears twice, at a place and a
    gap drawn for each sequence. Returns ids (n_seqs, seq_len); targets, the next token
    (-1 at the last place); and ``repeated``, True where the next token continues the second
    copy, the places only a model that copies from context can get right."""
    if not 2 <= segment <= seq_len // 2:
        raise ValueError(f"segment must be in 2..seq_len // 2 = {seq_len // 2}, got {segment}")
    ids = rng.integers(0, vocab_size, (n_seqs, seq_len))
    repeated = np.zeros((n_seqs, seq_len), dtype=bool)
    for row in range(n_seqs):
        first = rng.integers(0, seq_len - 2 * segment + 1)  # where the segment starts
        second = rng.integers(first + segment, seq_len - segment + 1)  # where it starts again
        ids[row, second : second + segment] = ids[row, first : first + segment]
        repeated[row, second : second + segment - 1] = True
    targets = np.full_like(ids, IGNORE)
    targets[:, :-1] = ids[:, 1:]
    return ids, targets, repeated


def previous_occurrence(ids: np.ndarray) -> np.ndarray:
    """For each place i, the last place j < i holding the same token, or -1: (batch, n)."""
    found = np.full(ids.shape, -1)
    for row, seq in enumerate(ids):
        last = {}  # token -> the last place it was seen
        for i, token in enumerate(seq):
            found[row, i] = last.get(token, -1)
            last[token] = i
    return found


def prefix_matching_score(pattern: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Per head, the mean attention weight a query gives to the token after the previous
    occurrence of its own token, over the queries whose token occurred before.
    pattern: (batch, heads, n, n) attention weights; ids: (batch, n). Returns (heads,)."""
    found = previous_occurrence(ids)  # (batch, n): where each token last appeared, or -1
    rows, queries = np.nonzero(found >= 0)
    after = found[rows, queries] + 1  # the token after that earlier occurrence
    return pattern[rows, :, queries, after].mean(axis=0)


def uniform_prefix_matching(ids: np.ndarray) -> float:
    """The prefix-matching score of a causal head that spreads its weight evenly: the query at
    i gives 1 / (i + 1) to each key, so to the one the score looks at."""
    _, queries = np.nonzero(previous_occurrence(ids) >= 0)
    return float(np.mean(1.0 / (queries + 1)))


def uniform_previous_token(n: int) -> float:
    """The previous-token score (``lib.heads.offset_score(w, -1)``) of an even causal head
    over queries 1..n-1."""
    return float(np.mean(1.0 / (np.arange(1, n) + 1)))


def copying_score(model, layer: int, head: int) -> float:
    """The fraction of tokens whose own logit is the largest when a head attends to them alone:
    each token's embedding through the head's values and output (its OV circuit) and the
    readout, with nothing else in the stream. A head that copies scores near 1; chance is
    1 / vocab."""
    p, d_k = model.params, model.layer(layer).d_k
    cols = slice(head * d_k, (head + 1) * d_k)  # the head's d_k columns of W_v, rows of W_o
    ov = p[f"W_v{layer}"][:, cols] @ p[f"W_o{layer}"][cols]  # (d, d)
    logits = p["tok_emb"][: model.vocab_size] @ ov @ p["W_out"]  # (vocab, vocab)
    return float(np.mean(logits.argmax(axis=1) == np.arange(model.vocab_size)))


def ablation_losses(model, ids, targets, repeated) -> np.ndarray:
    """The mean loss on the repeated places with each head alone switched off by the head
    mask (notebook 06): (n_layers, n_heads)."""
    losses = np.zeros((model.n_layers, model.n_heads))
    on_repeated = np.where(repeated, targets, IGNORE)  # only the repeated places are scored
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            head_mask = np.ones((model.n_layers, model.n_heads))
            head_mask[layer, head] = 0.0
            logits, _ = model.forward(ids, head_mask)
            losses[layer, head] = cross_entropy(logits, on_repeated)[0]
    return losses


def predict_from_pattern(ids: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """For every query, the token at the key it gives the most weight: ids (batch, n), one
    head's pattern (batch, n, n) -> (batch, n)."""
    keys = pattern.argmax(axis=-1)  # (batch, n)
    return np.take_along_axis(ids, keys, axis=-1)
