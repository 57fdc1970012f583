"""Checks of notebook 05 (training heads): the softmax backward pass, the gradient of the
cross-entropy, and one Adam step."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import attention as A
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    diagnose,
    expect_shape,
    passed,
    same_unstable,
)


def check_softmax_backward(
    softmax_backward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> None:
    """Exercise (notebook 05): dL/dscores from p = softmax(scores) (last axis) and dL/dp."""
    from ..backprop import softmax_backward

    name = "softmax_backward"
    rng = np.random.default_rng(5)
    for shape in ((2, 3, 4, 5), (3, 6)):  # (batch, heads, n_q, n_k), then (n_q, n_k)
        p = A.softmax(rng.normal(size=shape))
        g = rng.normal(size=p.shape)
        got = as_array(call(softmax_backward_fn, name, p.copy(), g.copy()), name)
        expect_shape(got, p.shape, name, "a gradient shaped like the weights")
        expected = softmax_backward(p, g)
        if close(got, expected, 1e-9):
            continue
        diagnose(
            got,
            [
                (
                    p * g,
                    f"{name}: only the diagonal of the Jacobian is there; every score moves "
                    "every weight of its row, so subtract the row's sum of g * p from g first.",
                ),
                (
                    p * (1 - p) * g,
                    f"{name}: p * (1 - p) is only the diagonal of the softmax Jacobian; the "
                    "off-diagonal terms -p_i p_j are missing.",
                ),
                (
                    g - (g * p).sum(axis=-1, keepdims=True),
                    f"{name}: multiply by p at the end: a weight of 0 must pass no gradient back.",
                ),
                (
                    lambda p=p, g=g: softmax_backward(p, g, axis=-2),
                    f"{name}: the sum runs over the wrong axis; softmax normalised the keys, "
                    "the last axis.",
                ),
                (-expected, f"{name}: the sign is flipped."),
            ],
            tol=1e-9,
        )
        if not np.allclose(got.sum(axis=-1), 0.0, atol=1e-9):
            raise CheckFailed(
                f"{name}: each row of the gradient should sum to 0 (adding a constant to a "
                "row of scores changes nothing); yours does not."
            )
        raise CheckFailed(f"{name}: wrong values; compare with the Jacobian derived above.")
    passed("softmax_backward: p * (g - sum(g * p)) along the keys; matches lib.")


def _ce_cases():
    """(logits, targets) pairs: ordinary logits, then logits of several hundred (a confident
    model) where an unstabilised softmax overflows, on another shape."""
    rng = np.random.default_rng(50)
    logits = rng.normal(size=(2, 5, 4))  # (batch, n, classes)
    targets = rng.integers(0, 4, size=(2, 5))
    targets[:, 0] = -1  # not scored
    targets[1, 3] = -1
    yield logits, targets
    big = rng.normal(scale=300.0, size=(3, 4, 6))
    big[0, 1] += 900.0  # a row of logits near 1000
    big[2, 2] = [-900.0, -850.0, -880.0, -950.0, -870.0, -860.0]  # one near -900
    targets = rng.integers(0, 6, size=(3, 4))
    targets[0, 0] = targets[2, 3] = -1
    yield big, targets


def _log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _ce_mistakes(name, logits, targets, expected):
    scored = targets != -1
    count = scored.sum()
    classes = logits.shape[-1]
    probs = A.softmax(logits)
    onehot = np.eye(classes)[np.where(scored, targets, 0)]
    keep = scored[..., None]

    def grad_from(p):
        return (p - onehot) * keep / count

    def naive(x, axis=-1):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)

    per_sequence = np.maximum(scored.sum(axis=-1), 1)[:, None, None]
    return [
        (
            expected * count,
            f"{name}: the loss is a mean over the scored answers, so divide by their count.",
        ),
        (
            expected * count / targets.size,
            f"{name}: divide by the number of *scored* answers, not by all positions.",
        ),
        (
            expected * count / targets.shape[0],
            f"{name}: you divided by the number of sequences (the batch size); divide by the "
            "number of scored answers.",
        ),
        (
            (probs - onehot) * keep / per_sequence / targets.shape[0],
            f"{name}: you averaged within each sequence first, so a sequence with few scored "
            "answers weighs as much as a full one; divide by the total count of scored answers.",
        ),
        (
            lambda: (probs - np.eye(classes)[targets]) / count,
            f"{name}: a target of -1 means 'not scored': those positions must get a zero "
            "gradient, not be treated as the last class.",
        ),
        (
            (probs - onehot) / count,
            f"{name}: positions whose target is -1 are not scored; their gradient must be 0.",
        ),
        (probs * keep / count, f"{name}: subtract 1 at the target class (softmax minus one-hot)."),
        (-expected, f"{name}: the sign is flipped: it is softmax minus one-hot."),
        (
            lambda: grad_from(naive(logits)),
            f"{name}: your softmax overflows on logits of several hundred (exp(900) is inf, so "
            "you get NaN); subtract each row's largest logit before np.exp.",
        ),
        (
            lambda: grad_from(naive(logits - logits.min(axis=-1, keepdims=True))),
            f"{name}: you shifted the logits by each row's minimum, which still overflows when "
            "they are far apart; subtract each row's maximum.",
        ),
        (
            lambda: grad_from(A.softmax(logits, axis=-2)),
            f"{name}: your softmax runs over the positions (axis -2); take it over the "
            "classes, the last axis.",
        ),
        (
            lambda: grad_from(A.softmax(logits, axis=0)),
            f"{name}: your softmax runs over the batch (axis 0); take it over the classes, "
            "the last axis.",
        ),
        (
            lambda: grad_from(_log_softmax(logits)),
            f"{name}: you used the log-softmax; the gradient takes the softmax itself "
            "(probabilities) minus the one-hot.",
        ),
    ]


def check_cross_entropy_grad(grad_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 05): dL/dlogits of the mean cross-entropy over scored answers."""
    from ..tiny import cross_entropy

    name = "cross_entropy_grad"
    for logits, targets in _ce_cases():
        with np.errstate(all="ignore"):
            got = as_array(call(grad_fn, name, logits.copy(), targets.copy()), name)
        expect_shape(got, logits.shape, name, "a gradient shaped like the logits")
        _, expected = cross_entropy(logits, targets)
        if close(got, expected, 1e-9):
            continue
        diagnose(got, _ce_mistakes(name, logits, targets, expected), same=same_unstable(1e-9))
        if not np.isfinite(got).all():
            raise CheckFailed(
                f"{name}: NaN or inf in the gradient for logits of several hundred; subtract "
                "each row's largest logit before np.exp."
            )
        raise CheckFailed(f"{name}: wrong values; the gradient is (softmax - one-hot) / count.")
    passed("cross_entropy_grad: (softmax - one-hot) / scored count, 0 where not scored.")


