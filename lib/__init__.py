"""Helpers for the course "Multi-head attention, built from scratch in Python".

- ``lib.lists``: attention on plain Python lists (notebook 01).
- ``lib.attention``: NumPy softmax, masks, scaled dot-product and multi-head attention
  (notebooks 02 and 03).
- ``lib.heads``: entropy, offset scores and similarity of heads (notebook 04).
- ``lib.plots``: heatmaps of heads, entropy bars, similarity matrices (notebook 04).
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
    "padding_mask",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "valid_head_counts",
]
