"""Checks of notebook 06 (pruning heads), on small models trained here with different numbers
of heads (so that no shape can be hard-coded)."""

import copy
import functools
from collections.abc import Callable

import numpy as np

from .. import heads as H
from .. import pruning, tiny
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


@functools.cache
def _trained(n_heads: int, d_model: int, seed: int):
    """A briefly trained tiny model (trained once per process) and its evaluation data."""
    rng = np.random.default_rng(seed)
    model = tiny.init_tiny_model(5, 8, d_model, n_heads, 5, rng, n_slots=2)
    data = tiny.copy_offsets_task(64, 8, 5, (1, 3), np.random.default_rng(seed * 10))
    batch = functools.partial(tiny.copy_offsets_task, 32, 8, 5, (1, 3))
    tiny.train(model, batch, data, 40, rng, lr=0.02, eval_every=40)
    return model, data


def _per_head_answer(fn, name: str, what: str):
    """(answer, model, ids, targets) of two trained models; ``fn`` gets a copy of each."""
    for spec in ((4, 16, 6), (2, 12, 9)):
        model, (ids, targets) = _trained(*spec)
        got = as_array(call(fn, name, copy.deepcopy(model), ids, targets), name)
        expect_shape(got, (model.n_heads,), name, f"one {what} per head")
        yield got, model, ids, targets


@exercise
def check_ablation_drops(drops_fn: Callable) -> None:
    """Exercise (notebook 06): ``drops_fn(model, ids, targets) -> (heads,)`` accuracy drops."""
    name = "ablation_drops"
    for got, model, ids, targets in _per_head_answer(drops_fn, name, "drop"):
        expected = pruning.ablation_drops(model, ids, targets)
        if close(got, expected, 1e-9):
            continue
        base = tiny.accuracy(model, ids, targets)
        off = base - expected  # the accuracies with each head off
        only = base - np.array([tiny.accuracy(model, ids, targets, e) for e in np.eye(len(got))])
        mistakes = {
            "the sign is flipped: a head that helps should have a positive drop.": -expected,
            "these are the accuracies with each head off; subtract "
            "them from the accuracy with all heads on.": off,
            "you kept only head h (all the others off); switch off head h alone.": only,
            "measure the drop from the model's own accuracy with all heads, not from 1.": 1.0 - off,
        }
        diagnose(got, name, mistakes, tol=1e-9)
        raise CheckFailed(
            f"{name}: wrong values; set entry h of an all-ones head mask to 0, compare accuracies."
        )
    passed("ablation_drops: base accuracy minus accuracy with one head off, per head.")


