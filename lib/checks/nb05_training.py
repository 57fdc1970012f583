"""Checks of notebook 05 (training heads): the softmax backward pass, the gradient of the
cross-entropy, one Adam step, the head-count sweep run by its
protocol, and reading the sweep's results."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .. import attention as A
from .. import heads as H
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
    passed,
    same_unstable,
)


@exercise
def check_softmax_backward(
    softmax_backward_fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> None:
    """Exercise (notebook 05): dL/dscores from p = softmax(scores) (last axis) and dL/dp."""
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


@exercise
def check_cross_entropy_grad(grad_fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """Exercise (notebook 05): dL/dlogits of the mean cross-entropy over scored answers."""
    name = "cross_entropy_grad"
    for logits, targets in _ce_cases():
        with np.errstate(all="ignore"):
            got = as_array(call(grad_fn, name, logits.copy(), targets.copy()), name)
        expect_shape(got, logits.shape, name, "a gradient shaped like the logits")
        _, expected = T.cross_entropy(logits, targets)
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


@exercise
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


# --------------------------------------------------------------------------- the sweep


def _sweep_model(vocab: int, n: int, d_model: int, n_slots: int, n_heads: int, rng):
    """The model of a sweep run (module level, so that the grader can send it to a kernel)."""
    return T.init_tiny_model(vocab, n, d_model, n_heads, vocab, rng, n_slots=n_slots)


def _sweep_batch(n_seqs: int, n: int, vocab: int, offsets: tuple[int, ...], rng):

    return T.copy_offsets_task(n_seqs, n, vocab, offsets, rng)


# (vocab, n, d_model, offsets, head_counts, seeds, budget, target, eval_every): small sweeps
# with runs that reach the target early and runs that never do, on two shapes.
_SWEEPS = (
    (4, 6, 8, (1, 2), (1, 2), (0, 1), 100, 0.9, 10),
    (5, 8, 12, (1, 3), (1, 3), (3, 4), 90, 0.9, 15),
)


@functools.cache
def _sweep_eval(config: int, corrupt: bool = False):
    """The held-out data of a check sweep; ``corrupt``: every scored target moved to another
    class, so a run measured on these sequences can get almost nothing right."""
    vocab, n, _, offsets = _SWEEPS[config][:4]
    ids, targets = T.copy_offsets_task(48, n, vocab, offsets, np.random.default_rng(90 + config))
    if corrupt:
        targets = np.where(targets >= 0, (targets + 1) % vocab, targets)
    ids.flags.writeable = targets.flags.writeable = False
    return ids, targets


def _sweep_args(config: int, corrupt: bool = False):
    vocab, n, d_model, offsets, head_counts, seeds, budget, target, every = _SWEEPS[config]
    make_model = functools.partial(_sweep_model, vocab, n, d_model, len(offsets))
    make_batch = functools.partial(_sweep_batch, 16, n, vocab, offsets)
    ids, targets = _sweep_eval(config, corrupt)
    data = (ids.copy(), targets.copy())
    return make_model, make_batch, data, list(head_counts), list(seeds), budget, target, every


@functools.cache
def _sweep(config: int, variant: str = "") -> dict:
    """The sweep of check config ``config`` as the protocol runs it (variant ""), or as one
    realistic variant or mistake runs it: {(h, seed): (accuracy, steps, entropy)}."""

    make_model, make_batch, eval_data, head_counts, seeds, budget, target, every = _sweep_args(
        config
    )
    mask = A.causal_mask(eval_data[0].shape[1])
    one = np.random.default_rng(seeds[0])  # "one generator": made once, before the loops
    per_seed = {s: np.random.default_rng(s) for s in seeds}  # "one generator per seed"
    runs = {}
    for h in head_counts:
        for seed in seeds:
            rng = {"one generator": one, "per seed": per_seed.get(seed)}.get(variant)
            rng = np.random.default_rng(seed) if rng is None else rng
            model = make_model(h, rng)
            train_rng = np.random.default_rng(seed) if variant == "two generators" else rng
            data = make_batch(train_rng) if variant == "training batch" else eval_data
            stop = None if variant == "no early stop" else target
            log = T.train(
                model, make_batch, data, budget, train_rng, eval_every=every, stop_at=stop
            )
            weights = model.forward(data[0])[1]
            if variant == "entropy in nats":
                entropy = H.head_entropy(weights)
            else:
                entropy = H.head_entropy_normalised(weights, mask)
            steps = log.steps[-1] if variant == "last step" else log.steps_to(target)
            runs[h, seed] = (log.accuracy[-1], steps, entropy)
    return runs


def _read_sweep(got, name: str, head_counts, seeds) -> dict:
    """The answer as {(h, seed): (accuracy, steps, entropy)}, or a sentence saying what in
    its structure is not as asked."""
    keys = {(h, s) for h in head_counts for s in seeds}
    if not isinstance(got, dict):
        raise CheckFailed(
            f"{name} should return a dict with one entry per (h, seed) pair, got "
            f"{type(got).__name__}."
        )
    found = set(got)
    if found != keys:
        if found == {(s, h) for h, s in keys} and len(set(head_counts) | set(seeds)) > 1:
            raise CheckFailed(f"{name}: key each run by (h, seed), in that order.")
        missing = sorted(keys - found, key=str)
        if missing:
            raise CheckFailed(
                f"{name}: no entry for (h, seed) = {missing[0]}; the keys should be every "
                f"(h, seed) pair of head_counts {list(head_counts)} and seeds {list(seeds)}."
            )
        raise CheckFailed(
            f"{name}: unexpected key {sorted(found - keys, key=str)[0]!r}; the keys should be "
            f"the (h, seed) pairs of head_counts {list(head_counts)} and seeds {list(seeds)}."
        )
    runs = {}
    for (h, s), run in got.items():
        where = f"the run (h, seed) = ({h}, {s})"
        if not isinstance(run, dict) or not {"accuracy", "steps", "entropy"} <= set(run):
            raise CheckFailed(
                f"{name}: {where} should be a dict with the keys 'accuracy', 'steps' and 'entropy'."
            )
        try:
            accuracy = float(run["accuracy"])
        except (TypeError, ValueError):
            raise CheckFailed(f"{name}: {where} has an accuracy that is not a number.") from None
        steps = _as_steps(run["steps"])
        if steps is False:
            raise CheckFailed(
                f"{name}: {where}: 'steps' should be the step count at which the held-out "
                f"accuracy first reached the target, or None; got {run['steps']!r}."
            )
        entropy = as_array(run["entropy"], name, f"the entropy of {where}")
        expect_shape(entropy, (h,), name, f"one entropy per head for {where}")
        runs[h, s] = (accuracy, steps, entropy)
    return runs


def _as_steps(steps):
    """A step count (an int), None, or False when it is neither."""
    if steps is None:
        return None
    try:
        value = float(steps)
    except (TypeError, ValueError):
        return False
    return int(value) if value.is_integer() and not isinstance(steps, bool) else False


def _same_run(a, b, tol: float = 1e-9) -> bool:
    (acc, steps, ent), (acc_b, steps_b, ent_b) = a, b
    return abs(acc - acc_b) <= tol and steps == steps_b and close(ent, ent_b, tol)


def _same_runs(a, b) -> bool:
    if not isinstance(a, dict) or not isinstance(b, dict) or set(a) != set(b):
        return False
    return all(_same_run(run, b[key]) for key, run in a.items())


_SWEEP_MISTAKES = (
    (
        "training batch",
        "you measured accuracy on a training batch; measure it on eval_data, the held-out "
        "sequences the model never trains on.",
    ),
    (
        "one generator",
        "one generator serves every run, so each run starts where the previous one left "
        "off; make a new np.random.default_rng(seed) for each (h, seed).",
    ),
    (
        "per seed",
        "each seed's generator carries on from one head count to the next, so only the first "
        "head count starts from the seed; make a new np.random.default_rng(seed) for every run.",
    ),
    (
        "no early stop",
        "your runs carry on after reaching the target; stop a run once its held-out accuracy "
        "reaches it (lib.tiny.train's stop_at).",
    ),
    (
        "last step",
        "'steps' is the last step trained even for runs that never reached the target; it "
        "should be the first evaluated step at which the target was reached, or None.",
    ),
    (
        "entropy in nats",
        "your entropies are in nats; normalise each query's entropy by the log of the number "
        "of keys it may see (H.head_entropy_normalised), so that 1 means uniform.",
    ),
)


@exercise
def check_head_count_sweep(sweep_fn: Callable) -> None:
    """Exercise (notebook 05): the head-count sweep, run by the protocol.

    ``sweep_fn(make_model, make_batch, eval_data, head_counts, seeds, budget, target,
    eval_every) -> {(h, seed): {"accuracy", "steps", "entropy"}}``. Runs two small sweeps and
    compares with :func:`lib.heads.head_count_sweep` run by the same protocol (model and
    batches from one ``np.random.default_rng(seed)`` per run; two generators seeded alike are
    accepted). When they differ it names the mistake, or tests the protocol's rules one by one
    (the same seeds give the same runs, different seeds different ones, accuracy measured on
    the held-out data, ``steps`` consistent with the accuracy, entropies normalised).
    """
    name = "head_count_sweep"
    for config in range(len(_SWEEPS)):
        args = _sweep_args(config)
        head_counts, seeds, target = args[3], args[4], args[6]
        got = call(sweep_fn, name, *args)
        runs = _read_sweep(got, name, head_counts, seeds)
        if _same_runs(runs, _sweep(config)) or _same_runs(runs, _sweep(config, "two generators")):
            continue
        diagnose(
            runs,
            [(lambda v=v: _sweep(config, v), f"{name}: {m}") for v, m in _SWEEP_MISTAKES],
            same=_same_runs,
        )
        _protocol_rules(sweep_fn, name, config, runs, head_counts, seeds, target)
        raise CheckFailed(
            f"{name}: your runs keep the protocol's rules but draw other random numbers; "
            "use one generator per run, np.random.default_rng(seed), first for make_model(h, "
            "rng), then for training (lib.tiny.train with that rng)."
        )
    passed("head_count_sweep: seeded runs, held-out accuracy, early stop, normalised entropy.")


def _protocol_rules(sweep_fn, name, config, runs, head_counts, seeds, target) -> None:
    """Raise the first rule of the protocol that ``runs`` break (see check_head_count_sweep)."""
    for (h, s), (acc, steps, ent) in runs.items():
        where = f"(h, seed) = ({h}, {s})"
        if not 0 <= acc <= 1:
            raise CheckFailed(f"{name}: the accuracy of {where} is {acc:.3g}, not in [0, 1].")
        if steps is not None and acc < target:
            raise CheckFailed(
                f"{name}: {where} has steps = {steps} but ends at accuracy {acc:.3f}, below the "
                "target; stop a run once it reaches the target (lib.tiny.train's stop_at)."
            )
        if steps is None and acc >= target:
            raise CheckFailed(
                f"{name}: {where} ends at accuracy {acc:.3f}, at or above the target, but its "
                "'steps' is None; give the first evaluated step that reached the target."
            )
        if not np.all((ent >= -1e-12) & (ent <= 1 + 1e-12)):
            raise CheckFailed(
                f"{name}: the entropies of {where} are not all in [0, 1]; normalise each "
                "query's entropy by the log of the number of keys it may see."
            )
    again = _read_sweep(call(sweep_fn, name, *_sweep_args(config)), name, head_counts, seeds)
    if not _same_runs(runs, again):
        raise CheckFailed(
            f"{name}: run twice with the same seeds, your sweep gives other numbers; draw "
            "every run's random numbers from np.random.default_rng(seed)."
        )
    if len(seeds) > 1:
        for h in head_counts:
            if all(_same_run(runs[h, seeds[0]], runs[h, s]) for s in seeds[1:]):
                raise CheckFailed(
                    f"{name}: with {h} head(s) every seed gave the same run; build each run's "
                    "generator from its own seed."
                )
    corrupt = _read_sweep(
        call(sweep_fn, name, *_sweep_args(config, corrupt=True)), name, head_counts, seeds
    )
    # Every scored target of those sequences was changed, so a run measured on them gets
    # almost nothing right (a position needs every slot's changed answer).
    if max(acc for acc, _, _ in corrupt.values()) > 0.25:
        raise CheckFailed(
            f"{name}: your accuracies do not come from eval_data (with its targets all "
            "changed, your runs still scored well); measure each run on eval_data, which the "
            "model never trains on."
        )


# --------------------------------------------------------------------------- reading the sweep


def _table(target: float, order, runs: dict) -> tuple[dict, float]:
    """A sweep's results as ``head_count_sweep`` returns them, from {h: [accuracy, ...]}
    (one per seed), in the dict order ``order``; a run reached the target when its accuracy
    is at least the target (it then stopped there)."""
    results = {}
    for h in order:
        for seed, acc in enumerate(runs[h]):
            steps = 20 * (seed + 3) if acc >= target else None
            results[h, seed] = {"accuracy": acc, "steps": steps, "entropy": np.full(h, 0.5)}
    return results, target


def _sufficient_tables():
    """Sweeps whose right reading differs from each wrong one, on different head counts."""
    yield _table(
        0.99,
        (2, 8, 1, 16, 4),
        {
            1: [0.01, 0.02, 0.01],
            2: [0.995, 0.82, 0.39],  # one seed reached it
            4: [0.993, 0.986, 0.987],  # two seeds are below 0.99 but print as 0.99
            8: [1.0, 0.99, 0.997],  # all reached, one of them exactly at the target
            16: [0.991, 0.995, 1.0],
        },
    )
    yield _table(0.9, (6, 3, 2), {2: [0.95, 0.6, 0.92], 3: [0.93, 1.0, 0.91], 6: [1.0, 1.0, 0.97]})
    yield _table(0.95, (1, 4), {1: [0.3, 0.2], 4: [0.97, 0.5]})
    # 2 heads: the mean (0.85) and the median reach 0.8, one seed (0.75) does not
    yield _table(0.8, (5, 2, 3), {2: [0.9, 0.9, 0.75], 3: [0.85, 0.8, 0.95], 5: [1.0, 0.9, 0.95]})
    # 2 heads: 0.9896 prints as 0.990 (3 digits) and 0.99, yet is below the target
    yield _table(0.99, (4, 2, 8), {2: [0.9896, 0.995, 1.0], 4: [0.991, 0.99, 0.999], 8: [1.0] * 3})


def _smallest(results, target, reached=None, per_h=min, pick=min):
    """The smallest head count whose runs all reached the target (the worst seed's accuracy
    is at least the target), or a mistaken variant of that reading."""
    reached = reached or (lambda acc: acc >= target)
    by_h = {}
    for (h, _), run in results.items():
        by_h.setdefault(h, []).append(run["accuracy"])
    ok = [h for h, accs in by_h.items() if reached(per_h(accs))]
    return pick(ok) if ok else None


def _reading_mistakes(name: str):
    """(what the mistake returns on a sweep, the sentence naming it), for each realistic
    misreading of a sweep."""

    def index(results, target):
        best = _smallest(results, target)
        return None if best is None else sorted({h for h, _ in results}).index(best)

    return [
        (
            lambda r, t: _smallest(r, t, per_h=np.median),
            f"{name}: you compared the median seed with the target; a head count suffices "
            "only when every one of its seeds reached the target.",
        ),
        (
            lambda r, t: _smallest(r, t, per_h=np.mean),
            f"{name}: you compared the mean over the seeds with the target; a head count "
            "suffices only when every one of its seeds reached the target, the worst included.",
        ),
        (
            lambda r, t: _smallest(r, t, per_h=max),
            f"{name}: one seed reaching the target is not enough; every seed of a head count "
            "must reach it.",
        ),
        (
            lambda r, t: _smallest(r, t, reached=lambda a: round(a, 2) >= t),
            f"{name}: you rounded the accuracies before comparing them (0.986 prints as 0.99 "
            "but is below 0.99); compare the unrounded accuracy, or use 'steps'.",
        ),
        (
            lambda r, t: _smallest(r, t, reached=lambda a: round(a, 3) >= t),
            f"{name}: you rounded the accuracies before comparing them (0.9896 prints as 0.990 "
            "but is below 0.99); compare the unrounded accuracy, or use 'steps'.",
        ),
        (
            lambda r, t: _smallest(r, t, per_h=lambda accs: accs[0]),
            f"{name}: you looked at the first seed only; a head count suffices only when every "
            "one of its seeds reached the target.",
        ),
        (
            lambda r, t: _smallest(r, t, reached=lambda a: a > t),
            f"{name}: a run whose accuracy equals the target has reached it; compare with >=, "
            "not >.",
        ),
        (
            index,
            f"{name}: return the head count itself, not its position in the list of head counts.",
        ),
        (
            lambda r, t: _smallest(r, t, pick=lambda ok: ok[0]),
            f"{name}: the results are not in head-count order; return the smallest head count "
            "that suffices, not the first one you met.",
        ),
        (
            lambda r, t: _smallest(r, t, pick=max),
            f"{name}: you returned the largest head count that suffices; the question is the "
            "smallest one.",
        ),
        (
            lambda r, t: _smallest(r, t) if _smallest(r, t) is not None else 0,
            f"{name}: when no head count suffices, return None (not 0).",
        ),
    ]


def _same_count(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and float(a) == b)


@exercise
def check_smallest_sufficient_heads(smallest_fn: Callable) -> None:
    """Exercise (notebook 05): the smallest head count with which every seed reached the
    target, from a sweep's results (``head_count_sweep``'s dict); None when there is none.

    A misreading is named only when the answer is that misreading's on every sweep tried
    (an answer that merely coincides with one of them on one sweep is not diagnosed)."""
    name = "smallest_sufficient_heads"
    tables = list(_sufficient_tables())
    answers = []
    for results, target in tables:
        got = call(smallest_fn, name, {k: dict(v) for k, v in results.items()}, target)
        if got is not None and (
            isinstance(got, bool) or not isinstance(got, int | float | np.integer | np.floating)
        ):
            raise CheckFailed(
                f"{name} should return a head count (an integer) or None, got {type(got).__name__}."
            )
        answers.append(got)
    expected = [_smallest(results, target) for results, target in tables]
    if all(_same_count(g, e) for g, e in zip(answers, expected, strict=True)):
        passed("smallest_sufficient_heads: every seed must reach the target, unrounded.")
        return
    for mistake, message in _reading_mistakes(name):
        if all(
            _same_count(got, mistake(results, target))
            for got, (results, target) in zip(answers, tables, strict=True)
        ):
            raise CheckFailed(message)
    got, want, (results, target) = next(
        (g, e, t)
        for g, e, t in zip(answers, expected, tables, strict=True)
        if not _same_count(g, e)
    )
    heads = sorted({h for h, _ in results})
    if got is None:
        raise CheckFailed(
            f"{name}: you returned None, but with {want} heads every seed reached the "
            f"target {target}."
        )
    raise CheckFailed(
        f"{name}: for head counts {heads} and target {target} the answer is {want}, you "
        f"returned {got!r}; a head count suffices when every seed's run reached the target."
    )
