"""Notebook 09's experiment at a larger size: the tiny model with each position scheme, several
seeds, the same budget, accuracy at the training length and at longer lengths.

    python bench/positions.py               # 10 seeds, 400 steps of 32 sequences, lengths to 128
    python bench/positions.py --seeds 3 --steps 150 --batch 16 --lengths 16 32 64  # the notebook's
    python bench/positions.py --train-len 8 --lengths 8 16 32 64    # train on shorter sequences

It runs ``lib.tiny.position_experiment`` (the protocol notebook 09 runs, written once) on the
notebook's two tasks, copy two back and the last marked token, and prints, for every scheme
and test length, the median accuracy over seeds and its range (min to max). At a longer
length only the positions at or beyond the training length are scored. The numbers are
deterministic for a given machine's BLAS (seeded; one BLAS thread), not timings; the run
takes a few minutes on the course's 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from lib import positions as POS  # noqa: E402
from lib import tiny as T  # noqa: E402

VOCAB = 8


def tasks() -> dict:
    return {
        "copy two back": lambda n, L, r: T.copy_offsets_task(n, L, VOCAB, (2,), r),
        "last marked token": lambda n, L, r: T.last_marked_task(n, L, VOCAB, 4, r),
    }


def summary(records: list[dict], schemes, lengths, train_len: int) -> list[str]:
    """One line per scheme: median [min, max] of the accuracy over seeds, per length."""
    head = " | ".join(
        f"{f'length {n}' if n == train_len else f'positions {train_len}-{n - 1}':^18}"
        for n in lengths
    )
    lines = [f"{'scheme':>11} | {head}"]
    for scheme in schemes:
        cells = []
        for n in lengths:
            accs = np.array(
                [r["accuracy"] for r in records if (r["scheme"], r["length"]) == (scheme, n)]
            )
            cells.append(f"{np.median(accs):.2f} [{accs.min():.2f}, {accs.max():.2f}]")
        lines.append(f"{scheme:>11} | " + " | ".join(f"{c:^18}" for c in cells))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 (default 10)")
    parser.add_argument("--steps", type=int, default=400, help="training steps (default 400)")
    parser.add_argument("--batch", type=int, default=32, help="sequences per step (default 32)")
    parser.add_argument("--train-len", type=int, default=16, help="training length (default 16)")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[16, 32, 64, 128], help="test lengths"
    )
    parser.add_argument("--lr", type=float, default=0.02, help="Adam's learning rate")
    args = parser.parse_args(argv)
    threadpool_limits(1)
    seeds = tuple(range(args.seeds))
    lengths = tuple(sorted(set(args.lengths) | {args.train_len}))
    print(
        f"tiny model, d_model 16, 4 heads, {VOCAB} token types; seeds {seeds[0]}..{seeds[-1]}, "
        f"{args.steps} steps of {args.batch} sequences of length {args.train_len}, Adam at "
        f"lr {args.lr}; 128 held-out sequences per length"
    )
    for name, task in tasks().items():
        started = time.perf_counter()
        records = T.position_experiment(
            task, POS.SCHEMES, seeds, args.steps, args.train_len, lengths,
            vocab_size=VOCAB, n_classes=VOCAB, batch=args.batch, lr=args.lr,
        )  # fmt: skip
        print(f"\n{name}: median accuracy over {len(seeds)} seeds [min, max] "
              f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
        print("\n".join(summary(records, POS.SCHEMES, lengths, args.train_len)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
