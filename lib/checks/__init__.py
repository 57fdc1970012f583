"""Checks for the exercises in the notebooks (``from lib import checks``).

Each ``check_*`` function calls a student's implementation on fixed inputs (at least two
shapes, and inputs where numerical instability shows when stability is the point) and
compares the result with lib's reference. On success it prints one line starting with "✓".
On failure it raises :class:`CheckFailed` with one sentence the student can act on: where
the answer matches a known mistake (a missing 1/sqrt(d_k), softmax over the wrong axis, a
mask the wrong way round, ...) the sentence names that mistake; otherwise it says which
property is broken (shape, rows not summing to 1, ...). Messages never contain the
solution's code. In Jupyter a failed check shows as that one line, not a traceback.

One module per notebook (``nb01_lists`` ... ``nb10_scale``), all built on ``_core``:
``CheckFailed``, the call wrapper ``call`` and the mistake table ``diagnose``.

``show_solution("name")`` prints an exercise's reference answer, after a warning, for
self-learners who tried (``_solutions``).
"""

from ._core import CheckFailed
from ._solutions import UnknownExercise, show_solution
from .nb01_lists import check_attention_list, check_log_softmax_list, check_sliding_window_mask_list
from .nb02_numpy import check_causal_mask, check_padding_mask, check_softmax
from .nb03_multi_head import check_merge_heads, check_param_count, check_split_heads
from .nb04_heads import check_entropy, check_head_similarity, check_previous_token_score
from .nb05_training import (
    check_adam_step,
    check_cross_entropy_grad,
    check_head_count_sweep,
    check_smallest_sufficient_heads,
    check_softmax_backward,
)
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

__all__ = [
    "CheckFailed",
    "check_ablation_drops",
    "check_adam_step",
    "check_alibi_bias",
    "check_attention_list",
    "check_causal_mask",
    "check_coreference_accuracy",
    "check_cross_entropy_grad",
    "check_decode_step",
    "check_entropy",
    "check_find_offset_head",
    "check_from_torch",
    "check_gqa_attention",
    "check_gradient_importance",
    "check_head_count_sweep",
    "check_head_roles",
    "check_head_similarity",
    "check_log_softmax_list",
    "check_merge_heads",
    "check_online_softmax_update",
    "check_padding_mask",
    "check_param_count",
    "check_previous_token_score",
    "check_prune_heads",
    "check_rope_scores",
    "check_sinusoidal_shift",
    "check_smallest_sufficient_heads",
    "check_softmax",
    "check_softmax_backward",
    "check_spearman",
    "check_split_heads",
    "check_target_score",
    "check_sliding_window_mask_list",
    "check_torch_attention",
    "check_torch_mask",
    "show_solution",
    "UnknownExercise",
]
