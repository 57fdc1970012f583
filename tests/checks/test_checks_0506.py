"""Checks of notebooks 05 and 06: each accepts the reference (and the right answers that
differ from it only where the exercise leaves a choice), reports a stub, and names the
mistakes students make (more of them, each with its own message, in test_check_mutants.py)."""

import numpy as np
from helpers import lib_answers, rejects, stub, unrefused

from lib import attention as A
from lib import checks
from lib import heads as H
from lib import pruning as PR
from lib import tiny as T
from lib.backprop import softmax_backward

# lib's answers, unrefused: the references of the checks that refuse them
H, PR = lib_answers(H), lib_answers(PR)
softmax_backward = unrefused(softmax_backward)

# --------------------------------------------------------------------------- 05


def test_softmax_backward_check(capsys):
    checks.check_softmax_backward(softmax_backward)
    assert capsys.readouterr().out.startswith("✓ softmax_backward")
    check = checks.check_softmax_backward
    rejects(check, stub, "not implemented yet")
    rejects(check, lambda p, g: p * g, "only the diagonal of the Jacobian")
    rejects(check, lambda p, g: p * (1 - p) * g, "off-diagonal terms -p_i p_j")
    rejects(check, lambda p, g: g - (g * p).sum(-1, keepdims=True), "multiply by p")
    rejects(check, lambda p, g: p * (g - (g * p).sum(-2, keepdims=True)), "wrong axis")
    rejects(check, lambda p, g: p * ((g * p).sum(-1, keepdims=True) - g), "sign is flipped")
    rejects(check, lambda p, g: p * g[..., :1], "should sum to 0")
    rejects(check, lambda p, g: p, "should sum to 0")  # rows of p sum to 1
    rejects(check, lambda p, g: g - g.mean(-1, keepdims=True), "wrong values")
    rejects(check, lambda p, g: p[0], "expected a gradient shaped like the weights")


def ce_grad(logits, targets):
    return T.cross_entropy(logits, targets)[1]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_cross_entropy_grad_check(capsys):
    checks.check_cross_entropy_grad(ce_grad)
    assert capsys.readouterr().out.startswith("✓ cross_entropy_grad")
    check = checks.check_cross_entropy_grad

    def onehot(logits, targets):
        return np.eye(logits.shape[-1])[targets]  # -1 silently picks the last class

    def no_mask(logits, targets):
        count = (targets != -1).sum()
        return (softmax(logits) - onehot(logits, targets)) / count

    def summed(logits, targets):
        scored = (targets != -1)[..., None]
        return (softmax(logits) - onehot(logits, np.maximum(targets, 0))) * scored

    def over_all_positions(logits, targets):
        scored = (targets != -1)[..., None]
        return (softmax(logits) - onehot(logits, np.maximum(targets, 0))) * scored / targets.size

    rejects(check, stub, "not implemented yet")
    rejects(check, no_mask, "not be treated as the last class")
    rejects(check, summed, "divide by their count")
    rejects(check, over_all_positions, "*scored* answers")
    rejects(check, lambda lg, t: -ce_grad(lg, t), "sign is flipped")
    rejects(check, lambda lg, t: softmax(lg) * (t != -1)[..., None] / (t != -1).sum(), "subtract 1")
    rejects(check, lambda lg, t: ce_grad(lg, t)[0], "shaped like the logits")


def adam(param, grad, m, v, t, lr, b1, b2, eps, correct=True, sign=-1, root=True, t_shift=0):
    m = b1 * m + (1 - b1) * grad
    v = b2 * v + (1 - b2) * grad**2
    tc = t + t_shift
    m_hat = m / (1 - b1**tc) if correct else m
    v_hat = v / (1 - b2**tc) if correct else v
    step = m_hat / ((np.sqrt(v_hat) if root else v_hat) + eps)
    return param + sign * lr * step, m, v


