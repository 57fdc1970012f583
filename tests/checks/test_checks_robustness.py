"""The exercise checks never crash and never give the solution away.

tests/checks/test_checks.py shows each check accepts the reference and names the classic mistakes.
This file covers what it leaves out: answers of the wrong shape or type (None, a list
instead of an array, a ragged list, a scalar), more mistakes students really make (d_k
taken from the wrong axis, (weights, output) swapped, a heads axis not moved, ...), errors
raised inside the student's code, and a scan of every message for solution code taken from
the notebooks' solution regions.
"""

import importlib
import inspect
import math
import pkgutil
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    attention_lists,
    lib_answers,
    lib_causal_mask,
    lib_padding_mask,
    rejects,
    rope_turn,
    stub,
    unrefused,
)
from test_checks_10 import NB10_REFERENCES
from test_checks_11 import NB11_REFERENCES

import lib
from lib import attention as A
from lib import checks, head_types, pruning, torch_bridge
from lib import heads as H
from lib import lists as L
from lib import positions as POS
from lib import tiny as T
from lib.backprop import softmax_backward
from lib.checks import CheckFailed
from lib.checks._core import NotAttempted

# lib's answers, unrefused: the references of the checks that refuse them
A, H, head_types, pruning = (lib_answers(m) for m in (A, H, head_types, pruning))
softmax_backward = unrefused(softmax_backward)

ROOT = Path(__file__).resolve().parents[2]


def log_softmax_row(row):
    """log softmax of one list: s - m - log(sum exp(s - m)); -inf stays -inf."""
    finite = [s for s in row if s != -math.inf]
    if not finite:
        return list(row)
    top = max(finite)
    log_total = math.log(sum(math.exp(s - top) for s in finite))
    return [s - top - log_total for s in row]


def sliding_window_mask(n, window):
    return [[i - window < j <= i for j in range(n)] for i in range(n)]


def split_heads(x, n_heads):
    *lead, seq, d = x.shape
    return A.split_heads(x.reshape(-1, seq, d), n_heads).reshape(*lead, n_heads, seq, -1)


def merge_heads(x):
    *lead, h, seq, d_k = x.shape
    return A.merge_heads(x.reshape(-1, h, seq, d_k)).reshape(*lead, seq, h * d_k)


def param_count(d, s, h, k, v, bias):
    weights = d * h * k + s * h * k + s * h * v + h * v * d
    return weights + ((2 * h * k + h * v + d) if bias else 0)


def previous_token(w):
    return H.offset_score(w, -1)


def find_offset_head(attentions, attention_mask, offset):
    """(layer, head, score) of the head with the highest score for key i + offset
    (notebook 07's exercise)."""
    targets, queries = head_types.offset_masks(attention_mask, offset)
    scores = head_types.target_score(attentions, targets, queries)  # (layers, heads)
    layer, head = np.unravel_index(np.argmax(scores), scores.shape)
    return int(layer), int(head), float(scores[layer, head])


def to_torch_mask(mask, n_heads):
    """Our (batch, 1 or heads, n_q, n_k) mask as torch's (batch * heads, n_q, n_k) boolean
    attn_mask, True = blocked (notebook 08's exercise 1)."""
    import torch

    batch, _, n_q, n_k = mask.shape
    per_head = np.broadcast_to(mask, (batch, n_heads, n_q, n_k))
    return torch.from_numpy(~per_head.reshape(batch * n_heads, n_q, n_k))


def torch_attention(module, x_q, x_kv, mask):
    """nn.MultiheadAttention with lib's answer for queries with nothing to attend to
    (notebook 08's exercise 3)."""
    import torch

    empty = ~mask.any(axis=-1, keepdims=True)  # (batch, 1, n_q, 1)
    blocked = to_torch_mask(mask | empty, module.num_heads)
    tq, tkv = torch.from_numpy(x_q), torch.from_numpy(x_kv)
    with torch.no_grad():
        out, weights = module(tq, tkv, tkv, attn_mask=blocked, average_attn_weights=False)
    b_o = 0.0 if module.out_proj.bias is None else module.out_proj.bias.detach().numpy()
    return np.where(empty[:, 0], b_o, out.numpy()), np.where(empty, 0.0, weights.numpy())


def cross_entropy_grad(logits, targets):
    return T.cross_entropy(logits, targets)[1]


def adam_step(param, grad, m, v, t, lr, beta1, beta2, eps):
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad**2
    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
    return param - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def smallest_sufficient_heads(results, target):
    """The smallest head count whose seeds all reached the target (notebook 05's exercise)."""
    reached = {}
    for (h, _), run in results.items():
        reached[h] = reached.get(h, True) and run["steps"] is not None
    return min((h for h, ok in reached.items() if ok), default=None)


