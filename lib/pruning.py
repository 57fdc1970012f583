"""Head importance and pruning for the tiny model (notebook 06). A head mask multiplies each
head's output (:mod:`lib.backprop`); a 0 removes that head."""

from dataclasses import dataclass

import numpy as np

from . import _validate as valid
from .tiny import TinyModel, accuracy


def _mask_or_ones(model: TinyModel, head_mask) -> np.ndarray:
    mask = np.ones(model.n_heads) if head_mask is None else np.asarray(head_mask, dtype=float)
    if mask.shape != (model.n_heads,):
        raise ValueError(
            f"head_mask must have shape (heads,) = ({model.n_heads},), got {mask.shape}"
        )
    return mask


def ablation_drops(model: TinyModel, ids, targets, head_mask=None) -> np.ndarray:
    """Accuracy lost when each head alone is switched off, (heads,): positive = the head
    helped; 0 for a head already off."""
    base_mask = _mask_or_ones(model, head_mask)
    base = accuracy(model, ids, targets, base_mask)
    drops = np.zeros(model.n_heads)
    for h in np.flatnonzero(base_mask):  # the heads still on
        mask = base_mask.copy()
        mask[h] = 0.0
        drops[h] = base - accuracy(model, ids, targets, mask)
    return drops


def gradient_importance(model: TinyModel, ids, targets, head_mask=None) -> np.ndarray:
    """Mean over sequences of |dL/d mask_h|, (heads,) (Michel, Levy & Neubig, 2019): how the
    loss changes, to first order, when the mask moves. The mask gets one row per sequence,
    so that the absolute value is taken per sequence: opposite pulls do not cancel."""
    base_mask = _mask_or_ones(model, head_mask)
    ids = np.asarray(ids)
    per_sequence = np.tile(base_mask, (ids.shape[0], 1))  # (batch, heads)
    _, grads = model.loss_and_grads(ids, targets, per_sequence)
    # the loss is the batch's mean: times the batch size, the mean per-sequence gradient
    return np.abs(grads["head_mask"]).mean(axis=0) * ids.shape[0]


@dataclass
class PruningStep:
    removed: int | None  # head switched off at this step (None: the starting point)
    head_mask: np.ndarray  # (heads,) after this step
    accuracy: float  # on the selection data


def prune_iteratively(
    model: TinyModel,
    select_data: tuple[np.ndarray, np.ndarray],
    score: str = "ablation",
    max_drop: float = 0.01,
) -> list[PruningStep]:
    """Switch heads off one at a time, least important first by ``score``, re-scoring after
    each, until the next step would lose more than ``max_drop`` accuracy on ``select_data`` (so
    report the result on other data) or one head is left. The unpruned model is step 0."""
    scores = {"ablation": ablation_drops, "gradient": gradient_importance}
    valid.one_of(score, "score", tuple(scores))
    if not 0 <= max_drop < 1:
        raise ValueError(f"max_drop must be in [0, 1), got {max_drop}")
    mask = np.ones(model.n_heads)
    start = accuracy(model, *select_data, mask)
    steps = [PruningStep(None, mask, start)]
    while mask.sum() > 1:
        importance = scores[score](model, *select_data, mask)
        alive = np.flatnonzero(mask)
        weakest = int(alive[np.argmin(importance[alive])])
        mask = mask.copy()  # each step keeps its own
        mask[weakest] = 0.0
        acc = accuracy(model, *select_data, mask)
        if start - acc > max_drop:
            break
        steps.append(PruningStep(weakest, mask, acc))
    return steps


def ranks(values) -> np.ndarray:
    """Ranks 1..n (1 = smallest); tied values share the mean of their ranks."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 1:
        raise ValueError(f"ranks expects a 1-D array, got shape {values.shape}")
    if np.isnan(values).any():  # np.unique would give all NaNs one shared, largest rank
        where = np.flatnonzero(np.isnan(values)).tolist()
        raise ValueError(f"ranks of NaN are undefined, got NaN at index {where} of {values}")
    _, group, counts = np.unique(values, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # the rank of each distinct value's last copy
    return (last - (counts - 1) / 2)[group]


def spearman(a, b) -> float:
    """Spearman rank correlation: the Pearson correlation of the two rank vectors."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(
            f"spearman needs two 1-D arrays of the same length >= 2, got {a.shape} and {b.shape}"
        )
    ra, rb = ranks(a) - (len(a) + 1) / 2, ranks(b) - (len(b) + 1) / 2
    denom = np.sqrt((ra**2).sum() * (rb**2).sum())
    if denom == 0:
        raise ValueError("spearman is undefined when one of the inputs is constant")
    return float((ra * rb).sum() / denom)
