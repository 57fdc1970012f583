"""lib.timing.best_time: what it calls, what it returns, when it stops."""

import time

import pytest

from lib.timing import best_time


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
