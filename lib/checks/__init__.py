"""Checks for the exercises in the notebooks (``from lib import checks``).

Each ``check_*`` calls a student's function on fixed inputs (two shapes or more, and inputs
where instability shows when stability is the point) and compares it with lib's reference: it
prints one line starting with "✓", or raises :class:`CheckFailed` with one sentence the
student can act on, the mistake when it is a known one, else the property that is broken.
Messages never contain the solution's code. One module per notebook, all built on ``_core``;
``show_solution("name")`` prints an exercise's reference answer, after a warning.
"""

# ruff: noqa: F401 - the checks are imported to be re-exported (__all__ lists them)

from ._core import CheckFailed
from ._solutions import UnknownExercise, show_solution
from .nb01_lists import check_attention_list, check_log_softmax_list, check_sliding_window_mask_list
from .nb02_numpy import check_causal_mask, check_padding_mask, check_softmax
from .nb03_multi_head import check_merge_heads, check_param_count, check_split_heads
from .nb04_heads import check_entropy, check_head_similarity, check_previous_token_score
from .nb05_sweep import check_head_count_sweep, check_smallest_sufficient_heads
from .nb05_training import check_adam_step, check_cross_entropy_grad, check_softmax_backward
from .nb06_pruning import (
    check_ablation_drops,
    check_gradient_importance,
    check_head_roles,
    check_prune_heads,
    check_spearman,
)
from .nb07_pretrained import (
    check_coreference_accuracy,
    check_find_offset_head,
    check_target_score,
)
from .nb08_pytorch import check_from_torch, check_torch_attention, check_torch_mask
from .nb09_positions import check_alibi_bias, check_rope_scores, check_sinusoidal_shift
from .nb10_scale import check_decode_step, check_gqa_attention, check_online_softmax_update
from .nb11_induction import (
    check_ablation_losses,
    check_predict_from_pattern,
    check_prefix_matching_score,
)

# Every check imported above, in the notebooks' order.
__all__ = ["CheckFailed", "UnknownExercise", "show_solution"]
__all__ += [name for name in globals() if name.startswith("check_")]
