"""Each realistic wrong answer (a "mutant" of the reference) gets ITS message, not just any
rejection: for every exercise, every mutant below must be rejected with a sentence that
contains its own fragment, and two different mutants of one exercise never get the same
sentence. Also: a hard-coded answer (right for the first input only) never passes, because
every check tries at least two shapes; the two wrong answers that used to pass (a softmax
shifted by the row's minimum; a cross-entropy gradient on an unstabilised softmax) fail;
a stub in a helper is blamed on the helper; and a failed check renders as one line in
IPython."""

import math

import numpy as np
import pytest
import torch
from helpers import stub
from test_checks_09 import NB09_MUTANTS
from test_checks_robustness import REFERENCES
from torch import nn

from lib import attention as A
from lib import checks
from lib import pruning as P
from lib import tiny as T
from lib import torch_bridge as TB
from lib.backprop import softmax_backward
from lib.checks import CheckFailed


def message_of(check, fn):
    with np.errstate(all="ignore"), pytest.raises(CheckFailed) as info:
        check(fn)
    return str(info.value)


# --------------------------------------------------------------------------- mutants


def list_softmax(shift):
    def softmax_row(row):
        finite = [s for s in row if s != -math.inf]
        if not finite:
            return [0.0] * len(row)
        c = shift(finite)
        exps = [math.exp(s - c) for s in row]
        return [e / sum(exps) for e in exps]

    return softmax_row


def np_softmax(shift=lambda x: x.max(axis=-1, keepdims=True), axis=-1):
    def softmax(x):
        e = np.exp(x - shift(x))
        out = e / e.sum(axis=axis, keepdims=True)
        return np.nan_to_num(out, nan=0.0) if shift is not None else out

    return softmax


def attention(mask_mode="where", scale=math.sqrt):
    def attn(q, k, v, mask=None):
        q, k, v = (np.asarray(a, dtype=float) for a in (q, k, v))
        s = q @ np.swapaxes(k, -1, -2) / scale(q.shape[-1])
        if mask is not None:
            m = np.asarray(mask)
            s = s * m if mask_mode == "multiply" else np.where(m, s, -np.inf)
        w = A.softmax(s)
        return w @ v, w

    return attn


def ce(softmax=A.softmax, divide="count", mask_unscored=True, subtract=True):
    def grad(logits, targets):
        scored = targets != -1
        p = softmax(logits)
        onehot = np.eye(logits.shape[-1])[np.where(scored, targets, 0)]
        g = p - onehot if subtract else p
        if mask_unscored:
            g = g * scored[..., None]
        if divide == "count":
            return g / scored.sum()
        if divide == "batch":
            return g / logits.shape[0]
        if divide == "per-sequence":
            per = np.maximum(scored.sum(axis=-1), 1)[:, None, None]
            return g / per / logits.shape[0]
        return g

    return grad


