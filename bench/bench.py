"""Benchmarks for the course's attention code (`make bench`).

This machine is shared and noisy, so every comparison is a *ratio measured in one run*:
the contenders are interleaved (one call of each, round-robin, repeated) and the median
time of each is reported. Absolute times are printed for orientation only.

    python bench/bench.py            # everything
    python bench/bench.py --quick    # fewer repetitions
    python bench/bench.py --only torch --threads 2   # one section, two threads
    python bench/bench.py --only parts   # where the time goes at the smallest torch shape
    python bench/bench.py --only causal-parts   # and in the causal core
    python bench/bench.py --only weights-parts  # and with the per-head weights kept
    python bench/bench.py --only removals --before DIR  # lib before (a checkout at DIR) and now
    python bench/bench.py --only grading --students 20  # grade.py vs nbgrader autograde
"""

from __future__ import annotations

import os

# NumPy (OpenBLAS) and torch (OpenMP) in one process: idle threads of one library spin and
# take cores from the other. Let both put idle threads to sleep at once. These must be set
# before either library is imported.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402
from timing import (  # noqa: E402
    fmt_time,
    interleaved_medians,
    interleaved_times,
    median_ratio,
    spread,
)

from lib import attention as A  # noqa: E402
from lib import blockwise as BW  # noqa: E402
from lib import lists as L  # noqa: E402
from lib import tiny as T  # noqa: E402

# --------------------------------------------------------------------------- which kernels


def numpy_blas() -> dict:
    """threadpoolctl's record of NumPy's BLAS (internal_api, version, architecture, ...)."""
    from threadpoolctl import threadpool_info

    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    return blas[0] if blas else {}


def openblas_own_choice() -> str | None:
    """The kernels OpenBLAS picks on this CPU when OPENBLAS_CORETYPE does not force them,
    asked of a fresh Python (the choice is made once, when NumPy is first imported)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    code = (
        "import numpy, threadpoolctl\n"
        "print(*[i.get('architecture') for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'][:1])"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return done.stdout.strip()


def describe_numpy_blas() -> None:
    """Print which BLAS kernels NumPy runs, and say so when the environment forces them.

    Matrix products are most of the time of every benchmark below, and their speed depends
    on the kernels OpenBLAS runs (AVX2 or AVX-512 ones, say). OpenBLAS picks them for the
    CPU when NumPy is imported, unless OPENBLAS_CORETYPE names others.
    """
    blas = numpy_blas()
    if not blas:
        print("NumPy's BLAS: not reported by threadpoolctl")
        return
    kernels = blas.get("architecture") or "unreported"
    print(f"NumPy's BLAS: {blas['internal_api']} {blas['version']}, {kernels} kernels")
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if blas["internal_api"] == "openblas" and forced:
        own = openblas_own_choice()
        if own and own != kernels:
            print(
                f"  OPENBLAS_CORETYPE={forced} is set in this environment: without it, OpenBLAS "
                f"would run its {own} kernels on this CPU.\n"
                "  Every NumPy time below depends on that choice; to measure OpenBLAS's own:"
                " env -u OPENBLAS_CORETYPE make bench"
            )


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


def bench_loop_vs_reshape(reps: int, threads: int) -> None:
    from threadpoolctl import threadpool_limits

    print("\n== Per-head loop vs reshape (self-attention, float64, no mask) ==")
    print("reshape: A.multi_head_attention, the plain form notebook 03 derives")
    print("ratio > 1: the loop is slower than the reshape version")
    # Notebook 03 times these shapes with one BLAS thread: on a busy 2-core machine two
    # threads made single timings jump by large factors from run to run.
    print(f"threads: {threads} for NumPy's BLAS (threadpoolctl)")
    header = f"{'batch':>5} {'n':>5} {'d':>5} {'h':>3} {'reshape':>12} {'loop heads':>12}"
    print(header + f" {'loop b+h':>12} {'heads/reshape':>14} {'b+h/reshape':>12}")
    for batch, n, d, h in SHAPES:
        rng = np.random.default_rng(0)
        params = A.init_mha_params(d, h, rng)
        x = rng.normal(size=(batch, n, d))
        with threadpool_limits(limits=threads):
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
                {"mha": lambda x=x, p=params: BW.multi_head_attention(x, x, p)},
                reps=max(5, reps // (1 + n // 64)),
            )["mha"]
            gflops = mha_flops(batch, n, d) / t / 1e9
            print(
                f"  {batch:5d} {n:5d} {d:5d} {h:3d} {fmt_time(t)} {gflops:8.1f} "
                f"{gflops / peak:7.0%}"
            )


# --------------------------------------------------------------------------- training


def bench_training(reps: int) -> None:
    """Training steps per second of notebook 05/06's tiny model (forward, backward, Adam)."""
    from threadpoolctl import threadpool_limits

    print("\n== Tiny model training (notebooks 05-06): one step = forward + backward + Adam ==")
    print("batch 32 x seq 12, float64; steps/s from the median step time; threads = BLAS threads")
    print(
        f"  {'d':>3} {'h':>3} {'slots':>5} {'1 thread':>12} {'2 threads':>12} {'2t speed-up':>11}"
    )
    rng = np.random.default_rng(0)
    for d, h, offsets in (
        (16, 1, (1, 2, 3)),
        (16, 4, (1, 2, 3)),
        (16, 16, (1, 2, 3)),
        (32, 8, (1, 3)),
        (256, 4, (1, 2, 3)),  # the syllabus's d_model for the head-count sweep (notebook 05)
        (256, 16, (1, 2, 3)),
    ):
        model = T.init_tiny_model(8, 12, d, h, 8, rng, n_slots=len(offsets))
        optimiser = T.Adam()
        ids, targets = T.copy_offsets_task(32, 12, 8, offsets, rng)

        def step(model=model, optimiser=optimiser, ids=ids, targets=targets):
            _, grads = model.loss_and_grads(ids, targets)
            optimiser.step(model.params, grads)

        times = {}
        for threads in (1, 2):
            with threadpool_limits(threads):
                times[threads] = interleaved_medians({"step": step}, reps * 10)["step"]
        print(
            f"  {d:3d} {h:3d} {len(offsets):5d} {1 / times[1]:8.0f} st/s {1 / times[2]:8.0f} st/s "
            f"{times[1] / times[2]:10.2f}x"
        )


