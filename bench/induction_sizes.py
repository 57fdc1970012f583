"""Notebook 11's training at other sizes: does a cheaper setting still form the induction
circuit, over several seeds?

    python bench/induction_sizes.py            # 6 seeds of each setting below
    python bench/induction_sizes.py --seeds 3  # quicker

Each setting trains the notebook's 2-layer, 2-head model with RoPE, in float64 as the
notebook does, on the notebook's task (24 token types, 25 tokens, a repeated segment of 8)
with Adam, and reports per seed: the step where the held-out loss on repeated places is
halfway down (as the notebook's ``drop_step``), that loss at the end, and the best
previous-token score of layer 0 and prefix-matching score of layer 1 at the end. "formed"
counts the seeds where both scores are above 4 times an even spread's, the notebook's bar.
Seeded, with one BLAS thread: the numbers depend neither on the load nor, in float64, on the
BLAS kernels (in float32 they do: training amplifies the kernels' different rounding). This
is not a timing; the cheaper settings see fewer sequences, batch x steps, or carry a smaller
model.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from lib import heads as H  # noqa: E402
from lib import induction as IND  # noqa: E402
from lib import tiny as T  # noqa: E402
from lib import transformer as TR  # noqa: E402

VOCAB, SEQ_LEN, SEGMENT, EVERY = 24, 25, 8, 25
# (d_model, batch, learning rate, steps); the first is the notebook's
SETTINGS = [
    (32, 64, 0.02, 800),
    (32, 64, 0.03, 600),
    (32, 64, 0.04, 600),
    (32, 48, 0.02, 800),
    (32, 48, 0.03, 600),
    (24, 64, 0.02, 800),
    (16, 64, 0.02, 800),
]


def train(d_model, batch, lr, steps, seed, held):
    """The notebook's training loop; returns what it logs on the held-out sequences."""
    held_ids, held_targets, held_repeated = held
    initial = np.random.default_rng(seed)  # the initial weights, as the notebook's new_model
    model = TR.init_transformer(VOCAB, 2, 2, initial, d_model=d_model, rope=True)
    rng, adam, log = np.random.default_rng(100 + seed), T.Adam(lr=lr), []
    for step in range(1, steps + 1):
        ids, targets, _ = IND.repeated_segment_task(batch, SEQ_LEN, VOCAB, SEGMENT, rng)
        adam.step(model.params, model.loss_and_grads(ids, targets)[1])
        if step % EVERY == 0:
            logits, run = model.forward(held_ids)
            loss = T.cross_entropy(logits, np.where(held_repeated, held_targets, -1))[0]
            previous = H.offset_score(run.patterns[0], -1).max()
            prefix = IND.prefix_matching_score(run.patterns[1], held_ids).max()
            log.append((step, loss, previous, prefix))
    return np.array(log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds 0 .. N-1 (default 6)")
    args = parser.parse_args(argv)
    threadpool_limits(1)
    held = IND.repeated_segment_task(256, SEQ_LEN, VOCAB, SEGMENT, np.random.default_rng(11))
    bar_previous = 4 * IND.uniform_previous_token(SEQ_LEN)
    bar_prefix = 4 * IND.uniform_prefix_matching(held[0])
    print(f"formed: previous-token > {bar_previous:.2f} and prefix-matching > {bar_prefix:.2f}")
    for d_model, batch, lr, steps in SETTINGS:
        rows, formed = [], 0
        for seed in range(args.seeds):
            log = train(d_model, batch, lr, steps, seed, held)
            start, end = log[0, 1], log[-1, 1]
            drop = int(log[np.argmax(log[:, 1] < (start + end) / 2), 0])
            ok = log[-1, 2] > bar_previous and log[-1, 3] > bar_prefix
            formed += ok
            rows.append(
                f"  seed {seed}: drop at {drop:4d}, end loss {end:.2f}, previous-token "
                f"{log[-1, 2]:.2f}, prefix-matching {log[-1, 3]:.2f}"
                + ("" if ok else "  (not formed)")
            )
        print(
            f"\nd_model {d_model}, batch {batch}, lr {lr}, {steps} steps ({batch * steps} "
            f"sequences): formed in {formed} of {args.seeds} seeds"
        )
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