def naive(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def adam(store_hat=False, average_m=True, abs_v=False, correct=True, sign=-1, root=True):
    def step(param, grad, m, v, t, lr, b1, b2, eps):
        m = b1 * m + ((1 - b1) if average_m else 1) * grad
        v = b2 * v + (1 - b2) * (np.abs(grad) if abs_v else grad**2)
        m_hat = m / (1 - b1**t) if correct else m
        v_hat = v / (1 - b2**t) if correct else v
        new = param + sign * lr * m_hat / ((np.sqrt(v_hat) if root else v_hat) + eps)
        return (new, m_hat, v_hat) if store_hat else (new, m, v)

    return step


def attn_k(q, k, v, mask=None):
    out, w = A.scaled_dot_product_attention(q, k, v, mask)
    return w @ k, w


def coref_pairs(w, p, a, d, rows=True):
    b = np.arange(len(p))
    wh = np.moveaxis(w, 2, -1)
    return (wh[:, b, p, a], wh[:, b, p, d]) if rows else (wh[:, b, a, p], wh[:, b, d, p])


def prev_head(w, m, offset=-1):
    n = m.shape[1]
    tokens = [["t"] * int(k) for k in m.sum(axis=1)]
    from lib import head_types as HT

    targets, queries = HT.target_masks(tokens, n)["previous" if offset == -1 else "next"]
    scores = HT.target_score(w, targets, queries)
    layer, head = np.unravel_index(np.argmax(scores), scores.shape)
    return int(layer), int(head)


def loader(transpose_in=True, transpose_out=True, biases=True):
    def load(p):
        m = nn.MultiheadAttention(
            p.d_model, p.n_heads, bias=p.has_bias, batch_first=True, dtype=torch.float64
        )
        with torch.no_grad():
            W = np.concatenate([p.W_q, p.W_k, p.W_v], axis=1)
            m.in_proj_weight.copy_(
                torch.from_numpy(
                    W.T.copy() if transpose_in else W.T.T.reshape(-1, p.d_model).copy()
                )
            )
            m.out_proj.weight.copy_(torch.from_numpy(p.W_o.T.copy() if transpose_out else p.W_o))
            if p.has_bias:
                if biases:
                    m.in_proj_bias.copy_(torch.from_numpy(np.concatenate([p.b_q, p.b_k, p.b_v])))
                    m.out_proj.bias.copy_(torch.from_numpy(p.b_o))
                else:
                    m.in_proj_bias.zero_()
                    m.out_proj.bias.zero_()
        return m.eval()

    return load


def stacked_in_proj(p):
    W = np.concatenate([p.W_q, p.W_k, p.W_v], axis=0)  # not transposed: (3d, d) by luck
    m = TB.to_torch_mha(p)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.from_numpy(W))
    return m


def bias_always(p):
    """Packs the biases whether or not the layer has them: NumPy's concatenation error."""
    return TB.pack_in_proj(p)[0], np.concatenate([p.b_q, p.b_k, p.b_v])