def prune_heads(model, select_data, max_drop):
    """The heads iterative pruning removes, in order (notebook 06's exercise)."""
    steps = pruning.prune_iteratively(model, select_data, "ablation", max_drop)
    return [step.removed for step in steps[1:]]


def rope_scores(q, k, base):
    """Notebook 09's exercise: RoPE with the interleaved layout, then q k^T / sqrt(d_k)."""
    pos = np.arange(np.shape(q)[-2])
    turned_q = rope_turn(q, pos, base, "interleaved")
    turned_k = rope_turn(k, pos, base, "interleaved")
    return turned_q @ np.swapaxes(turned_k, -1, -2) / math.sqrt(turned_q.shape[-1])


# Every check, with the reference answer of its exercise.
REFERENCES = {
    "check_log_softmax_list": (checks.check_log_softmax_list, log_softmax_row),
    "check_softmax": (checks.check_softmax, A.softmax),
    "check_sliding_window_mask_list": (
        checks.check_sliding_window_mask_list,
        sliding_window_mask,
    ),
    "check_causal_mask": (checks.check_causal_mask, lib_causal_mask),
    "check_padding_mask": (checks.check_padding_mask, lib_padding_mask),
    "check_attention_list": (checks.check_attention_list, attention_lists),
    "check_split_heads": (checks.check_split_heads, split_heads),
    "check_merge_heads": (checks.check_merge_heads, merge_heads),
    "check_param_count": (checks.check_param_count, param_count),
    "check_entropy": (checks.check_entropy, H.row_entropy),
    "check_previous_token_score": (checks.check_previous_token_score, previous_token),
    "check_head_similarity": (checks.check_head_similarity, H.head_similarity),
    "check_softmax_backward": (checks.check_softmax_backward, softmax_backward),
    "check_cross_entropy_grad": (checks.check_cross_entropy_grad, cross_entropy_grad),
    "check_adam_step": (checks.check_adam_step, adam_step),
    "check_ablation_drops": (checks.check_ablation_drops, pruning.ablation_drops),
    "check_gradient_importance": (checks.check_gradient_importance, pruning.gradient_importance),
    "check_spearman": (checks.check_spearman, pruning.spearman),
    "check_head_count_sweep": (checks.check_head_count_sweep, H.head_count_sweep),
    "check_smallest_sufficient_heads": (
        checks.check_smallest_sufficient_heads,
        smallest_sufficient_heads,
    ),
    "check_prune_heads": (checks.check_prune_heads, prune_heads),
    "check_head_roles": (checks.check_head_roles, H.head_roles),
    "check_target_score": (checks.check_target_score, head_types.target_score),
    "check_find_offset_head": (checks.check_find_offset_head, find_offset_head),
    "check_coreference_accuracy": (
        checks.check_coreference_accuracy,
        head_types.coreference_accuracy,
    ),
    "check_torch_mask": (checks.check_torch_mask, to_torch_mask),
    "check_from_torch": (checks.check_from_torch, unrefused(torch_bridge.from_torch_mha)),
    "check_torch_attention": (checks.check_torch_attention, torch_attention),
    "check_sinusoidal_shift": (checks.check_sinusoidal_shift, unrefused(POS.sinusoidal_shift)),
    "check_rope_scores": (checks.check_rope_scores, rope_scores),
    "check_alibi_bias": (checks.check_alibi_bias, unrefused(POS.alibi_bias)),
}
REFERENCES.update(NB10_REFERENCES)  # notebook 10's, with its own tests in test_checks_10.py
REFERENCES.update(NB11_REFERENCES)  # notebook 11's, with its own tests in test_checks_11.py
# These exercises ask for a torch tensor or an MHAParams, so plain lists are rightly refused.
TORCH_ANSWERS = {"check_torch_mask", "check_from_torch"}


def _exercise_name(check) -> str:
    """The name a check gives its exercise: the one its "not attempted" error carries."""
    with pytest.raises(NotAttempted) as info:
        check.__wrapped__(stub)
    return info.value.name


def _lib_namesakes(name: str) -> list:
    """lib's functions called ``name``, in every lib module (the checks' aside)."""
    modules = [importlib.import_module(f"lib.{m.name}") for m in pkgutil.iter_modules(lib.__path__)]
    return [getattr(m, name) for m in modules if inspect.isfunction(getattr(m, name, None))]


