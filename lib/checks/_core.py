"""What every check is built on. A check calls the student's function with :func:`call`,
reads the answer (:func:`as_array`, :func:`expect_shape`), compares it with lib's reference
and, when it differs, hands :func:`diagnose` its table of realistic mistakes, {the sentence
naming the mistake: what that mistake returns}; else it says which property fails."""

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Callable, Sequence

import numpy as np

_LIB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CheckFailed(AssertionError):
    """An exercise's answer is not right yet; the message says what to fix. IPython shows it
    as its one-line message (``_render_traceback_``), not as a traceback into the check."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mCheckFailed\x1b[0m: {self}"]


class NotAttempted(CheckFailed):
    """The exercise is still its stub: the function raised ``NotImplementedError()`` itself."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(
            f"{name} is not implemented yet: replace `raise NotImplementedError()` with your code."
        )


def exercise(check: Callable) -> Callable:
    """While the exercise is its stub, the check prints one line and raises nothing, so that
    Run all goes on. Graders still fail it: nbgrader sets ``NBGRADER_EXECUTION``, and
    tools/grade.py calls ``check.__wrapped__``."""

    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except NotAttempted as exc:
            if os.environ.get("NBGRADER_EXECUTION"):
                raise
            print(not_attempted_line(exc.name))

    return checked


def not_attempted_line(name: str) -> str:
    """What a check prints while ``name`` is its stub (shorter than JupyterLab's column)."""
    return f'○ Not attempted yet. Stuck after trying? checks.show_solution("{name}")'


def raised_in(exc: BaseException, fn: Callable) -> str | None:
    """The name of the student's helper (not ``fn``, not lib, not a package) that raised
    ``exc``, else None. The grader's proxy for a function in another process sets it."""
    if hasattr(exc, "raised_in"):
        return exc.raised_in or None
    tb = exc.__traceback__  # caught, so it has one
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if code is getattr(fn, "__code__", None) or code.co_name.startswith("<"):
        return None
    path = "" if code.co_filename.startswith("<") else os.path.abspath(code.co_filename)
    if path.startswith(_LIB_DIR + os.sep) or "site-packages" in path or "dist-packages" in path:
        return None
    return code.co_name


class LibCallRefused(Exception):  # noqa: N818 - named for what it reports
    """Raised by a lib function while the student's function that replaces it runs."""


def _refused(*args, **kwargs):
    """The body swapped into a refused lib function (it runs with that function's globals)."""
    raise __import__("lib.checks._core", fromlist=["_"]).LibCallRefused("MESSAGE")


@contextlib.contextmanager
def refusing(refused: Sequence[tuple[str, str, str]]):
    """While the block runs, each lib function in ``refused``, (module, qualified name,
    message), raises LibCallRefused(message): its code is swapped, so every name the student
    may have bound it to (``L.attention``, ``from lib.lists import attention``) is caught."""
    swapped = []
    try:
        for module, qualname, message in refused:
            target = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
            swapped.append((target, target.__code__))
            consts = tuple(message if c == "MESSAGE" else c for c in _refused.__code__.co_consts)
            target.__code__ = _refused.__code__.replace(co_consts=consts)
        yield
    finally:
        for target, code in swapped:
            target.__code__ = code


def _namesakes(name: str) -> list[tuple[str, str, str]]:
    """lib's own functions named ``name``, in its loaded modules: its answers to that exercise."""
    modules = [m for m in sys.modules if m.startswith("lib.") and ".checks" not in m]
    found = {m: getattr(sys.modules[m], name, None) for m in modules}
    return [(m, name, f"{m}.{name}") for m, f in found.items() if getattr(f, "__module__", 0) == m]


def call(fn: Callable, name: str, *args, hints=(), refuse=()):
    """Call the student's function on copies of the arrays in ``args``, turning whatever it
    raises into one sentence (``hints``: (exception type, sentence or a function of the
    exception giving one) pairs). While ``fn`` runs, lib's answers raise: its functions named
    ``name`` and those in ``refuse``, (module, qualified name, how the notebook names it)."""
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    ask = f"{name}: this exercise asks you to write it yourself, not to call"
    labels = {(module, qualname): label for module, qualname, label in (*_namesakes(name), *refuse)}
    refused = [(*target, f"{ask} {label}.") for target, label in labels.items()]
    try:
        if refused and hasattr(fn, "refusing"):  # the grader's stand-in for a kernel's function
            return fn.refusing(refused)(*args)
        with refusing(refused):
            return fn(*args)
    except NotImplementedError as exc:
        helper = raised_in(exc, fn)
        if helper is not None and helper != name:
            raise CheckFailed(
                f"{name} calls {helper}, which is not implemented yet: finish {helper} "
                "first (replace its `raise NotImplementedError()`)."
            ) from None
        raise NotAttempted(name) from None
    except Exception as exc:  # noqa: BLE001 - any error in student code becomes a message
        if type(exc).__name__ == "LibCallRefused":  # also when rebuilt by the grader
            raise CheckFailed(str(exc)) from None
        for exc_type, sentence in hints:
            if isinstance(exc, exc_type):
                raise CheckFailed(sentence(exc) if callable(sentence) else sentence) from None
        raise CheckFailed(f"{name} raised {type(exc).__name__}: {exc}") from None