MUTANTS = {
    "check_softmax_list": [
        ("naive", list_softmax(lambda r: 0.0), "overflowed on scores near 1000"),
        ("min shift", list_softmax(min), "other than its largest score"),
        ("no exp", lambda row: [x / sum(row) for x in row], "exponentiate each score"),
        ("no normalise", lambda row: [math.exp(x) for x in row], "divide every exp"),
    ],
    "check_softmax": [
        ("naive", np_softmax(shift=lambda x: 0.0), "scores near 1000 give NaN/inf"),
        ("min shift", np_softmax(shift=lambda x: x.min(-1, keepdims=True)), "each row's minimum"),
        ("mean shift", np_softmax(shift=lambda x: x.mean(-1, keepdims=True)), "each row's mean"),
        ("first shift", np_softmax(shift=lambda x: x[..., :1]), "each row's first score"),
        ("global max", np_softmax(shift=lambda x: x.max()), "not the maximum of the whole array"),
        ("axis -2", np_softmax(axis=-2, shift=lambda x: 0.0), "your columns sum to 1"),
        ("whole array", lambda x: np.exp(x) / np.exp(x).sum(), "sum of the whole array"),
    ],
    "check_attention_list": [
        ("mask multiplied", attention("multiply"), "multiplied the scores by the mask"),
        ("no scale", attention(scale=lambda d: 1.0), "did not scale"),
        ("divide by d_k", attention(scale=lambda d: d), "divided the scores by d_k"),
    ],
    "check_attention": [
        ("mask multiplied", attention("multiply"), "multiplied the scores by the mask"),
        ("no scale", attention(scale=lambda d: 1.0), "did not scale"),
        ("divide by d_k", attention(scale=lambda d: d), "divided the scores by d_k"),
        (
            "times sqrt",
            attention(scale=lambda d: 1 / math.sqrt(d)),
            "multiplied the scores by sqrt",
        ),
        ("w @ k", attn_k, "it is weights @ v"),
    ],
    "check_causal_mask_list": [
        ("no diagonal", lambda n: [[j < i for j in range(n)] for i in range(n)], "itself"),
        ("inverted", lambda n: [[j > i for j in range(n)] for i in range(n)], "wrong way round"),
        ("transposed", lambda n: [[j >= i for j in range(n)] for i in range(n)], "after it"),
        ("off by one", lambda n: [[j <= i + 1 for j in range(n)] for i in range(n)], "off by one"),
        ("ints", lambda n: [[int(j <= i) for j in range(n)] for i in range(n)], "as int64 numbers"),
    ],
    "check_padding_mask": [
        ("inverted", lambda ls, n: ~A.padding_mask(ls, n), "wrong way round"),
        (
            "plus one",
            lambda ls, n: A.padding_mask(np.minimum(np.array(ls) + 1, n), n),
            "key L is already padding",
        ),
        (
            "minus one",
            lambda ls, n: A.padding_mask(np.maximum(np.array(ls) - 1, 0), n),
            "marked only L-1",
        ),
        ("2-D", lambda ls, n: A.padding_mask(ls, n)[:, 0, 0], "broadcasts over heads"),
        ("ints", lambda ls, n: A.padding_mask(ls, n).astype(int), "use booleans"),
    ],
    "check_split_heads": [
        (
            "straight reshape",
            lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1),
            "cuts the sequence",
        ),
        (
            "interleaved",
            lambda x, h: x.reshape(*x.shape[:2], -1, h).transpose(0, 3, 1, 2),
            "contiguous block",
        ),
        ("no transpose", lambda x, h: x.reshape(*x.shape[:2], h, -1), "behind seq"),
    ],
    "check_merge_heads": [
        ("no transpose", lambda x: x.reshape(x.shape[0], x.shape[2], -1), "mixes tokens"),
        (
            "interleaved",
            lambda x: x.transpose(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1),
            "interleaves",
        ),
        ("no reshape", lambda x: x.transpose(0, 2, 1, 3), "one axis of heads * d_k"),
    ],
    "check_param_count": [
        (
            "no W_O",
            lambda d, h, b: 3 * d * d + (3 * d if b else 0),
            "left out the output projection",
        ),
        ("no biases", lambda d, h, b: 4 * d * d, "left out the biases"),
        ("one bias", lambda d, h, b: 4 * d * d + (d if b else 0), "only one bias"),
        ("no W_O bias", lambda d, h, b: 4 * d * d + (3 * d if b else 0), "bias of the output"),
        ("per head", lambda d, h, b: h * 4 * d * d + (4 * d if b else 0), "every head full"),
        ("one head", lambda d, h, b: 4 * d * (d // h) + (4 * d if b else 0), "one head's"),
        ("float", lambda d, h, b: 4.0 * d * d, "whole number"),
    ],
    "check_entropy": [
        ("0 log 0", lambda w: -(w * np.log(w)).sum(-1), "0 * log(0)"),
        ("sign", lambda w: (w * np.log(np.where(w > 0, w, 1))).sum(-1), "negative"),
        ("bits", lambda w: -(w * np.log2(np.where(w > 0, w, 1))).sum(-1), "base 2"),
        ("queries", lambda w: -(w * np.log(np.where(w > 0, w, 1))).sum(-2), "over the queries"),
        ("mean", lambda w: -(w * np.log(np.where(w > 0, w, 1))).mean(-1), "not a mean"),
    ],
    "check_previous_token_score": [
        (
            "diagonal",
            lambda w: np.mean([w[:, :, i, i] for i in range(w.shape[-1])], axis=(0, 1)),
            "diagonal",
        ),
        (
            "next",
            lambda w: np.mean([w[:, :, i, i + 1] for i in range(w.shape[-1] - 1)], axis=(0, 1)),
            "next token",
        ),
        (
            "wraps",
            lambda w: np.mean([w[:, :, i, i - 1] for i in range(w.shape[-1])], axis=(0, 1)),
            "wrapped around",
        ),
        (
            "all earlier",
            lambda w: np.tril(w, k=-1)[..., 1:, :].sum(-1).mean(axis=(0, 2)),
            "summed all earlier",
        ),
    ],
    "check_head_similarity": [
        (
            "raw dots",
            lambda w: (f := np.moveaxis(w, 1, 0).reshape(w.shape[1], -1)) @ f.T,
            "raw dot products",
        ),
        (
            "mixed",
            lambda w: (
                (
                    f := w.reshape(w.shape[1], -1)
                    / np.linalg.norm(w.reshape(w.shape[1], -1), axis=1, keepdims=True)
                )
                @ f.T
            ),
            "mixes heads",
        ),
        (
            "per batch item",
            lambda w: (
                (
                    f := w.reshape(w.shape[0], -1)
                    / np.linalg.norm(w.reshape(w.shape[0], -1), axis=1, keepdims=True)
                )
                @ f.T
            ),
            "(heads, heads)",
        ),
    ],
    "check_softmax_backward": [
        ("diagonal p*g", lambda p, g: p * g, "only the diagonal of the Jacobian"),
        ("p(1-p)", lambda p, g: p * (1 - p) * g, "off-diagonal terms"),
        ("no final p", lambda p, g: g - (g * p).sum(-1, keepdims=True), "multiply by p"),
        ("axis", lambda p, g: softmax_backward(p, g, axis=-2), "wrong axis"),
        ("sign", lambda p, g: -softmax_backward(p, g), "sign is flipped"),
    ],
    "check_cross_entropy_grad": [
        ("unstable softmax", ce(softmax=naive), "overflows on logits of several hundred"),
        (
            "min-shifted softmax",
            ce(softmax=lambda x: naive(x - x.min(-1, keepdims=True))),
            "each row's minimum",
        ),
        (
            "softmax over positions",
            ce(softmax=lambda x: A.softmax(x, axis=-2)),
            "over the positions",
        ),
        ("divided by batch", ce(divide="batch"), "number of sequences"),
        ("per sequence", ce(divide="per-sequence"), "within each sequence first"),
        ("no division", ce(divide=None), "divide by their count"),
        ("-1 scored", ce(mask_unscored=False), "their gradient must be 0"),
        ("no one-hot", ce(subtract=False), "subtract 1 at the target"),
        ("sign", lambda lg, t: -T.cross_entropy(lg, t)[1], "sign is flipped"),
    ],
    "check_adam_step": [
        ("stores m_hat, v_hat", adam(store_hat=True), "bias-corrected m_hat"),
        ("m not averaged", adam(average_m=False), "running *average*: weight the new gradient"),
        ("v of |g|", adam(abs_v=True), "not its absolute value"),
        ("no correction", adam(correct=False), "bias correction is missing"),
        ("uphill", adam(sign=+1), "uphill"),
        ("no sqrt", adam(root=False), "square root of v_hat"),
    ],
    "check_ablation_drops": [
        ("sign", lambda *a: -P.ablation_drops(*a), "sign is flipped"),
        (
            "accuracies",
            lambda m, i, t: T.accuracy(m, i, t) - P.ablation_drops(m, i, t),
            "accuracies with each head off",
        ),
        (
            "only head",
            lambda m, i, t: (
                T.accuracy(m, i, t) - np.array([T.accuracy(m, i, t, e) for e in np.eye(m.n_heads)])
            ),
            "kept only head h",
        ),
        (
            "from 1",
            lambda m, i, t: (
                1.0
                - P.ablation_drops(m, i, t) * 0
                - (T.accuracy(m, i, t) - P.ablation_drops(m, i, t))
            ),
            "not from 1",
        ),
    ],
    "check_gradient_importance": [
        (
            "signed",
            lambda m, i, t: m.loss_and_grads(i, t, np.ones((len(i), m.n_heads)))[1][
                "head_mask"
            ].mean(0),
            "take the absolute value",
        ),
        (
            "abs after sum",
            lambda m, i, t: np.abs(m.loss_and_grads(i, t, np.ones(m.n_heads))[1]["head_mask"]),
            "per sequence before averaging",
        ),
        (
            "at zero",
            lambda m, i, t: np.abs(
                m.loss_and_grads(i, t, np.zeros((len(i), m.n_heads)))[1]["head_mask"]
            ).mean(0),
            "all heads on",
        ),
    ],
    "check_spearman": [
        (
            "pearson",
            lambda a, b: float(np.corrcoef(a, b)[0, 1]),
            "Pearson correlation of the values",
        ),
        (
            "ordinal ties",
            lambda a, b: float(
                np.corrcoef(
                    np.argsort(np.argsort(a, kind="stable")),
                    np.argsort(np.argsort(b, kind="stable")),
                )[0, 1]
            ),
            "mean of their ranks",
        ),
        (
            "argsort once",
            lambda a, b: float(np.corrcoef(np.argsort(a), np.argsort(b))[0, 1]),
            "argsort of the argsort",
        ),
        ("sign", lambda a, b: -P.spearman(a, b), "sign is flipped"),
    ],
    "check_target_score": [
        (
            "all queries",
            lambda w, t, q: (w * t[:, None]).sum(-1).mean(axis=(0, 2)),
            "only where `queries` is True",
        ),
        (
            "summed",
            lambda w, t, q: ((w * t[:, None]).sum(-1) * q[:, None]).sum(axis=(0, 2)),
            "divide by the number of chosen",
        ),
        (
            "columns",
            lambda w, t, q: (
                ((np.swapaxes(w, -1, -2) * t[:, None]).sum(-1) * q[:, None]).sum(axis=(0, 2))
                / q.sum()
            ),
            "column-wise",
        ),
    ],
    "check_find_previous_token_head": [
        ("swapped", lambda w, m: prev_head(w, m)[::-1], "(head, layer)"),
        ("next", lambda w, m: prev_head(w, m, offset=1), "next-token head"),
        ("from 1", lambda w, m: tuple(i + 1 for i in prev_head(w, m)), "counted from 1"),
        ("flat", lambda w, m: prev_head(w, m)[0] * w.shape[2] + prev_head(w, m)[1], "flat index"),
    ],
    "check_coreference_accuracy": [
        (
            "ties win",
            lambda w, p, a, d: np.greater_equal(*coref_pairs(w, p, a, d)).mean(axis=1),
            "a tie is not a win",
        ),
        (
            "columns",
            lambda w, p, a, d: np.greater(*coref_pairs(w, p, a, d, rows=False)).mean(axis=1),
            "the pronoun's row",
        ),
        (
            "mean difference",
            lambda w, p, a, d: np.subtract(*coref_pairs(w, p, a, d)).mean(axis=1),
            "averaged the weight differences",
        ),
        (
            "counts",
            lambda w, p, a, d: np.greater(*coref_pairs(w, p, a, d)).sum(axis=1),
            "you counted wins",
        ),
    ],
    "check_torch_attn_mask": [
        ("unchanged", lambda m: torch.from_numpy(m), "unchanged"),
        ("numpy", lambda m: ~m, "not ndarray"),
        ("transposed", lambda m: torch.from_numpy(~m.T.copy()), "transposed"),
        (
            "float additive",
            lambda m: torch.zeros(m.shape, dtype=torch.float64).masked_fill(
                torch.from_numpy(~m), -torch.inf
            ),
            "additive float mask",
        ),
        ("float 0/1", lambda m: torch.from_numpy((~m).astype(float)), "0/1 values would not block"),
    ],
    "check_pack_in_proj": [
        ("bias always", bias_always, "on params without them"),
        (
            "not transposed",
            lambda p: (np.concatenate([p.W_q, p.W_k, p.W_v]), TB.pack_in_proj(p)[1]),
            "transpose of ours",
        ),
        (
            "order",
            lambda p: (np.concatenate([p.W_k.T, p.W_q.T, p.W_v.T]), TB.pack_in_proj(p)[1]),
            "blocks are in the wrong order",
        ),
        (
            "reshape",
            lambda p: (
                np.concatenate([p.W_q, p.W_k, p.W_v], axis=1).reshape(-1, p.d_model),
                TB.pack_in_proj(p)[1],
            ),
            "reshaping does not transpose",
        ),
        (
            "(d, 3d)",
            lambda p: (np.concatenate([p.W_q, p.W_k, p.W_v], axis=1), TB.pack_in_proj(p)[1]),
            "(out_features, in_features)",
        ),
        (
            "bias order",
            lambda p: (
                TB.pack_in_proj(p)[0],
                None if p.b_q is None else np.concatenate([p.b_k, p.b_q, p.b_v]),
            ),
            "biases are in the wrong order",
        ),
        ("bias dropped", lambda p: (TB.pack_in_proj(p)[0], None), "your in_proj_bias is None"),
    ],
    "check_load_into_torch": [
        (
            "in_proj not transposed",
            stacked_in_proj,
            "in_proj_weight needs our W_q, W_k, W_v transposed",
        ),
        ("out_proj not transposed", loader(transpose_out=False), "W_o transposed"),
        ("biases missing", loader(biases=False), "biases are missing"),
        (
            "not batch_first",
            lambda p: TB.to_torch_mha(p).__class__(p.d_model, p.n_heads, batch_first=False),
            "batch_first=True",
        ),
        (
            "always with bias",
            lambda p: load_with_bias_always(p),
            "create the module with bias=False",
        ),
    ],
}


MUTANTS.update(NB09_MUTANTS)


def load_with_bias_always(p):
    m = (
        TB.to_torch_mha(p)
        if p.has_bias
        else nn.MultiheadAttention(p.d_model, p.n_heads, batch_first=True, dtype=torch.float64)
    )
    with torch.no_grad():
        m.in_proj_bias.copy_(torch.from_numpy(np.concatenate([p.b_q, p.b_k, p.b_v])))
    return m


CASES = [(name, label, fn, fragment) for name, ms in MUTANTS.items() for label, fn, fragment in ms]


def test_every_check_has_mutants():
    assert set(MUTANTS) == set(REFERENCES)


@pytest.mark.parametrize(
    "name, label, fn, fragment", CASES, ids=[f"{n}-{label}" for n, label, _, _ in CASES]
)
def test_mutant_gets_its_message(name, label, fn, fragment):
    message = message_of(REFERENCES[name][0], fn)
    assert fragment in message, message
    assert "\n" not in message


@pytest.mark.parametrize("name", list(MUTANTS))
def test_different_mutants_get_different_messages(name):
    messages = {label: message_of(REFERENCES[name][0], fn) for label, fn, _ in MUTANTS[name]}
    seen = {}
    for label, message in messages.items():
        assert message not in seen, f"{label!r} and {seen.get(message)!r} both get: {message}"
        seen[message] = label


@pytest.mark.parametrize("name", list(REFERENCES))
def test_a_hard_coded_answer_does_not_pass(name):
    """An answer that returns, for every call, what the reference returned on the first
    one: it fits one shape and one input only, and must fail."""
    check, reference = REFERENCES[name]
    first = []

    def memorised(*args):
        if not first:
            first.append(reference(*args))
        return first[0]

    message_of(check, memorised)


# --------------------------------------------------------------------------- what used to pass


def test_softmax_shifted_by_the_row_minimum_fails():
    message_of(checks.check_softmax_list, list_softmax(min))
    message_of(checks.check_softmax, np_softmax(shift=lambda x: x.min(-1, keepdims=True)))


def test_cross_entropy_grad_on_an_unstabilised_softmax_fails():
    assert "overflows" in message_of(checks.check_cross_entropy_grad, ce(softmax=naive))


# --------------------------------------------------------------------------- helpers' stubs


def test_a_stub_in_a_helper_is_blamed_on_the_helper():
    def pack_in_proj(params):
        raise NotImplementedError()

    def load_into_torch(params):
        weight, bias = pack_in_proj(params)
        return weight

    message = message_of(checks.check_load_into_torch, load_into_torch)
    assert message.startswith("load_into_torch calls pack_in_proj, which is not implemented"), (
        message
    )
    assert "load_into_torch is not implemented" not in message
    assert "not implemented yet" in message_of(checks.check_load_into_torch, stub)


def test_a_not_implemented_error_from_lib_is_quoted_not_blamed_on_a_helper():
    def softmax(x):
        return np.lib.stride_tricks.sliding_window_view(x, 2, writeable=True)  # a ValueError

    assert "raised ValueError" in message_of(checks.check_softmax, softmax)


# --------------------------------------------------------------------------- in IPython


def test_check_failed_renders_as_one_line_in_ipython():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shown = []
    shell._showtraceback = lambda etype, evalue, stb: shown.append((etype, stb))
    shell.user_ns["checks"] = checks
    shell.user_ns["wrong"] = lambda row: [1.0] * len(row)
    shell.run_cell("checks.check_softmax_list(wrong)")
    ((etype, stb),) = shown
    assert etype is CheckFailed
    assert len(stb) == 1 and "CheckFailed" in stb[0] and "sum to 1" in stb[0], stb
    shown.clear()
    shell.run_cell("1 / 0")  # any other exception keeps its traceback
    ((etype, stb),) = shown
    assert etype is ZeroDivisionError and len(stb) > 1
