"""Grade submitted student notebooks with the course's checks (`make grade`).

    python -m tools.grade SUBMISSIONS... [--src notebooks] [--out build/grades] [--jobs N]
                          [--cell-timeout S] [--notebook-timeout S] [--run-all]

SUBMISSIONS are notebooks, or folders holding one folder per student (``alice/01_...ipynb``,
or nbgrader's ``submitted/alice/<assignment>/01_...ipynb``). A notebook's student is the
first folder under the folder given, or, for a notebook given by itself, the folder it is
in. Each submission is matched by file name to the course notebook in ``--src``.

How a submission is graded:

- Each check of the course notebook is found in the submission by its content (a cell that
  calls the same ``checks.check_*``), or else by the check cell's id; the report says which.
  A check found neither way fails ("the check cell was deleted").
- The submission runs in a fresh kernel: its cells in order (by default only the ones the
  exercises need: the cells that define the names the checked functions use, found by
  reading the code; ``--run-all`` runs every cell), except the check cells.
- Where a check cell stands, the grader runs the course's check in ITS OWN process, on the
  student's function called inside the kernel (see tools/_kernel_call.py): the answers come
  back as plain data, so nothing a submission does to ``lib.checks``, ``lib``, NumPy or
  ``sys.modules`` can make a wrong answer pass.
- Graded per exercise: a cell or a check that runs longer than ``--cell-timeout`` seconds,
  or kills the kernel (``os._exit``, a crash), costs only itself. The check it belongs to
  fails with the reason (a cell that hung or died is not run again, so the checks that need
  what it defines fail too, saying so); the kernel is restarted, the cells the next checks
  need are run again, and grading goes on. Past ``--notebook-timeout`` seconds in all, the
  checks not graded yet fail with the reason; the ones graded keep their result.
- A submission that is missing, unreadable or not a notebook, or whose kernel does not
  start (three fresh kernels die before answering), scores 0 with the reason, and grading
  goes on with the next one.

Writes ``gradebook.csv`` and ``gradebook.json`` to ``--out`` (one row per student, a column
per exercise, totals, each failure's message) and prints a line per notebook graded. It runs
the students' code: grade in a throw-away environment (a container, a spare account).
When the grader runs as root (Gradescope's autograder does), the kernels run as an
unprivileged account instead (``AUTOGRADER_STUDENT_USER``, default ``nobody``; empty: as the
grader's own user), in folders of their own: the student's code cannot write the grader's
files, the course or the environment, nor signal the grader's processes. If that account
cannot run the kernel's Python, ``make grade`` says so on stderr and runs the kernels as
root; the Gradescope autograder refuses instead (``student_account``'s ``strict``).
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import csv
import hashlib
import io
import json
import os
import pickle
import queue
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
import numpy as np

from tools.make_student import CHECK_CALL

ROOT = Path(__file__).resolve().parents[1]
KERNEL_CALL = (Path(__file__).parent / "_kernel_call.py").read_text()
BUILTINS = set(dir(builtins)) | {"get_ipython", "display", "__file__", "__name__"}


# How often a kernel is started before a submission is given up as "kernel died" (Kernel).
START_ATTEMPTS = 3


class GradingAbort(BaseException):  # noqa: N818 - not an Exception: checks must not catch it
    """The submission cannot be graded any further (dead kernel, timeout); scores 0."""


# --------------------------------------------------------------------------- results


@dataclass
class CheckResult:
    exercise: str  # the checked function's name, e.g. softmax_row
    check: str  # the course's check call, e.g. checks.check_softmax_list(softmax_row)
    passed: bool
    message: str = ""
    found_by: str = ""  # "content", "id" or "" (missing)


@dataclass
class NotebookResult:
    student: str
    notebook: str
    path: str
    status: str  # "graded", "missing", "unreadable", "not a notebook", "kernel died", "timeout"
    reason: str = ""  # why not graded; for a graded one, the kernel restarts, if any
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def score(self) -> int:
        return sum(c.passed for c in self.checks) if self.status == "graded" else 0


# --------------------------------------------------------------------------- the course's checks


@dataclass
class SourceCheck:
    cell_id: str | None
    source: str
    calls: list[tuple[str, str]]  # (check function name, argument expression)

    @property
    def exercise(self) -> str:
        return self.calls[0][1]


def check_calls(source: str) -> list[tuple[str, str]]:
    """The ``checks.check_x(expr)`` calls of a cell, as (check name, argument source)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [(m.group(1), m.group(2) or "") for m in CHECK_CALL.finditer(source)]
    calls = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "checks"
            and node.func.attr.startswith("check_")
        ):
            arg = ast.get_source_segment(source, node.args[0]) if node.args else ""
            calls.append((node.func.attr, arg or ""))
    return calls


