"""``checks.show_solution("name")``: an exercise's reference answer, for self-learners who
tried. The student notebooks have stubs instead, so the solved exercise cells travel with lib,
in ``lib/data/solutions.json`` (written by ``make student``)."""

import json
from importlib import resources

SOLUTIONS = resources.files("lib") / "data" / "solutions.json"

WARNING = (
    "Try first: the check tells you which mistake it sees, and fixing it yourself is where "
    "the learning happens. Below is the course's reference answer for {name} (notebook "
    "{notebook}); yours may differ and still be right, so run its check again afterwards."
)


class UnknownExercise(LookupError):
    """No exercise of that name; the message (shown without a traceback) lists the names."""

    def _render_traceback_(self) -> list[str]:
        return [f"UnknownExercise: {self}"]


def solution(name) -> dict:
    """The exercise ``name`` names (its function or check, or the name of either, e.g. "softmax"
    or "check_softmax"): {"name", "notebook", "check", "source"}."""
    name = getattr(name, "__name__", name)
    exercises = json.loads(SOLUTIONS.read_text(encoding="utf-8"))["exercises"]
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
