"""Timing helpers of `make bench`: contenders interleaved round-robin, medians, ratios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def interleaved_times(
    contenders: dict[str, Callable[[], object]], reps: int
) -> dict[str, list[float]]:
    """Seconds of each call of each contender, calls interleaved round-robin.

    Round r of every contender ran at nearly the same moment, so a ratio taken within one
    round is little affected by the machine getting busier or quieter between rounds.
    Each round starts one contender later than the last (A B C, B C A, C A B, ...), so
    every contender follows every other equally often: what one call leaves behind (a
    warm cache, memory just given back to the OS) does not always favour the same one.
    """
    for fn in contenders.values():  # warm-up
        fn()
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def interleaved_medians(contenders: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Median seconds per call of each contender, calls interleaved round-robin."""
    times = interleaved_times(contenders, reps)
    return {name: statistics.median(ts) for name, ts in times.items()}


def median_ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    """Median over rounds of time(a) / time(b): above 1, a is slower."""
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


def spread(ts: list[float]) -> float:
    """Interquartile range as a fraction of the median: how noisy the timings were."""
    q1, _, q3 = statistics.quantiles(ts, n=4)
    return (q3 - q1) / statistics.median(ts)


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds:8.2f} s "
