"""`make bench`: the bars on every set of CPU kernels this machine can run.

NumPy's speed depends on two choices made when it is imported: the kernels OpenBLAS picks
for matrix products (AVX-512 "SkylakeX" or AVX2 "Haswell" on the course's machines) and the
vector instructions of NumPy's own loops (exp, sums). An AVX2 machine runs AVX2 for both. An
AVX-512 machine can run both sets: its own, and AVX2 forced in a subprocess by
OPENBLAS_CORETYPE=Haswell and NPY_DISABLE_CPU_FEATURES (NumPy's AVX-512 loops off), with
torch held to AVX2 as well (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS). Forcing only
OpenBLAS is not enough: NumPy's float32 exp2, for one, is 2x faster than exp with
AVX-512 loops and 2x slower with AVX2 ones (docs/benchmarks.md).

Each set runs `bench/bench.py --bars` in its own process and saves its results as
bench/results/<date>-<cpu>-<kernels>.json (cpu: the CPU's maker and family, such as AMD-EPYC,
so that runs on two machines the same day keep their own files); the table at the end gives
PASS/FAIL per bar and set.

    python bench/kernel_sets.py            # every set this CPU can run
    python bench/kernel_sets.py --quick    # fewer repetitions, without the largest shape
    python bench/kernel_sets.py --before DIR   # and lib against a checkout of an earlier commit

Then `python bench/report.py` writes docs/benchmarks.md from the newest results.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
FORCED = (
    "OPENBLAS_CORETYPE",
    "NPY_DISABLE_CPU_FEATURES",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
)

PROBE = """
import json, numpy, threadpoolctl
from numpy._core._multiarray_umath import __cpu_features__, __cpu_dispatch__
blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({
    "openblas": blas[0].get("architecture") if blas else None,
    "avx512": bool(__cpu_features__.get("AVX512F")),
    "avx512_dispatch": [f for f in __cpu_dispatch__ if f == "X86_V4" or f.startswith("AVX512")],
}))
"""


def probe(env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def cpu_tag() -> str:
    """The CPU's maker and family for a file name: 'AMD EPYC 9B14' -> 'AMD-EPYC', 'Intel(R)
    Xeon(R) Processor @ 2.50GHz' -> 'Intel-Xeon' ('cpu' when /proc/cpuinfo does not say)."""
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1] for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "cpu"
    words = re.findall(r"[A-Za-z]+", name.replace("(R)", "").replace("(TM)", ""))
    return "-".join(words[:2]) or "cpu"


def kernel_sets() -> list[tuple[str, dict]]:
    """(name, environment) of each kernel set to measure: the CPU's own, and AVX2 if the
    CPU's own is AVX-512."""
    own_env = {k: v for k, v in os.environ.items() if k not in FORCED}
    own = probe(own_env)
    if not own["avx512"]:
        print(f"This CPU has no AVX-512: only its own kernels ({own['openblas']}, AVX2) run here.")
        return [(own["openblas"] or "own", own_env)]
    avx2_env = dict(own_env, OPENBLAS_CORETYPE="Haswell")
    avx2_env["NPY_DISABLE_CPU_FEATURES"] = " ".join(own["avx512_dispatch"])
    # torch too, as on an AVX2 machine: its own kernels (SDPA, exp) and MKL's products.
    avx2_env.update(ATEN_CPU_CAPABILITY="avx2", MKL_ENABLE_INSTRUCTIONS="AVX2")
    forced = probe(avx2_env)
    print(
        f"This CPU has AVX-512: measuring its own kernels ({own['openblas']}) and AVX2 ones "
        f"({forced['openblas']}, NumPy's loops without {avx2_env['NPY_DISABLE_CPU_FEATURES']})."
    )
    return [(own["openblas"], own_env), (forced["openblas"], avx2_env)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--sets", nargs="+", help="measure only these kernel sets (e.g. Haswell)")
    parser.add_argument("--before", help="a checkout of an earlier commit to time lib against")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    date = datetime.date.today().isoformat()
    runs = {}
    for name, env in kernel_sets():
        out = RESULTS / f"{date}-{cpu_tag()}-{name}.json"
        if args.sets and name not in args.sets:  # keep an earlier run's file in the summary
            if out.exists():
                runs[name] = json.loads(out.read_text())
            continue
        print(f"\n######## kernel set {name} -> {out.relative_to(HERE.parent)}", flush=True)
        command = [sys.executable, str(HERE / "bench.py"), "--bars", "--save", str(out)]
        command += ["--quick"] if args.quick else []
        command += ["--before", args.before] if args.before else []
        subprocess.run(command, env=env, check=True)
        runs[name] = json.loads(out.read_text())
    names = list(runs)
    print("\n######## Summary: the bars per kernel set (ratio, PASS/FAIL)")
    print(f"{'bar':<66} " + " ".join(f"{n:>16}" for n in names))
    bars = {b["name"]: b for b in next(iter(runs.values()))["bars"]}
    for bar in bars:
        cells = []
        for n in names:
            found = [b for b in runs[n]["bars"] if b["name"] == bar]
            if not found:
                cells.append(f"{'-':>16}")
                continue
            b = found[0]
            shown = f"{b['ratio']:.2%}" if bar.startswith("memory n=") else f"{b['ratio']:.2f}x"
            verdict = "PASS" if b["passed"] else "FAIL"
            cells.append(f"{shown} {verdict}".rjust(16))
        print(f"{bar:<66} " + " ".join(cells))
    for n in names:
        failed = [b for b in runs[n]["bars"] if not b["passed"]]
        print(f"{n}: {len(runs[n]['bars']) - len(failed)} of {len(runs[n]['bars'])} bars passed")


if __name__ == "__main__":
    main()
