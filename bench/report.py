"""Write docs/benchmarks.md from bench/results/: the newest `make bench` run's bars per kernel
set, its before-and-after table when it has one, the notes written beside it, and a list of
every earlier result file.

    python bench/report.py                 # the newest date's runs
    python bench/report.py --date 2026-11-29

A run is the JSON files of one date and CPU that `bench/kernel_sets.py` saved, one per kernel
set; its notes, if any, are bench/results/<date>-<cpu>-notes.md, written by whoever ran it:
what the numbers mean, in words, with the measured reason for each bar missed.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOC = HERE.parent / "docs" / "benchmarks.md"

INTRO = """# Benchmarks

What `make bench` measures and what it measured. This file is written by `bench/report.py`
from the result files in `bench/results/`; edit the script or the notes beside the results,
not this file.

## How to read a figure

Every comparison is a **ratio measured in one run**: the contenders are interleaved (one call
of each, round-robin, each round starting one contender later) and the ratio is the median
over rounds of time / time. The machine is shared (2 cores), so absolute times move from run
to run while ratios move much less; each result file records the load average before and
after, and each ratio the spread of its contenders' times (interquartile range / median).

**Kernel sets.** NumPy's speed depends on two choices made when it is imported: the kernels
OpenBLAS runs for matrix products and the vector instructions of NumPy's own loops (`exp`,
sums, comparisons). An AVX2 machine runs AVX2 for both. A machine with AVX-512 runs AVX-512
for both by itself ("SkylakeX"), and `make bench` also runs it with both forced to AVX2
("Haswell": `OPENBLAS_CORETYPE=Haswell` and `NPY_DISABLE_CPU_FEATURES` naming NumPy's AVX-512
targets, torch held to AVX2 as well). Forcing only OpenBLAS does not reproduce an AVX2
machine: NumPy's float32 `exp2`, for one, runs about 2x faster than `exp` with its AVX-512
loops and about 2x slower with its AVX2 ones. lib keeps a speed trick only if it wins on both.

