"""The "scale" section of `make bench`: the performance bars of notebook 10.

- causal attention: lib's blocks of query rows (lib.blockwise.attention, causal=True) against
  torch's F.scaled_dot_product_attention(is_causal=True) and against itself with skipping
  turned off, on the attention core (q, k, v) of two long-sequence shapes, float32;
- memory: NumPy's peak allocation (tracemalloc) of exact attention at n = 16384, d = 64, one
  head, as a share of one n x n float32 buffer, and (no bar) the time against the plain
  (unblocked) form at the largest n whose n x n buffers fit in the memory available;
- decoding: a 512-token prompt, then 512 tokens one at a time, d = 512, 8 heads, float32:
  lib's Decoder (preallocated cache) against a torch layer that keeps its cache by
  concatenation (SDPA), per generated token; and the cache's speed-up over recomputing the
  whole causal forward for every token;
- the roofline's two ceilings (notebook 10, section 4): the float32 matmul peak and the
  memory bandwidth of a large copy.

The bars on the fast path against nn.MultiheadAttention are checked by the torch section.
Every bar is returned as (name, measured ratio, bar, spread) for bench.py's summary and
results file.

The sections that explain a figure rather than check a bar live here too: where the causal
core's time goes (causal-parts) and where lib+w's time goes against mha+w (weights-parts).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import tracemalloc
import warnings

import numpy as np
from timing import fmt_time, interleaved_medians, interleaved_times, median_ratio, spread

from lib import attention as A
from lib import blockwise as BW
from lib import kv_cache as KV

CAUSAL_SHAPES = [(2, 4096, 512, 8), (1, 8192, 512, 8)]  # (batch, n, d_model, heads)
MEMORY_N, MEMORY_D = 16384, 64
DECODE = dict(prompt=512, new=512, d_model=512, heads=8)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (2 cores)"


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def qkv(batch, n, d_model, heads, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    shape = (batch, heads, n, d_model // heads)
    return tuple(rng.normal(size=shape).astype(dtype) for _ in range(3))


def bench_causal(reps: int, bars: list) -> None:
    import torch
    from torch.nn import functional as F

    print("\n-- causal attention core, float32: q, k, v of (batch, heads, n, d_k) --")
    print("lib       BW.attention(q, k, v, causal=True): blocks of query rows that skip the keys")
    print("          after the last one their rows may attend to")
    print("lib noskip  the same with skip_masked_blocks=False (every key computed, then masked)")
    print("sdpa      F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    print(
        f"{'batch':>5} {'n':>5} {'d':>4} {'h':>2} | {'lib':>10} {'lib noskip':>10} "
        f"{'sdpa':>10} | {'lib/sdpa':>8} {'lib/noskip':>10} {'spread':>6}"
    )
    for batch, n, d, h in CAUSAL_SHAPES:
        q, k, v = qkv(batch, n, d, h)
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        want = BW.attention(q, k, v, causal=True)
        with torch.inference_mode():
            got = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy()
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"SDPA and lib disagree at {batch, n, d, h}")

        def sdpa(tq=tq, tk=tk, tv=tv):
            with torch.inference_mode():
                return F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)

        contenders = {
            "lib": lambda q=q, k=k, v=v: BW.attention(q, k, v, causal=True),
            "noskip": lambda q=q, k=k, v=v: BW.attention(
                q, k, v, causal=True, skip_masked_blocks=False
            ),
            "sdpa": sdpa,
        }
        t = interleaved_times(contenders, reps=max(6, reps // (n // 1024)))
        med = {name: statistics.median(ts) for name, ts in t.items()}
        r_sdpa, r_skip = median_ratio(t, "lib", "sdpa"), median_ratio(t, "lib", "noskip")
        noise = max(spread(ts) for ts in t.values())
        print(
            f"{batch:5d} {n:5d} {d:4d} {h:2d} | {fmt_time(med['lib'])} {fmt_time(med['noskip'])} "
            f"{fmt_time(med['sdpa'])} | {r_sdpa:7.2f}x {r_skip:9.2f}x {noise:6.0%}"
        )
        where = f"causal core {(batch, n, d, h)}"
        bars.append((f"{where}: lib / sdpa(is_causal)", r_sdpa, 1.3, noise))
        bars.append((f"{where}: lib / lib without skipping", r_skip, 0.6, noise))


class _TimedNumPy:
    """NumPy for lib.blockwise while :func:`bench_causal_parts` runs: the calls made by one
    block of the kernel (``attend_block``) are timed and added up by what they compute
    (``s.max``, ``s.sum`` and indexing are methods, not NumPy calls: they count as the rest)."""

    def __init__(self, d_k: int):
        self.d_k, self.seconds, self.products = d_k, {}, []

    def __getattr__(self, name):
        fn = getattr(np, name)
        if not callable(fn) or isinstance(fn, type):
            return fn

        def timed(*args, **kwargs):
            if sys._getframe(1).f_code.co_name != "attend_block":
                return fn(*args, **kwargs)
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            part = self.part(name, args)
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - start
            if part in ("scores q k^T", "P @ v"):  # the operands, to replay with torch
                self.products.append((args[0], args[1], result))
            return result

        return timed

    def part(self, name, args) -> str:
        if name == "matmul":
            return "scores q k^T" if args[0].shape[-1] == self.d_k else "P @ v"
        if name == "divide":  # the output (d_v = d_k numbers a row) or the kept weights
            return "normalise o" if args[0].shape[-1] == self.d_k else "normalise weights"
        return self.PARTS.get(name, "other NumPy calls")

    PARTS = {
        "exp": "exp",
        "subtract": "subtract the max",
        "copyto": "mask",
        "isinf": "overflowed scores to NaN",
    }


def bench_causal_parts(reps: int) -> None:
    """Where the causal core's time goes: lib's kernel loop, its NumPy calls timed by kind,
    against SDPA(is_causal) on the same q, k, v (one thread each)."""
    import torch
    from threadpoolctl import threadpool_limits
    from torch.nn import functional as F

    batch, n, d, h = CAUSAL_SHAPES[0]
    q, k, v = qkv(batch, n, d, h)
    tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
    flop = 2 * 2 * batch * h * (n * (n + 1) / 2) * (d // h)  # q k^T and P v, causal half
    torch.set_num_threads(1)
    with threadpool_limits(limits=1), torch.inference_mode():
        sdpa = interleaved_medians(
            {"sdpa": lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True),
             "lib": lambda: BW.attention(q, k, v, causal=True)}, reps=max(6, reps // 4),
        )  # fmt: skip
        runs = []
        for _ in range(max(6, reps // 4)):
            timed = _TimedNumPy(d // h)
            BW.np = timed
            try:
                BW.attention(q, k, v, causal=True)
            finally:
                BW.np = np
            runs.append(timed.seconds)
        # the same products, on the same operands (views), with OpenBLAS and with torch's BLAS
        numpy_ops = timed.products
        with warnings.catch_warnings():  # k and v are read-only views: torch only reads them
            warnings.simplefilter("ignore", UserWarning)
            torch_ops = [tuple(torch.from_numpy(x) for x in op) for op in numpy_ops]
        replay = interleaved_medians(
            {"numpy": lambda: [np.matmul(a, b, out=o) for a, b, o in numpy_ops],
             "torch": lambda: [torch.matmul(a, b, out=o) for a, b, o in torch_ops]},
            reps=max(6, reps // 4),
        )  # fmt: skip
    parts = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    print(f"\n== Where the causal core's time goes at {(batch, n, d, h)}, float32 ==")
    print(f"lib untimed {fmt_time(sdpa['lib'])}, SDPA(is_causal) {fmt_time(sdpa['sdpa'])}: "
          f"lib / SDPA {sdpa['lib'] / sdpa['sdpa']:.2f}x; GFLOP/s count q k^T and P v over the "
          "causal half")  # fmt: skip
    products = sum(t for name, t in parts.items() if name in ("scores q k^T", "P @ v"))
    for name, t in [*sorted(parts.items(), key=lambda item: -item[1]), ("all of these", None)]:
        t = sum(parts.values()) if t is None else t
        print(f"  {name:<26} {fmt_time(t)} {t / sdpa['lib']:6.0%} of lib")
    print(f"  {'q k^T + P v':<26} {fmt_time(products)} = {flop / products / 1e9:.0f} GFLOP/s; "
          f"SDPA's whole call = {flop / sdpa['sdpa'] / 1e9:.0f} GFLOP/s")  # fmt: skip
    print(f"  the same {len(numpy_ops)} products replayed: NumPy {fmt_time(replay['numpy'])}, "
          f"torch.matmul {fmt_time(replay['torch'])} ({flop / replay['torch'] / 1e9:.0f} "
          f"GFLOP/s): NumPy / torch {replay['numpy'] / replay['torch']:.2f}x")  # fmt: skip


WEIGHTS_SHAPES = [((8, 512, 512, 8), np.float32), ((2, 2048, 512, 8), np.float64)]


def _torch_call_parts(fn, d_k: int) -> dict[str, float]:
    """Seconds of each kind of operation torch runs in one call of ``fn``, by its profiler
    (each operation's own time: a linear layer's time is its addmm's)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    parts: dict[str, float] = {}
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key in ("aten::addmm", "aten::mm"):
            part = "projections"
        elif e.key in ("aten::bmm", "aten::baddbmm"):
            second = e.input_shapes[-2] if e.key == "aten::baddbmm" else e.input_shapes[1]
            part = "scores q k^T" if second[-2] == d_k else "P @ v"
        elif e.key in ("aten::_softmax", "aten::softmax"):
            part = "softmax"
        else:
            part = "other"
        parts[part] = parts.get(part, 0.0) + e.self_cpu_time_total / 1e6
    return parts


def _lib_call_parts(fn, d_k: int) -> dict[str, float]:
    """Seconds of each kind of NumPy call in one call of ``fn`` (lib's fast path): the
    kernel's calls by :class:`_TimedNumPy`, the projections (``A.project``), and 'other',
    the rest of the call (the row max and sum, Python)."""
    timed, project = _TimedNumPy(d_k), A.project

    def timed_project(*args):
        start = time.perf_counter()
        out = project(*args)
        seconds = time.perf_counter() - start
        timed.seconds["projections"] = timed.seconds.get("projections", 0.0) + seconds
        return out

    BW.np, A.project = timed, timed_project
    try:
        start = time.perf_counter()
        fn()
        total = time.perf_counter() - start
    finally:
        BW.np, A.project = np, project
    timed.seconds["other"] = total - sum(timed.seconds.values())
    return timed.seconds


def bench_weights_parts(reps: int, torch_layers) -> None:
    """Where the time goes when the per-head weights are kept: lib's fast path with weights,
    its NumPy calls timed by kind, against nn.MultiheadAttention with weights, its
    operations timed by torch's profiler (one thread each). The two are timed in the same
    rounds, taking turns to go first, and each part's ratio is the median over rounds.
    ``torch_layers(params, dtype)``: the torch layers with lib's weights (bench.py's)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    softmax = ("exp", "subtract the max", "normalise weights", "normalise o", "mask")
    softmax += ("overflowed scores to NaN", "other NumPy calls")
    for (batch, n, d, h), dtype in WEIGHTS_SHAPES:
        rng = np.random.default_rng(0)
        params = A.init_mha_params(d, h, rng, bias=True, dtype=dtype)
        x = rng.normal(size=(batch, n, d)).astype(dtype)
        mha, _ = torch_layers(params, torch.from_numpy(x).dtype)
        xt = torch.from_numpy(x)

        def mha_w(x=xt, layer=mha):
            return layer(x, x, x, average_attn_weights=False)

        def lib_w(x=x, p=params):
            return BW.multi_head_attention(x, x, p)

        rounds = max(6, reps // 2)
        with threadpool_limits(limits=1), torch.inference_mode():
            t = interleaved_times({"lib+w": lib_w, "mha+w": mha_w}, reps=rounds)
            lib_runs, torch_runs = [], []
            for r in range(rounds):  # one timed call of each, taking turns to go first
                for side in ("lib", "torch") if r % 2 == 0 else ("torch", "lib"):
                    if side == "lib":
                        lib_runs.append(_lib_call_parts(lib_w, d // h))
                    else:
                        torch_runs.append(_torch_call_parts(mha_w, d // h))
        for run in lib_runs:
            run["softmax"] = sum(run.get(name, 0.0) for name in softmax)
            run["all"] = sum(run.values()) - run["softmax"]
        for run in torch_runs:
            run["all"] = sum(run.values())
        print(f"\n== Where the time goes with the weights kept, {(batch, n, d, h)}, "
              f"{np.dtype(dtype).name}, no mask ==")  # fmt: skip
        print(f"untimed, {rounds} rounds: lib+w {fmt_time(statistics.median(t['lib+w']))}, "
              f"mha+w {fmt_time(statistics.median(t['mha+w']))}: lib+w / mha+w "
              f"{median_ratio(t, 'lib+w', 'mha+w'):.2f}x")  # fmt: skip
        print("lib: its NumPy calls timed one by one ('other': the rest of the call); torch:")
        print("  its operations' own time by torch.profiler ('other': copies, views, and so on);")
        print("  medians over rounds; lib / mha: median over rounds of the ratio in each round")
        print(f"  {'part':<24} {'lib+w':>11} {'mha+w':>11} {'lib / mha':>9}")
        for name in ("projections", "scores q k^T", "P @ v", "softmax", *softmax, "other", "all"):
            t_lib = statistics.median(run.get(name, 0.0) for run in lib_runs)
            indent = "    " if name in softmax else "  "
            line = f"{indent}{name:<{26 - len(indent)}} {fmt_time(t_lib)}"
            if name in torch_runs[0]:
                t_torch = statistics.median(run[name] for run in torch_runs)
                ratio = statistics.median(
                    a.get(name, 0.0) / b[name] for a, b in zip(lib_runs, torch_runs, strict=True)
                )
                line += f" {fmt_time(t_torch)} {ratio:8.2f}x"
            print(line)
    values = np.random.default_rng(0).normal(size=1 << 22)
    print("\nNumPy's exp alone, on 2^22 numbers:", end="")
    for dtype in (np.float32, np.float64):
        x = values.astype(dtype)
        out = np.empty_like(x)
        t = interleaved_medians({"exp": lambda x=x, out=out: np.exp(x, out=out)}, reps)
        print(f" {np.dtype(dtype).name} {t['exp'] / x.size * 1e9:.1f} ns", end="")
    print(" per number")


def peak_bytes(fn) -> int:
    """NumPy's peak allocation while fn runs (tracemalloc sees NumPy's buffers)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def bench_memory(reps: int, bars: list) -> None:
    n, d = MEMORY_N, MEMORY_D
    print(f"\n-- exact attention at n = {n}, d = {d}, one head, float32 --")
    q, k, v = (a[0, 0] for a in qkv(1, n, d, 1))
    buffer = n * n * 4  # one n x n float32 matrix
    inputs_and_output = 4 * n * d * 4
    for causal in (False, True):
        extra = peak_bytes(lambda c=causal: BW.attention(q, k, v, causal=c)) - n * d * 4
        share = extra / buffer
        print(
            f"lib {'causal' if causal else 'full  '}: peak NumPy allocation beyond the output "
            f"{extra / 2**20:6.1f} MiB = {share:.2%} of one n x n float32 buffer "
            f"({buffer / 2**30:.0f} GiB)"
        )
        bars.append(
            (f"memory n={n}{' causal' if causal else ''}: extra / n x n buffer", share, 0.05, 0.0)
        )
    # The plain form holds the n x n scores (and, briefly, a temporary of their size).
    avail = available_bytes()
    m = n
    while avail is not None and 3 * m * m * 4 + inputs_and_output > 0.5 * avail and m > 1024:
        m //= 2
    where = "" if avail is None else f" ({avail / 2**30:.1f} GiB available)"
    print(f"time against the plain form at n = {m}, the largest that fits{where}:")
    if m != n:
        q, k, v = (a[:m] for a in (q, k, v))
    plain_peak = peak_bytes(lambda: A.scaled_dot_product_attention(q, k, v))
    print(f"  plain form's peak NumPy allocation: {plain_peak / 2**20:.0f} MiB")
    t = interleaved_times(
        {
            "lib": lambda: BW.attention(q, k, v),
            "plain": lambda: A.scaled_dot_product_attention(q, k, v),
        },
        reps=max(3, reps // 7),
    )
    ratio = median_ratio(t, "lib", "plain")
    noise = max(spread(ts) for ts in t.values())
    print(
        f"  lib {fmt_time(statistics.median(t['lib']))}, plain "
        f"{fmt_time(statistics.median(t['plain']))}: lib / plain {ratio:.2f}x "
        f"(spread {noise:.0%}; no bar)"
    )


def torch_decoder(params: A.MHAParams):
    """A torch layer that decodes with its own cache, grown by concatenation."""
    import torch
    from torch.nn import functional as F

    d, h = params.d_model, params.n_heads
    d_k = d // h
    W = torch.from_numpy(np.concatenate([params.W_q, params.W_k, params.W_v], axis=1).T.copy())
    W_o = torch.from_numpy(params.W_o.T.copy())

    class Decoder:
        def reset(self):
            self.k = self.v = None

        def __call__(self, x):
            with torch.inference_mode():
                b, t, _ = x.shape
                qkv = F.linear(x, W).view(b, t, 3, h, d_k).permute(2, 0, 3, 1, 4)
                q, k, v = qkv[0], qkv[1], qkv[2]
                self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
                self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
                o = F.scaled_dot_product_attention(q, self.k, self.v, is_causal=t > 1)
                return F.linear(o.transpose(1, 2).reshape(b, t, d), W_o)

    decoder = Decoder()
    decoder.reset()
    return decoder


def bench_decoding(reps: int, bars: list) -> None:
    import torch

    prompt, new, d, h = DECODE["prompt"], DECODE["new"], DECODE["d_model"], DECODE["heads"]
    total = prompt + new
    print(
        f"\n-- decoding, float32, batch 1, d = {d}, {h} heads: a {prompt}-token prompt, then "
        f"{new} tokens one at a time --"
    )
    print("lib    KV.Decoder: prefill, then one step per token into a preallocated cache")
    print("torch  Linear + torch.cat onto its own cache + SDPA + Linear, per token")
    rng = np.random.default_rng(0)
    params = A.init_mha_params(d, h, rng, dtype=np.float32)
    x = rng.normal(size=(1, total, d)).astype(np.float32)
    xt = torch.from_numpy(x)
    lib, ref = KV.Decoder(params, max_len=total), torch_decoder(params)
    outs = {}

    def run_lib():
        lib.reset()
        lib(x[:, :prompt])
        outs["lib"] = [lib(x[:, i : i + 1]) for i in range(prompt, total)]

    def run_torch():
        ref.reset()
        ref(xt[:, :prompt])
        outs["torch"] = [ref(xt[:, i : i + 1]) for i in range(prompt, total)]

    run_lib()
    run_torch()
    for a, b in zip(outs["lib"], outs["torch"], strict=True):
        if not np.allclose(a, b.numpy(), rtol=1e-4, atol=1e-4):
            raise AssertionError("lib's decoder and torch's disagree")
    t = interleaved_times({"lib": run_lib, "torch": run_torch}, reps=max(5, reps // 2))
    ratio = median_ratio(t, "lib", "torch")
    noise = max(spread(ts) for ts in t.values())
    per = {name: statistics.median(ts) / new for name, ts in t.items()}  # prefill included
    print(
        f"per generated token (prefill included, divided by {new}): lib {fmt_time(per['lib'])},"
        f" torch {fmt_time(per['torch'])}: lib / torch {ratio:.2f}x "
        f"(spread {noise:.0%})"
    )
    bars.append(("decoding: lib / torch per token", ratio, 1.2, noise))

    # Without a cache, each new token reruns the whole causal forward over the sequence.
    steps = 16
    print("the cache against recomputing the causal forward over all n tokens, per token")
    print(f"(cached: {steps} consecutive steps after a prompt of n, the prompt not timed):")
    print(f"  {'n':>5} {'cached step':>12} {'recompute':>12} {'speed-up':>9}")
    for n in (prompt, total - steps):
        xs, mask = x[:, :n], A.causal_mask(n)

        def cached(n=n):
            lib.reset()
            lib(x[:, :n])
            t0 = time.perf_counter()
            for i in range(n, n + steps):
                lib(x[:, i : i + 1])
            return (time.perf_counter() - t0) / steps

        def recompute(xs=xs, mask=mask):
            t0 = time.perf_counter()
            BW.multi_head_attention(xs, xs, params, mask, need_weights=False)
            return time.perf_counter() - t0

        rounds = [(cached(), recompute()) for _ in range(max(5, reps // 3))]
        step_t = statistics.median(c for c, _ in rounds)
        full_t = statistics.median(r for _, r in rounds)
        speedup = statistics.median(r / c for c, r in rounds)
        print(f"  {n:5d} {fmt_time(step_t)} {fmt_time(full_t)} {speedup:8.0f}x")


def bench_roofline(reps: int) -> None:
    """The two ceilings of notebook 10's roofline: matmul peak and memory bandwidth."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(1024, 1024)).astype(np.float32)
    src = np.ones(2**25, np.float32)  # 128 MiB
    dst = np.empty_like(src)
    t = interleaved_times({"matmul": lambda: a @ a, "copy": lambda: np.copyto(dst, src)}, reps)
    peak = 2 * 1024**3 / min(t["matmul"]) / 1e9
    bandwidth = 2 * src.nbytes / min(t["copy"]) / 1e9
    print(
        f"\n-- roofline (notebook 10, section 4): float32 matmul 1024 x 1024 peak {peak:.0f} "
        f"GFLOP/s, copy bandwidth {bandwidth:.1f} GB/s (read + write), ridge point "
        f"{peak / bandwidth:.0f} FLOP/byte (best of {reps}) --"
    )


def bench_scale(reps: int) -> list:
    """Run the section; returns the bars as (name, measured ratio, bar, spread)."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    print("\n== Attention at scale (notebook 10): its performance bars ==")
    print(
        f"one thread for NumPy's BLAS and for torch {torch.__version__} "
        f"({torch.backends.cpu.get_cpu_capability()}); ratios are medians over rounds of "
        "time / time within one round"
    )
    print(f"before: {load()}")
    bars: list = []
    with threadpool_limits(limits=1):
        bench_roofline(reps)
        bench_causal(reps, bars)
        bench_memory(reps, bars)
        bench_decoding(reps, bars)
    print(f"\nafter: {load()}")
    return bars
