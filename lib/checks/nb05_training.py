"""Checks of notebook 05 (training heads); the head-count sweep's checks are in ``nb05_sweep``."""

from collections.abc import Callable
from functools import partial

import numpy as np

from .. import attention as A
from .. import tiny as T
from ..backprop import softmax_backward
from ._core import (
    CheckFailed,
    as_array,
    call,
    close,
    diagnose,
    exercise,
    expect_shape,
    expect_tuple,
    passed,
    same_unstable,
)


@exercise
def check_softmax_backward(softmax_backward_fn: Callable) -> None:
    """Exercise (notebook 05): dL/dscores from p = softmax(scores) (last axis) and dL/dp."""
    name = "softmax_backward"
    rng = np.random.default_rng(5)
    for shape in ((2, 3, 4, 5), (3, 6)):  # (batch, heads, n_q, n_k), then (n_q, n_k)
        p = A.softmax(rng.normal(size=shape))
        g = rng.normal(size=p.shape)
        got = as_array(call(softmax_backward_fn, name, p, g), name)
        expect_shape(got, p.shape, name, "a gradient shaped like the weights")
        expected = softmax_backward(p, g)
        if close(got, expected, 1e-9):
            continue
        no_p = g - (g * p).sum(axis=-1, keepdims=True)
        mistakes = {
            "only the diagonal of the Jacobian is there; every score moves every "
            "weight of its row, so subtract the row's sum of g * p from g first.": p * g,
            "p * (1 - p) is only the diagonal of the softmax Jacobian; "
            "the off-diagonal terms -p_i p_j are missing.": p * (1 - p) * g,
            "multiply by p at the end: a weight of 0 must pass no gradient back.": no_p,
            "the sum runs over the wrong axis; softmax normalised the "
            "keys, the last axis.": softmax_backward(p, g, axis=-2),
            "the sign is flipped.": -expected,
        }
        diagnose(got, name, mistakes, tol=1e-9)
        if not np.allclose(got.sum(axis=-1), 0.0, atol=1e-9):
            raise CheckFailed(
                f"{name}: each row of the gradient should sum to 0 (adding a "
                "constant to a row of scores changes nothing); yours does not."
            )
        raise CheckFailed(f"{name}: wrong values; compare with the Jacobian derived above.")
    passed("softmax_backward: p * (g - sum(g * p)) along the keys; matches lib.")