def source_checks(source_nb) -> list[SourceCheck]:
    found = []
    for cell in source_nb.cells:
        if cell.cell_type == "code" and CHECK_CALL.search(cell.source):
            found.append(SourceCheck(cell.get("id"), cell.source, check_calls(cell.source)))
    return found


def locate_checks(submission, checks: list[SourceCheck]) -> list[tuple[int | None, str]]:
    """For each course check, (index of the submission cell where it stands, how it was
    found): first a code cell calling the same check (content), else the cell with the
    check cell's id, else (None, "")."""
    used: set[int] = set()
    calls = {
        i: {name for name, _ in check_calls(c.source)}
        for i, c in enumerate(submission.cells)
        if c.cell_type == "code" and CHECK_CALL.search(c.source)
    }
    ids = {c.get("id"): i for i, c in enumerate(submission.cells) if c.get("id")}
    located = []
    for check in checks:
        names = {name for name, _ in check.calls}
        index = next((i for i, n in calls.items() if i not in used and names <= n), None)
        how = "content"
        if index is None:
            index, how = ids.get(check.cell_id) if check.cell_id else None, "id"
            if index is not None and index in used:
                index = None
        if index is None:
            located.append((None, ""))
        else:
            used.add(index)
            located.append((index, how))
    return located


# --------------------------------------------------------------------------- which cells to run