NAMESAKES = {  # "check_softmax lib.attention": ("softmax", lib.attention.softmax)
    f"{name} {fn.__module__}": (name, _exercise_name(check), fn)
    for name, (check, _) in REFERENCES.items()
    for fn in _lib_namesakes(_exercise_name(check))
}


def test_the_exercises_lib_answers_by_name_are_found():
    exercises = {exercise for _, exercise, _ in NAMESAKES.values()}
    assert {"softmax", "head_similarity", "target_score", "prefix_matching_score"} <= exercises
    assert len(exercises) >= 20, sorted(exercises)


@pytest.mark.parametrize("key", sorted(NAMESAKES))
def test_a_call_to_lib_s_function_named_like_the_exercise_is_refused(key):
    """Whatever the arguments, the answer that hands the work to lib's function of the
    exercise's name fails with the refusal, and that function works again afterwards."""
    check, exercise, fn = NAMESAKES[key]
    message = rejects(REFERENCES[check][0], lambda *args: fn(*args))
    where = f"{fn.__module__}.{exercise}"
    assert (
        message == f"{exercise}: this exercise asks you to write it yourself, not to call {where}."
    )
    assert fn.__code__.co_name == exercise  # its own code is back


def test_every_check_is_covered():
    """A new check in lib.checks must be added to REFERENCES (and so to the tests below)."""
    defined = {name for name in dir(checks) if name.startswith("check_")}
    assert defined == set(REFERENCES), sorted(defined ^ set(REFERENCES))


def run(check, fn):
    """Run a check on a wrong answer: it must raise CheckFailed (nothing else) and never
    print a success line."""
    with np.errstate(all="ignore"), pytest.raises(CheckFailed) as info:
        check(fn)
    message = str(info.value)
    assert message and "\n" not in message.strip(), message
    return message


# --------------------------------------------------------------------------- any shape, any type


def as_lists(fn):
    """The reference, returning nested Python lists instead of arrays."""

    def wrapped(*args):
        result = fn(*args)
        if isinstance(result, tuple):
            return tuple(np.asarray(r).tolist() for r in result)
        return np.asarray(result).tolist()

    return wrapped


@pytest.mark.parametrize(
    "name", [n for n in REFERENCES if n != "check_param_count" and n not in TORCH_ANSWERS]
)
def test_lists_instead_of_arrays_are_accepted(name, capsys):
    check, reference = REFERENCES[name]
    check(as_lists(reference))
    assert capsys.readouterr().out.startswith("✓")


@pytest.mark.parametrize("name", list(REFERENCES))
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda *args: None, id="None"),
        pytest.param(lambda *args: 0.5, id="scalar"),
        pytest.param(lambda *args: "done", id="string"),
        pytest.param(lambda *args: [[1.0, 2.0], [3.0]], id="ragged"),
        pytest.param(lambda *args: np.zeros((2, 7, 3)), id="wrong-shape"),
        pytest.param(lambda *args: (np.zeros(3), np.zeros(3)), id="pair-of-vectors"),
        pytest.param(lambda *args: {"weights": 1}, id="dict"),
    ],
)
def test_wrong_shapes_and_types_are_reported_not_crashed(name, answer):
    check, _ = REFERENCES[name]
    run(check, answer)


@pytest.mark.parametrize(
    "name, answer, fragments",
    [
        ("check_log_softmax_list", lambda row: None, ["of shape (3,)", "got ()"]),
        ("check_log_softmax_list", lambda row: [row], ["of shape (3,)", "got (1, 3)"]),
        ("check_softmax", lambda x: A.softmax(x)[..., 0], ["(3, 4, 5)", "got (3, 4)"]),
        ("check_sliding_window_mask_list", lambda n, w: None, ["7 x 7", "got ()"]),
        ("check_causal_mask", lambda n_q, n_k: None, ["(3, 7)", "got ()"]),
        ("check_padding_mask", lambda lengths, n_k: None, ["(3, 1, 1, 5)", "got ()"]),
        ("check_attention_list", lambda q, k, v, mask=None: None, ["pair (output, weights)"]),
        ("check_split_heads", lambda x, h: x[None], ["(2, 4, 3, 2)", "got (1, 2, 3, 8)"]),
        ("check_merge_heads", lambda x: None, ["(2, 3, 8)", "got ()"]),
        ("check_param_count", lambda *args: None, ["whole number", "NoneType"]),
        ("check_entropy", lambda w: w, ["(2, 3, 5)", "got (2, 3, 5, 5)"]),
        ("check_previous_token_score", lambda w: w[..., 1, 0], ["(3,)", "got (2, 3)"]),
        ("check_head_similarity", lambda w: np.eye(3), ["(4, 4)", "got (3, 3)"]),
    ],
)
def test_shape_messages_say_what_was_expected(name, answer, fragments):
    message = run(REFERENCES[name][0], answer)
    for fragment in fragments:
        assert fragment in message, message


