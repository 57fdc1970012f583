"""Checks of notebook 05's head-count sweep: running it by its protocol, and reading it."""

import operator
from collections.abc import Callable
from functools import cache, partial

import numpy as np

from .. import attention as A
from .. import heads as H
from .. import tiny as T
from ._core import CheckFailed, as_array, call, close, diagnose, exercise, expect_shape, passed


def _sweep_model(vocab: int, n: int, d_model: int, n_slots: int, n_heads: int, rng):
    """The model of a sweep run (module level, so that the grader can send it to a kernel)."""
    return T.init_tiny_model(vocab, n, d_model, n_heads, vocab, rng, n_slots=n_slots)


# (vocab, n, d_model, offsets, head_counts, seeds, budget, target, eval_every): small sweeps
# with runs that reach the target early and runs that never do, on two shapes.
_SWEEPS = (
    (4, 6, 8, (1, 2), (1, 2), (0, 1), 100, 0.9, 10),
    (5, 8, 12, (1, 3), (1, 3), (3, 4), 90, 0.9, 15),
)


def _sweep_args(config: int, corrupt: bool = False):
    """The arguments of check sweep ``config``; ``corrupt``: every scored target of the
    held-out data moved to another class, so a run measured on it gets almost nothing right."""
    vocab, n, d_model, offsets, head_counts, seeds, *rest = _SWEEPS[config]
    ids, targets = T.copy_offsets_task(48, n, vocab, offsets, np.random.default_rng(90 + config))
    if corrupt:
        targets = np.where(targets >= 0, (targets + 1) % vocab, targets)
    make_model = partial(_sweep_model, vocab, n, d_model, len(offsets))
    make_batch = partial(T.copy_offsets_task, 16, n, vocab, offsets)
    return make_model, make_batch, (ids, targets), list(head_counts), list(seeds), *rest


@cache
def _sweep(config: int, variant: str = "") -> dict:
    """The sweep of check config ``config`` as the protocol runs it (variant ""), or as one
    realistic variant or mistake runs it: {(h, seed): (accuracy, steps, entropy)}."""
    args = _sweep_args(config)
    make_model, make_batch, eval_data, head_counts, seeds, budget, target, every = args
    mask = A.causal_mask(eval_data[0].shape[1])
    one = np.random.default_rng(seeds[0])  # "one generator": made once, before the loops
    per_seed = {s: np.random.default_rng(s) for s in seeds}  # "one generator per seed"
    runs = {}
    for h in head_counts:
        for seed in seeds:
            rng = {"one generator": one, "per seed": per_seed[seed]}.get(variant)
            rng = np.random.default_rng(seed) if rng is None else rng
            model = make_model(h, rng)
            train_rng = np.random.default_rng(seed) if variant == "two generators" else rng
            data = make_batch(train_rng) if variant == "training batch" else eval_data
            stop = None if variant == "no early stop" else target
            log = T.train(
                model, make_batch, data, budget, train_rng, eval_every=every, stop_at=stop
            )
            weights = model.forward(data[0])[1]
            nats = variant == "entropy in nats"
            entropy = H.head_entropy(weights) if nats else H.head_entropy_normalised(weights, mask)
            steps = log.steps[-1] if variant == "last step" else log.steps_to(target)
            runs[h, seed] = (log.accuracy[-1], steps, entropy)
    return runs


