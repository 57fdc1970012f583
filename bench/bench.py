"""Benchmarks for the course's attention code (`make bench`).

This machine is shared and noisy, so every comparison is a *ratio measured in one run*:
the contenders are interleaved (one call of each, round-robin, repeated) and the median
time of each is reported. Absolute times are printed for orientation only.

    python bench/bench.py            # everything
    python bench/bench.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

from lib import attention as A
from lib import lists as L


def interleaved_medians(contenders: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Median seconds per call of each contender, calls interleaved round-robin."""
    for fn in contenders.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(reps):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds:8.2f} s "


# --------------------------------------------------------------------------- lists vs NumPy


def bench_lists_vs_numpy(reps: int) -> None:
    print("\n== Lists vs NumPy: single-head attention, d_k = 32 (causal mask) ==")
    print(f"{'n':>5} {'lists':>12} {'numpy':>12} {'lists / numpy':>14}")
    rng = random.Random(0)
    for n in (8, 32, 96):
        Q, K, V = (L.random_matrix(n, 32, rng) for _ in range(3))
        mask = L.causal_mask(n)
        q, k, v = np.array(Q), np.array(K), np.array(V)
        mask_np = A.causal_mask(n)
        t = interleaved_medians(
            {
                "lists": lambda Q=Q, K=K, V=V, mask=mask: L.attention(Q, K, V, mask),
                "numpy": lambda q=q, k=k, v=v, m=mask_np: A.scaled_dot_product_attention(
                    q, k, v, m
                ),
            },
            reps=max(3, reps // (1 + n // 16)),
        )
        ratio = t["lists"] / t["numpy"]
        print(f"{n:5d} {fmt_time(t['lists'])} {fmt_time(t['numpy'])} {ratio:13.0f}x")


# --------------------------------------------------------------------------- loop vs reshape


def mha_loop_batch_and_heads(x_q, x_kv, params: A.MHAParams):
    """One sequence and one head at a time: the slowest honest way to write it."""
    batch, n_q, d = x_q.shape
    d_k = params.d_k
    out = np.empty_like(x_q)
    for b in range(batch):
        heads = []
        for h in range(params.n_heads):
            cols = slice(h * d_k, (h + 1) * d_k)
            q = x_q[b] @ params.W_q[:, cols]
            k = x_kv[b] @ params.W_k[:, cols]
            v = x_kv[b] @ params.W_v[:, cols]
            heads.append(A.scaled_dot_product_attention(q, k, v)[0])
        out[b] = np.concatenate(heads, axis=-1) @ params.W_o
    return out


SHAPES = [  # (batch, n, d_model, heads)
    (32, 8, 64, 8),
    (16, 32, 128, 8),
    (8, 128, 256, 8),
    (2, 512, 512, 8),
]


def bench_loop_vs_reshape(reps: int) -> None:
    print("\n== Per-head loop vs reshape (self-attention, float64, no mask) ==")
    print("ratio > 1: the loop is slower than the reshape version")
    header = f"{'batch':>5} {'n':>5} {'d':>5} {'h':>3} {'reshape':>12} {'loop heads':>12}"
    print(header + f" {'loop b+h':>12} {'heads/reshape':>14} {'b+h/reshape':>12}")
    for batch, n, d, h in SHAPES:
        rng = np.random.default_rng(0)
        params = A.init_mha_params(d, h, rng)
        x = rng.normal(size=(batch, n, d))
        t = interleaved_medians(
            {
                "reshape": lambda x=x, p=params: A.multi_head_attention(x, x, p),
                "heads": lambda x=x, p=params: A.multi_head_attention_per_head(x, x, p),
                "b+h": lambda x=x, p=params: mha_loop_batch_and_heads(x, x, p),
            },
            reps=max(5, reps // (1 + n // 64)),
        )
        print(
            f"{batch:5d} {n:5d} {d:5d} {h:3d} {fmt_time(t['reshape'])} {fmt_time(t['heads'])} "
            f"{fmt_time(t['b+h'])} {t['heads'] / t['reshape']:13.2f}x "
            f"{t['b+h'] / t['reshape']:11.2f}x"
        )


# --------------------------------------------------------------------------- GFLOP/s


def mha_flops(batch: int, n: int, d: int) -> int:
    """Multiply-adds x 2 of a self-attention forward: 4 projections + QK^T + PV."""
    return 2 * (4 * batch * n * d * d + 2 * batch * n * n * d)


def matmul_peak(dtype, reps: int) -> float:
    """GFLOP/s of one large square np.matmul: this machine's practical peak."""
    size = 1024
    rng = np.random.default_rng(0)
    a = rng.normal(size=(size, size)).astype(dtype)
    b = rng.normal(size=(size, size)).astype(dtype)
    t = interleaved_medians({"matmul": lambda: a @ b}, reps=reps)["matmul"]
    return 2 * size**3 / t / 1e9


def bench_gflops(reps: int) -> None:
    print("\n== Batched multi-head forward vs NumPy matmul peak (self-attention, no mask) ==")
    for dtype in (np.float64, np.float32):
        peak = matmul_peak(dtype, reps)
        name = np.dtype(dtype).name
        print(f"{name}: np.matmul 1024x1024 peak {peak:6.1f} GFLOP/s")
        print(
            f"  {'batch':>5} {'n':>5} {'d':>5} {'h':>3} {'time':>12} {'GFLOP/s':>8} {'of peak':>8}"
        )
        for batch, n, d, h in SHAPES:
            rng = np.random.default_rng(0)
            params = A.init_mha_params(d, h, rng, dtype=dtype)
            x = rng.normal(size=(batch, n, d)).astype(dtype)
            t = interleaved_medians(
                {"mha": lambda x=x, p=params: A.multi_head_attention(x, x, p)},
                reps=max(5, reps // (1 + n // 64)),
            )["mha"]
            gflops = mha_flops(batch, n, d) / t / 1e9
            print(
                f"  {batch:5d} {n:5d} {d:5d} {h:3d} {fmt_time(t)} {gflops:8.1f} "
                f"{gflops / peak:7.0%}"
            )


# --------------------------------------------------------------------------- pretrained BERT


BERT_SENTENCE = "The quick brown fox jumps over the lazy dog."  # 12 tokens with [CLS], [SEP]


def bench_bert(reps: int) -> None:
    from lib import bert as B

    print("\n== Pretrained BERT (all-MiniLM-L6-v2, 6 layers x 12 heads), lib.bert forward ==")
    models = {
        name: B.load_minilm(dtype) for name, dtype in (("f32", np.float32), ("f64", np.float64))
    }
    batch = models["f32"].tokenize([BERT_SENTENCE])
    n = batch.input_ids.shape[1]
    assert n == 12, n
    x = B.embed(models["f32"].weights, batch.input_ids)  # (1, n, d_model)
    layers = models["f32"].weights.layers

    def attention_only():
        for layer in layers:
            A.multi_head_attention(x, x, layer.attention)

    t = interleaved_medians(
        {
            "f32": lambda: B.bert_forward(models["f32"].weights, batch.input_ids),
            "f64": lambda: B.bert_forward(models["f64"].weights, batch.input_ids),
            "attention": attention_only,
        },
        reps=reps,
    )
    print(f"one {n}-token sentence, float32 forward: {fmt_time(t['f32'])}")
    print(f"  float64 / float32 forward time: {t['f64'] / t['f32']:5.2f}x")
    share = t["attention"] / t["f32"]
    print(f"  share of the float32 forward spent in the 6 multi-head attentions: {share:4.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = 5 if args.quick else 21
    print(
        f"numpy {np.__version__}; medians of {reps} interleaved repetitions (fewer for big shapes)"
    )
    bench_lists_vs_numpy(reps)
    bench_loop_vs_reshape(reps)
    bench_gflops(reps)
    bench_bert(reps)


if __name__ == "__main__":
    main()
