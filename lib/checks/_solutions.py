"""``checks.show_solution("name")``: an exercise's reference answer, on purpose only.

For self-learners: the student notebooks have no solutions (``make student`` replaces them
with stubs), so the solved exercise cells travel with lib instead, in
``lib/data/solutions.json`` (written by ``make student`` from the course's notebooks; a test
keeps it current). Nothing shows them unless asked by name, after a warning.
"""

from __future__ import annotations

import json
from importlib import resources

SOLUTIONS = resources.files("lib") / "data" / "solutions.json"

WARNING = (
    "Try first: the check tells you which mistake it sees, and fixing it yourself is where "
    "the learning happens. Below is the course's reference answer for {name} (notebook "
    "{notebook}); yours may differ and still be right, so run its check again afterwards."
)


class UnknownExercise(LookupError):
    """No exercise of that name; the message lists the names there are. In IPython it shows
    as its message, not a traceback (as ``CheckFailed`` does)."""

    def _render_traceback_(self) -> list[str]:
        return [f"UnknownExercise: {self}"]


def _exercises() -> list[dict]:
    return json.loads(SOLUTIONS.read_text(encoding="utf-8"))["exercises"]


def solution(name) -> dict:
    """The exercise called ``name`` (the function its check is given, e.g. "softmax", or the
    check's own name, e.g. "check_softmax"; or either function itself, as the check cell
    passes it): {"name", "notebook", "check", "source"}."""
    name = getattr(name, "__name__", name)
    exercises = _exercises()
    for exercise in exercises:
        if name in (exercise["name"], exercise["check"]):
            return exercise
    by_notebook: dict[str, list[str]] = {}
    for exercise in exercises:
        by_notebook.setdefault(exercise["notebook"][:2], []).append(exercise["name"])
    listed = "; ".join(f"{nb}: {', '.join(names)}" for nb, names in sorted(by_notebook.items()))
    raise UnknownExercise(
        f"no exercise named {name!r}. Give the name of the function you wrote, as its check "
        f"cell passes it. The exercises, by notebook: {listed}."
    )


def show_solution(name: str) -> None:
    """Print the reference answer of the exercise ``name``, after a warning."""
    exercise = solution(name)
    print(WARNING.format(name=exercise["name"], notebook=exercise["notebook"][:2]))
    print()
    print(exercise["source"])