@exercise
def check_cross_entropy_grad(grad_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 05): dL/dlogits of the mean cross-entropy over scored answers."""
    name = "cross_entropy_grad"
    # Ordinary logits, then logits of several hundred (a confident model), where a softmax
    # that is not stabilised overflows; a target of -1 is not scored.
    rng = np.random.default_rng(50)
    small, small_targets = rng.normal(size=(2, 5, 4)), rng.integers(0, 4, size=(2, 5))
    small_targets[:, 0] = small_targets[1, 3] = -1
    big = rng.normal(scale=300.0, size=(3, 4, 6))
    big[0, 1] += 900.0  # a row of logits near 1000
    big[2, 2] = [-900.0, -850.0, -880.0, -950.0, -870.0, -860.0]  # one near -900
    big_targets = rng.integers(0, 6, size=(3, 4))
    big_targets[0, 0] = big_targets[2, 3] = -1
    for logits, targets in ((small, small_targets), (big, big_targets)):
        with np.errstate(all="ignore"):
            got = as_array(call(grad_fn, name, logits, targets), name)
        expect_shape(got, logits.shape, name, "a gradient shaped like the logits")
        _, expected = T.cross_entropy(logits, targets)
        if close(got, expected, 1e-9):
            continue
        scored = targets != -1
        count, keep = scored.sum(), scored[..., None]
        probs = A.softmax(logits)
        onehot = np.eye(logits.shape[-1])[np.where(scored, targets, 0)]
        last_class = np.eye(logits.shape[-1])[targets]  # what index -1 picks

        def grad_from(p):
            return (p - onehot) * keep / count

        per_sequence = np.maximum(scored.sum(axis=-1), 1)[:, None, None] * len(targets)
        log_softmax = logits - logits.max(axis=-1, keepdims=True)
        log_softmax -= np.log(np.exp(log_softmax).sum(axis=-1, keepdims=True))
        summed = expected * count
        unscored, by_all = (probs - onehot) / count, summed / scored.size
        with np.errstate(all="ignore"):  # the softmax that is not stabilised overflows
            e, e_min = np.exp(logits), np.exp(logits - logits.min(-1, keepdims=True))
            mistakes = {
                "the loss is a mean over the scored answers, so divide by their count.": summed,
                "divide by the number of *scored* answers, not by all positions.": by_all,
                "you divided by the number of sequences (the batch size); "
                "divide by the number of scored answers.": summed / len(targets),
                "you averaged within each sequence first, so a sequence with few "
                "scored answers weighs as much as a full one; divide by the total "
                "count of scored answers.": (probs - onehot) * keep / per_sequence,
                "a target of -1 means 'not scored': those positions must get a zero "
                "gradient, not be treated as the last class.": (probs - last_class) / count,
                "positions whose target is -1 are not scored; their gradient must be 0.": unscored,
                "subtract 1 at the target class (softmax minus one-hot).": probs * keep / count,
                "the sign is flipped: it is softmax minus one-hot.": -expected,
                "your softmax overflows on logits of several hundred (exp(900) "
                "is inf, so you get NaN); subtract each row's largest "
                "logit before np.exp.": grad_from(e / e.sum(axis=-1, keepdims=True)),
                "you shifted the logits by each row's minimum, which still "
                "overflows when they are far apart; subtract each row's "
                "maximum.": grad_from(e_min / e_min.sum(axis=-1, keepdims=True)),
                "your softmax runs over the positions (axis -2); take it over the "
                "classes, the last axis.": grad_from(A.softmax(logits, axis=-2)),
                "your softmax runs over the batch (axis 0); take it over the "
                "classes, the last axis.": grad_from(A.softmax(logits, axis=0)),
                "you used the log-softmax; the gradient takes the softmax itself "
                "(probabilities) minus the one-hot.": grad_from(log_softmax),
            }
        diagnose(got, name, mistakes, same=partial(same_unstable, tol=1e-9))
        if not np.isfinite(got).all():
            raise CheckFailed(
                f"{name}: NaN or inf in the gradient for logits of several "
                "hundred; subtract each row's largest logit before np.exp."
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


@exercise
def check_adam_step(adam_step_fn: Callable) -> None:
    """Exercise (notebook 05): one Adam update, ``adam_step_fn(param, grad, m, v, t, lr, beta1,
    beta2, eps) -> (param, m, v)``, with t the number of this step, starting at 1."""
    name = "adam_step"
    lr, b1, b2, eps = _HYPER
    # A state in the middle of training (t = 5, moments not zero: there every mistake gives a
    # different answer), then three steps from the start, t = 1, 2, 3, on another shape.
    rng = np.random.default_rng(7)
    param = rng.normal(size=(3, 4))
    m, v = 0.1 * rng.normal(size=param.shape), 0.01 * rng.random(size=param.shape) + 1e-3
    steps = [(param, rng.normal(size=param.shape), m, v, 5)]
    param = rng.normal(size=(2, 5))
    m, v = np.zeros_like(param), np.zeros_like(param)
    for t in (1, 2, 3):
        steps.append((param, rng.normal(size=param.shape), m, v, t))
        param, m, v, _, _ = _adam_reference(*steps[-1], *_HYPER)
    for param, grad, m, v, t in steps:
        result = call(adam_step_fn, name, param, grad, m, v, t, *_HYPER)
        expect_tuple(result, 3, name, "a tuple (param, m, v)")
        got_p, got_m, got_v = (as_array(x, name) for x in result)
        for arr, what in ((got_p, "param"), (got_m, "m"), (got_v, "v")):
            expect_shape(arr, param.shape, name, f"the new {what}")
        new_p, new_m, new_v, m_hat, v_hat = _adam_reference(param, grad, m, v, t, *_HYPER)
        if not close(got_m, new_m, 1e-10):
            squares, unweighted = b1 * m + (1 - b1) * grad**2, b1 * m + grad
            mistakes = {
                "you returned the bias-corrected m_hat as the new m; keep m itself (the "
                "running average) as the state, and use m_hat only in the update.": m_hat,
                "m should be a running *average*: weight the "
                "new gradient by (1 - beta1).": unweighted,
                "m averages the gradient itself; it is v that averages its square.": squares,
            }
            diagnose(got_m, name, mistakes, tol=1e-10)
            raise CheckFailed(
                f"{name}: m is wrong at step t={t}; it is the running average of the gradient."
            )
        if not close(got_v, new_v, 1e-10):
            absolute = b2 * v + (1 - b2) * np.abs(grad)
            mistakes = {
                "you returned the bias-corrected v_hat as the new v; keep v itself (the "
                "running average) as the state, and use v_hat only in the update.": v_hat,
                "v averages the *squared* gradient, not its absolute value.": absolute,
                "v averages the *squared* gradient.": b2 * v + (1 - b2) * grad,
                "v should be a running *average*: weight the new "
                "squared gradient by (1 - beta2).": b2 * v + grad**2,
            }
            diagnose(got_v, name, mistakes, tol=1e-10)
            raise CheckFailed(
                f"{name}: v is wrong at step t={t}; it is the running average of grad**2."
            )
        if close(got_p, new_p, 1e-10):
            continue
        as_step = partial(_adam_reference, param, grad, m, v)  # this update as step s
        earlier, later = (as_step(s, *_HYPER)[0] if s > 0 else None for s in (t - 1, t + 1))
        eps_inside = param - lr * m_hat / np.sqrt(v_hat + eps)
        by_v_hat = param - lr * m_hat / (v_hat + eps)
        mistakes = {
            "the bias correction is missing: divide m by (1 - beta1**t) and v "
            "by (1 - beta2**t) before the update.": param - lr * new_m / (np.sqrt(new_v) + eps),
            "the parameter moved uphill; subtract the step.": 2 * param - new_p,
            "divide by the square root of v_hat, not by v_hat.": by_v_hat,
            "eps goes outside the square root: sqrt(v_hat) + eps.": eps_inside,
            "the bias correction uses the wrong t; t counts "
            "steps from 1, and this step is t.": earlier,
            "the bias correction uses t + 1; this step is t (counted from 1).": later,
        }
        diagnose(got_p, name, mistakes, tol=1e-10)
        raise CheckFailed(f"{name}: the new param is wrong at step t={t}.")
    passed("adam_step: running averages of g and g^2, bias-corrected, three steps match.")
