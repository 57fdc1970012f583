"""The matrix products alone: NumPy (OpenBLAS) against torch (MKL, on x86), one thread each.

lib and nn.MultiheadAttention compute the same products: the projections of every token and,
per head, the scores and weights @ V. Where the products dominate (the bench's smallest
shape, (16, 128, 256, 8)), how lib compares with torch is mostly how NumPy's BLAS compares
with torch's on that CPU; this script measures that part alone, on every kernel set the CPU
can run (as `make bench`), each ratio the median over interleaved rounds of NumPy's time /
torch's on the same arrays (> 1: NumPy is slower). Then, at that shape, the whole forward of
each side against its products alone: what each spends outside the products.

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


def whole_forward(rounds: int) -> None:
    """At the smallest shape, float32 and float64, no mask: the whole forward (lib's fast path
    and nn.MultiheadAttention, outputs only) against its four products run alone, to split
    each side's time into the products and everything else."""
    import torch
    from torch import nn

    from lib import attention as A
    from lib import blockwise as BW

    batch, n, d, h = 16, 128, 256, 8
    print(f"\nwhole forward at ({batch}, {n}, {d}, {h}), no mask, outputs only (ms, medians):")
    print(f"{'dtype':<8} {'lib':>7} {'mha':>7} {'lib/mha':>8} {'products: NumPy':>16} {'torch':>7}"
          f" {'rest: lib':>10} {'torch':>7}")  # fmt: skip
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        p = A.init_mha_params(d, h, rng, bias=True, dtype=dtype)
        x = rng.normal(size=(batch, n, d)).astype(dtype)
        mha = nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.from_numpy(x).dtype)
        with torch.no_grad():
            mha.in_proj_weight.copy_(torch.from_numpy(np.concatenate([p.W_q, p.W_k, p.W_v], 1).T))
            mha.in_proj_bias.copy_(torch.from_numpy(np.concatenate([p.b_q, p.b_k, p.b_v])))
            mha.out_proj.weight.copy_(torch.from_numpy(p.W_o.T))
            mha.out_proj.bias.copy_(torch.from_numpy(p.b_o))
        mha.eval()
        tx = torch.from_numpy(x)
        arrays = [rng.normal(size=s).astype(dtype) for _, a, b in PRODUCTS[:4] for s in (a, b)]
        tensors = [torch.from_numpy(a) for a in arrays]

        def numpy_products(a=arrays):
            return [a[i] @ a[i + 1] for i in range(0, 8, 2)]

        def torch_products(t=tensors):
            return [t[i] @ t[i + 1] for i in range(0, 8, 2)]

        def torch_mha(m=mha, t=tx):
            with torch.inference_mode():
                return m(t, t, t, need_weights=False)

        def lib(x=x, p=p):
            return BW.multi_head_attention(x, x, p, need_weights=False)

        contenders = [lib, torch_mha, numpy_products, torch_products]
        for f in contenders * 2:
            f()
        times = []
        for r in range(rounds):
            row = [0.0] * 4
            order = list(range(4))
            for i in order[r % 4 :] + order[: r % 4]:  # each round starts one contender later
                start = time.perf_counter()
                contenders[i]()
                row[i] = time.perf_counter() - start
            times.append(row)
        med = [1e3 * statistics.median(t[i] for t in times) for i in range(4)]
        ratio = statistics.median(t[0] / t[1] for t in times)
        rest_lib = 1e3 * statistics.median(t[0] - t[2] for t in times)
        rest_torch = 1e3 * statistics.median(t[1] - t[3] for t in times)
        print(f"{np.dtype(dtype).name:<8} {med[0]:7.2f} {med[1]:7.2f} {ratio:7.2f}x "
              f"{med[2]:16.2f} {med[3]:7.2f} {rest_lib:10.2f} {rest_torch:7.2f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--here", action="store_true", help="only this process's kernel set")
    args = parser.parse_args()
    if args.here:
        measure(args.rounds)
        whole_forward(args.rounds)
        return
    sys.path.insert(0, str(HERE))
    from kernel_sets import kernel_sets

    for name, env in kernel_sets():
        print(f"\n######## kernel set {name}", flush=True)
        command = [sys.executable, __file__, "--here", "--rounds", str(args.rounds)]
        subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