def _python_source(source: str) -> str:
    """A cell's source as plain Python (IPython magics turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def free_names(scope) -> set[str]:
    """The names a function, lambda or comprehension reads from the scopes around it: what it
    loads, less its parameters and the names it binds (Python makes those local), nested
    scopes alike; defaults and decorators are read outside, so they count whole."""
    local, loaded, declared = set(), set(), set()
    if isinstance(scope, _COMPREHENSIONS):
        first, *rest = scope.generators  # the first iterable is read outside
        body = [scope.key, scope.value] if isinstance(scope, ast.DictComp) else [scope.elt]
        body += [first.target, *first.ifs, *rest]
        outside = [first.iter]
    else:
        args = scope.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        local.update(a.arg for a in every if a is not None)
        outside = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        outside += getattr(scope, "decorator_list", [])
        body = scope.body if isinstance(scope.body, list) else [scope.body]
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, _SCOPES + _COMPREHENSIONS):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                local.add(node.name)
            loaded |= free_names(node)
            continue
        if isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
        elif isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else local).add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            local.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef | ast.ExceptHandler) and node.name:
            local.add(node.name)
        todo.extend(ast.iter_child_nodes(node))
    free = loaded - (local - declared)
    for node in outside:
        free |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return free


def names_of(source: str) -> tuple[set[str], set[str], set[str]] | None:
    """(names a cell defines at module level, names it reads anywhere, names it defines
    for sure: by a def, class, import or plain assignment at the top level), or None if it
    does not parse."""
    try:
        tree = ast.parse(_python_source(source))
    except (SyntaxError, ValueError):
        return None
    defined, used = set(), set()

    def visit(node, top: bool):
        if isinstance(node, _SCOPES + _COMPREHENSIONS):  # what it reads from outside itself
            if top and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(node.name)
            used.update(free_names(node))
            defined.update(n for g in ast.walk(node) if isinstance(g, ast.Global) for n in g.names)
            return
        if isinstance(node, ast.ClassDef):
            if top:
                defined.add(node.name)
            for child in ast.iter_child_nodes(node):
                visit(child, False)
            return
        if isinstance(node, ast.Import | ast.ImportFrom) and top:
            for alias in node.names:
                defined.add((alias.asname or alias.name).split(".")[0])
        if isinstance(node, ast.Global):
            defined.update(node.names)
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                used.add(node.id)
            elif top:
                defined.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child, top)

    surely = set()
    for statement in tree.body:
        visit(statement, True)
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            surely.add(statement.name)
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            surely.update((a.asname or a.name).split(".")[0] for a in statement.names)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        surely.add(node.id)
    return defined, used - BUILTINS, surely


def needed_cells(sources: list[str | None], targets: dict[int, set[str]]) -> set[int]:
    """Indices of the cells to run so that the names in ``targets`` ({index of a check's
    position: names its arguments read}) are defined there: the cells before each position
    that define one of the names (back to the last one that surely defines it), then, in
    turn, what those cells read. ``sources[i]`` is
    None for cells that are not run (markdown, check cells). A cell that does not parse is
    always run (its error is then the student's to see), and so is a cell with a star import
    (``from math import *`` may define any name: its module decides), with what it reads."""
    parsed = {i: names_of(s) for i, s in enumerate(sources) if s is not None}
    needed = {i for i, p in parsed.items() if p is None}
    todo = [(pos, name) for pos, names in targets.items() for name in names]
    for i, p in parsed.items():
        if p is not None and "*" in p[0]:
            needed.add(i)
            todo.extend((i, n) for n in p[1])
    seen = set()
    while todo:
        pos, name = todo.pop()
        for i in range(pos - 1, -1, -1):
            p = parsed.get(i)
            if p is None or name not in p[0]:
                continue
            if (i, name) not in seen:
                seen.add((i, name))
                if i not in needed:
                    needed.add(i)
                    todo.extend((i, n) for n in p[1])
            if name in p[2]:
                break
    return needed


# --------------------------------------------------------------------------- the kernel


@dataclass(frozen=True)
class Account:
    """The unprivileged account the kernels run as (when the grader is root)."""

    name: str
    uid: int
    gid: int

    def own(self, *paths: Path, mode: int = 0o700) -> None:
        for path in paths:
            os.chown(path, self.uid, self.gid)
            path.chmod(mode)

    def popen_args(self) -> dict:
        """What makes Popen start a process as this account (and in no other group)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


_ACCOUNTS: dict[tuple[str, str], Account | str] = {}


class UnsafeToGrade(RuntimeError):
    """The grader is root and cannot run the students' code as anyone else."""


def student_account(strict: bool = False) -> Account | None:
    """The account to run submissions' kernels as: None unless the grader is root. Then
    ``AUTOGRADER_STUDENT_USER`` (default ``nobody``; empty means root, as the grader), if it
    exists, is not root and can import ipykernel with this Python (a venv under a private
    home cannot be run by it). Otherwise :class:`UnsafeToGrade` when ``strict`` (the
    Gradescope autograder), else a warning on stderr and None (the kernels run as root)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    name = os.environ.get("AUTOGRADER_STUDENT_USER", "nobody")
    if not name:
        return None
    key = (name, sys.executable)
    if key not in _ACCOUNTS:
        _ACCOUNTS[key] = _find_account(name)
    found = _ACCOUNTS[key]
    if isinstance(found, Account):
        return found
    if strict:
        raise UnsafeToGrade(
            f"the grader runs as root and will not run the students' code as root: {name} "
            f"{found}. Let {name} run {sys.executable} (setup.sh's venv, under a folder it "
            "may enter), name another account in AUTOGRADER_STUDENT_USER, or set it to empty "
            "to run the code as root (it could then change its own grade)"
        )
    print(f"WARNING: the students' code runs as root, not as {name}: {name} {found}",
          file=sys.stderr, flush=True)  # fmt: skip
    return None


def _find_account(name: str, python: str = sys.executable) -> Account | str:
    """The account ``name``, or why the students' code cannot run as it with ``python``."""
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return "does not exist"
    if entry.pw_uid == 0:
        return "is root"
    account = Account(name, entry.pw_uid, entry.pw_gid)
    try:
        done = subprocess.run(
            [python, "-c", "import ipykernel"],
            cwd="/",
            env={"PATH": os.environ.get("PATH", ""), "HOME": "/"},
            capture_output=True,
            text=True,
            timeout=120,
            **account.popen_args(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run {python} ({exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"cannot run {python} with ipykernel ({last})"
    return account


def _open_answer(path: Path):
    """A file the kernel wrote, opened for reading only if it is a plain file (not a link to
    another file, a FIFO that would block, a device that never ends)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name} is not a plain file")
    return open(fd, "rb")


class Kernel:
    """A fresh Jupyter kernel for one submission, with deadlines and death detection. With
    an ``account``, the kernel runs as that account, in ``home`` (its working directory,
    HOME and every cache), and talks through a connection file it owns."""

    def __init__(
        self,
        cwd: Path,
        cell_timeout: float,
        deadline: float,
        tmp: Path,
        account: Account | None = None,
        home: Path | None = None,
    ):
        from jupyter_client.manager import KernelManager

        self.cell_timeout, self.deadline, self.tmp = cell_timeout, deadline, tmp
        self.account = account
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        launch = {}
        manager, options = KernelManager, {}
        if account is not None:

            class StudentKernelManager(KernelManager):
                def write_connection_file(self, **kw):
                    super().write_connection_file(**kw)  # root's, mode 600: make it theirs
                    os.chown(self.connection_file, account.uid, account.gid)

            manager, options = (
                StudentKernelManager,
                {"connection_file": str(tmp / "connection.json")},
            )
            cwd = home / "work"
            env.update(
                HOME=str(home),
                USER=account.name,
                LOGNAME=account.name,
                TMPDIR=str(home / "tmp"),
                IPYTHONDIR=str(home / ".ipython"),
                MPLCONFIGDIR=str(home / ".matplotlib"),
                XDG_CACHE_HOME=str(home / ".cache"),
                XDG_CONFIG_HOME=str(home / ".config"),
                JUPYTER_RUNTIME_DIR=str(home / ".jupyter-runtime"),
            )
            launch = account.popen_args()
        # A kernel that dies before it answers has run none of the submission's code: start
        # a new one, with new ports. The manager picks free ports and the kernel binds them a
        # second later; a kernel started meanwhile (make grade --jobs, the tests) can take one
        # first, and this kernel dies of "Address already in use" (a known race of Jupyter's).
        for attempt in range(1, START_ATTEMPTS + 1):
            self.km = manager(kernel_name="python3", **options)
            self.km.start_kernel(cwd=str(cwd), env=env, **launch)
            self.kc = self.km.client()
            self.kc.start_channels()
            try:
                self.kc.wait_for_ready(timeout=min(60.0, max(1.0, deadline - time.monotonic())))
                break
            except RuntimeError as exc:
                self.close()
                if attempt == START_ATTEMPTS or time.monotonic() > deadline:
                    why = f"the kernel did not start (tries: {attempt}; the last: {exc})"
                    raise GradingAbort(("kernel died", why)) from None
                print(f"the kernel did not start ({exc}); starting a new one", file=sys.stderr)
        self.calls = 0

    def close(self):
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        with contextlib.suppress(Exception):
            self.km.shutdown_kernel(now=True)

    def execute(self, code: str, what: str) -> dict:
        """Run code; return the reply's content. Raises GradingAbort on a dead kernel or a
        timeout."""
        # stop_on_error=False: after a cell that raised, the kernel must not abort the next request
        # (ipykernel aborts what arrives while it clears its queue: a check call, under load)
        msg_id = self.kc.execute(code, store_history=False, allow_stdin=False, stop_on_error=False)
        start = time.monotonic()
        while True:
            while True:  # outputs are not needed: drop them (works on jupyter_client 7 and 8)
                try:
                    self.kc.get_iopub_msg(timeout=0)
                except queue.Empty:
                    break
            try:
                reply = self.kc.get_shell_msg(timeout=0.05)
            except queue.Empty:
                now = time.monotonic()
                if not self.km.is_alive():
                    raise GradingAbort(("kernel died", f"the kernel died in {what}")) from None
                if now - start > self.cell_timeout:
                    raise GradingAbort(
                        ("timeout", f"{what} ran longer than {self.cell_timeout:g} s")
                    ) from None
                if now > self.deadline:
                    raise GradingAbort(
                        ("timeout", f"the notebook ran past its time limit, in {what}")
                    ) from None
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]

    def call(self, expr: str, args: tuple, what: str, refused: tuple = ()):
        """Call ``expr`` (the student's function, evaluated in the kernel) on ``args``; return
        its answer rebuilt from plain data, or raise what it raised, rebuilt likewise.
        ``refused``: the lib functions that raise instead of running meanwhile
        (``lib.checks._core.refusing``)."""
        self.calls += 1
        folder = self.tmp / f"call{self.calls}"
        folder.mkdir()
        args_path = folder / "args.pickle"
        with open(args_path, "wb") as f:
            pickle.dump((expr, args, tuple(refused)), f)
        if self.account is not None:  # written by root in root's folder, then given over
            self.account.own(args_path, mode=0o600)
            self.account.own(folder)
        code = (
            f"exec(compile({KERNEL_CALL!r}, '<grader>', 'exec'), {{'__name__': '__grader__', "
            f"'_user_ns': get_ipython().user_ns, '_args_path': {str(args_path)!r}, "
            f"'_result_dir': {str(folder)!r}}})"
        )
        reply = self.execute(code, what)
        try:
            with _open_answer(folder / "result.json") as f:
                result = json.load(f)
            with (
                _open_answer(folder / "arrays.npz") as f,
                np.load(f, allow_pickle=False) as npz,
            ):
                arrays = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            why = f"{reply.get('ename')}: {reply.get('evalue')}" if reply.get("ename") else exc
            raise RuntimeError(f"the kernel sent back no readable answer ({why})") from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        kind = result.get("kind")
        if kind == "value":
            return decode(result["value"], arrays)
        if kind == "error":
            raise rebuild_exception(result)
        if kind == "undefined":
            raise Undefined(expr, result.get("message", ""))
        raise RuntimeError(f"calling {expr} in the kernel failed: {result.get('message')}")


class Undefined(Exception):  # noqa: N818
    def __init__(self, expr: str, message: str):
        super().__init__(
            f"{expr} is not defined when its check runs: the cell that defines it raised an "
            f"error or was deleted ({message})."
        )


class Opaque:
    """An answer of a type the grader does not rebuild (its type name is kept)."""

    def __init__(self, text: str = ""):
        self.text = text

    def __repr__(self):
        return self.text or f"<{type(self).__name__}>"


def decode(node, arrays):
    t = node["t"]
    if t == "none":
        return None
    if t == "bool":
        return bool(node["v"])
    if t == "int":
        return int(node["v"])
    if t == "float":
        return float(node["v"])
    if t == "str":
        return str(node["v"])
    if t == "npscalar":
        return arrays[node["a"]][()]
    if t == "array":
        return arrays[node["a"]]
    if t == "list":
        return [decode(x, arrays) for x in node["v"]]
    if t == "tuple":
        return tuple(decode(x, arrays) for x in node["v"])
    if t == "dict":
        out = {}
        for k, v in node["v"]:
            with contextlib.suppress(TypeError):
                out[decode(k, arrays)] = decode(v, arrays)
        return out
    if t == "tensor":
        import torch

        dtype = getattr(torch, node["dtype"].removeprefix("torch."), None)
        tensor = torch.from_numpy(arrays[node["a"]])
        return tensor.to(dtype) if isinstance(dtype, torch.dtype) else tensor
    if t == "mha":
        import torch
        from torch import nn

        config = dict(node["config"])
        config["dtype"] = getattr(torch, config["dtype"].removeprefix("torch."))
        module = nn.MultiheadAttention(**config)
        state = {k: torch.from_numpy(arrays[a]) for k, a in node["state"].items()}
        module.load_state_dict(state)
        return module.train(node["training"])
    if t == "mhaparams":  # rebuilt, and so checked again, by lib in the grader's process
        from lib import attention as A

        fields = {k: decode(v, arrays) for k, v in node["v"].items()}
        try:
            return A.MHAParams(**fields)
        except (TypeError, ValueError) as exc:
            return type("MHAParams", (Opaque,), {})(f"an MHAParams lib refuses ({exc})")
    name = re.sub(r"\W", "_", str(node.get("type", "object"))) or "object"
    return type(name, (Opaque,), {})(str(node.get("repr", "")))


_SAFE_EXCEPTIONS = {
    f"builtins.{name}": obj
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, Exception)
}
_SAFE_EXCEPTIONS["numpy.exceptions.AxisError"] = np.exceptions.AxisError


def rebuild_exception(result) -> Exception:
    """The student's exception as an instance of a trusted class (the first of its bases
    the grader knows), keeping its type name, message and where a stub was raised."""
    base = next((_SAFE_EXCEPTIONS[t] for t in result["types"] if t in _SAFE_EXCEPTIONS), None)
    base = base or RuntimeError
    message = result.get("message", "")
    name = re.sub(r"\W", "_", result.get("name", base.__name__)) or base.__name__
    cls = type(name, (base,), {"__str__": lambda self: message, "__init__": lambda self: None})
    exc = cls()
    exc.args = (message,)
    exc.raised_in = result.get("raised_in", "")
    return exc


class KernelFunction:
    """Stands for the student's function in the grader's process: calling it calls the
    function in the kernel."""

    def __init__(self, kernel: Kernel, expr: str, what: str):
        self.kernel, self.expr, self.what = kernel, expr, what
        self.__name__ = expr

    def __call__(self, *args):
        return self.kernel.call(self.expr, args, self.what)

    def refusing(self, refused):
        """This function, called with the lib functions in ``refused`` refused in the kernel
        while it runs (``lib.checks._core.call``)."""
        return lambda *args: self.kernel.call(self.expr, args, self.what, tuple(refused))


# --------------------------------------------------------------------------- one notebook


def read_submission(path: Path):
    """The notebook, or (status, reason) when it cannot be read."""
    if not path.exists():
        return None, ("missing", f"no file {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, ("unreadable", f"cannot read {path}: {exc}")
    try:
        json.loads(text)
    except ValueError as exc:
        return None, ("not a notebook", f"{path.name} is not JSON ({exc})")
    try:
        return nbformat.reads(text, as_version=4), None
    except Exception as exc:  # noqa: BLE001 - any malformed notebook is reported, not raised
        return None, ("not a notebook", f"{path.name} is not a Jupyter notebook ({exc})")


def run_check(check_name: str, fn) -> tuple[bool, str]:
    """Run one of the course's checks (here, in the grader's process) on ``fn``."""
    from lib import checks

    check = getattr(checks, check_name, None)
    if check is None:
        return False, f"the course has no check named {check_name}"
    strict = getattr(check, "__wrapped__", check)  # an exercise left as its stub fails here
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            strict(fn)
        except checks.CheckFailed as exc:
            return False, f"CheckFailed: {exc}"
        except Undefined as exc:
            return False, str(exc)
        except Exception as exc:  # noqa: BLE001 - a check must never stop the grading
            return False, f"the check could not run ({type(exc).__name__}: {exc})"
    return True, ""


def grade_notebook(
    path: Path,
    source_path: Path,
    student: str = "",
    cell_timeout: float = 120.0,
    notebook_timeout: float = 600.0,
    run_all: bool = False,
    strict_account: bool = False,
) -> NotebookResult:
    """Grade one submission against the course notebook ``source_path``; never raises for
    anything the submission does. ``strict_account``: see :func:`student_account`."""
    start = time.monotonic()
    result = NotebookResult(student, source_path.name, str(path), "graded")
    source = nbformat.read(source_path, as_version=4)
    checks = source_checks(source)

    def fail_all(status, reason):
        result.status, result.reason = status, reason
        result.checks = [
            CheckResult(c.exercise, c.source.strip(), False, reason, "") for c in checks
        ]

    submission, problem = read_submission(path)
    if problem:
        fail_all(*problem)
        result.seconds = time.monotonic() - start
        return result
    cells = submission.cells
    located = locate_checks(submission, checks)
    at = {
        index: check for check, (index, _) in zip(checks, located, strict=True) if index is not None
    }
    sources = [
        c.source if c.cell_type == "code" and i not in at else None for i, c in enumerate(cells)
    ]
    if run_all:
        to_run = {i for i, s in enumerate(sources) if s is not None}
    else:
        targets = {}
        for index, check in at.items():
            names = set()
            for _, expr in check.calls:
                parsed = names_of(expr)
                names |= parsed[1] if parsed else set()
            targets[index] = names
        to_run = needed_cells(sources, targets)
    outcome: dict[int, list[tuple[bool, str]]] = {}
    steps = [i for i in range(len(cells)) if i in at or i in to_run]
    skipped: dict[int, str] = {}  # cells that hung or killed the kernel: not run again
    restarts: list[str] = []
    done = 0  # steps[:done] have run (or failed for good)
    account = student_account(strict_account)  # before any of the submission's code runs
    tmp = Path(tempfile.mkdtemp(prefix="grade-"))
    home = None
    if account is not None:  # root's folders it may enter, and a home of its own
        tmp.chmod(0o711)
        home = tmp / "home"
        for sub in (home, home / "work", home / "tmp"):
            sub.mkdir()
            account.own(sub)
    try:
        while done < len(steps):
            current = None
            kernel = None
            try:
                folder = tmp / f"kernel{len(restarts)}"  # its calls' files: call1, ...
                folder.mkdir()
                if account is not None:
                    folder.chmod(0o711)
                kernel = Kernel(
                    source_path.parent,
                    cell_timeout,
                    start + notebook_timeout,
                    folder,
                    account,
                    home,
                )
                for i in steps[:done]:  # after a restart: what the next checks may need
                    if i in to_run and i not in skipped:
                        current = i
                        kernel.execute(cells[i].source, f"cell {i}")
                for i in steps[done:]:
                    current = i
                    if i in at:
                        for check_name, expr in at[i].calls:
                            what = f"cell {i} ({check_name}({expr}))"
                            fn = KernelFunction(kernel, expr, what)
                            outcome.setdefault(i, []).append(run_check(check_name, fn))
                    else:
                        kernel.execute(cells[i].source, f"cell {i}")
                    done += 1
            except GradingAbort as abort:
                status, reason = abort.args[0]
                if current is None or time.monotonic() > start + notebook_timeout:
                    if not outcome and not restarts:  # nothing graded: as before, all fail
                        fail_all(status, reason)
                    for i in steps[done:]:
                        if i in at:
                            outcome.setdefault(i, []).append((False, f"{status}: {reason}"))
                    break
                # One exercise must not cost the others: restart the kernel and go on after
                # the cell (or check) that hung or killed it.
                restarts.append(f"{status}: {reason}")
                if current in at:
                    outcome.setdefault(current, []).append((False, f"{status}: {reason}"))
                else:
                    skipped[current] = f"{status}: {reason}"
                done = max(done, steps.index(current) + 1)
            finally:
                if kernel is not None:
                    kernel.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if restarts:
        result.reason = "the kernel was restarted after: " + "; ".join(restarts)
    if result.status == "graded":
        for check, (index, how) in zip(checks, located, strict=True):
            if index is None:
                result.checks.append(
                    CheckResult(
                        check.exercise, check.source.strip(), False, "the check cell was deleted"
                    )
                )
                continue
            runs = outcome.get(index, [])
            failed = [m for ok, m in runs if not ok]
            message = failed[0] if failed else ""
            if skipped and "is not defined when its check runs" in message:
                message += " Not run: " + "; ".join(
                    f"cell {i} ({why})" for i, why in sorted(skipped.items())
                )
            result.checks.append(
                CheckResult(
                    check.exercise,
                    check.source.strip(),
                    bool(runs) and not failed,
                    message,
                    how,
                )
            )
    result.seconds = time.monotonic() - start
    return result


# --------------------------------------------------------------------------- many notebooks


def collect(paths: list[Path], src: Path) -> list[tuple[str, Path]]:
    """(student, path) of every submission: notebooks under folders (one folder per student),
    and notebooks given by themselves (their folder names the student). For every student
    found in a folder, a course notebook that another student submitted and this one did
    not is listed too (and graded as missing)."""
    found: list[tuple[str, Path]] = []
    for path in paths:
        if path.is_dir():
            for nb in sorted(path.rglob("*.ipynb")):
                if ".ipynb_checkpoints" in nb.parts:
                    continue
                rel = nb.relative_to(path)
                student = rel.parts[0] if len(rel.parts) > 1 else path.name
                found.append((student, nb))
        else:
            found.append((path.parent.name or ".", path))
    names = sorted({p.name for _, p in found if (src / p.name).exists()})
    by_student: dict[str, dict[str, Path]] = {}
    for student, nb in found:
        by_student.setdefault(student, {})[nb.name] = nb
    out = []
    for student in sorted(by_student):
        have = by_student[student]
        base = next(iter(have.values())).parent
        for name in sorted(set(names) | set(have)):
            out.append((student, have.get(name, base / name)))
    return out


def _grade_task(task) -> NotebookResult:
    student, path, src, cell_timeout, notebook_timeout, run_all = task
    source = src / path.name
    if not source.exists():
        return NotebookResult(
            student,
            path.name,
            str(path),
            "no course notebook",
            f"no course notebook named {path.name} in {src}",
        )
    try:
        return grade_notebook(path, source, student, cell_timeout, notebook_timeout, run_all)
    except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
        return NotebookResult(
            student, path.name, str(path), "grader error", f"{type(exc).__name__}: {exc}"
        )


def grade_all(
    submissions: list[tuple[str, Path]],
    src: Path,
    jobs: int = 1,
    cell_timeout: float = 120.0,
    notebook_timeout: float = 600.0,
    run_all: bool = False,
    report=None,
) -> list[NotebookResult]:
    tasks = [(s, p, src, cell_timeout, notebook_timeout, run_all) for s, p in submissions]
    results = []
    if jobs <= 1:
        for task in tasks:
            results.append(_grade_task(task))
            if report:
                report(results[-1])
        return results
    import multiprocessing

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for result in pool.map(_grade_task, tasks):
            results.append(result)
            if report:
                report(result)
    return results


def lib_fingerprint() -> str:
    """A hash of lib's source files, to notice a submission that edited them on disk."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "lib").rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------- the gradebook


def gradebook(results: list[NotebookResult]):
    """(columns, rows): one row per student, a column per exercise ("<notebook>:<exercise>"),
    then total, max and every failure's message."""
    columns: list[str] = []
    for r in sorted(results, key=lambda r: r.notebook):
        for c in r.checks:
            col = f"{Path(r.notebook).stem}:{c.exercise}"
            if col not in columns:
                columns.append(col)
    rows = {}
    for r in results:
        row = rows.setdefault(r.student, {"student": r.student, "total": 0, "failures": []})
        for c in r.checks:
            col = f"{Path(r.notebook).stem}:{c.exercise}"
            ok = int(c.passed and r.status == "graded")
            row[col] = ok
            row["total"] += ok
            if not ok:
                why = c.message if r.status == "graded" else f"{r.status}: {r.reason}"
                row["failures"].append(f"{col}: {why}")
    for row in rows.values():
        row["max"] = len(columns)
        for col in columns:
            row.setdefault(col, 0)
            if col not in row:
                row["failures"].append(f"{col}: not submitted")
    return ["student", *columns, "total", "max", "failures"], [rows[s] for s in sorted(rows)]


def write_gradebook(results: list[NotebookResult], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    columns, rows = gradebook(results)
    csv_path, json_path = out / "gradebook.csv", out / "gradebook.json"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([" | ".join(row[c]) if c == "failures" else row[c] for c in columns])
    students = {}
    for r in results:
        students.setdefault(r.student, []).append(asdict(r) | {"score": r.score})
    data = {
        "columns": columns,
        "rows": rows,
        "notebooks": {s: sorted(v, key=lambda n: n["notebook"]) for s, v in students.items()},
    }
    json_path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return csv_path, json_path


def describe(result: NotebookResult, verbose: bool = True) -> str:
    head = f"{result.student}/{result.notebook}: "
    total = len(result.checks)
    if result.status != "graded":
        text = f"{head}0/{total} ({result.status}: {result.reason})"
    else:
        text = f"{head}{result.score}/{total} checks passed ({result.seconds:.1f} s)"
        if result.reason:
            text += f" ({result.reason})"
    if verbose and result.status == "graded":
        for c in result.checks:
            line = c.check.splitlines()[0] if c.check else c.exercise
            note = "" if c.found_by in ("content", "") else f"  [check cell found by {c.found_by}]"
            text += f"\n  {'✓' if c.passed else '✗'} {line}{note}"
            if not c.passed:
                text += f"  -> {c.message}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, nargs="+")
    parser.add_argument("--src", type=Path, default=ROOT / "notebooks" / "solved")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "grades")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once")
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=120.0,
        help="seconds one cell (or one call of "
        "a student's function by a check) may run; default 120",
    )
    parser.add_argument(
        "--notebook-timeout",
        type=float,
        default=600.0,
        help="seconds one notebook may take in all; default 600",
    )
    parser.add_argument(
        "--run-all",
        action="store_true",
        help="run every cell of a submission, not only those the exercises need",
    )
    parser.add_argument("--quiet", action="store_true", help="one line per notebook")
    args = parser.parse_args(argv)
    submissions = collect(args.submissions, args.src)
    if not submissions:
        print("no submissions found", file=sys.stderr)
        return 1
    before = lib_fingerprint()
    start = time.monotonic()
    results = grade_all(
        submissions,
        args.src,
        args.jobs,
        args.cell_timeout,
        args.notebook_timeout,
        args.run_all,
        report=lambda r: print(describe(r, not args.quiet), flush=True),
    )
    elapsed = time.monotonic() - start
    csv_path, json_path = write_gradebook(results, args.out)
    print()
    for name in sorted({r.notebook for r in results}):
        mine = [r for r in results if r.notebook == name]
        total = max((len(r.checks) for r in mine), default=0)
        graded = [r for r in mine if r.status == "graded"]
        mean = sum(r.score for r in mine) / len(mine)
        print(
            f"{name}: {len(mine)} submissions, mean {mean:.2f}/{total}, "
            f"{len(mine) - len(graded)} not graded"
        )
    print(f"graded {len(results)} notebooks in {elapsed:.1f} s; wrote {csv_path} and {json_path}")
    if lib_fingerprint() != before:
        print(
            "WARNING: lib's source files changed on disk while grading: a submission may have "
            "edited them; the grades cannot be trusted. Restore lib and grade again.",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
