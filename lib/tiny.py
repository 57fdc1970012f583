"""A tiny trainable attention model in NumPy and its optimiser (notebooks 05, 06, 09, 10).

Embeddings -> one causal multi-head attention layer -> a linear readout, at every position::

    x = tok_emb[ids] + pos_emb[:n]          # (batch, n, d)
    a = MHA(x, x, causal mask, head_mask)   # (batch, n, d)
    logits = a @ W_out + b_out              # (batch, n, classes)

No residual connection, no MLP, no LayerNorm: whatever the readout knows, the attention layer
had to bring to that position. The parameters are a plain dict of arrays, so that the
optimiser and the gradient check walk over them by name."""

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from . import _validate as valid
from . import positions as POS
from .attention import MHAParams, glorot
from .backprop import mha_backward, mha_forward, weight_gradient
from .tasks import IGNORE
from .tasks import copy_offsets_task as copy_offsets_task  # also T.<task>, as the notebooks
from .tasks import last_marked_task as last_marked_task  # call them; they live in lib.tasks
from .tasks import repeating_pattern_task as repeating_pattern_task


@dataclass
class TinyModel:
    """params: tok_emb (vocab, d), pos_emb (max_len, d) (learned positions only), W_q W_k W_v
    W_o (d, d), b_q b_k b_v b_o (d,), W_out (d, slots * classes), b_out (slots * classes,).
    ``n_slots`` answers per position; ``positions`` one of :data:`lib.positions.SCHEMES`."""

    params: dict[str, np.ndarray]
    n_heads: int
    n_slots: int = 1
    positions: str = "learned"

    @property
    def d_model(self) -> int:
        return self.params["tok_emb"].shape[1]

    @property
    def max_len(self) -> int | None:
        """The longest sequence: pos_emb's rows; None (any length) without learned positions."""
        return self.params["pos_emb"].shape[0] if self.positions == "learned" else None

    def mha_params(self) -> MHAParams:
        """The attention layer's weights: the arrays of ``params`` themselves."""
        p = self.params
        return MHAParams(**{name: p[name] for name in valid.PARAM_NAMES}, n_heads=self.n_heads)

    def forward(self, ids: np.ndarray, head_mask: np.ndarray | None = None):
        """Logits (batch, n, slots, classes), weights (batch, heads, n, n) and a cache."""
        scheme = valid.one_of(self.positions, "positions", POS.SCHEMES)
        p, dtype = self.params, self.params["tok_emb"].dtype
        ids = valid.token_ids(ids, len(p["tok_emb"]), self.max_len)  # tok_emb: a row per token
        batch, n = ids.shape
        # the attention weights are checked by mha_forward
        valid.finite_all({k: p[k] for k in ("tok_emb", "pos_emb", "W_out", "b_out") if k in p})
        x = p["tok_emb"][ids]  # (batch, n, d): the tokens alone, for none, rope and alibi
        rope = alibi = None
        if scheme == "learned":
            x = x + p["pos_emb"][:n]
        elif scheme == "sinusoidal":
            x = x + POS.sinusoidal_table(n, self.d_model, dtype=dtype)
        elif scheme == "rope":
            rope = POS.RoPE()
        elif scheme == "alibi":
            alibi = POS.alibi_bias(n, n, POS.alibi_slopes(self.n_heads).astype(dtype))
        a, weights, mha_cache = mha_forward(
            x, x, self.mha_params(), None, head_mask, causal=True, rope=rope, score_bias=alibi
        )
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
            logits = a @ p["W_out"] + p["b_out"]  # (batch, n, slots * classes)
        if not valid.all_finite(logits):
            parts = {"a": a, "W_out": p["W_out"], "b_out": p["b_out"]}
            raise valid.overflow("the logits a @ W_out + b_out", logits.dtype, parts)
        logits = logits.reshape(batch, n, self.n_slots, -1)
        return logits, weights, (ids, a, mha_cache)

    def backward(self, d_logits: np.ndarray, cache) -> dict[str, np.ndarray]:
        """Gradients of every parameter (and of the head mask) from dL/dlogits."""
        d_logits = valid.real_array(d_logits, "d_logits")
        valid.finite(d_logits, "d_logits")
        ids, a, mha_cache = cache
        p = self.params
        d_logits = d_logits.reshape(*ids.shape, -1)  # (batch, n, slots * classes)
        mha_grads = mha_backward(d_logits @ p["W_out"].T, mha_cache)  # checked there
        mha_grads.pop("score_bias", None)  # ALiBi's slopes are fixed
        d_x = mha_grads.pop("x_q") + mha_grads.pop("x_kv")  # self-attention: x is both
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is explained below
            grads = {
                "W_out": weight_gradient(a, d_logits),
                "b_out": d_logits.sum(axis=(0, 1)),
                "tok_emb": np.zeros_like(p["tok_emb"]),
            }
            np.add.at(grads["tok_emb"], ids, d_x)
            if self.positions == "learned":
                grads["pos_emb"] = np.zeros_like(p["pos_emb"])
                grads["pos_emb"][: ids.shape[1]] = d_x.sum(axis=0)
        valid.gradients(grads, d_logits)
        grads.update(mha_grads)
        return grads

    def loss_and_grads(self, ids, targets, head_mask=None):
        """Mean cross-entropy over scored answers, and the gradients of everything.
        targets: (batch, n, slots), or (batch, n) when the model has one slot."""
        logits, _, cache = self.forward(ids, head_mask)
        loss, d_logits = cross_entropy(logits, self._slotted(targets))
        return loss, self.backward(d_logits, cache)

    def _slotted(self, targets) -> np.ndarray:  # a one-slot model's (batch, n) targets get a slot
        targets = np.asarray(targets)
        return targets[..., None] if targets.ndim == 2 and self.n_slots == 1 else targets