**Files.** `make bench` (`bench/kernel_sets.py`) runs `bench/bench.py --bars` once per kernel
set, each in its own process, and saves `bench/results/<date>-<cpu>-<kernels>.json`: the date
and commit, the CPU model, the kernels (OpenBLAS's, NumPy's loops, torch's), the versions of
Python, NumPy and torch, the thread count, the load average before and after, and every bar
with its ratio, its limit, PASS or FAIL and its spread. With `--before DIR` (a checkout of an
earlier commit) it also times lib's fast path then and now, with each speed trick turned off
one at a time, and saves that table in the same file.

## The bars

One thread each for NumPy and torch, on every kernel set measured:

- lib's fast path (`BW.multi_head_attention`) at most 1.3x `nn.MultiheadAttention`, output
  only (lib / mha) and with the per-head weights kept (lib+w / mha+w), at every shape
  ((16, 128, 256, 8), (8, 512, 512, 8), (2, 2048, 512, 8) as (batch, n, d_model, heads)),
  dtype and mask (none, causal);
- the causal core (`BW.attention(q, k, v, causal=True)`) at (2, 4096, 512, 8) and
  (1, 8192, 512, 8), float32: at most 1.3x SDPA with `is_causal=True`, and at most 0.6x of
  itself without skipping the keys a block cannot reach;
- memory at n = 16384 (d = 64, one head, with and without a causal mask): NumPy's peak
  allocation beyond the output at most 5 % of one n x n float32 buffer;
- decoding (`KV.Decoder`, a 512-token prompt then 512 tokens one at a time): at most 1.2x a
  torch layer with its own cache, per token.
"""

SECTIONS = """## Every section: `python bench/bench.py`

`make bench` runs only the sections with bars (`torch` and `scale`, and `removals` when given
`--before`). `python bench/bench.py` runs every section and prints, as ratios measured in one
run: list-based vs NumPy attention; the per-head loop vs the reshape version of multi-head
attention (`--threads N` to change the BLAS threads); the batched forward's GFLOP/s against
this machine's `np.matmul` peak; training steps per second of the tiny model of notebooks
05-06; one forward of the pretrained BERT; lib against `nn.MultiheadAttention` and an
SDPA-based torch module (section `torch`, the bars above, and lib against its readable form
`A.multi_head_attention`, no bar); notebook 10's bars (section `scale`, with the roofline's
two ceilings and the cache against recomputing, no bar). Sections that explain a figure:
`parts` (the pieces of a forward at the smallest shape, NumPy against torch), `causal-parts`
(each NumPy call of one block of lib's kernel timed by what it computes, against SDPA
`is_causal`, and the same matrix products replayed with `torch.matmul`), `weights-parts` (the
same with the per-head weights kept, against torch's profiler), `removals --before DIR`
(lib then and now, each trick on and off). `--quick` is a shorter run, `--only NAME` one
section, `--only grading` times `tools/grade.py` against nbgrader's `autograde`.

`python bench/positions.py` is not a timing: it runs notebook 09's position experiment larger
than the notebook can afford; its runs are in `bench/results/2026-11-26-positions*.txt`.
`python bench/induction_sizes.py` is not a timing either: it trains notebook 11's model at
cheaper settings (smaller d_model or batch, a larger learning rate, fewer steps) over six seeds
and counts the seeds where the induction circuit forms; its run is in
`bench/results/2026-11-29-induction-sizes.txt`. With `--store` it writes the training logs of
the notebook's seeds 0 to 2 to `data/induction_runs.json`, which the notebook plots after
checking that its own run of seed 0 equals the stored one.
"""


def runs_by_key() -> dict[tuple[str, str], list[dict]]:
    """Every saved run, as {(date, cpu): [one record per kernel set]}."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(RESULTS.glob("*.json")):
        record = json.loads(path.read_text())
        record["file"] = path.name
        record["set"] = record["kernels"]["openblas"] or "own"
        runs.setdefault((record["date"], record["cpu"]), []).append(record)
    return runs


def short_cpu(cpu: str) -> str:
    words = re.findall(r"[A-Za-z]+", cpu.replace("(R)", "").replace("(TM)", ""))
    return "-".join(words[:2]) or "cpu"


def shown(bar: dict) -> str:
    ratio = f"{bar['ratio']:.2%}" if bar["name"].startswith("memory n=") else f"{bar['ratio']:.2f}x"
    return ratio + ("" if bar["passed"] else " **FAIL**") + f" ({bar['spread']:.0%})"


def run_section(records: list[dict]) -> list[str]:
    """The newest run: what ran, and a table of its bars (a column per kernel set)."""
    first = records[0]
    lines = [
        f"## The newest run: {first['date']}, {first['cpu']}",
        "",
        f"{first['cores']} cores, {first['threads']} thread each, Python "
        f"{first['versions']['python']}, numpy {first['versions']['numpy']}, torch "
        f"{first['versions']['torch']}, OpenBLAS {first['kernels']['openblas_version']}, "
        f"commit {first['commit'][:7]}"
        + ("" if first["worktree_clean"] else " with uncommitted changes")
        + f", {first['reps']} repetitions.",
        "",
    ]
    for r in records:
        passed = sum(b["passed"] for b in r["bars"])
        k = r["kernels"]
        lines.append(
            f"- {r['set']} (NumPy's loops {k['numpy_loops']}, torch {k['torch']}): "
            f"[bench/results/{r['file']}](../bench/results/{r['file']}), load average "
            f"{r['load_before']} before, {r['load_after']} after; **{passed} of "
            f"{len(r['bars'])}** bars passed."
        )
    lines += ["", "| bar | limit | " + " | ".join(r["set"] for r in records) + " |"]
    lines.append("| --- | --- | " + " | ".join("---" for _ in records) + " |")
    for bar in first["bars"]:
        limit = f"{bar['bar']:.0%}" if bar["name"].startswith("memory n=") else f"{bar['bar']}x"
        cells = []
        for r in records:
            found = [b for b in r["bars"] if b["name"] == bar["name"]]
            cells.append(shown(found[0]) if found else "-")
        lines.append(f"| {bar['name']} | {limit} | " + " | ".join(cells) + " |")
    lines += ["", "Each ratio is followed by the spread of its contenders' times.", ""]
    return lines


def removals_section(records: list[dict]) -> list[str]:
    """The before-and-after table: a row per call, a column per contender and kernel set."""
    records = [r for r in records if "removals" in r]
    if not records:
        return []
    commit = records[0]["removals"]["before_commit"]
    rows = records[0]["removals"]["rows"]
    contenders = list(dict.fromkeys(row["contender"] for row in rows))
    calls = list(dict.fromkeys(row["call"] for row in rows))
    lines = [
        f"## Before and after: lib's fast path at commit {commit} and now",
        "",
        "The same calls, interleaved in the same rounds: the code before (its module imported",
        "from a checkout of that commit), the code before with each of its speed tricks turned",
        "off by its own constants, the code now, and the code now with a trick it keeps undone",
        "or another block size (`bench/removals.py`). Each cell is the median over rounds of",
        "time / time(the code before): below 1, faster than before.",
        "",
    ]
    for r in records:
        table = {(row["call"], row["contender"]): row for row in r["removals"]["rows"]}
        lines += [f"{r['set']} kernels:", ""]
        lines.append("| call | " + " | ".join(contenders) + " | spread |")
        lines.append("| --- | " + " | ".join("---" for _ in contenders) + " | --- |")
        for call in calls:
            cells = [f"{table[(call, c)]['ratio']:.2f}x" for c in contenders]
            spread = table[(call, contenders[0])]["spread"]
            lines.append(f"| {call} | " + " | ".join(cells) + f" | {spread:.0%} |")
        lines.append("")
    return lines


def history_section(runs, newest) -> list[str]:
    lines = [
        "## Earlier runs",
        "",
        "Their files stay in `bench/results/`; what each run said about the code of its day is",
        "in the history of this file.",
        "",
    ]
    for key in sorted(runs, reverse=True):
        if key == newest:
            continue
        for r in runs[key]:
            passed = sum(b["passed"] for b in r["bars"])
            lines.append(
                f"- {r['date']}, {r['cpu']}, {r['set']}, commit {r['commit'][:7]}: "
                f"{passed} of {len(r['bars'])} bars of that day passed "
                f"([{r['file']}](../bench/results/{r['file']}))."
            )
    texts = sorted(p.name for p in RESULTS.glob("*.txt"))
    lines += ["", "Text outputs of single sections: " + ", ".join(f"`{t}`" for t in texts) + "."]
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--date", help="the run to report (default: the newest)")
    args = parser.parse_args()
    runs = runs_by_key()
    keys = [k for k in runs if args.date in (None, k[0])]
    if not keys:
        raise SystemExit(f"no results for {args.date} in {RESULTS}")
    newest = max(keys)
    records = sorted(runs[newest], key=lambda r: r["set"] != "SkylakeX")  # the CPU's own first
    notes = RESULTS / f"{newest[0]}-{short_cpu(newest[1])}-notes.md"
    parts = [INTRO, *run_section(records), *removals_section(records)]
    if notes.exists():  # its links point at files beside it
        text = re.sub(r"\]\(([^/)]+)\)", r"](../bench/results/\1)", notes.read_text())
        parts += [text.rstrip(), ""]
    parts += [*history_section(runs, newest), SECTIONS]
    DOC.write_text("\n".join(parts).rstrip() + "\n")
    print(f"wrote {DOC.relative_to(HERE.parent)} from {', '.join(r['file'] for r in records)}")


if __name__ == "__main__":
    main()
