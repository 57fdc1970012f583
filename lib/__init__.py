"""Helpers for the course "Multi-head attention, built from scratch in Python".

- ``lib.lists``: attention on plain Python lists (notebook 01).
- ``lib.attention``: NumPy softmax, masks, scaled dot-product and multi-head attention
  (notebooks 02 and 03).
- ``lib.heads``: entropy, offset scores and similarity of heads (notebook 04).
- ``lib.plots``: heatmaps of heads, entropy bars, similarity matrices (notebook 04).
- ``lib.backprop``: forward with a cache, backward by hand, softmax backward, head mask
  (notebook 05).
- ``lib.tiny``: the tiny trainable model, its tasks, cross-entropy, Adam, training loop
  (notebooks 05 and 06).
- ``lib.pruning``: ablation and gradient head importance, iterative pruning, Spearman
  (notebook 06).
- ``lib.torch_bridge``: our weights and masks to and from ``torch.nn.MultiheadAttention``
  (notebook 08; imports torch when first used, and is not imported by ``import lib``).
- ``lib.bert``: a pretrained BERT (all-MiniLM-L6-v2) run with lib's multi-head attention
  (notebook 07).
- ``lib.head_types``: head-type scores, labels and the coreference probe (notebook 07).
- ``lib.checks``: the checks that follow each exercise.

The most used names are re-exported here, so ``from lib import multi_head_attention`` works.
"""

from .attention import (
    MHAParams,
    causal_mask,
    count_params,
    init_mha_params,
    merge_heads,
    multi_head_attention,
    multi_head_attention_per_head,
    multi_head_attention_reshape,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    split_heads,
    valid_head_counts,
)

__all__ = [
    "MHAParams",
    "causal_mask",
    "count_params",
    "init_mha_params",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_per_head",
    "multi_head_attention_reshape",
    "padding_mask",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "valid_head_counts",
]