def _proportional(a, b) -> bool:
    """``a`` is a positive multiple of ``b`` (only the ranking of importances is used)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all() and b.any()):
        return False
    scale = (a @ b) / (b @ b)
    return bool(scale > 0 and np.allclose(a, scale * b, rtol=1e-7, atol=1e-12 * np.abs(a).max()))


@exercise
def check_gradient_importance(importance_fn: Callable) -> None:
    """Exercise (notebook 06): ``importance_fn(model, ids, targets) -> (heads,)``, the mean over
    sequences of |dL/d mask_h| at an all-ones mask, or any positive multiple (only ranks count)."""
    name = "gradient_importance"
    for got, model, ids, targets in _per_head_answer(importance_fn, name, "importance"):
        if _proportional(got, pruning.gradient_importance(model, ids, targets)):
            continue
        ones = np.ones((ids.shape[0], model.n_heads))
        per_seq = model.loss_and_grads(ids, targets, ones)[1]["head_mask"]  # (batch, heads)
        at_zero = model.loss_and_grads(ids, targets, 0 * ones)[1]["head_mask"]
        mistakes = {
            "take the absolute value: a head whose mask gradient "
            "is negative matters too.": per_seq.sum(axis=0),
            "take |gradient| per sequence before averaging; with one mask for the whole batch, "
            "sequences that pull in opposite directions cancel.": np.abs(per_seq.sum(axis=0)),
            "measure the gradient at the model you have: all heads "
            "on (mask of ones), not off.": np.abs(at_zero).sum(axis=0),
        }
        diagnose(got, name, mistakes, same=_proportional)
        raise CheckFailed(
            f"{name}: wrong values; pass a (batch, heads) mask of ones so the backward pass "
            "gives one gradient per sequence and head."
        )
    passed("gradient_importance: mean over sequences of |dL/d mask_h|, per head.")


@exercise
def check_spearman(spearman_fn: Callable) -> None:
    """Exercise (notebook 06): Spearman rank correlation of two 1-D arrays, ties averaged."""
    name = "spearman"
    for a, b in (
        (np.array([0.30, 0.02, 0.11, 0.0, 0.0, 0.25]), np.array([0.9, 0.1, 0.7, 0.2, 0.3, 0.4])),
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([10.0, 20.0, 30.0, 1000.0])),
        (np.array([3.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0])),
    ):
        got = call(spearman_fn, name, a, b)
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise CheckFailed(
                f"{name} should return one number, got {type(got).__name__}."
            ) from None
        expected = pruning.spearman(a, b)
        if abs(got - expected) < 1e-9:
            continue
        pearson = np.corrcoef(a, b)[0, 1]
        untied = [np.argsort(np.argsort(x, kind="stable"), kind="stable") for x in (a, b)]
        mistakes = {
            "that is the Pearson correlation of the values; correlate their ranks.": pearson,
            "tied values must share the mean of their ranks (two values tied "
            "for ranks 1 and 2 both get 1.5).": np.corrcoef(*untied)[0, 1],
            "np.argsort gives the order, not the ranks; the rank of each value is the argsort of "
            "the argsort (then average the ties).": np.corrcoef(np.argsort(a), np.argsort(b))[0, 1],
            "the sign is flipped; rank both arrays in the same direction.": -expected,
        }
        diagnose(got, name, mistakes, tol=1e-9)
        raise CheckFailed(
            f"{name}: for a={a.tolist()} and b={b.tolist()} expected {expected:.4f}, got {got:.4f}."
        )
    passed("spearman: Pearson correlation of the ranks, ties averaged.")


def _removed_list(got, name: str, n_heads: int) -> list[int]:
    """The answer as a list of head indices, or a sentence saying why it is not one."""
    if isinstance(got, np.ndarray):
        got = got.tolist()
    if not isinstance(got, list | tuple):
        raise CheckFailed(
            f"{name} should return the list of heads it removed, in the order removed; got "
            f"{type(got).__name__}."
        )
    for h in got:
        if isinstance(h, bool) or not isinstance(h, int | float | np.integer | np.floating):
            raise CheckFailed(f"{name}: every entry should be a head index (an int), got {h!r}.")
        if not np.isfinite(h) or float(h) != int(h) or not 0 <= int(h) < n_heads:
            raise CheckFailed(f"{name}: {h!r} is not a head index 0..{n_heads - 1}.")
    values = [int(h) for h in got]
    if len(values) == n_heads and set(values) <= {0, 1} and n_heads > 2:
        raise CheckFailed(
            f"{name}: that looks like a head mask; return the heads removed, in the order removed."
        )
    twice = [h for i, h in enumerate(values) if h in values[:i]]
    if twice:
        raise CheckFailed(f"{name}: head {twice[0]} is removed twice; each head can go once.")
    return values


@exercise
def check_prune_heads(prune_fn: Callable) -> None:
    """Exercise (notebook 06): iterative pruning by ablation -> [heads removed, in order]. The
    answer is replayed: each step removes a head of smallest re-scored drop (any of tied heads),
    no step goes ``max_drop`` below the unpruned accuracy, and it stops only when one would."""
    name = "prune_heads"
    # (n_heads, d_model, seed, max_drop) of small models whose pruning removes some heads and
    # stops before the last: re-scoring changes the order in the first, drops tie at 0 in the
    # second (any of the tied heads may go), and the third starts well below accuracy 1.
    for n_heads, d_model, seed, max_drop in ((5, 20, 2, 0.02), (6, 24, 5, 0.01), (6, 12, 3, 0.1)):
        model, data = _trained(n_heads, d_model, seed)
        got = call(prune_fn, name, copy.deepcopy(model), (data[0].copy(), data[1].copy()), max_drop)
        removed = _removed_list(got, name, n_heads)
        kept = pruning.prune_iteratively(model, data, "ablation", max_drop)[-1].head_mask
        if len(removed) < n_heads - 1 and set(removed) == set(np.flatnonzero(kept).tolist()):
            raise CheckFailed(
                f"{name}: those are the heads that survive; return the ones removed, in the "
                "order removed."
            )
        _replay(name, model, data, removed, max_drop)
    passed("prune_heads: re-scored after every removal, stopped before a drop over max_drop.")


def _replay(name, model, data, removed, max_drop) -> None:
    """Raise what is wrong with pruning ``model`` by removing ``removed`` in order."""
    mask = np.ones(model.n_heads)
    start = previous = tiny.accuracy(model, *data, mask)
    first_order = [int(h) for h in np.argsort(pruning.ablation_drops(model, *data), kind="stable")]

    def cost(head):
        """How far below the unpruned accuracy removing ``head`` next takes the model."""
        return start - tiny.accuracy(model, *data, np.where(np.arange(mask.size) == head, 0, mask))

    for step, head in enumerate(removed, 1):
        alive = np.flatnonzero(mask)  # _removed_list let no head through twice
        drops = pruning.ablation_drops(model, *data, mask)
        weakest = int(alive[np.argmin(drops[alive])])
        if drops[head] > drops[weakest] + 1e-12:
            if head == int(alive[np.argmax(drops[alive])]):
                raise CheckFailed(
                    f"{name}: step {step} removes head {head}, the most important one; remove "
                    "the head whose removal costs the least accuracy."
                )
            if head == [h for h in first_order if mask[h]][0]:
                raise CheckFailed(
                    f"{name}: step {step} follows the ranking of the unpruned model; score the "
                    "heads again after every removal, with the removed heads switched off."
                )
            raise CheckFailed(
                f"{name}: at step {step} removing head {weakest} costs less accuracy than "
                f"removing head {head}; remove the least important head each time."
            )
        mask[head] = 0.0
        acc = tiny.accuracy(model, *data, mask)
        if start - acc > max_drop + 1e-12:
            if previous - acc <= max_drop + 1e-12 and step > 1 and start > previous:
                raise CheckFailed(
                    f"{name}: step {step} takes the accuracy {start - acc:.3f} below the "
                    "unpruned model's; compare every step with the unpruned accuracy, not with "
                    "the step before."
                )
            raise CheckFailed(
                f"{name}: step {step} takes the accuracy more than max_drop below the unpruned "
                "model's; stop before that step, not after it."
            )
        previous = acc
    alive = np.flatnonzero(mask)
    if len(alive) < 2:
        return
    drops = pruning.ablation_drops(model, *data, mask)
    weakest = int(alive[np.argmin(drops[alive])])
    if cost(weakest) > max_drop + 1e-12:
        return
    # Pruning stopped although the least important head could go: say why, if a known reason.
    ranked = [h for h in first_order if mask[h]][0]
    if drops[ranked] > drops[alive].min() + 1e-12 and cost(ranked) > max_drop:
        raise CheckFailed(
            f"{name}: you followed the ranking of the unpruned model (head {ranked} next); "
            "score the heads again after every removal, with the removed heads switched off."
        )
    if 1.0 - (start - cost(weakest)) > max_drop:
        raise CheckFailed(
            f"{name}: you stopped early because you measured the drop from 1; measure it from "
            "the unpruned model's own accuracy."
        )
    most = int(alive[np.argmax(drops[alive])])
    if cost(most) > max_drop:
        raise CheckFailed(
            f"{name}: you stopped after {len(removed)} removal(s), but head {weakest}, the "
            f"least important now, can go within max_drop; if you tried head {most}, the most "
            "important one, remove the least important head instead."
        )
    raise CheckFailed(
        f"{name}: you stopped after {len(removed)} removal(s), but removing head "
        f"{weakest} next keeps the accuracy within max_drop of the unpruned model's."
    )


def _pattern_weights(batch: int, n: int, heads) -> np.ndarray:
    """Causal attention weights (batch, heads, n, n): for each (o, share) a head lists, that
    share of each query's weight on the key o back, the rest spread (with noise) over the others."""
    rng = np.random.default_rng(n * 10 + len(heads))
    w = np.zeros((batch, len(heads), n, n))
    for b in range(batch):
        for h, pattern in enumerate(heads):
            for i in range(n):
                row = w[b, h, i]
                for o, share in pattern:
                    if i - o >= 0:
                        row[i - o] += share
                rest = [j for j in range(i + 1) if row[j] == 0]  # key i at least (o >= 1)
                row[rest] += rng.dirichlet(np.full(len(rest), 50.0)) * (1.0 - row.sum())
    return w