# --------------------------------------------------------------------------- more real mistakes


def softmax_axis2(x):  # written for 3-D input only
    e = np.exp(x - x.max(axis=2, keepdims=True))
    return e / e.sum(axis=2, keepdims=True)


def log_softmax_list_unstable(row):
    log_total = math.log(sum(math.exp(s) for s in row))
    return [s - log_total for s in row]


def window_ragged(n, window):  # only the entries that may be attended to
    return [[True] * min(i + 1, window) for i in range(n)]


def padding_list_indexing(lengths, n_k):  # lengths[:, None] on a Python list
    return (np.arange(n_k)[None, :] < lengths[:, None])[:, None, None, :]


def padding_2d(lengths, n_k):
    return np.arange(n_k)[None, :] < np.asarray(lengths)[:, None]


def attention_list_factory(scale=None, swap=False, mask_none_crash=False):
    """Wrong list attentions: d taken from the wrong size, pair swapped, mask=None crash."""

    def attention(Q, K, V, mask=None):
        d = {"q": len(Q), "k": len(K), None: len(Q[0])}[scale]
        scores = [[sum(a * b for a, b in zip(qr, kr, strict=True)) for kr in K] for qr in Q]
        scores = [[s / math.sqrt(d) for s in row] for row in scores]
        if mask is not None or mask_none_crash:
            scores = [
                [s if ok else -math.inf for s, ok in zip(row, mrow, strict=True)]
                for row, mrow in zip(scores, mask, strict=True)
            ]
        weights = [L.softmax(row) for row in scores]
        out = L.matmul(weights, V)
        return (weights, out) if swap else (out, weights)

    return attention


def split_forgot_transpose(x, h):
    b, s, d = x.shape
    return x.reshape(b, s, h, d // h)


def split_float_dk(x, h):
    b, s, d = x.shape
    return x.reshape(b, s, h, d / h).transpose(0, 2, 1, 3)


def merge_forgot_reshape(x):
    return np.swapaxes(x, -3, -2)


def entropy_wrong_axis(w):
    return -(w * np.log(np.where(w > 0, w, 1.0))).sum(axis=-2)


def entropy_mean(w):
    return -(w * np.log(np.where(w > 0, w, 1.0))).mean(axis=-1)


def similarity_mixed(w):
    flat = w.reshape(w.shape[1], -1)
    flat = flat / np.linalg.norm(flat, axis=1, keepdims=True)
    return flat @ flat.T


def similarity_one_norm(w):
    flat = np.moveaxis(w, 1, 0).reshape(w.shape[1], -1)
    return flat @ flat.T / np.linalg.norm(flat, axis=1)


def log_softmax_list_not_normalised(row):
    top = max(s for s in row if s != -math.inf)
    return [s - top for s in row]


def attention_list_sqrt_times(q, k, v, mask=None):
    scores = [[x * math.sqrt(len(q[0])) for x in row] for row in L.matmul(q, L.transpose(k))]
    if mask is not None:
        scores = [
            [x if ok else -math.inf for x, ok in zip(row, mrow, strict=True)]
            for row, mrow in zip(scores, mask, strict=True)
        ]
    w = [L.softmax(row) for row in scores]
    return L.matmul(w, v), w


def attention_list_uses_k(q, k, v, mask=None):
    out, w = attention_lists(q, k, v, mask)
    return L.matmul(w, k), w


def causal_mask_top_left(n_q, n_k):
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]


