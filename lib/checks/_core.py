"""The core every check is built on: :class:`CheckFailed`, the call wrapper :func:`call`, and
the mistake table :func:`diagnose`.

A check calls the student's function with :func:`call` (a stub, an error in the student's
code or in a helper it calls become one sentence), reads the answer with :func:`as_array` and
:func:`expect_shape`, compares it with lib's reference, and when it differs hands
:func:`diagnose` a table of the realistic mistakes: for each, what that mistake returns on
the same inputs (or a function computing it) and the sentence that names it. The first
mistake whose answer equals the student's is raised; then the check says which property
fails (shape, sums, ...).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np

_LIB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RED, _RESET = "\x1b[0;31m", "\x1b[0m"


class CheckFailed(AssertionError):
    """An exercise's answer is not right yet; the message says what to fix.

    In IPython and Jupyter (JupyterLab, Colab's IPython 7.34) it is shown as its one-line
    message instead of a traceback through the check's code: IPython calls
    ``_render_traceback_`` for exceptions that have it. Other exceptions keep their
    traceback.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"{_RED}CheckFailed{_RESET}: {self}"]


class NotAttempted(CheckFailed):
    """The exercise is still its stub: the function raised ``NotImplementedError()`` itself.
    A grader counts it as a failure; in the learner's notebook :func:`exercise` shows it as
    one line instead, so that Run all goes on."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(
            f"{name} is not implemented yet: replace `raise NotImplementedError()` with your code."
        )


def grading() -> bool:
    """Whether the check runs under a grader that scores it by whether it raises: nbgrader
    sets ``NBGRADER_EXECUTION`` (``autograde``, ``validate``) in the kernels it runs. (The
    course's own grader, tools/grade.py, calls the undecorated check, ``check.__wrapped__``.)"""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def exercise(check: Callable) -> Callable:
    """Make ``check`` an exercise's check as the notebooks call it: an exercise not attempted
    yet (still its stub) prints one line saying so and how to see the course's answer, and
    raises nothing, so that the cells after it run on lib's reference; a grader gets
    :class:`NotAttempted`. Every other answer is checked as ``check`` checks it."""

    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except NotAttempted as exc:
            if grading():
                raise
            print(not_attempted_line(exc.name))
            return None

    return checked


def not_attempted_line(name: str) -> str:
    """What an exercise's check prints in the learner's notebook while ``name`` is its stub:
    one line, shorter than JupyterLab's code column, under the exercise it is about."""
    return f'○ Not attempted yet. Stuck after trying? checks.show_solution("{name}")'


# --------------------------------------------------------------------------- calling


def _student_frame(code) -> bool:
    """Whether a code object belongs to the student (not lib, not an installed package)."""
    path = os.path.abspath(code.co_filename) if not code.co_filename.startswith("<") else ""
    if path.startswith(_LIB_DIR + os.sep):
        return False
    return "site-packages" not in path and "dist-packages" not in path


def raised_in(exc: BaseException, fn: Callable) -> str | None:
    """The name of the student's function that raised ``exc``, when it is not ``fn`` itself
    (a helper the exercise calls); None when ``fn`` raised it or nothing better is known.

    The grader's proxy for a function run in another process sets ``exc.raised_in``.
    """
    if hasattr(exc, "raised_in"):
        return exc.raised_in or None
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return None
    code = last.tb_frame.f_code
    if code is getattr(fn, "__code__", None) or code.co_name.startswith("<"):
        return None
    return code.co_name if _student_frame(code) else None


Hint = tuple[type, "str | Callable[[Exception], str]"]
# A lib function an exercise asks the student to write: (module, qualified name, how the
# notebook names it), e.g. ("lib.lists", "attention", "L.attention").
Refused = tuple[str, str, str]


class LibCallRefused(Exception):  # noqa: N818 - named for what it reports
    """Raised in place of a lib function while the student's function that should replace
    it runs (see :func:`refusing`)."""


def _refused(*args, **kwargs):
    """The body swapped into a refused lib function (see :func:`refusing`): it runs with that
    function's module globals, so it finds this module by import."""
    raise __import__("lib.checks._core", fromlist=["_"]).LibCallRefused("MESSAGE")


def _refusal(message: str):
    """The code of a function that raises LibCallRefused(message), whatever it is passed."""
    code = _refused.__code__
    return code.replace(co_consts=tuple(message if c == "MESSAGE" else c for c in code.co_consts))


@contextlib.contextmanager
def refusing(refused: Sequence[tuple[str, str, str]]):
    """While the block runs, each lib function in ``refused`` ((module, qualified name,
    message) triples) raises LibCallRefused with its message instead of running. Its code is
    swapped, so every name the student may have bound it to (``L.attention``, ``from
    lib.lists import attention``, a method reached through an instance) is caught."""
    swapped = []
    try:
        for module, qualname, message in refused:
            target = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
            if target.__code__.co_freevars:  # a closure: its code cannot be swapped
                raise ValueError(f"cannot refuse {module}.{qualname}: it is a closure")
            swapped.append((target, target.__code__))
            target.__code__ = _refusal(message)
        yield
    finally:
        for target, code in swapped:
            target.__code__ = code


def refused_message(name: str, label: str) -> str:
    """The sentence a check gives when the student's ``name`` calls lib's ``label``."""
    return f"{name}: this exercise asks you to write it yourself, not to call {label}."


def call(
    fn: Callable, name: str, *args, hints: Sequence[Hint] = (), refuse: Sequence[Refused] = ()
):
    """Call the student's function, turning whatever it raises into one clear sentence.

    A stub says "not implemented yet"; a stub in a helper that ``fn`` calls is named as such
    (the helper, not ``fn``, is unfinished). A hint maps an exception type to a sentence, or
    to a function of the exception that returns one (to quote it); any other exception is
    quoted as "<name> raised <type>: <message>". ``refuse`` names the lib functions that do
    what the exercise asks: while ``fn`` runs they raise instead, and the check says "write
    it yourself" (a function run in the grader's kernel is given them to refuse there).
    """
    refused = [(mod, qualname, refused_message(name, label)) for mod, qualname, label in refuse]
    try:
        if refused and hasattr(fn, "refusing"):  # the grader's stand-in for a kernel's function
            return fn.refusing(refused)(*args)
        with refusing(refused):
            return fn(*args)
    except LibCallRefused as exc:
        raise CheckFailed(str(exc)) from None
    except NotImplementedError as exc:
        helper = raised_in(exc, fn)
        if helper is not None and helper != name:
            raise CheckFailed(
                f"{name} calls {helper}, which is not implemented yet: finish {helper} "
                "first (replace its `raise NotImplementedError()`)."
            ) from None
        raise NotAttempted(name) from None
    except Exception as exc:  # noqa: BLE001 - any error in student code becomes a message
        if type(exc).__name__ == "LibCallRefused":  # rebuilt by the grader from the kernel's
            raise CheckFailed(str(exc)) from None
        for exc_type, hint in hints:
            if isinstance(exc, exc_type):
                raise CheckFailed(hint(exc) if callable(hint) else hint) from None
        raise CheckFailed(f"{name} raised {type(exc).__name__}: {exc}") from None


# --------------------------------------------------------------------------- reading answers


def as_array(value, name: str, what: str = "its result") -> np.ndarray:
    """The answer as a float array, or a sentence saying why it cannot be one."""
    try:
        with np.errstate(all="ignore"):
            arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise CheckFailed(
            f"{name} should return numbers in a rectangular shape, but {what} is "
            f"{type(value).__name__} that cannot be read as an array."
        ) from None
    except RuntimeError as exc:  # e.g. torch: a tensor that requires grad refuses numpy()
        if "requires grad" in str(exc):
            raise CheckFailed(
                f"{name}: {what} is a torch tensor that requires grad, which NumPy cannot "
                "read; return a NumPy array (call .detach() on the tensor, then .numpy())."
            ) from None
        raise CheckFailed(
            f"{name}: {what} ({type(value).__name__}) cannot be read as an array: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}."
        ) from None
    return arr


def expect_shape(arr: np.ndarray, shape: tuple[int, ...], name: str, what: str) -> None:
    if arr.shape != tuple(shape):
        raise CheckFailed(f"{name}: expected {what} of shape {tuple(shape)}, got {arr.shape}.")


def close(a, b, tol: float = 1e-7, equal_nan: bool = False) -> bool:
    """Same shape and values within ``tol`` (relative and absolute)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=equal_nan))


def passed(message: str) -> None:
    print(f"✓ {message}")


# --------------------------------------------------------------------------- the mistake table


Mistake = tuple[object, str]


def diagnose(
    got,
    mistakes: Iterable[Mistake],
    same: Callable[[object, object], bool] | None = None,
    tol: float = 1e-7,
) -> None:
    """Raise the message of the first known mistake whose answer equals ``got``.

    Each mistake is ``(wrong, message)``: ``wrong`` is what that mistake returns on the
    check's inputs, or a function of no arguments that computes it (evaluated only when
    needed; one that raises, or returns None, is skipped). ``same(got, wrong)`` decides
    equality; by default values within ``tol``, NaN equal to NaN (an unstable mistake's
    NaNs are part of its signature).
    """
    if same is None:

        def same(a, b):
            return close(a, b, tol, equal_nan=True)

    for wrong, message in mistakes:
        if callable(wrong):
            try:
                with np.errstate(all="ignore"):
                    wrong = wrong()
            except Exception:  # noqa: BLE001 - a mistake that cannot be built is skipped
                continue
        if wrong is None:
            continue
        with np.errstate(all="ignore"):
            if same(got, wrong):
                raise CheckFailed(message)


def same_unstable(tol: float = 1e-7) -> Callable[[object, object], bool]:
    """Equality for answers of numerically unstable mistakes: where the mistake gives NaN
    or inf, the answer may give NaN, inf or 0 (a student's guard may have replaced the NaN);
    everywhere else the values must agree within ``tol``."""

    def same(got, wrong) -> bool:
        got, wrong = np.asarray(got, dtype=float), np.asarray(wrong, dtype=float)
        if got.shape != wrong.shape:
            return False
        bad = ~np.isfinite(wrong)
        if not bad.any():
            return close(got, wrong, tol)
        if not np.all(~np.isfinite(got[bad]) | (got[bad] == 0)):
            return False
        return bool(np.allclose(got[~bad], wrong[~bad], rtol=tol, atol=tol))

    return same


def same_value(a, b) -> bool:
    """Equality for scalar answers (exact for integers, within 1e-9 for floats)."""
    try:
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    except (TypeError, ValueError):
        return False


def same_array(a, b) -> bool:
    """Exact equality (masks, index arrays)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b))
