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
from helpers import attention_lists, lib_answers, lib_causal_mask, lib_padding_mask, stub, unrefused
from test_checks_09 import NB09_MUTANTS, least_squares_shift
from test_checks_10 import NB10_MUTANTS
from test_checks_11 import NB11_MUTANTS
from test_checks_robustness import REFERENCES

from lib import attention as A
from lib import checks
from lib import head_types as HT
from lib import heads as H
from lib import lists as L
from lib import pruning as PR
from lib import tiny as T
from lib.backprop import softmax_backward
from lib.checks import CheckFailed

# lib's answers, unrefused: the mutants are built from those the checks refuse
H, HT, PR = lib_answers(H), lib_answers(HT), lib_answers(PR)
softmax_backward = unrefused(softmax_backward)


def message_of(check, fn):
    """The failure message of ``check`` on ``fn``, called as a grader calls it (undecorated:
    a stub fails too)."""
    with np.errstate(all="ignore"), pytest.raises(CheckFailed) as info:
        getattr(check, "__wrapped__", check)(fn)
    return str(info.value)


# --------------------------------------------------------------------------- mutants


def list_log_softmax(shift=max, log_of_weights=False, guard=False, all_masked=None):
    """log-softmax of one list, shifted by ``shift`` of the finite scores (None: no shift);
    or the log of the softmax's weights (``guard``: log(0) taken as -inf); ``all_masked``
    replaces the answer for a row with nothing to attend to."""

    def log_softmax_row(row):
        finite = [s for s in row if s != -math.inf]
        if not finite and all_masked is not None:
            return [all_masked] * len(row)
        if log_of_weights:
            weights = L.softmax(row)
            return [math.log(w) if (w > 0 or not guard) else -math.inf for w in weights]
        c = shift(finite) if shift is not None else 0.0
        log_total = math.log(sum(math.exp(s - c) for s in finite))
        return [s - c - log_total for s in row]

    return log_softmax_row


def masked_to(value):
    """A right log-softmax that gives masked keys ``value`` instead of -inf."""
    right = list_log_softmax()

    def log_softmax_row(row):
        return [value if s == -math.inf else x for s, x in zip(row, right(row), strict=True)]

    return log_softmax_row


def window(condition, as_int=False):
    """A sliding-window mask: entry (i, j) = condition(i, j, window)."""

    def mask(n, w):
        return [[(int if as_int else bool)(condition(i, j, w)) for j in range(n)] for i in range(n)]

    return mask