def softmax_axis0(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def padding_one_short(lengths, n_k):
    return lib_padding_mask(np.maximum(np.asarray(lengths) - 1, 0), n_k)


def padding_ints(lengths, n_k):
    return lib_padding_mask(lengths, n_k).astype(int)


def merge_interleaved(x):
    *lead, h, s, d = x.shape
    return np.moveaxis(x, -3, -1).reshape(*lead, s, h * d)


def previous_zero_first(w):  # on causal weights the same numbers as wrapping around
    n = w.shape[-1]
    rows = [w[..., i, i - 1] if i else np.zeros(w.shape[:2]) for i in range(n)]
    return np.mean(rows, axis=(0, 1))


def previous_all_earlier(w):
    return np.tril(w, k=-1)[..., 1:, :].sum(axis=-1).mean(axis=(0, 2))


def raises_type_error(*args):
    return None + 1


MISTAKES = [
    ("check_log_softmax_list", log_softmax_list_unstable, "subtract the row's largest score"),
    ("check_softmax", softmax_axis2, "axis=-1"),
    ("check_sliding_window_mask_list", window_ragged, "have lengths [1, 2, 3, 3, 3, 3, 3]"),
    ("check_causal_mask", causal_mask_top_left, "LAST n_q positions"),
    ("check_padding_mask", padding_list_indexing, "Python list"),
    ("check_padding_mask", padding_2d, "(batch, 1, 1, n_k)"),
    ("check_attention_list", attention_list_factory(scale="q"), "number of queries"),
    ("check_attention_list", attention_list_factory(scale="k"), "keys; d_k is"),
    ("check_attention_list", attention_list_factory(swap=True), "order (output, weights)"),
    ("check_attention_list", attention_list_factory(mask_none_crash=True), "mask=None"),
    ("check_split_heads", split_forgot_transpose, "behind seq"),
    ("check_split_heads", split_float_dk, "integer division"),
    ("check_merge_heads", merge_forgot_reshape, "one axis"),
    ("check_param_count", lambda d, s, h, k, v, bias: param_count(d, d, h, k, v, bias), "d_source"),
    ("check_entropy", entropy_wrong_axis, "over the queries"),
    ("check_entropy", entropy_mean, "not a mean"),
    ("check_head_similarity", similarity_mixed, "mixes heads"),
    ("check_head_similarity", similarity_one_norm, "must give 1"),
    ("check_log_softmax_list", log_softmax_list_not_normalised, "not the log of the sum"),
    ("check_softmax", softmax_axis0, "axis 0"),
    ("check_attention_list", attention_list_sqrt_times, "multiplied the scores"),
    ("check_attention_list", attention_list_uses_k, "it is weights @ v"),
    ("check_padding_mask", padding_one_short, "marked only L-1"),
    ("check_padding_mask", padding_ints, "use booleans"),
    ("check_merge_heads", merge_interleaved, "interleaves"),
    ("check_param_count", lambda d, s, h, k, v, bias: param_count(d, s, h, k, k, bias), "d_v"),
    ("check_param_count", lambda d, s, h, k, v, bias: 4 * d * d, "standard layer"),
    ("check_previous_token_score", previous_zero_first, "query 0 has no previous token"),
    ("check_previous_token_score", previous_all_earlier, "summed all earlier keys"),
] + [(name, raises_type_error, "TypeError") for name in REFERENCES]


@pytest.mark.parametrize(
    "name, wrong, fragment",
    MISTAKES,
    ids=[f"{name}-{getattr(wrong, '__name__', 'lambda')}" for name, wrong, _ in MISTAKES],
)
def test_more_mistakes_are_named(name, wrong, fragment):
    message = run(REFERENCES[name][0], wrong)
    assert fragment in message, message


def test_the_quoted_error_of_a_student_is_kept():
    """An error raised on an input with another number of leading axes is quoted, with the
    input's shape."""

    def split_heads_3d(x, n_heads):
        batch, seq, d_model = x.shape
        return A.split_heads(x, n_heads)

    message = run(checks.check_split_heads, split_heads_3d)
    assert "not enough values to unpack" in message and "(5, 6)" in message, message


# --------------------------------------------------------------------------- no solution leaks


def solution_lines():
    """Non-trivial lines of every solution region of every notebook."""
    import json

    lines = set()
    for path in sorted((ROOT / "notebooks" / "solved").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            inside = False
            for line in "".join(cell["source"]).split("\n"):
                text = line.strip()
                if text in ("### BEGIN SOLUTION", "### END SOLUTION"):
                    inside = text.startswith("### BEGIN")
                    continue
                text = text.split("  #")[0].strip()  # code without its trailing comment
                if inside and len(text) >= 16:
                    lines.add(text)
    return lines


def test_messages_never_contain_solution_code():
    secret = solution_lines()
    assert len(secret) > 10  # the scan found the notebooks' solutions
    messages = [run(REFERENCES[name][0], wrong) for name, wrong, _ in MISTAKES]
    messages += [run(REFERENCES[name][0], lambda *args: np.zeros((2, 7, 3))) for name in REFERENCES]
    squash = str.maketrans("", "", " \t")
    for message in messages:
        for line in secret:
            assert line.translate(squash) not in message.translate(squash), (line, message)
