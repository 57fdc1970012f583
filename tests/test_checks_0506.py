"""Checks of notebooks 05 and 06: each accepts the reference, reports a stub, and names
the mistakes students make."""

import numpy as np
from helpers import rejects, stub

from lib import checks
from lib import pruning as P
from lib import tiny as T
from lib.backprop import softmax_backward

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
    checks.check_ablation_drops(P.ablation_drops)
    assert capsys.readouterr().out.startswith("✓ ablation_drops")
    check = checks.check_ablation_drops

    def only_head(model, ids, targets):
        base = T.accuracy(model, ids, targets)
        eye = np.eye(model.n_heads)
        return np.array([base - T.accuracy(model, ids, targets, eye[h]) for h in range(len(eye))])

    def accuracies(model, ids, targets):
        return T.accuracy(model, ids, targets) - P.ablation_drops(model, ids, targets)

    rejects(check, stub, "not implemented yet")
    rejects(check, lambda *a: -P.ablation_drops(*a), "sign is flipped")
    rejects(check, only_head, "kept only head h")
    rejects(check, accuracies, "accuracies with each head off")
    rejects(check, lambda *a: P.ablation_drops(*a)[:-1], "one drop per head")


def test_gradient_importance_check(capsys):
    checks.check_gradient_importance(P.gradient_importance)
    checks.check_gradient_importance(lambda *a: 3.0 * P.gradient_importance(*a))  # a sum
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
    rejects(check, lambda *a: -P.gradient_importance(*a), "wrong values")


def test_spearman_check(capsys):
    checks.check_spearman(P.spearman)
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
    rejects(check, lambda a, b: -P.spearman(a, b), "sign is flipped")
    rejects(check, lambda a, b: None, "should return one number")
