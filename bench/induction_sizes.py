"""Notebook 11's training at other sizes: does a cheaper setting still form the induction
circuit, over several seeds?

    python bench/induction_sizes.py            # 6 seeds of each setting below
    python bench/induction_sizes.py --seeds 3  # quicker
    python bench/induction_sizes.py --store    # write data/induction_runs.json (see below)

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

``--store`` writes, instead, the logs of the notebook's setting for seeds 0, 1 and 2 to
``data/induction_runs.json``: every 25 steps, both held-out losses and each head's
previous-token (layer 0) and prefix-matching (layer 1) score, as the notebook's ``train``
logs them. Section 3 of the notebook trains seed 0 itself, checks that it equals the stored
seed 0, and plots all three from the file. Then run ``make notebooks-links``, which copies the
file into ``lib/data/``.
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
    """The notebook's training loop; returns what it logs on the held-out sequences: per
    entry, a list with one item every EVERY steps."""
    held_ids, held_targets, held_repeated = held
    initial = np.random.default_rng(seed)  # the initial weights, as the notebook's new_model
    model = TR.init_transformer(VOCAB, 2, 2, initial, d_model=d_model, rope=True)
    rng, adam = np.random.default_rng(100 + seed), T.Adam(lr=lr)
    log = {"step": [], "repeated": [], "fresh": [], "previous_token": [], "prefix_matching": []}
    for step in range(1, steps + 1):
        ids, targets, _ = IND.repeated_segment_task(batch, SEQ_LEN, VOCAB, SEGMENT, rng)
        adam.step(model.params, model.loss_and_grads(ids, targets)[1])
        if step % EVERY == 0:
            logits, run = model.forward(held_ids)
            log["step"].append(step)
            for name, scored in (("repeated", held_repeated), ("fresh", ~held_repeated)):
                log[name].append(T.cross_entropy(logits, np.where(scored, held_targets, -1))[0])
            log["previous_token"].append(H.offset_score(run.patterns[0], -1).tolist())
            log["prefix_matching"].append(
                IND.prefix_matching_score(run.patterns[1], held_ids).tolist()
            )
    return log


def store(held, path: Path) -> None:
    """The notebook's setting, seeds 0-2, logged as its section 3 logs them, to ``path``."""
    runs = {str(seed): train(*SETTINGS[0], seed, held) for seed in range(3)}
    lines = [f'  "{seed}": {json.dumps(log)}' for seed, log in runs.items()]  # a seed a line
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {path.relative_to(ROOT)}: seeds {', '.join(runs)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="seeds 0 .. N-1 (default 6)")
    parser.add_argument("--store", action="store_true", help="write data/induction_runs.json")
    args = parser.parse_args(argv)
    threadpool_limits(1)
    held = IND.repeated_segment_task(256, SEQ_LEN, VOCAB, SEGMENT, np.random.default_rng(11))
    if args.store:
        store(held, ROOT / "data" / "induction_runs.json")
        return 0
    bar_previous = 4 * IND.uniform_previous_token(SEQ_LEN)
    bar_prefix = 4 * IND.uniform_prefix_matching(held[0])
    print(f"formed: previous-token > {bar_previous:.2f} and prefix-matching > {bar_prefix:.2f}")
    for setting in SETTINGS:
        d_model, batch, lr, steps = setting
        rows, formed = [], 0
        for seed in range(args.seeds):
            log = {key: np.array(values) for key, values in train(*setting, seed, held).items()}
            loss, start, end = log["repeated"], log["repeated"][0], log["repeated"][-1]
            drop = int(log["step"][np.argmax(loss < (start + end) / 2)])
            previous, prefix = log["previous_token"][-1].max(), log["prefix_matching"][-1].max()
            ok = previous > bar_previous and prefix > bar_prefix
            formed += ok
            rows.append(
                f"  seed {seed}: drop at {drop:4d}, end loss {end:.2f}, previous-token "
                f"{previous:.2f}, prefix-matching {prefix:.2f}" + ("" if ok else "  (not formed)")
            )
        print(
            f"\nd_model {d_model}, batch {batch}, lr {lr}, {steps} steps ({batch * steps} "
            f"sequences): formed in {formed} of {args.seeds} seeds"
        )
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
