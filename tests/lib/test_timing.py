"""lib.timing.best_time and best_times: what they call, what they return, when they stop."""

import time

import pytest

from lib.timing import best_time, best_times


def test_it_times_repeat_runs_of_number_calls_and_keeps_the_fastest_per_call():
    calls = []
    durations = iter([0.06, 0.01, 0.06])  # seconds per run of `number` calls

    def fn(x):
        calls.append(x)
        if len(calls) % 4 == 1:  # the first call of each run sleeps for the whole run
            time.sleep(next(durations))

    best = best_time(fn, "a", repeat=3, number=4)
    assert calls == ["a"] * 12
    assert 0.01 / 4 <= best < 0.03 / 4  # the fastest run, per call (the mean: 0.043 / 4)


def test_a_budget_stops_new_runs_but_one_always_happens():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.02)

    best_time(slow, repeat=50, budget=0.05)
    assert 1 < len(calls) < 10
    calls.clear()
    best_time(slow, repeat=5, budget=0.0)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "kw, words",
    [({"repeat": 0}, "repeat must be an integer >= 1, got 0"),
     ({"number": 2.5}, "number must be an integer >= 1, got 2.5 (float)")],
)  # fmt: skip
def test_bad_counts_are_refused(kw, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        best_time(lambda: None, **kw)


def test_best_times_warms_up_then_calls_the_functions_in_turn_and_keeps_each_ones_fastest():
    calls = []
    sleeps = {"slow": iter([0.0, 0.08, 0.02, 0.06]), "fast": iter([0.0, 0.03, 0.01, 0.04])}

    def timed(name):
        def fn():
            calls.append(name)
            time.sleep(next(sleeps[name]))  # the first (warm-up) call is not timed

        return fn

    best = best_times({"slow": timed("slow"), "fast": timed("fast")}, repeat=3)
    assert calls == ["slow", "fast"] * 4  # a warm-up, then three rounds in turn
    assert list(best) == ["slow", "fast"]
    assert 0.02 <= best["slow"] < 0.05  # the fastest of 0.08, 0.02 and 0.06 s
    assert 0.01 <= best["fast"] < 0.025  # of 0.03, 0.01 and 0.04 s


def test_best_times_refuses_a_bad_repeat():
    with pytest.raises(ValueError, match="repeat must be an integer >= 1, got 0"):
        best_times({"f": lambda: None}, repeat=0)