def hint(exc_type: type, name: str, advice: str, context: str = "") -> tuple:
    """A hint for :func:`call`: an ``exc_type`` error quoted, then what to do about it."""
    return exc_type, lambda exc: f"{name} raised {exc_type.__name__} ({exc}){context}: {advice}"


def describe(value) -> str:
    """A short description of a wrong answer: its type, and its shape if it has one."""
    if len(getattr(value, "shape", ())) > 0:
        return f"{type(value).__name__} of shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 40 else type(value).__name__


def expect_tuple(value, n: int, name: str, what: str) -> None:
    if not (isinstance(value, tuple | list) and len(value) == n):
        raise CheckFailed(f"{name} should return {what}, got {describe(value)}.")


def as_array(value, name: str, what: str = "its result") -> np.ndarray:
    """The answer as a float array, or a sentence saying why it cannot be one."""
    try:
        with np.errstate(all="ignore"):
            return np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError, RuntimeError) as exc:
        if "requires grad" in str(exc):  # torch refuses numpy() on such a tensor
            raise CheckFailed(
                f"{name}: {what} is a torch tensor that requires grad, which NumPy cannot "
                "read; return a NumPy array (call .detach() on the tensor, then .numpy())."
            ) from None
        raise CheckFailed(
            f"{name} should return numbers in a rectangular shape, but {what} "
            f"is {type(value).__name__} that cannot be read as an array."
        ) from None


def expect_shape(arr: np.ndarray, shape: tuple[int, ...], name: str, what: str) -> None:
    if arr.shape != tuple(shape):
        raise CheckFailed(f"{name}: expected {what} of shape {tuple(shape)}, got {arr.shape}.")


def expect_bool(arr: np.ndarray, expected: np.ndarray, where: str) -> None:
    """A mask's entries are booleans, or a sentence saying what they are instead."""
    if arr.dtype == bool:
        return
    if arr.dtype.kind in "iuf" and np.array_equal(arr, expected):
        raise CheckFailed(
            f"{where}: the right entries, but as {arr.dtype} "
            "numbers: use booleans, True/False (True = may attend)."
        )
    raise CheckFailed(f"{where}: use booleans, True/False (True = may attend), got {arr.dtype}.")


def close(a, b, tol: float = 1e-7, equal_nan: bool = False) -> bool:
    """Same shape and values within ``tol`` (relative and absolute)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=equal_nan))


def passed(message: str) -> None:
    print(f"✓ {message}")


def diagnose(got, where: str, mistakes: dict, same=None, tol: float = 1e-7) -> None:
    """Raise "<where>: <sentence>" for the first of ``mistakes``, {sentence: what that mistake
    returns}, that ``got`` equals by ``same`` (default: within ``tol``, NaN equal to NaN, as an
    unstable mistake's NaNs are its signature). A value may be a function of no arguments,
    called only when needed; one that raises or returns None is skipped."""
    if same is None:
        same = functools.partial(close, tol=tol, equal_nan=True)
    with np.errstate(all="ignore"):
        for message, wrong in mistakes.items():
            try:
                wrong = wrong() if callable(wrong) else wrong
            except Exception:  # noqa: BLE001 - a mistake that cannot be built is skipped
                continue
            if wrong is not None and same(got, wrong):
                raise CheckFailed(f"{where}: {message}")


def same_unstable(got, wrong, tol: float = 1e-7) -> bool:
    """Equality for answers of numerically unstable mistakes: where the mistake gives NaN or
    inf, the answer may give NaN, inf or 0 (a student's guard may have replaced the NaN);
    everywhere else the values must agree within ``tol``."""
    got, wrong = np.asarray(got, dtype=float), np.asarray(wrong, dtype=float)
    if got.shape != wrong.shape:
        return False
    bad = ~np.isfinite(wrong)
    guarded = np.all(~np.isfinite(got[bad]) | (got[bad] == 0))
    return bool(guarded and np.allclose(got[~bad], wrong[~bad], rtol=tol, atol=tol))