# --------------------------------------------------------------------------- lib vs PyTorch

TORCH_SHAPES = [  # (batch, n, d_model, heads), from the issue
    (16, 128, 256, 8),
    (8, 512, 512, 8),
    (2, 2048, 512, 8),
]


def _sdpa_module(d: int, h: int, dtype):
    """Multi-head attention built on F.scaled_dot_product_attention: one fused QKV Linear,
    SDPA on (batch, heads, n, d_k), the output Linear. What a hand-written torch layer
    usually looks like."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class SDPAAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d, dtype=dtype)
            self.out = nn.Linear(d, d, dtype=dtype)

        def forward(self, x, is_causal=False):
            batch, n, _ = x.shape
            qkv = self.qkv(x).view(batch, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
            heads = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=is_causal)
            return self.out(heads.transpose(1, 2).reshape(batch, n, d))

    return SDPAAttention().eval(), torch


def _torch_layers_from_lib(params: A.MHAParams, dtype):
    """nn.MultiheadAttention and the SDPA module holding lib's weights (torch: x @ W.T)."""
    import torch
    from torch import nn

    d, h = params.d_model, params.n_heads
    mha = nn.MultiheadAttention(d, h, batch_first=True, dtype=dtype).eval()
    sdpa, _ = _sdpa_module(d, h, dtype)
    w_in = np.concatenate([params.W_q, params.W_k, params.W_v], axis=1).T
    b_in = np.concatenate([params.b_q, params.b_k, params.b_v])
    with torch.no_grad():
        for lin_w, lin_b, w_out, b_out in (
            (mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias),
            (sdpa.qkv.weight, sdpa.qkv.bias, sdpa.out.weight, sdpa.out.bias),
        ):
            lin_w.copy_(torch.from_numpy(w_in))
            lin_b.copy_(torch.from_numpy(b_in))
            w_out.copy_(torch.from_numpy(params.W_o.T))
            b_out.copy_(torch.from_numpy(params.b_o))
    return mha, sdpa