def test_adam_step_check(capsys):
    checks.check_adam_step(adam)
    assert capsys.readouterr().out.startswith("✓ adam_step")
    check = checks.check_adam_step
    rejects(check, stub, "not implemented yet")
    rejects(check, lambda *a: adam(*a, correct=False), "bias correction is missing")
    rejects(check, lambda *a: adam(*a, sign=+1), "uphill")
    rejects(check, lambda *a: adam(*a, root=False), "square root")
    rejects(check, lambda *a: adam(*a, t_shift=-1) if a[4] > 1 else adam(*a), "wrong t")

    def m_not_averaged(param, grad, m, v, t, lr, b1, b2, eps):
        _, _, v = adam(param, grad, m, v, t, lr, b1, b2, eps)
        m = b1 * m + grad
        return param - lr * m / (np.sqrt(v) + eps), m, v

    rejects(check, m_not_averaged, "running *average*")

    def v_of_abs(param, grad, m, v, t, lr, b1, b2, eps):
        p, m, _ = adam(param, grad, m, v, t, lr, b1, b2, eps)
        return p, m, b2 * v + (1 - b2) * np.abs(grad)

    rejects(check, v_of_abs, "squared")
    rejects(check, lambda *a: adam(*a)[0], "tuple (param, m, v)")


# --------------------------------------------------------------------------- 06


def test_ablation_drops_check(capsys):
    checks.check_ablation_drops(PR.ablation_drops)
    assert capsys.readouterr().out.startswith("✓ ablation_drops")
    check = checks.check_ablation_drops

    def only_head(model, ids, targets):
        base = T.accuracy(model, ids, targets)
        eye = np.eye(model.n_heads)
        return np.array([base - T.accuracy(model, ids, targets, eye[h]) for h in range(len(eye))])

    def accuracies(model, ids, targets):
        return T.accuracy(model, ids, targets) - PR.ablation_drops(model, ids, targets)

    rejects(check, stub, "not implemented yet")
    rejects(check, lambda *a: -PR.ablation_drops(*a), "sign is flipped")
    rejects(check, only_head, "kept only head h")
    rejects(check, accuracies, "accuracies with each head off")
    rejects(check, lambda *a: PR.ablation_drops(*a)[:-1], "one drop per head")


def test_gradient_importance_check(capsys):
    checks.check_gradient_importance(PR.gradient_importance)
    checks.check_gradient_importance(lambda *a: 3.0 * PR.gradient_importance(*a))  # a sum
    out = capsys.readouterr().out
    assert out.count("✓ gradient_importance") == 2
    check = checks.check_gradient_importance

    def signed(model, ids, targets):
        _, g = model.loss_and_grads(ids, targets, np.ones((len(ids), model.n_heads)))
        return g["head_mask"].mean(axis=0)

    def abs_after_sum(model, ids, targets):
        _, g = model.loss_and_grads(ids, targets, np.ones(model.n_heads))
        return np.abs(g["head_mask"])

    def at_zero(model, ids, targets):
        _, g = model.loss_and_grads(ids, targets, np.zeros((len(ids), model.n_heads)))
        return np.abs(g["head_mask"]).mean(axis=0)

    rejects(check, stub, "not implemented yet")
    rejects(check, signed, "take the absolute value")
    rejects(check, abs_after_sum, "per sequence before averaging")
    rejects(check, at_zero, "all heads on")
    rejects(check, lambda *a: -PR.gradient_importance(*a), "wrong values")


def test_spearman_check(capsys):
    checks.check_spearman(PR.spearman)
    assert capsys.readouterr().out.startswith("✓ spearman")
    check = checks.check_spearman

    def pearson(a, b):
        return float(np.corrcoef(a, b)[0, 1])

    def ordinal(a, b):
        def r(x):
            return np.argsort(np.argsort(x, kind="stable"), kind="stable")

        return float(np.corrcoef(r(a), r(b))[0, 1])

    def argsort_once(a, b):
        return float(np.corrcoef(np.argsort(a), np.argsort(b))[0, 1])

    rejects(check, stub, "not implemented yet")
    rejects(check, pearson, "Pearson correlation of the values")
    rejects(check, ordinal, "mean of their ranks")
    rejects(check, argsort_once, "argsort of the argsort")
    rejects(check, lambda a, b: -PR.spearman(a, b), "sign is flipped")
    rejects(check, lambda a, b: None, "should return one number")


# --------------------------------------------------------------------------- the experiments


def sweep_two_generators(
    make_model, make_batch, eval_data, head_counts, seeds, budget, target, every
):
    """The sweep with the model and the batches drawn from two generators of the same seed:
    every seed still starts every head count from the same numbers and the same batches."""
    results = {}
    for h in head_counts:
        for seed in seeds:
            model = make_model(h, np.random.default_rng(seed))
            r = np.random.default_rng(seed)
            log = T.train(model, make_batch, eval_data, budget, r, eval_every=every, stop_at=target)
            w = model.forward(eval_data[0])[1]
            results[h, seed] = {
                "accuracy": log.accuracy[-1],
                "steps": log.steps_to(target),
                "entropy": H.head_entropy_normalised(w, A.causal_mask(w.shape[-1])),
            }
    return results


