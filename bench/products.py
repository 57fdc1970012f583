"""The matrix products alone: NumPy (OpenBLAS) against torch (MKL, on x86), one thread each.

lib and nn.MultiheadAttention compute the same products: the projections of every token and,
per head, the scores and weights @ V. Where the products dominate (the bench's smallest
shape, (16, 128, 256, 8)), how lib compares with torch is mostly how NumPy's BLAS compares
with torch's on that CPU; this script measures that part alone, on every kernel set the CPU
can run (as `make bench`), each ratio the median over interleaved rounds of NumPy's time /
torch's on the same arrays (> 1: NumPy is slower).

    python bench/products.py
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# (name, shape of a, shape of b) for a @ b: the products of an MHA forward at two bench shapes
PRODUCTS = [
    ("(16, 128, 256, 8): q, k, v projection", (2048, 256), (256, 768)),
    ("(16, 128, 256, 8): output projection", (2048, 256), (256, 256)),
    ("(16, 128, 256, 8): scores, per head", (128, 128, 32), (128, 32, 128)),
    ("(16, 128, 256, 8): weights @ V, per head", (128, 128, 128), (128, 128, 32)),
    ("(2, 2048, 512, 8): q, k, v projection", (4096, 512), (512, 1536)),
    ("(2, 2048, 512, 8): scores, per head", (16, 2048, 64), (16, 64, 2048)),
]


def measure(rounds: int) -> None:
    import threadpoolctl
    import torch

    threadpoolctl.threadpool_limits(1)
    torch.set_num_threads(1)
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"][0]
    print(
        f"NumPy {np.__version__}: {blas['internal_api']} {blas.get('version')} "
        f"{blas.get('architecture')} kernels; torch {torch.__version__} "
        f"({torch.backends.cpu.get_cpu_capability()}); one thread each; median of {rounds} rounds"
    )
    rng = np.random.default_rng(0)
    print(f"{'product':<44} {'float32':>8} {'float64':>8}   NumPy time / torch time")
    for name, shape_a, shape_b in PRODUCTS:
        cells = []
        for dtype in (np.float32, np.float64):
            a = rng.normal(size=shape_a).astype(dtype)
            b = rng.normal(size=shape_b).astype(dtype)
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            contenders = [lambda a=a, b=b: a @ b, lambda a=ta, b=tb: a @ b]
            for f in contenders * 2:  # warm up
                f()
            ratios = []
            for r in range(rounds):
                times = [0.0, 0.0]
                for i in (0, 1) if r % 2 == 0 else (1, 0):  # each goes first every other round
                    start = time.perf_counter()
                    contenders[i]()
                    times[i] = time.perf_counter() - start
                ratios.append(times[0] / times[1])
            cells.append(f"{statistics.median(ratios):7.2f}x")
        print(f"{name:<44} {cells[0]:>8} {cells[1]:>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--here", action="store_true", help="only this process's kernel set")
    args = parser.parse_args()
    if args.here:
        measure(args.rounds)
        return
    sys.path.insert(0, str(HERE))
    from kernel_sets import kernel_sets

    for name, env in kernel_sets():
        print(f"\n######## kernel set {name}", flush=True)
        command = [sys.executable, __file__, "--here", "--rounds", str(args.rounds)]
        subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
