"""The "removals" section of bench.py: lib's fast path before and after a change, in one run.

``--before DIR`` names a checkout of the commit to compare with (``git worktree add DIR
<commit>``); its ``lib`` is imported beside this one as the package ``lib_before``. On the
calls of the bars, interleaved in the same rounds, it times:

- the code before, then the code before with each of its speed tricks turned off, one at a
  time, by its own constants (what removing that trick alone costs or saves);
- the code now, and the code now with each trick it keeps undone, and with other block sizes
  (what keeping the trick and its one block size gains).

Each ratio is the median over rounds of time(contender) / time(the code before): below 1,
faster than before. A trick stays only if undoing it costs time on every kernel set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from timing import fmt_time, interleaved_times, median_ratio, spread

from lib import attention as A
from lib import blockwise as BW

# The constants of lib/blockwise.py before this round (commit 9a7d26c) that turn its tricks
# off: a weights array never reuses the last one's memory; every row's maximum subtracted;
# causal blocks sized like any other; groups of whole score matrices as large as row blocks.
BEFORE_OFF = {
    "no weights pool": dict(SPARE_WEIGHTS_BYTES=1 << 62),
    "exp shifted": dict(SAFE_SCORE={}),
    "no causal block rule": dict(CAUSAL_BLOCKS=1, CAUSAL_MIN_ROWS=1),
    "one block size": dict(GROUP_BYTES=8 << 20),
}
BEFORE_OFF["all four off"] = {k: v for sizes in BEFORE_OFF.values() for k, v in sizes.items()}


ATTEND_BLOCK = BW.attend_block  # lib's own, for the variants below to call


def causal_as_mask(q, k, allowed, diagonal):
    """The causal rule of a block as part of its mask, over every key of the block."""
    if diagonal is None:
        return allowed
    rule = BW.causal_rule(0, q.shape[-2], 0, k.shape[-2], diagonal)
    return rule if allowed is None else allowed & rule


def causal_on_whole_block(q, k, v, allowed, diagonal, out, weights) -> None:
    """lib's attend_block with the causal rule applied to every key of the block, not only
    to those some row of it cannot see: the trick "mask only the diagonal band" undone."""
    ATTEND_BLOCK(q, k, v, causal_as_mask(q, k, allowed, diagonal), None, out, weights)


def normalised_before_pv(q, k, v, allowed, diagonal, out, weights) -> None:
    """lib's attend_block with notebook 02's softmax (A.masked_softmax) before P @ V: the
    trick "normalised after P @ V" undone."""
    s = np.matmul(q, np.swapaxes(k, -1, -2), out=weights)
    w = A.masked_softmax(s, causal_as_mask(q, k, allowed, diagonal))
    np.matmul(w, v, out=out)


AFTER_UNDONE = {
    "normalised before P @ V": dict(attend_block=normalised_before_pv),
    "causal on whole block": dict(attend_block=causal_on_whole_block),
    "blocks 2 MB": dict(ROW_BLOCK_BYTES=2 << 20),
    "blocks 8 MB": dict(ROW_BLOCK_BYTES=8 << 20),
}

CALLS = [  # (batch, n, d_model, heads), dtype, causal, need_weights: the bars' shapes
    ((16, 128, 256, 8), np.float32, False, False),
    ((16, 128, 256, 8), np.float64, False, True),
    ((8, 512, 512, 8), np.float32, True, False),
    ((8, 512, 512, 8), np.float64, False, True),
    ((2, 2048, 512, 8), np.float32, False, True),
    ((2, 2048, 512, 8), np.float64, True, False),
]
CORE = (2, 4096, 512, 8)  # the causal core, float32


def load_before(root: str):
    """``root``/lib imported as the package lib_before; returns its (blockwise, attention)
    and the commit checked out at ``root``."""
    lib = Path(root) / "lib"
    spec = importlib.util.spec_from_file_location(
        "lib_before", lib / "__init__.py", submodule_search_locations=[str(lib)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["lib_before"] = package
    spec.loader.exec_module(package)
    from lib_before import attention as old_attention
    from lib_before import blockwise as old_blockwise

    done = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True)
    return old_blockwise, old_attention, done.stdout.decode().strip() or "unknown"


@contextlib.contextmanager
def patched(module, values: dict):
    old = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(module, name, value)


def bench_removals(reps: int, before_root: str) -> tuple[str, list]:
    """Run the section; returns the commit compared with and the rows (call, contender,
    ratio to the code before, spread)."""
    from threadpoolctl import threadpool_limits

    OLD, OLD_A, commit = load_before(before_root)
    print(f"\n== Before and after: lib's fast path at commit {commit} and now, one thread ==")
    print("ratio: median over rounds of time / time(before); below 1: faster than before")
    calls = []
    rng = np.random.default_rng(0)
    for (batch, n, d, h), dtype, causal, weights in CALLS:
        params = A.init_mha_params(d, h, rng, bias=True, dtype=dtype)
        old_params = OLD_A.MHAParams(**params.arrays(), n_heads=h)
        x = rng.normal(size=(batch, n, d)).astype(dtype)
        name = f"{np.dtype(dtype).name} {(batch, n, d, h)} {'causal' if causal else 'none'}"
        name += " +w" if weights else ""
        calls.append(
            (
                name,
                lambda x=x, p=old_params, c=causal, w=weights: OLD.multi_head_attention(
                    x, x, p, causal=c, need_weights=w
                ),
                lambda x=x, p=params, c=causal, w=weights: BW.multi_head_attention(
                    x, x, p, causal=c, need_weights=w
                ),
            )
        )
    batch, n, d, h = CORE
    q, k, v = (rng.normal(size=(batch, h, n, d // h)).astype(np.float32) for _ in range(3))
    calls.append(
        (
            f"causal core {CORE} float32",
            lambda: OLD.attention(q, k, v, causal=True),
            lambda: BW.attention(q, k, v, causal=True),
        )
    )

    def run(module, values, call):
        def timed():
            with patched(module, values):
                call()

        return timed

    names = ["before"] + [f"before, {t}" for t in BEFORE_OFF] + ["after"]
    names += [f"after, {t}" for t in AFTER_UNDONE]
    print(f"{'call':<34} {'before':>11} " + " ".join(f"{m[:14]:>14}" for m in names[1:]))
    rows = []
    with threadpool_limits(limits=1):
        for name, old_call, new_call in calls:
            contenders = {"before": old_call, "after": new_call}
            contenders |= {f"before, {t}": run(OLD, v, old_call) for t, v in BEFORE_OFF.items()}
            contenders |= {f"after, {t}": run(BW, v, new_call) for t, v in AFTER_UNDONE.items()}
            contenders = {m: contenders[m] for m in names}
            big = "2048" in name or "core" in name
            t = interleaved_times(contenders, reps=max(4, reps // (4 if big else 1)))
            OLD.release_spare_weights()
            noise = max(spread(ts) for ts in t.values())
            ratios = {m: median_ratio(t, m, "before") for m in names}
            print(
                f"{name:<34} {fmt_time(statistics.median(t['before']))} "
                + " ".join(f"{ratios[m]:13.2f}x" for m in names[1:])
                + f" {noise:4.0%}",
                flush=True,
            )
            rows += [(name, m, ratios[m], noise) for m in names[1:]]
    return commit, rows