def bench_torch(reps: int, threads: int, shapes=TORCH_SHAPES) -> list:
    """lib vs nn.MultiheadAttention vs an SDPA module, and lib's fast path vs its readable form.
    Returns the bars as (name, measured ratio, bar)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(threads)
    print(
        f"\n== lib vs PyTorch {torch.__version__}: multi-head self-attention forward, with biases "
        "=="
    )
    print(
        f"threads: {threads} for NumPy's BLAS (threadpoolctl) and {threads} for torch "
        "(torch.set_num_threads); torch runs in eval mode under torch.inference_mode()"
    )
    torch_blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    blas = numpy_blas()
    print(
        f"kernels: torch {torch.backends.cpu.get_cpu_capability()} for its own code (SDPA, exp)"
        f" and {torch_blas.group(1) if torch_blas else 'an unreported BLAS'} for matrix products;"
        f" NumPy {blas.get('internal_api', 'BLAS')} {blas.get('architecture', 'unreported')}"
    )
    print("contenders, each on the same weights and input (outputs checked equal first):")
    print("  lib+w    BW.multi_head_attention(x, x, params, mask): output + per-head weights")
    print("  lib      the same with need_weights=False: output only")
    print("  read     A.multi_head_attention(x, x, params, mask): the readable form of")
    print("           notebook 03 (output + weights)")
    print("  mha+w    nn.MultiheadAttention(batch_first=True), need_weights=True,")
    print("           average_attn_weights=False: output + per-head weights")
    print("  mha      the same with need_weights=False: output only")
    print("  sdpa     Linear(d, 3d) + F.scaled_dot_product_attention + Linear(d, d): output only")
    print("causal: lib gets A.causal_mask(n); mha gets attn_mask=~A.causal_mask(n) (bool, True =")
    print("  blocked) with is_causal=True; sdpa gets is_causal=True (no mask tensor)")
    print("ratios are medians over rounds of time / time within one round; > 1: lib is slower")
    print("spread: largest interquartile range / median among the contenders (noise)")
    bars = []
    with threadpool_limits(limits=threads):
        for dtype in (np.float32, np.float64):
            torch_dtype = torch.float32 if dtype == np.float32 else torch.float64
            print(f"\n{np.dtype(dtype).name}:")
            print(
                f"{'batch':>5} {'n':>5} {'d':>4} {'h':>2} {'mask':>6} | {'lib+w':>10} "
                f"{'lib':>10} {'read':>10} {'mha+w':>10} {'mha':>10} {'sdpa':>10} | "
                f"{'lib+w/read':>10} {'lib+w/mha+w':>11} {'lib/mha':>7} {'lib/sdpa':>8} "
                f"{'spread':>6}"
            )
            for batch, n, d, h in shapes:
                rng = np.random.default_rng(0)
                params = A.init_mha_params(d, h, rng, bias=True, dtype=dtype)
                x = rng.normal(size=(batch, n, d)).astype(dtype)
                mha, sdpa = _torch_layers_from_lib(params, torch_dtype)
                xt = torch.from_numpy(x)
                for causal in (False, True):
                    mask = A.causal_mask(n) if causal else None
                    blocked = None if mask is None else torch.from_numpy(~mask)

                    def lib_w(x=x, p=params, m=mask):
                        return BW.multi_head_attention(x, x, p, m)

                    def lib(x=x, p=params, m=mask):
                        return BW.multi_head_attention(x, x, p, m, need_weights=False)

                    def read(x=x, p=params, m=mask):
                        return A.multi_head_attention(x, x, p, m)

                    def mha_w(x=xt, layer=mha, m=blocked, c=causal):
                        with torch.inference_mode():
                            return layer(
                                x, x, x, attn_mask=m, is_causal=c, average_attn_weights=False
                            )

                    def mha_o(x=xt, layer=mha, m=blocked, c=causal):
                        with torch.inference_mode():
                            return layer(x, x, x, attn_mask=m, is_causal=c, need_weights=False)

                    def sdpa_o(x=xt, layer=sdpa, c=causal):
                        with torch.inference_mode():
                            return layer(x, is_causal=c)

                    want = lib()[0]
                    tol = 1e-4 if dtype == np.float32 else 1e-10
                    for name, got in (
                        ("read", read()[0]),
                        ("mha+w", mha_w()[0].numpy()),
                        ("mha", mha_o()[0].numpy()),
                        ("sdpa", sdpa_o().numpy()),
                    ):
                        if not np.allclose(got, want, rtol=tol, atol=tol):
                            raise AssertionError(f"{name} disagrees with lib at {batch, n, d, h}")
                    contenders = {
                        "lib+w": lib_w,
                        "lib": lib,
                        "read": read,
                        "mha+w": mha_w,
                        "mha": mha_o,
                        "sdpa": sdpa_o,
                    }
                    # 42 rounds at n = 128, 14 at n = 512, 10 at n = 2048, with 21 reps: with
                    # only 3 rounds the largest shape's ratios moved by up to 0.3 between runs.
                    t = interleaved_times(contenders, reps=max(10, 2 * reps // (1 + n // 256)))
                    med = {k: statistics.median(v) for k, v in t.items()}
                    r_read = median_ratio(t, "lib+w", "read")
                    r_w = median_ratio(t, "lib+w", "mha+w")
                    r_mha = median_ratio(t, "lib", "mha")
                    r_sdpa = median_ratio(t, "lib", "sdpa")
                    noise = max(spread(v) for v in t.values())
                    kind = "causal" if causal else "none"
                    print(
                        f"{batch:5d} {n:5d} {d:4d} {h:2d} {kind:>6} | "
                        + " ".join(fmt_time(med[k]) for k in contenders)
                        + f" | {r_read:9.2f}x {r_w:10.2f}x {r_mha:6.2f}x {r_sdpa:7.2f}x "
                        f"{noise:6.0%}"
                    )
                    where = f"{np.dtype(dtype).name} {(batch, n, d, h)} {kind}"
                    bars.append((f"{where}: lib / mha", r_mha, 1.3, noise))
                    bars.append((f"{where}: lib+w / mha+w", r_w, 1.3, noise))
    return bars


def _torch_parts(shape, dtype):
    """(part, floating-point operations or None, NumPy call or None, torch call) for
    :func:`bench_torch_parts`: the pieces of one multi-head self-attention forward."""
    import torch
    from torch.nn import functional as F

    batch, n, d, h = shape
    d_k = d // h
    rng = np.random.default_rng(0)
    params = A.init_mha_params(d, h, rng, bias=True, dtype=dtype)
    x = rng.normal(size=(batch, n, d)).astype(dtype)
    scale = 1.0 / np.sqrt(d_k)  # folded into W_q and b_q: the queries come out scaled
    W = np.concatenate([params.W_q * scale, params.W_k, params.W_v], axis=1).astype(dtype)
    b = np.concatenate([params.b_q * scale, params.b_k, params.b_v]).astype(dtype)
    x2 = x.reshape(batch * n, d)
    qkv = (x2 @ W + b).reshape(batch, n, 3, h, d_k)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # lib's views
    k_t = k.transpose(0, 1, 3, 2)
    q_c, k_c, k_t_c, v_c = (np.ascontiguousarray(a) for a in (q, k, k_t, v))
    S = np.zeros((batch, h, n, n), dtype)
    heads = np.ascontiguousarray(v_c.transpose(0, 2, 1, 3)).reshape(batch * n, d)
    # torch's side: (batch, heads, n, d_k) contiguous tensors, weights as (out, in)
    tx, tx2, tW, tb = (torch.from_numpy(a) for a in (x, x2, W.T.copy(), b))
    theads = torch.from_numpy(heads)
    tW_o, tb_o = torch.from_numpy(params.W_o.T.copy()), torch.from_numpy(params.b_o)
    tq, tk, tv = (torch.from_numpy(a) for a in (q_c, k_c, v_c))
    tS = torch.zeros(batch, h, n, n, dtype=tq.dtype)
    mha, _ = _torch_layers_from_lib(params, tq.dtype)

    projection = 2 * batch * n * d * d  # one (batch n x d) @ (d x d) product
    per_head = 2 * batch * h * n * n * d_k  # q k^T, or P v, over all heads
    return [
        (
            "QKV projection + bias",
            3 * projection,
            lambda: A.project(x2, W, b),  # x @ W + b, as lib projects
            lambda: F.linear(tx2, tW, tb),
        ),
        (
            "output projection + bias",
            projection,
            lambda: A.project(heads, params.W_o, params.b_o),
            lambda: F.linear(theads, tW_o, tb_o),
        ),
        (
            "scores q k^T, views",
            per_head,
            lambda: np.matmul(q, k_t, out=S),
            lambda: torch.matmul(tq, tk.transpose(-1, -2), out=tS),
        ),
        (
            "scores q k^T, contiguous",
            per_head,
            lambda: np.matmul(q_c, k_t_c, out=S),
            lambda: torch.matmul(tq, tk.transpose(-1, -2), out=tS),
        ),
        ("P v, views", per_head, lambda: np.matmul(S, v), lambda: torch.matmul(tS, tv)),
        ("P v, contiguous", per_head, lambda: np.matmul(S, v_c), lambda: torch.matmul(tS, tv)),
        ("exp of the scores", None, lambda: np.exp(S), lambda: torch.exp(tS)),
        (
            "attention core (torch: SDPA)",
            None,
            None,
            lambda: F.scaled_dot_product_attention(tq, tk, tv),
        ),
        (
            "whole layer, output only",
            None,
            lambda: BW.multi_head_attention(x, x, params, need_weights=False),
            lambda: mha(tx, tx, tx, need_weights=False),
        ),
    ]


def bench_torch_parts(reps: int, threads: int, shape=TORCH_SHAPES[0]) -> None:
    """Where the time goes at one shape: the same products and passes in NumPy and torch.

    The target lib <= nn.MultiheadAttention is hardest at the smallest shape. This times
    the pieces both sides are made of, on the same data, so that the report can say which
    piece a difference comes from rather than guess.
    """
    import torch
    from threadpoolctl import threadpool_limits

    print(f"\n== Where the time goes at (batch, n, d, h) = {shape}, no mask ==")
    print("'views': q, k, v as views into one fused projection (rows 3 d apart);")
    print("  'contiguous': each head's q, k^T, v as its own contiguous array (lib's blocks copy")
    print("  them so). torch always gets contiguous tensors.")
    print(f"GFLOP/s count 2 m n k per (m x k) @ (k x n) product; {threads} thread(s) for both")
    torch.set_num_threads(threads)
    with threadpool_limits(limits=threads), torch.inference_mode():
        for dtype in (np.float32, np.float64):
            rows = _torch_parts(shape, dtype)
            contenders = {}
            tol = 1e-4 if dtype == np.float32 else 1e-10
            for part, _, np_call, torch_call in rows:  # in order: the scores, then P v on them
                if np_call is not None:
                    contenders["numpy: " + part] = np_call
                    want, got = (c() for c in (np_call, torch_call))
                    if isinstance(want, tuple):  # the whole layers: (output, weights=None)
                        want, got = want[0], got[0]
                    if not np.allclose(got.numpy(), want, rtol=tol, atol=tol):
                        raise AssertionError(f"NumPy and torch disagree on {part} at {shape}")
                contenders["torch: " + part] = torch_call
            med = interleaved_medians(contenders, reps=2 * reps)
            print(f"\n{np.dtype(dtype).name}:")
            print(
                f"  {'part':<30} {'NumPy':>11} {'torch':>11} {'NumPy/torch':>11} "
                f"{'GFLOP/s NumPy':>13} {'torch':>6}"
            )
            for part, flop, _, _ in rows:
                t_torch = med["torch: " + part]
                t_np = med.get("numpy: " + part)  # None: no NumPy counterpart
                line = f"  {part:<30} " + (f"{'-':>11}" if t_np is None else fmt_time(t_np))
                line += f" {fmt_time(t_torch)} "
                line += f"{'-':>11}" if t_np is None else f"{t_np / t_torch:10.2f}x"
                if flop is not None:
                    line += f" {flop / t_np / 1e9:13.0f} {flop / t_torch / 1e9:6.0f}"
                print(line)


SECTIONS = (
    "lists", "loop", "gflops", "training", "bert", "torch", "parts", "causal-parts",
    "weights-parts", "removals", "scale", "grading",
)  # fmt: skip
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


def numpy_simd() -> str:
    """The widest vector instructions NumPy's own loops (exp, sums, ...) run on this CPU:
    NumPy picks them at import, like OpenBLAS, and NPY_DISABLE_CPU_FEATURES can narrow them."""
    from numpy._core._multiarray_umath import __cpu_features__

    on = [name for name, enabled in __cpu_features__.items() if enabled]
    return "AVX-512" if "AVX512_SKX" in on or "X86_V4" in on else "AVX2" if "AVX2" in on else "SSE"


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def summarise(bars: list) -> bool:
    """Print PASS/FAIL per bar; True when every bar passed."""
    kernels = f"{numpy_blas().get('architecture', 'unreported')}, NumPy loops {numpy_simd()}"
    print(f"\n== Bars of make bench, kernels {kernels} ==")
    for name, ratio, bar, _ in bars:
        verdict = "PASS" if ratio <= bar else "FAIL"
        if name.startswith("memory n="):
            print(f"  {verdict} {name}: {ratio:.2%} (bar <= {bar:.0%})")
        else:
            print(f"  {verdict} {name}: {ratio:.2f}x (bar <= {bar:.1f}x)")
    failed = sum(ratio > bar for _, ratio, bar, _ in bars)
    print(f"  {len(bars) - failed} of {len(bars)} bars passed")
    return failed == 0


def save_results(
    path: str, bars: list, load_before: list, threads: int, reps: int, removals=None
) -> None:
    """The run as JSON: the machine, the kernels, the versions, the load and every ratio
    (``removals``: the commit compared with and the rows of the removals section)."""
    import datetime
    import json
    import platform
    import subprocess

    import torch

    def git(*args):
        done = subprocess.run(["git", *args], capture_output=True, text=True)
        return done.stdout.strip()

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    blas = numpy_blas()
    record = {
        "date": datetime.date.today().isoformat(),
        "commit": git("rev-parse", "HEAD"),
        # bench/results/ left out: make bench writes one kernel set's file before the next runs
        "worktree_clean": git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"
        )
        == "",  # fmt: skip
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernels": {
            "openblas": blas.get("architecture"),
            "openblas_version": blas.get("version"),
            "numpy_loops": numpy_simd(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "NPY_DISABLE_CPU_FEATURES": os.environ.get("NPY_DISABLE_CPU_FEATURES"),
            "torch": torch.backends.cpu.get_cpu_capability(),
        },
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "torch": torch.__version__,
        },
        "threads": threads,
        "reps": reps,
        "load_before": load_before,
        "load_after": load_average(),
        "bars": [
            {
                "name": name,
                "ratio": round(ratio, 4),
                "bar": bar,
                "passed": ratio <= bar,
                "spread": round(noise, 3),
            }
            for name, ratio, bar, noise in bars
        ],
    }
    if removals is not None:
        commit, rows = removals
        record["removals"] = {
            "before_commit": commit,
            "rows": [
                {"call": call, "contender": who, "ratio": round(ratio, 4), "spread": round(n, 3)}
                for call, who, ratio, n in rows
            ],
        }
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    print(f"results saved to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", choices=SECTIONS, help="run one section only")
    parser.add_argument(
        "--bars", action="store_true", help="the sections with bars only (torch, scale)"
    )
    parser.add_argument(
        "--before", help="a checkout of an earlier commit: the removals section compares with it"
    )
    parser.add_argument("--save", help="write the bars and the machine as JSON to this file")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for NumPy (loop and torch sections) and torch (torch section)",
    )
    parser.add_argument(
        "--students", type=int, help="students in the grading section (default 20, --quick 4)"
    )
    args = parser.parse_args()
    reps = 5 if args.quick else 21
    load_before = load_average()
    print(
        f"numpy {np.__version__}; medians of {reps} interleaved repetitions (fewer for big shapes)"
    )
    describe_numpy_blas()
    print(f"NumPy's own loops: {numpy_simd()}; load average {load_before} ({os.cpu_count()} cores)")
    run = set(SECTIONS) if args.only is None else {args.only}
    if args.bars:
        run = {"torch", "scale"} | ({"removals"} if args.before else set())
    if "removals" in run and not args.before:
        parser.error("the removals section needs --before DIR (a checkout of an earlier commit)")
    bars = []
    if "lists" in run:
        bench_lists_vs_numpy(reps)
    if "loop" in run:
        bench_loop_vs_reshape(reps, args.threads)
    if "gflops" in run:
        bench_gflops(reps)
    if "training" in run:
        bench_training(reps)
    if "bert" in run:
        bench_bert(reps)
    if "torch" in run:
        # --quick leaves out the largest shape, which alone takes about a minute.
        shapes = TORCH_SHAPES[:2] if args.quick else TORCH_SHAPES
        bars += bench_torch(reps, args.threads, shapes)
    if "parts" in run:
        bench_torch_parts(reps, args.threads)
    if "causal-parts" in run:
        from scale import bench_causal_parts

        bench_causal_parts(reps)
    if "weights-parts" in run:
        from scale import bench_weights_parts

        bench_weights_parts(reps, _torch_layers_from_lib)
    removals = None
    if "removals" in run:
        from removals import bench_removals

        removals = bench_removals(reps, args.before)
    if "scale" in run:
        from scale import bench_scale

        bars += bench_scale(reps)
    if "grading" in run:
        from grading import bench_grading

        bench_grading(args.students or (4 if args.quick else 20))
    if bars:
        summarise(bars)
    if args.save:
        save_results(args.save, bars, load_before, args.threads, reps, removals)


if __name__ == "__main__":
    main()