def _read_sweep(got, name: str, head_counts, seeds) -> dict:
    """The answer as {(h, seed): (accuracy, steps, entropy)}, or what in it is not as asked."""
    keys = {(h, s) for h in head_counts for s in seeds}
    if not isinstance(got, dict):
        raise CheckFailed(
            f"{name} should return a dict with one entry per (h, seed) pair, got "
            f"{type(got).__name__}."
        )
    if set(got) != keys and set(got) == {(s, h) for h, s in keys}:
        raise CheckFailed(f"{name}: key each run by (h, seed), in that order.")
    pairs = f"(h, seed) pair of head_counts {list(head_counts)} and seeds {list(seeds)}"
    if keys - set(got):
        raise CheckFailed(
            f"{name}: no entry for (h, seed) = {sorted(keys - set(got), key=str)[0]}; the keys "
            f"should be every {pairs}."
        )
    if set(got) - keys:
        raise CheckFailed(
            f"{name}: unexpected key {sorted(set(got) - keys, key=str)[0]!r}; the keys should "
            f"be every {pairs}."
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
        steps = run["steps"]
        try:
            ok = steps is None or (float(steps).is_integer() and not isinstance(steps, bool))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise CheckFailed(
                f"{name}: {where}: 'steps' should be the step count at which the held-out "
                f"accuracy first reached the target, or None; got {steps!r}."
            )
        steps = None if steps is None else int(float(steps))
        entropy = as_array(run["entropy"], name, f"the entropy of {where}")
        expect_shape(entropy, (h,), name, f"one entropy per head for {where}")
        runs[h, s] = (accuracy, steps, entropy)
    return runs


def _same_run(a, b, tol: float = 1e-9) -> bool:
    (acc, steps, ent), (acc_b, steps_b, ent_b) = a, b
    return abs(acc - acc_b) <= tol and steps == steps_b and close(ent, ent_b, tol)


def _same_runs(a, b) -> bool:
    return set(a) == set(b) and all(_same_run(run, b[key]) for key, run in a.items())


_SWEEP_MISTAKES = {
    "training batch": "you measured accuracy on a training batch; measure it on eval_data, the "
    "held-out sequences the model never trains on.",
    "one generator": "one generator serves every run, so each run starts where the previous one "
    "left off; make a new np.random.default_rng(seed) for each (h, seed).",
    "per seed": "each seed's generator carries on from one head count to the next, so only the "
    "first head count starts from the seed; make a new np.random.default_rng(seed) for every run.",
    "no early stop": "your runs carry on after reaching the target; stop a run once its "
    "held-out accuracy reaches it (lib.tiny.train's stop_at).",
    "last step": "'steps' is the last step trained even for runs that never reached the target; "
    "it should be the first evaluated step at which the target was reached, or None.",
    "entropy in nats": "your entropies are in nats; normalise each query's entropy by the log of "
    "the number of keys it may see (H.head_entropy_normalised), so that 1 means uniform.",
}


@exercise
def check_head_count_sweep(sweep_fn: Callable) -> None:
    """Exercise (notebook 05): the head-count sweep run by the protocol, compared with lib's."""
    name = "head_count_sweep"
    for config in range(len(_SWEEPS)):
        args = _sweep_args(config)
        runs = _read_sweep(call(sweep_fn, name, *args), name, args[3], args[4])
        if _same_runs(runs, _sweep(config)) or _same_runs(runs, _sweep(config, "two generators")):
            continue
        mistakes = {m: partial(_sweep, config, v) for v, m in _SWEEP_MISTAKES.items()}
        diagnose(runs, name, mistakes, same=_same_runs)
        _protocol_rules(sweep_fn, name, config, runs)
        raise CheckFailed(
            f"{name}: your runs keep the protocol's rules but draw other random numbers; "
            "use one generator per run, np.random.default_rng(seed), first for make_model(h, "
            "rng), then for training (lib.tiny.train with that rng)."
        )
    passed("head_count_sweep: seeded runs, held-out accuracy, early stop, normalised entropy.")


def _protocol_rules(sweep_fn, name, config, runs) -> None:
    """Raise the first rule of the protocol that ``runs`` break."""
    head_counts, seeds, _, target = _SWEEPS[config][4:8]
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
    for h in head_counts:
        if all(_same_run(runs[h, seeds[0]], runs[h, s]) for s in seeds[1:]):
            raise CheckFailed(
                f"{name}: with {h} head(s) every seed gave the same run; build each run's "
                "generator from its own seed."
            )
    corrupt = call(sweep_fn, name, *_sweep_args(config, corrupt=True))
    # Every scored target of those sequences was changed, so a run measured on them gets
    # almost nothing right (a position needs every slot's changed answer).
    if max(acc for acc, _, _ in _read_sweep(corrupt, name, head_counts, seeds).values()) > 0.25:
        raise CheckFailed(
            f"{name}: your accuracies do not come from eval_data (with its targets all "
            "changed, your runs still scored well); measure each run on eval_data, which the "
            "model never trains on."
        )


def _table(target: float, runs: dict) -> tuple[dict, float]:
    """A sweep's results as ``head_count_sweep`` returns them, in the order of ``runs``, {h:
    [accuracy of each seed]}; a run that reached the target stopped there."""
    results = {}
    for h, accuracies in runs.items():
        for seed, acc in enumerate(accuracies):
            steps = 20 * (seed + 3) if acc >= target else None
            results[h, seed] = {"accuracy": acc, "steps": steps, "entropy": np.full(h, 0.5)}
    return results, target


# Sweeps on different head counts (not in order) whose right reading differs from each wrong one.
_SUFFICIENT_TABLES = (
    _table(
        0.99,
        {
            2: [0.995, 0.82, 0.39],  # one seed reached it
            8: [1.0, 0.99, 0.997],  # all reached, one of them exactly at the target
            1: [0.01, 0.02, 0.01],
            16: [0.991, 0.995, 1.0],
            4: [0.993, 0.986, 0.987],  # two seeds are below 0.99 but print as 0.99
        },
    ),
    _table(0.9, {6: [1.0, 1.0, 0.97], 3: [0.93, 1.0, 0.91], 2: [0.95, 0.6, 0.92]}),
    _table(0.95, {1: [0.3, 0.2], 4: [0.97, 0.5]}),
    # 2 heads: the mean (0.85) and the median reach 0.8, one seed (0.75) does not
    _table(0.8, {5: [1.0, 0.9, 0.95], 2: [0.9, 0.9, 0.75], 3: [0.85, 0.8, 0.95]}),
    # 2 heads: 0.9896 prints as 0.990 (3 digits) and 0.99, yet is below the target
    _table(0.99, {4: [0.991, 0.99, 0.999], 2: [0.9896, 0.995, 1.0], 8: [1.0] * 3}),
)


def _smallest(results, target, reached=operator.ge, per_h=min, pick=min):
    """The smallest head count all of whose seeds reached the target, or a misreading of it."""
    by_h = {}
    for (h, _), run in results.items():
        by_h.setdefault(h, []).append(run["accuracy"])
    ok = [h for h, accs in by_h.items() if reached(per_h(accs), target)]
    return pick(ok) if ok else None


def _index(results, target):
    best = _smallest(results, target)
    return None if best is None else sorted({h for h, _ in results}).index(best)


# Each realistic misreading of a sweep: {the sentence naming it: what it returns}.
_READINGS = {
    "you compared the median seed with the target; a head count suffices only when "
    "every one of its seeds reached the target.": partial(_smallest, per_h=np.median),
    "you compared the mean over the seeds with the target; a head count suffices only when every "
    "one of its seeds reached the target, the worst included.": partial(_smallest, per_h=np.mean),
    "one seed reaching the target is not enough; every seed of "
    "a head count must reach it.": partial(_smallest, per_h=max),
    "you rounded the accuracies before comparing them (0.986 prints as "
    "0.99 but is below 0.99); compare the unrounded accuracy, or use "
    "'steps'.": partial(_smallest, reached=lambda a, t: round(a, 2) >= t),
    "you rounded the accuracies before comparing them (0.9896 prints as "
    "0.990 but is below 0.99); compare the unrounded accuracy, or use "
    "'steps'.": partial(_smallest, reached=lambda a, t: round(a, 3) >= t),
    "you looked at the first seed only; a head count suffices only when every one of "
    "its seeds reached the target.": partial(_smallest, per_h=lambda accs: accs[0]),
    "a run whose accuracy equals the target has reached it; compare with >=, not >.": partial(
        _smallest, reached=operator.gt
    ),
    "return the head count itself, not its position in the list of head counts.": _index,
    "the results are not in head-count order; return the smallest head count that "
    "suffices, not the first one you met.": partial(_smallest, pick=lambda ok: ok[0]),
    "you returned the largest head count that suffices; the question is the smallest one.": partial(
        _smallest, pick=max
    ),
    "when no head count suffices, return None (not 0).": lambda r, t: _smallest(r, t) or 0,
}


def _same_count(a, b) -> bool:
    return (a is None) == (b is None) and (a is None or float(a) == b)


@exercise
def check_smallest_sufficient_heads(smallest_fn: Callable) -> None:
    """Exercise (notebook 05): the smallest head count with which every seed reached the target,
    or None. A misreading is named only when the answer is its answer on every sweep tried."""
    name = "smallest_sufficient_heads"
    answers, wrong = [], []
    for results, target in _SUFFICIENT_TABLES:
        got = call(smallest_fn, name, {k: dict(v) for k, v in results.items()}, target)
        number = isinstance(got, int | float | np.integer | np.floating)
        if got is not None and (isinstance(got, bool) or not number):
            raise CheckFailed(
                f"{name} should return a head count (an integer) or None, got {type(got).__name__}."
            )
        answers.append(got)
        if not _same_count(got, _smallest(results, target)):
            wrong.append((got, _smallest(results, target), results, target))
    if not wrong:
        passed("smallest_sufficient_heads: every seed must reach the target, unrounded.")
        return
    mistakes = {
        m: [reading(*table) for table in _SUFFICIENT_TABLES] for m, reading in _READINGS.items()
    }
    diagnose(answers, name, mistakes, same=lambda got, wrong: all(map(_same_count, got, wrong)))
    got, want, results, target = wrong[0]
    if got is None:
        raise CheckFailed(
            f"{name}: you returned None, but with {want} heads every seed reached the "
            f"target {target}."
        )
    raise CheckFailed(
        f"{name}: for head counts {sorted({h for h, _ in results})} and target {target} the "
        f"answer is {want}, you returned {got!r}; a head count suffices when every seed's run "
        "reached the target."
    )