def test_head_count_sweep_check_accepts_the_protocol_and_its_seeded_variant(capsys):
    checks.check_head_count_sweep(H.head_count_sweep)  # extra keys ("mean_weights") are fine
    checks.check_head_count_sweep(sweep_two_generators)
    out = capsys.readouterr().out
    assert out.count("✓ head_count_sweep") == 2
    rejects(checks.check_head_count_sweep, stub, "not implemented yet")
    rejects(
        checks.check_head_count_sweep,
        lambda *a: {k: {"accuracy": v["accuracy"]} for k, v in H.head_count_sweep(*a).items()},
        "'accuracy', 'steps' and 'entropy'",
    )
    rejects(
        checks.check_head_count_sweep,
        lambda *a: {k: v for k, v in list(H.head_count_sweep(*a).items())[1:]},
        "no entry for (h, seed) = (1, 0)",
    )


def smallest_by_steps(results, target):
    reached = {}
    for (h, _), run in results.items():
        reached[h] = reached.get(h, True) and run["steps"] is not None
    return min((h for h, ok in reached.items() if ok), default=None)


def smallest_by_accuracy(results, target):
    heads = sorted({h for h, _ in results})
    for h in heads:
        if all(run["accuracy"] >= target for (g, _), run in results.items() if g == h):
            return h
    return None


def test_smallest_sufficient_heads_check(capsys):
    checks.check_smallest_sufficient_heads(smallest_by_steps)
    checks.check_smallest_sufficient_heads(smallest_by_accuracy)  # the same when runs stop
    assert capsys.readouterr().out.count("✓ smallest_sufficient_heads") == 2
    check = checks.check_smallest_sufficient_heads
    rejects(check, stub, "not implemented yet")
    rejects(check, lambda r, t: None, "you returned None, but with 8 heads")
    rejects(check, lambda r, t: "8", "a head count (an integer) or None")
    rejects(check, lambda r, t: 1, "the answer is 8, you returned 1")


def prune_reference(model, select_data, max_drop):
    return [s.removed for s in PR.prune_iteratively(model, select_data, "ablation", max_drop)]


def prune_last_of_ties(model, select_data, max_drop):
    """Iterative pruning that breaks ties between equally unimportant heads the other way."""
    mask = np.ones(model.n_heads)
    start = T.accuracy(model, *select_data, mask)
    removed = []
    while mask.sum() > 1:
        drops = PR.ablation_drops(model, *select_data, mask)
        alive = np.flatnonzero(mask)
        head = int(alive[drops[alive] == drops[alive].min()][-1])
        trial = mask.copy()
        trial[head] = 0.0
        if start - T.accuracy(model, *select_data, trial) > max_drop:
            break
        mask = trial
        removed.append(head)
    return removed


def test_prune_heads_check_accepts_any_order_among_tied_heads(capsys):
    checks.check_prune_heads(lambda *a: prune_reference(*a)[1:])
    checks.check_prune_heads(prune_last_of_ties)
    assert capsys.readouterr().out.count("✓ prune_heads") == 2
    # ...and the two really differ on a model whose drops tie
    model, data = checks.nb06_pruning._trained(6, 24, 5)
    assert prune_reference(model, data, 0.01)[1:] != prune_last_of_ties(model, data, 0.01)
    check = checks.check_prune_heads
    rejects(check, stub, "not implemented yet")
    rejects(check, lambda *a: None, "the list of heads it removed")
    rejects(check, lambda *a: [9], "is not a head index")
    rejects(check, lambda *a: [float("nan")], "is not a head index")
    rejects(check, lambda *a: [0, 0], "removed twice")
    rejects(check, lambda *a: [1, 0, 0], "head 0 is removed twice")  # the repeated head
    rejects(check, lambda *a: [], "you stopped after 0 removal(s)")


def test_head_roles_check(capsys):
    checks.check_head_roles(H.head_roles)
    assert capsys.readouterr().out.startswith("✓ head_roles")
    rejects(checks.check_head_roles, stub, "not implemented yet")
    rejects(checks.check_head_roles, lambda w, o, t: np.ones(w.shape[1]), "wrong roles")
    rejects(checks.check_head_roles, lambda w, o, t: np.ones(3), "one role per head")