def split_any(x, h, swap=(-3, -2)):
    return np.swapaxes(x.reshape(*x.shape[:-1], h, x.shape[-1] // h), *swap)


def split_fixed(x, h):  # written for (batch, seq, d_model) only
    b, s, d = x.shape
    return x.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)


def merge_any(x, swap=(-3, -2)):
    return np.swapaxes(x, *swap).reshape(*x.shape[:-3], x.shape[-2], -1)


def merge_fixed(x):  # written for (batch, heads, seq, d_k) only
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def count(q=True, k="s", v="v", o="v*d", biases="right"):
    """Parameter counts with one slip: W_k/W_v reading rows of d_model ("d") instead of
    d_source ("s"), values of width d_k ("k"), W_o square ("d*d") or missing (None), and
    biases "right", "d_model" (all of length d_model), "b_o=h*d_v", "no b_o", "never" or
    "always"."""

    def param_count(d, s, h, dk, dv, bias):
        src = {"s": s, "d": d}[k]
        val = {"v": dv, "k": dk}[v]
        weights = d * h * dk + src * h * dk + src * h * val
        weights += {"v*d": h * val * d, "d*d": d * d, None: 0}[o]
        right = 2 * h * dk + h * val + d
        b = {
            "right": right,
            "d_model": 4 * d,
            "b_o=h*d_v": right - d + h * val,
            "no b_o": right - d,
            "never": 0,
            "always": right,
        }[biases]
        if biases == "right" and o is None:
            b = right - d
        use = bias or biases == "always"
        return weights + (b if use and biases != "never" else 0)

    return param_count


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


def attention_no_shift(q, k, v, mask=None):
    """Attention on lists with the textbook softmax, exp(s) / sum(exp(s)), not shifted."""
    d = len(q[0])
    scores = [
        [sum(a * b for a, b in zip(qi, kj, strict=True)) / math.sqrt(d) for kj in k] for qi in q
    ]
    if mask is not None:
        scores = [
            [s if ok else -math.inf for s, ok in zip(r, m, strict=True)]
            for r, m in zip(scores, mask, strict=True)
        ]
    weights = []
    for row in scores:
        e = [math.exp(s) for s in row]
        weights.append([x / sum(e) for x in e])
    out = [
        [sum(w * vj[c] for w, vj in zip(wr, v, strict=True)) for c in range(len(v[0]))]
        for wr in weights
    ]
    return out, weights


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
    _, w = attention_lists(q, k, v, mask)  # lib's attention is refused in this check
    return np.asarray(w) @ np.asarray(k), np.asarray(w)


def coref_pairs(w, p, a, d, rows=True):
    b = np.arange(len(p))
    wh = np.moveaxis(w, 2, -1)
    return (wh[:, b, p, a], wh[:, b, p, d]) if rows else (wh[:, b, a, p], wh[:, b, d, p])


def offset_head(w, m, offset, sign=1, wrap=False, queries=None):
    """notebook 07's find_offset_head, with switches for its classic mistakes."""
    n = m.shape[1]
    i = np.arange(n)
    pair = m[:, :, None] & m[:, None, :]
    key = i[:, None] + sign * offset
    targets = pair & (i[None, None, :] == (key % n if wrap else key)[None])
    q = targets.any(axis=-1) if queries is None else queries(m, i, offset, n)
    scores = HT.target_score(w, targets, q)
    layer, head = np.unravel_index(np.argmax(scores), scores.shape)
    return int(layer), int(head), float(scores[layer, head])


def torch_mask(invert=True, head_major=False, first_head=False):
    """notebook 08's to_torch_mask, with switches for its classic mistakes."""

    def convert(mask, n_heads):
        b, _, n_q, n_k = mask.shape
        full = np.broadcast_to(mask[:, :1] if first_head else mask, (b, n_heads, n_q, n_k))
        full = ~full if invert else full
        full = full.transpose(1, 0, 2, 3) if head_major else full
        return torch.from_numpy(np.ascontiguousarray(full).reshape(b * n_heads, n_q, n_k))

    return convert


def from_torch(
    transpose=True, order=(0, 1, 2), reshape=False, w_o_t=True, biases=True, bias_order=None
):
    """notebook 08's from_torch, with switches for its classic mistakes."""

    def read(module):
        d = module.embed_dim
        weight = module.in_proj_weight.detach().numpy()
        if reshape:
            blocks = np.split(weight.reshape(d, 3 * d), 3, axis=1)
        else:
            blocks = [weight[i * d : (i + 1) * d] for i in range(3)]
            blocks = [b.T for b in blocks] if transpose else blocks
        blocks = [blocks[i] for i in order]
        W_o = module.out_proj.weight.detach().numpy()
        W_o = W_o.T if w_o_t else W_o
        if module.in_proj_bias is None or not biases:
            return A.MHAParams(*blocks, W_o, module.num_heads)
        b = module.in_proj_bias.detach().numpy()
        b_o = module.out_proj.bias.detach().numpy()
        return A.MHAParams(
            *blocks,
            W_o,
            module.num_heads,
            *(b[i * d : (i + 1) * d] for i in bias_order or order),
            b_o,
        )

    return read


def torch_attention(invert=True, fix=True, zero_weights=True, output="b_o", head_major=False):
    """notebook 08's torch_attention, with switches for its classic mistakes."""

    def run(module, x_q, x_kv, mask):
        empty = ~mask.any(axis=-1, keepdims=True)
        convert = torch_mask(invert=invert, head_major=head_major)
        blocked = convert(mask | empty if fix else mask, module.num_heads)
        tq, tkv = torch.from_numpy(x_q), torch.from_numpy(x_kv)
        with torch.no_grad():
            out, w = module(tq, tkv, tkv, attn_mask=blocked, average_attn_weights=False)
        out, w = out.numpy(), w.numpy()
        w = np.where(empty, 0.0, w) if zero_weights else w
        if output is not None:
            b_o = module.out_proj.bias
            fill = 0.0 if b_o is None or output == 0 else b_o.detach().numpy()
            out = np.where(empty[:, 0], fill, out)
        return out, w

    return run


def sweep(rng="run", eval_on="held-out", stop=True, steps="first", entropy="normalised", keys="h"):
    """The head-count sweep of notebook 05, right (the defaults) or with one mistake."""

    def run_sweep(make_model, make_batch, eval_data, head_counts, seeds, budget, target, every):
        one = np.random.default_rng(seeds[0])
        per_seed = {s: np.random.default_rng(s) for s in seeds}
        other = make_batch(np.random.default_rng(1234))  # a held-out set of its own
        results = {}
        for h in head_counts:
            for s in seeds:
                if rng == "one":
                    r = one
                elif rng == "per seed":
                    r = per_seed[s]
                else:
                    seed = {"run": s, "unseeded": None, "constant": 0, "offset": s + 100}[rng]
                    r = np.random.default_rng(seed)
                model = make_model(h, r)
                data = {"held-out": eval_data, "train": None, "other": other}[eval_on]
                data = make_batch(r) if data is None else data
                log = T.train(model, make_batch, data, budget, r, eval_every=every,
                              stop_at=target if stop else None)  # fmt: skip
                w = model.forward(data[0])[1]
                ent = H.head_entropy(w) if entropy == "nats" else (
                    H.head_entropy_normalised(w, A.causal_mask(w.shape[-1])))  # fmt: skip
                key = (h, s) if keys == "h" else (s, h)
                results[key] = {
                    "accuracy": log.accuracy[-1],
                    "steps": log.steps[-1] if steps == "last" else log.steps_to(target),
                    "entropy": ent,
                }
        return results

    return run_sweep


def smallest(per_h=min, reached=lambda acc, target: acc >= target, pick=min, none=None):
    """Reading a sweep: the smallest head count whose seeds all reached the target."""

    def read(results, target):
        by_h = {}
        for (h, _), run in results.items():
            by_h.setdefault(h, []).append(run["accuracy"])
        ok = [h for h, accs in by_h.items() if reached(per_h(accs), target)]
        return pick(ok) if ok else none

    return read


def by_index(results, target):
    heads = sorted({h for h, _ in results})
    best = smallest()(results, target)
    return None if best is None else heads.index(best)


def prune(pick="weakest", base="start", keep_failing=False, answer="removed"):
    """Iterative pruning by ablation (notebook 06), right (the defaults) or with one mistake."""

    def run_pruning(model, data, max_drop):
        mask = np.ones(model.n_heads)
        start = previous = T.accuracy(model, *data, mask)
        ranking = list(np.argsort(PR.ablation_drops(model, *data), kind="stable"))
        removed = []
        while mask.sum() > 1:
            alive = np.flatnonzero(mask)
            drops = PR.ablation_drops(model, *data, mask)
            if pick == "one-shot":
                head = [h for h in ranking if mask[h]][0]
            else:
                head = alive[(np.argmax if pick == "most" else np.argmin)(drops[alive])]
            trial = mask.copy()
            trial[head] = 0.0
            acc = T.accuracy(model, *data, trial)
            over = {"start": start, "previous": previous, "one": 1.0}[base] - acc > max_drop
            if over and not keep_failing:
                break
            mask, previous = trial, acc
            removed.append(int(head))
            if over:
                break
        return {"removed": removed, "kept": np.flatnonzero(mask).tolist(), "mask": mask}[answer]

    return run_pruning


def roles(score=lambda w, o: H.offset_score(w, -o), threshold=True, out="offset"):
    """The lookup of each head (notebook 06), right (the defaults) or with one mistake."""

    def head_roles(w, offsets, t):
        scores = np.stack([score(w, o) for o in offsets])  # (offsets, heads)
        best = scores.argmax(axis=0)
        value = {"offset": np.asarray(offsets)[best], "index": best, "score": scores.max(0)}[out]
        return np.where(scores.max(axis=0) >= t, value, 0) if threshold else value

    return head_roles


def wrapped_score(w, o):
    n = w.shape[-1]
    return np.mean([w[..., i, (i - o) % n] for i in range(n)], axis=(0, 1))


MUTANTS = {
    "check_log_softmax_list": [
        ("naive", list_log_softmax(shift=None), "overflowed on scores near 1000"),
        ("min shift", list_log_softmax(shift=min), "other than its largest score"),
        ("log of weights", list_log_softmax(log_of_weights=True), "log of 0.0, which fails"),
        (
            "log of weights, guarded",
            list_log_softmax(log_of_weights=True, guard=True),
            "as if they were masked",
        ),
        ("weights", L.softmax, "the weights themselves"),
        ("no log-sum", lambda row: [s - max(row) for s in row], "not the log of the sum"),
        (
            "sum, not log",
            lambda row: [s - max(row) - sum(math.exp(x - max(row)) for x in row) for s in row],
            "not the sum itself",
        ),
        ("sign", lambda row: [-x for x in list_log_softmax()(row)], "sign is flipped"),
        ("masked 0", masked_to(0.0), "you gave it 0"),
        ("masked NaN", masked_to(math.nan), "the log-softmax of the unmasked scores alone"),
        ("all-masked zeros", list_log_softmax(all_masked=0.0), "you returned [0.0, 0.0, 0.0]"),
        ("all-masked crash", list_log_softmax(), "return that, without an error."),
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
        (
            "times sqrt",
            attention(scale=lambda d: 1 / math.sqrt(d)),
            "multiplied the scores by sqrt",
        ),
        ("w @ k", attn_k, "it is weights @ v"),
        ("no max shift", attention_no_shift, "exp overflowed on scores near"),
    ],
    "check_sliding_window_mask_list": [
        ("causal", window(lambda i, j, w: j <= i), "plain causal mask"),
        ("one too many", window(lambda i, j, w: 0 <= i - j <= w), "window + 1 keys"),
        ("one too few", window(lambda i, j, w: 0 <= i - j < w - 1), "only window - 1 keys"),
        ("no diagonal", window(lambda i, j, w: 0 < i - j <= w), "cannot attend to itself"),
        ("symmetric", window(lambda i, j, w: abs(i - j) < w), "reaches into the future"),
        ("transposed", window(lambda i, j, w: 0 <= j - i < w), "transposed"),
        ("inverted", window(lambda i, j, w: not 0 <= i - j < w), "wrong way round"),
        ("ints", window(lambda i, j, w: 0 <= i - j < w, as_int=True), "as int64 numbers"),
        ("window 3", window(lambda i, j, w: 0 <= i - j < 3), "ignores `window`"),
    ],
    "check_causal_mask": [
        ("top-left", lambda n_q, n_k: np.tri(n_q, n_k, dtype=bool), "LAST n_q positions"),
        (
            "no cache",
            lambda n_q, n_k: np.pad(np.tri(n_q, dtype=bool), ((0, 0), (n_k - n_q, 0))),
            "cannot see the cached keys",
        ),
        (
            "one too many",
            lambda n_q, n_k: np.tri(n_q, n_k, k=n_k - n_q + 1, dtype=bool),
            "sees the key after",
        ),
        (
            "one too few",
            lambda n_q, n_k: np.tri(n_q, n_k, k=n_k - n_q - 1, dtype=bool),
            "cannot see its own position",
        ),
        (
            "wrong direction",
            lambda n_q, n_k: np.tri(n_q, n_k, k=n_q - n_k, dtype=bool),
            "diagonal the wrong way",
        ),
        ("inverted", lambda n_q, n_k: ~lib_causal_mask(n_q, n_k), "wrong way round"),
        ("transposed", lambda n_q, n_k: lib_causal_mask(n_q, n_k).T, "one row per key"),
        ("ints", lambda n_q, n_k: lib_causal_mask(n_q, n_k).astype(int), "as int64 numbers"),
    ],
    "check_padding_mask": [
        ("inverted", lambda ls, n: ~lib_padding_mask(ls, n), "wrong way round"),
        (
            "plus one",
            lambda ls, n: lib_padding_mask(np.minimum(np.array(ls) + 1, n), n),
            "key L is already padding",
        ),
        (
            "minus one",
            lambda ls, n: lib_padding_mask(np.maximum(np.array(ls) - 1, 0), n),
            "marked only L-1",
        ),
        ("2-D", lambda ls, n: lib_padding_mask(ls, n)[:, 0, 0], "broadcasts over heads"),
        ("ints", lambda ls, n: lib_padding_mask(ls, n).astype(int), "use booleans"),
    ],
    "check_split_heads": [
        (
            "straight reshape",
            lambda x, h: x.reshape(*x.shape[:-2], h, x.shape[-2], -1),
            "cuts the sequence",
        ),
        (
            "interleaved",
            lambda x, h: np.moveaxis(x.reshape(*x.shape[:-1], -1, h), -1, -3),
            "contiguous block",
        ),
        ("no transpose", lambda x, h: x.reshape(*x.shape[:-1], h, -1), "behind seq"),
        ("fixed axes", split_fixed, "any number of leading axes"),
        ("counted from the front", lambda x, h: split_any(x, h, (1, 2)), "axes 1 and 2"),
        ("swapped 0 and 1", lambda x, h: split_any(x, h, (0, 1)), "axes 0 and 1"),
    ],
    "check_merge_heads": [
        ("no transpose", lambda x: x.reshape(*x.shape[:-3], x.shape[-2], -1), "mixes tokens"),
        (
            "interleaved",
            lambda x: np.moveaxis(x, -3, -1).reshape(*x.shape[:-3], x.shape[-2], -1),
            "interleaves",
        ),
        ("no reshape", lambda x: np.swapaxes(x, -3, -2), "one axis of heads * d_k"),
        ("fixed axes", merge_fixed, "any number of leading axes"),
        ("counted from the front", lambda x: merge_any(x, (1, 2)), "axes 1 and 2"),
    ],
    "check_param_count": [
        ("standard formula", lambda d, s, h, k, v, b: 4 * d * d + (4 * d if b else 0), "standard"),
        ("source width", count(k="d"), "d_source features"),
        ("one head", lambda d, s, h, k, v, b: count()(d, s, 1, k, v, b), "you counted one head"),
        ("d_k for values", count(v="k"), "not d_k"),
        ("square W_o", count(o="d*d"), "not (d_model, d_model)"),
        ("no W_o", count(o=None), "left out the output projection W_o"),
        ("biases of d_model", count(biases="d_model"), "each bias has the length"),
        ("b_o of heads * d_v", count(biases="b_o=h*d_v"), "b_o is added"),
        ("no b_o", count(biases="no b_o"), "projection's bias b_o"),
        ("biases never", count(biases="never"), "also has a bias vector"),
        ("biases always", count(biases="always"), "no bias vectors to count"),
        ("float", lambda *args: float(count()(*args)), "whole number"),
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
        ("sign", lambda *a: -PR.ablation_drops(*a), "sign is flipped"),
        (
            "accuracies",
            lambda m, i, t: T.accuracy(m, i, t) - PR.ablation_drops(m, i, t),
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
                - PR.ablation_drops(m, i, t) * 0
                - (T.accuracy(m, i, t) - PR.ablation_drops(m, i, t))
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
    "check_head_count_sweep": [
        ("training batch", sweep(eval_on="train"), "accuracy on a training batch"),
        ("one generator", sweep(rng="one"), "one generator serves every run"),
        ("per seed", sweep(rng="per seed"), "carries on from one head count"),
        ("no early stop", sweep(stop=False), "carry on after reaching the target"),
        ("last step", sweep(steps="last"), "even for runs that never reached"),
        ("nats", sweep(entropy="nats"), "your entropies are in nats"),
        ("unseeded", sweep(rng="unseeded"), "run twice with the same seeds"),
        ("seed ignored", sweep(rng="constant"), "every seed gave the same run"),
        ("other held-out set", sweep(eval_on="other"), "do not come from eval_data"),
        ("other draws", sweep(rng="offset"), "draw other random numbers"),
        ("keys swapped", sweep(keys="seed"), "key each run by (h, seed)"),
    ],
    "check_smallest_sufficient_heads": [
        ("median", smallest(per_h=np.median), "compared the median seed"),
        ("any seed", smallest(per_h=max), "one seed reaching the target is not enough"),
        ("rounded", smallest(reached=lambda a, t: round(a, 2) >= t), "rounded the accuracies"),
        ("3 digits", smallest(reached=lambda a, t: round(a, 3) >= t), "0.9896 prints as 0.990"),
        ("first seed", smallest(per_h=lambda accs: accs[0]), "the first seed only"),
        ("strict", smallest(reached=lambda a, t: a > t), "compare with >=, not >"),
        ("index", by_index, "not its position"),
        ("first met", smallest(pick=lambda ok: ok[0]), "not the first one you met"),
        ("zero for none", smallest(none=0), "return None (not 0)"),
        ("mean", smallest(per_h=np.mean), "compared the mean over the seeds"),
        ("largest", smallest(pick=max), "the largest head count that suffices"),
        ("always 4", lambda results, target: 4, "the answer is 8, you returned 4"),
    ],
    "check_prune_heads": [
        ("one-shot", prune(pick="one-shot"), "ranking of the unpruned model"),
        ("most important", prune(pick="most"), "the most important one"),
        ("off by one", prune(keep_failing=True), "stop before that step, not after it"),
        ("previous step", prune(base="previous"), "not with the step before"),
        ("from 1", prune(base="one"), "measured the drop from 1"),
        ("survivors", prune(answer="kept"), "those are the heads that survive"),
        ("mask", prune(answer="mask"), "looks like a head mask"),
    ],
    "check_head_roles": [
        ("negative", lambda *a: -H.head_roles(*a), "positive number"),
        ("forward", roles(score=lambda w, o: H.offset_score(w, o)), "key i - o"),
        ("no threshold", roles(threshold=False), "give it 0"),
        ("index", roles(out="index"), "not its position in offsets"),
        ("wrapped", roles(score=wrapped_score), "instead of counting them as 0"),
        ("scores", roles(out="score"), "those are the best mean weights"),
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
        ("sign", lambda a, b: -PR.spearman(a, b), "sign is flipped"),
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
    "check_find_offset_head": [
        ("sign", lambda w, m, o: offset_head(w, m, o, sign=-1), "key i + offset (offset -1"),
        (
            "swapped",
            lambda w, m, o: (lambda r: (r[1], r[0], r[2]))(offset_head(w, m, o)),
            "(head, layer",
        ),
        (
            "from 1",
            lambda w, m, o: (lambda r: (r[0] + 1, r[1] + 1, r[2]))(offset_head(w, m, o)),
            "counted from 1",
        ),
        (
            "wraps",
            lambda w, m, o: offset_head(w, m, o, wrap=True, queries=lambda m, i, o, n: m),
            "wrap around",
        ),
        (
            "no-target queries as 0",
            lambda w, m, o: offset_head(w, m, o, queries=lambda m, i, o, n: m),
            "counting those without a key",
        ),
        (
            "padding targets",
            lambda w, m, o: offset_head(
                w, m, o, queries=lambda m, i, o, n: m & (i + o >= 0) & (i + o < n)
            ),
            "key i + offset is padding",
        ),
        ("no score", lambda w, m, o: offset_head(w, m, o)[:2], "return the winning head's score"),
        ("flat", lambda w, m, o: offset_head(w, m, o)[0] * w.shape[2], "flat index"),
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
    "check_torch_mask": [
        ("unchanged", torch_mask(invert=False), "True means 'may NOT attend'"),
        ("head-major", torch_mask(head_major=True), "ordered head by head"),
        ("first head", torch_mask(first_head=True), "the first head's mask"),
        ("numpy", lambda m, h: torch_mask()(m, h).numpy(), "not ndarray"),
        ("one per sequence", lambda m, h: torch_mask()(m, h)[::h], "per sequence *and head*"),
        (
            "float additive",
            lambda m, h: torch.zeros(torch_mask()(m, h).shape, dtype=torch.float64).masked_fill(
                torch_mask()(m, h), -torch.inf
            ),
            "additive float mask",
        ),
        ("float 0/1", lambda m, h: torch_mask()(m, h).double(), "0/1 values would not block"),
    ],
    "check_from_torch": [
        ("not transposed", from_torch(transpose=False), "transpose each block"),
        ("order", from_torch(order=(1, 0, 2)), "blocks are in the wrong order"),
        ("reshape", from_torch(reshape=True), "reshaping does not transpose"),
        ("W_o", from_torch(w_o_t=False), "W_o is out_proj.weight transposed"),
        ("biases dropped", from_torch(biases=False), "copy them into b_q, b_k, b_v and b_o"),
        ("bias order", from_torch(bias_order=(1, 0, 2)), "biases are in the wrong order"),
        ("tuple", lambda m: (m.in_proj_weight, m.out_proj.weight), "not a tuple"),
    ],
    "check_torch_attention": [
        (
            "NaN left",
            torch_attention(fix=False, zero_weights=False, output=None),
            "NaN for the queries with nothing to attend to",
        ),
        ("not inverted", torch_attention(invert=False), "NaN for queries that may attend"),
        ("weights kept", torch_attention(zero_weights=False), "must get weights 0"),
        ("output kept", torch_attention(output=None), "must be what lib gives"),
        ("output 0", torch_attention(output=0), "is b_o, not 0"),
        ("head-major mask", torch_attention(head_major=True), "the mask reached the wrong heads"),
        (
            "averaged weights",
            lambda *a: (lambda r: (r[0], r[1].mean(axis=1)))(torch_attention()(*a)),
            "average_attn_weights=False",
        ),
    ],
}


MUTANTS.update(NB09_MUTANTS)
MUTANTS["check_sinusoidal_shift"] = [
    *NB09_MUTANTS["check_sinusoidal_shift"],
    ("least squares", least_squares_shift, "as a least-squares fit gives"),
]


MUTANTS.update(NB10_MUTANTS)  # notebook 10's, written in test_checks_10.py
MUTANTS.update(NB11_MUTANTS)  # notebook 11's, written in test_checks_11.py
CASES = [(name, label, fn, fragment) for name, ms in MUTANTS.items() for label, fn, fragment in ms]


def test_every_check_has_mutants():
    assert set(MUTANTS) == set(REFERENCES)


@pytest.mark.parametrize(
    "name, label, fn, fragment", CASES, ids=[f"{n}-{label}" for n, label, _, _ in CASES]
)
def test_mutant_gets_its_message(name, label, fn, fragment):
    message = mutant_message(name, label, fn)
    assert fragment in message, message
    assert "\n" not in message


MESSAGES = {}  # (check, mutant) -> its message: the two tests share one run of each mutant


def mutant_message(name, label, fn):
    if (name, label) not in MESSAGES:
        MESSAGES[name, label] = message_of(REFERENCES[name][0], fn)
    return MESSAGES[name, label]


@pytest.mark.parametrize("name", list(MUTANTS))
def test_different_mutants_get_different_messages(name):
    messages = {label: mutant_message(name, label, fn) for label, fn, _ in MUTANTS[name]}
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
    message_of(checks.check_log_softmax_list, list_log_softmax(shift=min))
    message_of(checks.check_softmax, np_softmax(shift=lambda x: x.min(-1, keepdims=True)))


def test_cross_entropy_grad_on_an_unstabilised_softmax_fails():
    assert "overflows" in message_of(checks.check_cross_entropy_grad, ce(softmax=naive))


# --------------------------------------------------------------------------- helpers' stubs


def test_a_stub_in_a_helper_is_blamed_on_the_helper():
    def to_torch_mask(mask, n_heads):
        raise NotImplementedError()

    def torch_attention(module, x_q, x_kv, mask):
        blocked = to_torch_mask(mask, module.num_heads)
        return module(x_q, x_kv, x_kv, attn_mask=blocked)

    message = message_of(checks.check_torch_attention, torch_attention)
    assert message.startswith("torch_attention calls to_torch_mask, which is not implemented"), (
        message
    )
    assert "torch_attention is not implemented" not in message
    assert "not implemented yet" in message_of(checks.check_torch_attention, stub)


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
    shell.run_cell("checks.check_log_softmax_list(wrong)")
    ((etype, stb),) = shown
    assert etype is CheckFailed
    assert len(stb) == 1 and "CheckFailed" in stb[0] and "sum to 1" in stb[0], stb
    shown.clear()
    shell.run_cell("1 / 0")  # any other exception keeps its traceback
    ((etype, stb),) = shown
    assert etype is ZeroDivisionError and len(stb) > 1