_HYPER = (0.01, 0.9, 0.999, 1e-8)  # lr, beta1, beta2, eps


def _adam_reference(param, grad, m, v, t, lr, b1, b2, eps):
    """The new (param, m, v) and the bias-corrected (m_hat, v_hat)."""
    new_m = b1 * m + (1 - b1) * grad
    new_v = b2 * v + (1 - b2) * grad**2
    m_hat, v_hat = new_m / (1 - b1**t), new_v / (1 - b2**t)
    return param - lr * m_hat / (np.sqrt(v_hat) + eps), new_m, new_v, m_hat, v_hat


def _adam_steps():
    """(param, grad, m, v, t) of each step checked: first a state in the middle of training
    (t = 5, moments not zero: there every mistake gives a different answer), then three
    steps from the start, t = 1, 2, 3, on another shape."""
    rng = np.random.default_rng(7)
    param = rng.normal(size=(3, 4))
    m = 0.1 * rng.normal(size=param.shape)
    v = 0.01 * rng.random(size=param.shape) + 1e-3
    steps = [(param, rng.normal(size=param.shape), m, v, 5)]
    param = rng.normal(size=(2, 5))
    m, v = np.zeros_like(param), np.zeros_like(param)
    for t in (1, 2, 3):
        grad = rng.normal(size=param.shape)
        steps.append((param, grad, m, v, t))
        param, m, v, _, _ = _adam_reference(param, grad, m, v, t, *_HYPER)
    return steps


