"""The checks of notebook 11's exercises: the right answers pass, and realistic mistakes, written
as a student would write them, get their own messages. The references and mutants below are
also added to the tables of tests/checks/test_checks_robustness.py (wrong types and shapes, leaks
of solution code) and tests/checks/test_check_mutants.py (each mutant its own message; a
hard-coded answer fails)."""

import numpy as np
from helpers import rejects, stub

from lib import checks
from lib import tiny as T

# --------------------------------------------------------------------------- references


def prefix_matching_score(pattern, ids):
    weights = []
    for b, seq in enumerate(ids):
        last_seen = {}
        for i, token in enumerate(seq):
            if token in last_seen:
                weights.append(pattern[b, :, i, last_seen[token] + 1])
            last_seen[token] = i
    return np.mean(weights, axis=0)


def ablation_losses(model, ids, targets, repeated):
    losses = np.zeros((model.n_layers, model.n_heads))
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            head_mask = np.ones((model.n_layers, model.n_heads))
            head_mask[layer, head] = 0.0
            logits, _ = model.forward(ids, head_mask)
            losses[layer, head] = T.cross_entropy(logits, np.where(repeated, targets, -1))[0]
    return losses


def predict_from_pattern(ids, pattern):
    return np.take_along_axis(ids, pattern.argmax(axis=-1), axis=-1)


NB11_REFERENCES = {
    "check_prefix_matching_score": (checks.check_prefix_matching_score, prefix_matching_score),
    "check_ablation_losses": (checks.check_ablation_losses, ablation_losses),
    "check_predict_from_pattern": (checks.check_predict_from_pattern, predict_from_pattern),
}

# --------------------------------------------------------------------------- mutants


def matching(mistake):
    def score(pattern, ids):
        weights, seen = [], {}
        for b, seq in enumerate(ids):
            if mistake != "carried over":
                seen = {}
            for i, token in enumerate(seq):
                if seen.get(token, i) < i:
                    key = seen[token] if mistake == "the match itself" else seen[token] + 1
                    weights.append(pattern[b, :, i, key])
                elif mistake == "zeros counted":
                    weights.append(np.zeros(pattern.shape[1]))
                if mistake != "first occurrence" or token not in seen:
                    seen[token] = i
        return np.mean(weights, axis=0)

    return score


def mean_of_means(pattern, ids):  # each sequence's mean first, then the mean of those
    per_sequence = [
        prefix_matching_score(pattern[b : b + 1], ids[b : b + 1]) for b in range(len(ids))
    ]
    return np.mean(per_sequence, axis=0)


def ablating(mistake):
    def losses(model, ids, targets, repeated):
        out = np.zeros((model.n_layers, model.n_heads))
        scored = targets if mistake == "every place" else np.where(repeated, targets, -1)
        full = T.cross_entropy(model.forward(ids)[0], scored)[0]
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                head_mask = np.ones((model.n_layers, model.n_heads))
                head_mask[layer, head] = 0.0
                if mistake == "only one head on":
                    head_mask = 1.0 - head_mask
                out[layer, head] = T.cross_entropy(model.forward(ids, head_mask)[0], scored)[0]
        return out - full if mistake == "the change" else out

    return losses


def predicting(mistake):
    def predict(ids, pattern):
        keys = pattern.argmax(axis=-2 if mistake == "over queries" else -1)
        if mistake == "the place":
            return keys
        if mistake == "first sequence":
            return ids[0][keys]
        if mistake == "the next token":
            keys = np.minimum(keys + 1, ids.shape[1] - 1)
        return np.take_along_axis(ids, keys, axis=-1)

    return predict


NB11_MUTANTS = {
    "check_prefix_matching_score": [
        ("the match itself", matching("the match itself"), "earlier occurrence itself (key j)"),
        ("first occurrence", matching("first occurrence"), "matched the first occurrence"),
        ("zeros counted", matching("zeros counted"), "counting those whose token never"),
        ("carried over", matching("carried over"), "kept the places seen in one sequence"),
        ("mean of means", mean_of_means, "averaged each sequence first"),
    ],
    "check_ablation_losses": [
        ("every place", ablating("every place"), "you scored every place"),
        ("only one head on", ablating("only one head on"), "switched every head off but one"),
        ("the change", ablating("the change"), "returned the change in loss"),
    ],
    "check_predict_from_pattern": [
        ("the place", predicting("the place"), "returned the key's place"),
        ("over queries", predicting("over queries"), "along the queries (axis -2)"),
        ("first sequence", predicting("first sequence"), "from the first sequence"),
        ("the next token", predicting("the next token"), "returned the token after the key"),
    ],
}

# --------------------------------------------------------------------------- specific cases


def test_the_references_pass(capsys):
    for check, reference in NB11_REFERENCES.values():
        check(reference)
    assert capsys.readouterr().out.count("✓") == 3


def test_stubs_are_reported():
    for check, _ in NB11_REFERENCES.values():
        rejects(check, stub, "not implemented yet")


def test_each_mistake_gets_its_sentence():
    for name, mutants in NB11_MUTANTS.items():
        check = NB11_REFERENCES[name][0]
        for _, mutant, sentence in mutants:
            rejects(check, mutant, sentence)


def test_a_vectorised_prefix_matching_score_passes():
    """Any correct way is accepted: here, every earlier match found at once per query."""

    def score(pattern, ids):
        n = ids.shape[1]
        same = (ids[:, :, None] == ids[:, None, :]) & np.tri(n, k=-1, dtype=bool)  # j < i
        last = np.where(same, np.arange(n), -1).max(axis=-1)  # (batch, n)
        b, i = np.nonzero(last >= 0)
        return pattern[b, :, i, last[b, i] + 1].mean(axis=0)

    checks.check_prefix_matching_score(score)