@exercise
def check_head_roles(roles_fn: Callable) -> None:
    """Exercise (notebook 06): per head, the offset ``o`` with the highest mean weight on key
    ``i - o`` (over the queries that have it), if at least ``threshold``, else 0."""
    name = "head_roles"
    heads = [
        [(1, 0.9)],  # the previous token
        [(3, 0.8)],  # three back
        [(1, 0.46), (3, 0.44)],  # a mix: no single lookup
        [],  # spread evenly
        [(2, 0.6)],  # two back, less sharply
    ]
    for w, offsets, threshold in (  # offsets out of order in the second
        (_pattern_weights(2, 8, heads), (1, 2, 3), 0.5),
        (_pattern_weights(3, 6, [[(2, 0.7)], [(1, 0.55)], [], [(1, 0.95)]]), (2, 1), 0.6),
    ):
        got = as_array(call(roles_fn, name, w, tuple(offsets), threshold), name)
        heads, n = w.shape[1], w.shape[-1]
        expect_shape(got, (heads,), name, "one role per head")
        expected = H.head_roles(w, offsets, threshold)
        if close(got, expected, 1e-12):
            continue
        offsets = np.asarray(offsets)
        scores = np.stack([H.offset_score(w, -o) for o in offsets])  # (offsets, heads)
        zeroed = scores * (n - offsets[:, None]) / n  # queries without a key o back as 0
        best, top = scores.argmax(axis=0), scores.max(axis=0)
        mistakes = {
            "give the offset as a positive number (3 for the key three back).": -expected,
            "every head got 0; the key o back of query i is key i - o (the keys "
            "after the query have weight 0 under the causal mask).": np.zeros(heads),
            "a head whose best mean weight is below threshold "
            "has no single lookup; give it 0.": offsets[best],
            "return the offset itself (an element of offsets), not its "
            "position in offsets.": np.where(top >= threshold, best, 0),
            "queries i < o have no key o back; leave them out of "
            "that offset's average instead of counting them as "
            "0.": np.where(zeroed.max(0) >= threshold, offsets[zeroed.argmax(0)], 0),
        }
        diagnose(got, name, mistakes, tol=1e-9)
        if close(got, top, 1e-9) or close(got, np.where(top >= threshold, top, 0), 1e-9):
            raise CheckFailed(
                f"{name}: those are the best mean weights; return "
                "the offset that gets them (0 below threshold)."
            )
        raise CheckFailed(
            f"{name}: wrong roles: expected {expected.tolist()}, got {got.tolist()}; compare "
            "each head's mean weight on key i - o for every o in offsets."
        )
    passed("head_roles: the offset a head looks at most, 0 below the threshold.")
