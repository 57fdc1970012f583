"""Timing code on a machine that does other work too (notebook 02; used by 03, 08 and 10).

We keep the *fastest* of several timings, not their mean: other work on the machine only
ever adds time, so the fastest run is the closest to what the code itself costs.
"""

import time

from . import _validate as valid


def best_time(fn, *args, repeat: int = 3, number: int = 1, budget: float | None = None) -> float:
    """The fastest of up to ``repeat`` timings of ``number`` calls of ``fn(*args)``, in
    seconds per call; ``budget`` (seconds) stops starting new timings once it is spent."""
    repeat, number = valid.integer(repeat, "repeat", low=1), valid.integer(number, "number", low=1)
    times, start = [], time.perf_counter()
    for _ in range(repeat):
        if times and budget is not None and time.perf_counter() - start >= budget:
            break  # the budget is spent (and there is a timing): start no new one
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*args)
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def best_times(fns: dict, repeat: int = 7) -> dict[str, float]:
    """Several functions timed against each other: {name: seconds of its fastest call}. After
    a warm-up call each, ``repeat`` rounds call each in turn: other work slows them all alike."""
    repeat = valid.integer(repeat, "repeat", low=1)
    for fn in fns.values():
        fn()  # the first call may pay for allocations and caches
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: min(ts) for name, ts in times.items()}