def init_tiny_model(
    vocab_size: int,
    max_len: int,
    d_model: int,
    n_heads: int,
    n_classes: int,
    rng: np.random.Generator,
    n_slots: int = 1,
    positions: str = "learned",
) -> TinyModel:
    """The learned table ``pos_emb`` is drawn whatever ``positions`` says (and kept only for
    "learned"), so that with one rng every scheme starts from the same other weights."""
    d_k = valid.heads(d_model, n_heads)
    counts = dict(vocab_size=vocab_size, max_len=max_len, n_classes=n_classes, n_slots=n_slots)
    for name, value in counts.items():
        valid.integer(value, name, low=1)
    valid.one_of(positions, "positions", POS.SCHEMES)
    if positions == "rope":
        valid.even(d_k, "d_k", "RoPE turns pairs of coordinates")
    p = {
        "tok_emb": rng.normal(0.0, 1.0, (vocab_size, d_model)),
        "pos_emb": rng.normal(0.0, 1.0, (max_len, d_model)),
    }
    p |= {name: glorot(rng, d_model, d_model) for name in valid.WEIGHT_NAMES}
    p |= {name: np.zeros(d_model) for name in valid.BIAS_NAMES}
    p["W_out"] = rng.normal(0.0, 1.0 / math.sqrt(d_model), (d_model, n_slots * n_classes))
    p["b_out"] = np.zeros(n_slots * n_classes)
    if positions != "learned":
        del p["pos_emb"]
    return TinyModel(p, n_heads, n_slots, positions)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy over the answers whose target is not -1, and dL/dlogits. logits
    (..., classes); targets (...) ints in 0..classes-1, or -1 for "not scored"."""
    logits = valid.real_array(logits, "logits")
    valid.finite(logits, "logits")
    targets = np.asarray(targets)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(
            f"targets must have shape {logits.shape[:-1]} to match logits {logits.shape}, "
            f"got {targets.shape}"
        )
    n_classes = logits.shape[-1]
    scored = targets != IGNORE
    if targets[scored].size and (targets[scored].min() < 0 or targets[scored].max() >= n_classes):
        raise ValueError(f"targets must be in 0..{n_classes - 1} (or -1 to skip a position)")
    count = int(scored.sum())
    if count == 0:
        raise ValueError("no position has a target (all targets are -1)")
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    safe_targets = np.where(scored, targets, 0)
    picked = np.take_along_axis(log_probs, safe_targets[..., None], axis=-1)[..., 0]
    loss = -float(picked[scored].sum()) / count
    d_logits = np.exp(log_probs) - np.eye(n_classes, dtype=logits.dtype)[safe_targets]
    d_logits *= scored[..., None] / count  # 0 where not scored
    return loss, d_logits


def accuracy(model: TinyModel, ids, targets, head_mask=None) -> float:
    """Fraction of the scored positions (targets not -1) whose answers, every slot, are right."""
    targets = model._slotted(targets)
    scored = (targets != IGNORE).all(axis=-1)  # (batch, n)
    if not scored.any():
        raise ValueError("no position has a target (all targets are -1)")
    predicted = model.forward(ids, head_mask)[0].argmax(axis=-1)  # (batch, n, slots)
    right = (predicted == targets).all(axis=-1)  # (batch, n)
    return float(right[scored].mean())


@dataclass
class Adam:
    """Adam (Kingma & Ba, 2015) on a dict of arrays, in place: m and v are running means of the
    gradient and its square; dividing by (1 - beta**t) removes their early bias towards 0."""

    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    t: int = 0
    m: dict[str, np.ndarray] = field(default_factory=dict)
    v: dict[str, np.ndarray] = field(default_factory=dict)

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        for name, value in params.items():
            g = grads[name]
            if g.shape != value.shape:
                raise ValueError(f"gradient of {name} has shape {g.shape}, parameter {value.shape}")
            m = self.beta1 * self.m.get(name, 0.0) + (1 - self.beta1) * g
            v = self.beta2 * self.v.get(name, 0.0) + (1 - self.beta2) * g * g
            self.m[name], self.v[name] = m, v
            m_hat = m / (1 - self.beta1**self.t)
            v_hat = v / (1 - self.beta2**self.t)
            value -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


@dataclass
class TrainLog:
    steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)

    def steps_to(self, target_accuracy: float) -> int | None:
        """First logged step whose accuracy reached the target, or None."""
        reached = np.flatnonzero(np.array(self.accuracy) >= target_accuracy)
        return self.steps[reached[0]] if reached.size else None


def train(
    model: TinyModel,
    make_batch,
    eval_data: tuple[np.ndarray, np.ndarray],
    n_steps: int,
    rng: np.random.Generator,
    lr: float = 1e-2,
    eval_every: int = 50,
    stop_at: float | None = None,
) -> TrainLog:
    """Train with Adam on fresh batches ``make_batch(rng)``, logging the accuracy on ``eval_data``
    every ``eval_every`` steps and after the last; stop once it reaches ``stop_at``, if given."""
    optimiser = Adam(lr=lr)
    log = TrainLog()
    for step in range(1, n_steps + 1):
        ids, targets = make_batch(rng)
        _, grads = model.loss_and_grads(ids, targets)
        optimiser.step(model.params, grads)
        if step % eval_every == 0 or step == n_steps:
            log.steps.append(step)
            log.accuracy.append(accuracy(model, *eval_data))
            if stop_at is not None and log.accuracy[-1] >= stop_at:
                break
    return log


def position_experiment(
    task,
    schemes: tuple[str, ...],
    seeds: tuple[int, ...],
    n_steps: int,
    train_len: int,
    test_lens: tuple[int, ...],
    *,
    vocab_size: int,
    n_classes: int,
    d_model: int = 16,
    n_heads: int = 4,
    batch: int = 32,
    lr: float = 0.02,
    n_eval: int = 128,
) -> list[dict]:
    """Notebook 09's experiment: for each scheme and seed, train a tiny model (it and its
    batches ``task(batch, train_len, rng)`` drawn from ``default_rng(seed)``), then measure it
    at each test length on held-out sets shared by all (seed 1000 + length), scoring only the
    positions never trained on. Returns records {"scheme", "seed", "length", "accuracy"}."""
    valid.integer(n_steps, "n_steps", low=1)
    train_len = valid.integer(train_len, "train_len", low=2)
    for n in test_lens:
        if valid.integer(n, "test length", low=2) < train_len:
            raise ValueError(f"test lengths must be >= train_len={train_len}, got {n}")
    held_out = {}
    for n in sorted({train_len, *test_lens}):
        ids, targets = task(n_eval, n, np.random.default_rng(1000 + n))
        if n > train_len:
            targets = targets.copy()
            targets[:, :train_len] = IGNORE  # score only the positions never trained on
        held_out[n] = ids, targets
    batches = partial(task, batch, train_len)  # the training data: batches of length train_len
    records = []
    for scheme in schemes:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            model = init_tiny_model(
                vocab_size, max(test_lens), d_model, n_heads, n_classes, rng, positions=scheme
            )
            train(model, batches, held_out[train_len], n_steps, rng, lr=lr, eval_every=n_steps)
            for n in test_lens:
                score = accuracy(model, *held_out[n])
                records.append(dict(scheme=scheme, seed=seed, length=n, accuracy=score))
    return records
