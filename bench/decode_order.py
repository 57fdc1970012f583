"""Decoding one token: which order of the score product `KV.Decoder` should use, on every
kernel set this machine can run (notebook 10, section 7; `lib/kv_cache.py`).

A step multiplies each key/value head's cached keys, (L, d_k), by the g query rows of its
group, (g, d_k). `rows @ keys^T` gives the (g, L) scores directly; `(keys @ rows^T)^T` streams
the keys row by row and transposes the small result. Both read the same bytes; this times
both, with the softmax and `weights @ values` after them, as a step runs them, for 8, 4, 2 and
1 key/value heads (8 query heads of d_k = 64, L = 32768 cached tokens), interleaved, medians
of ratios within rounds, one BLAS thread.

    python bench/decode_order.py            # every kernel set, results printed
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def measure() -> None:
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits
    from timing import interleaved_times, median_ratio

    from lib import attention as A

    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"numpy {np.__version__}, BLAS {blas[0]['internal_api']} {blas[0]['version']} "
          f"{blas[0].get('architecture')}, NPY_DISABLE_CPU_FEATURES="
          f"{os.environ.get('NPY_DISABLE_CPU_FEATURES', '')!r}")  # fmt: skip
    rng = np.random.default_rng(0)
    heads, d_k, length = 8, 64, 32768
    print(f"{'dtype':>8} {'kv heads':>8} {'keys @ rows^T / rows @ keys^T':>30} {'spread':>7}")
    for dtype in (np.float32, np.float64):
        for kv in (8, 4, 2, 1):
            g = heads // kv
            keys = rng.standard_normal((1, kv, length, d_k)).astype(dtype)
            values = rng.standard_normal((1, kv, length, d_k)).astype(dtype)
            rows = rng.standard_normal((1, kv, g, d_k)).astype(dtype) / 8

            def rows_first(rows=rows, keys=keys, values=values):
                return A.softmax_inplace(rows @ keys.transpose(0, 1, 3, 2)) @ values

            def keys_first(rows=rows, keys=keys, values=values):
                scores = (keys @ rows.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
                return A.softmax_inplace(np.ascontiguousarray(scores)) @ values

            with threadpool_limits(limits=1):
                times = interleaved_times({"rows": rows_first, "keys": keys_first}, reps=21)
            ratio = median_ratio(times, "keys", "rows")
            low, high = (
                np.quantile([k / r for k, r in zip(times["keys"], times["rows"], strict=True)], q)
                for q in (0.25, 0.75)
            )
            print(f"{np.dtype(dtype).name:>8} {kv:>8} {ratio:29.2f}x {high - low:7.2f}")


def main() -> None:
    if "--measure" in sys.argv:
        measure()
        return
    from kernel_sets import kernel_sets

    for name, env in kernel_sets():
        print(f"\n######## kernel set {name}", flush=True)
        subprocess.run([sys.executable, __file__, "--measure"], env=env, check=True)


if __name__ == "__main__":
    main()