def check_adam_step(adam_step_fn: Callable) -> None:
    """Exercise (notebook 05): one Adam update.

    ``adam_step_fn(param, grad, m, v, t, lr, beta1, beta2, eps) -> (param, m, v)``, with t the
    number of this step, starting at 1.
    """
    name = "adam_step"
    lr, b1, b2, eps = _HYPER
    for param, grad, m, v, t in _adam_steps():
        result = call(adam_step_fn, name, param.copy(), grad.copy(), m.copy(), v.copy(), t, *_HYPER)
        if not isinstance(result, tuple | list) or len(result) != 3:
            raise CheckFailed(
                f"{name} should return a tuple (param, m, v), got {type(result).__name__}."
            )
        got_p, got_m, got_v = (as_array(x, name) for x in result)
        for arr, what in ((got_p, "param"), (got_m, "m"), (got_v, "v")):
            expect_shape(arr, param.shape, name, f"the new {what}")
        new_p, new_m, new_v, m_hat, v_hat = _adam_reference(param, grad, m, v, t, *_HYPER)
        at = f"at step t={t}"
        if not close(got_m, new_m, 1e-10):
            diagnose(
                got_m,
                [
                    (
                        m_hat,
                        f"{name}: you returned the bias-corrected m_hat as the new m; keep "
                        "m itself (the running average) as the state, and use m_hat only in "
                        "the update.",
                    ),
                    (
                        b1 * m + grad,
                        f"{name}: m should be a running *average*: weight the new gradient "
                        "by (1 - beta1).",
                    ),
                    (
                        b1 * m + (1 - b1) * grad**2,
                        f"{name}: m averages the gradient itself; it is v that averages its "
                        "square.",
                    ),
                ],
                tol=1e-10,
            )
            raise CheckFailed(
                f"{name}: m is wrong {at}; it is the running average of the gradient."
            )
        if not close(got_v, new_v, 1e-10):
            diagnose(
                got_v,
                [
                    (
                        v_hat,
                        f"{name}: you returned the bias-corrected v_hat as the new v; keep "
                        "v itself (the running average) as the state, and use v_hat only in "
                        "the update.",
                    ),
                    (
                        b2 * v + (1 - b2) * np.abs(grad),
                        f"{name}: v averages the *squared* gradient, not its absolute value.",
                    ),
                    (
                        b2 * v + (1 - b2) * grad,
                        f"{name}: v averages the *squared* gradient.",
                    ),
                    (
                        b2 * v + grad**2,
                        f"{name}: v should be a running *average*: weight the new squared "
                        "gradient by (1 - beta2).",
                    ),
                ],
                tol=1e-10,
            )
            raise CheckFailed(f"{name}: v is wrong {at}; it is the running average of grad**2.")
        if close(got_p, new_p, 1e-10):
            continue

        def step(m_, v_, sign=-1.0, root=True):
            return param + sign * lr * m_ / ((np.sqrt(v_) if root else v_) + eps)

        diagnose(
            got_p,
            [
                (
                    step(new_m, new_v),
                    f"{name}: the bias correction is missing: divide m by (1 - beta1**t) "
                    "and v by (1 - beta2**t) before the update.",
                ),
                (
                    step(m_hat, v_hat, sign=+1.0),
                    f"{name}: the parameter moved uphill; subtract the step.",
                ),
                (
                    step(m_hat, v_hat, root=False),
                    f"{name}: divide by the square root of v_hat, not by v_hat.",
                ),
                (
                    param - lr * m_hat / np.sqrt(v_hat + eps),
                    f"{name}: eps goes outside the square root: sqrt(v_hat) + eps.",
                ),
                (
                    step(new_m / (1 - b1 ** (t - 1)), new_v / (1 - b2 ** (t - 1)))
                    if t > 1
                    else None,
                    f"{name}: the bias correction uses the wrong t; t counts steps from 1, "
                    "and this step is t.",
                ),
                (
                    step(new_m / (1 - b1 ** (t + 1)), new_v / (1 - b2 ** (t + 1))),
                    f"{name}: the bias correction uses t + 1; this step is t (counted from 1).",
                ),
            ],
            tol=1e-10,
        )
        raise CheckFailed(f"{name}: the new param is wrong {at}.")
    passed("adam_step: running averages of g and g^2, bias-corrected, three steps match.")
