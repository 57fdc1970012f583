"""Helpers shared by the test files (not a test module itself)."""

import contextlib
import json
import sys
import types
from pathlib import Path

import pytest

from lib import attention as A
from lib.checks import CheckFailed

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- exercise checks


def rejects(check, fn, *fragments):
    """The check must raise CheckFailed whose message contains every fragment. (An exercise
    check is called as a grader calls it, undecorated: a stub fails too; in a notebook the
    decorated check prints one line for a stub instead, see test_not_attempted.py.)"""
    with pytest.raises(CheckFailed) as info:
        getattr(check, "__wrapped__", check)(fn)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def stub(*args, **kwargs):
    """A student's exercise that has not been started."""
    raise NotImplementedError()


# Answers written without lib's own version of the exercise: the checks of exercises whose
# answer lib holds refuse a call into lib while the student's function runs.


def unrefused(fn):
    """A copy of the lib function ``fn`` that a check's refusal does not reach (the refusal
    swaps ``fn.__code__`` while a student's answer runs; the copy keeps the original code):
    for reference answers and mutants built from lib's own answer to the exercise."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def lib_answers(module) -> types.SimpleNamespace:
    """The lib ``module`` with its functions as copies that a refusal does not reach, calling
    one another's copies: a check refuses lib's answer to its exercise (or a function of the
    module that answer calls), which tests use as the reference or build mutants from."""
    names = dict(vars(module))  # the copies' globals: calls inside the module reach copies
    for name, value in vars(module).items():
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            names[name] = types.FunctionType(value.__code__, names, name, value.__defaults__)
            names[name].__kwdefaults__ = value.__kwdefaults__
    return types.SimpleNamespace(**names)


# notebook 02's masks as lib computes them, for references and mutants of its checks
lib_causal_mask = unrefused(A.causal_mask)
lib_padding_mask = unrefused(A.padding_mask)


def attention_lists(Q, K, V, mask=None):
    """Notebook 01's exercise 3, on lists: (output, weights), scaled, masked, stable."""
    import math

    out, weights = [], []
    for i, q in enumerate(Q):
        scores = [sum(a * b for a, b in zip(q, k, strict=True)) / math.sqrt(len(q)) for k in K]
        if mask is not None:
            scores = [s if ok else -math.inf for s, ok in zip(scores, mask[i], strict=True)]
        top = max(scores)
        exps = [0.0 if s == -math.inf else math.exp(s - top) for s in scores]
        total = sum(exps)
        row = [e / total if total > 0 else 0.0 for e in exps]
        weights.append(row)
        out.append([sum(w * v[c] for w, v in zip(row, V, strict=True)) for c in range(len(V[0]))])
    return out, weights


def rope_turn(x, positions, base, layout="interleaved"):
    """x (..., n, d_k) turned by RoPE at ``positions`` (n,): pair i, coordinates (2i, 2i+1)
    (interleaved) or (i, i + d_k/2) (half), turned by p base^(-2i / d_k)."""
    import numpy as np

    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    angles = np.asarray(positions, dtype=float)[:, None] * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(angles), np.sin(angles)
    if layout == "interleaved":
        first, second = slice(0, d, 2), slice(1, d, 2)
    else:
        first, second = slice(0, d // 2), slice(d // 2, d)
    out = np.empty_like(x)
    out[..., first] = x[..., first] * c - x[..., second] * s
    out[..., second] = x[..., second] * c + x[..., first] * s
    return out


# --------------------------------------------------------------------------- lib's kernel sizes

TINY_BLOCKS = dict(ROW_BLOCK_BYTES=5 * 3 * 8)
"""Blocks of one or two query rows of a dozen keys (float64; float32: up to 3 rows): a score
matrix of a dozen rows is cut into many blocks, each skipping the keys its rows cannot reach,
as a long one is."""


@contextlib.contextmanager
def kernel_sizes(**sizes):
    """Set lib.blockwise's block sizes (e.g. ROW_BLOCK_BYTES=...) for the duration, so that a
    small problem is cut the way a long one is."""
    from lib import blockwise as BW

    old = {name: getattr(BW, name) for name in sizes}
    for name, value in sizes.items():
        setattr(BW, name, value)
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(BW, name, value)


# --------------------------------------------------------------------------- Jupyter kernels

PORT_TAKEN = """
import json, pathlib, runpy, socket, sys
connection, count, times = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
starts = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(starts))
if starts <= times:
    info = json.loads(pathlib.Path(connection).read_text())
    taken = socket.socket()
    taken.bind((info["ip"], info["shell_port"]))
    taken.listen()
sys.argv = ["ipykernel_launcher", "-f", connection]
runpy.run_module("ipykernel_launcher", run_name="__main__")
"""


def kernel_losing_the_port_race(folder: Path, times: int) -> tuple[Path, Path]:
    """A kernel "python3" whose first ``times`` starts find their shell port taken, as when
    another kernel binds it first (Jupyter's port race): they die of "Address already in use"
    before they answer. Returns (the folder to put on JUPYTER_PATH, the file counting starts)."""
    script, count = folder / "port_taken.py", folder / "starts"
    script.write_text(PORT_TAKEN)
    spec = folder / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, str(script), "{connection_file}", str(count), str(times)]
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"})
    )
    return folder / "jupyter", count
