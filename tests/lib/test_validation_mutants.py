"""Deleting any one call of lib's validation module makes the bad-input table fail.

For every call of ``lib._validate`` (imported as ``valid``), and of the checks that live
beside their one caller (:data:`LOCAL_CHECKS`), in the modules that use them, the function
containing the call is recompiled from its source with that one call deleted and put in
place of the original; the table of tests/lib/test_bad_inputs.py then runs, and at least one
row must fail. A call "deleted" means: a check used as a statement (``valid.finite(x, "x")``)
or a ``raise valid.overflow(...)`` becomes ``pass``; a predicate (``valid.all_finite(out)``)
answers True; a check whose value is used returns what it was given, unconverted and
unchecked (``valid.real_array(x, "x")`` -> ``x``), or, for the few that compute a result (the
guards' arrays, d_k), that result computed without checking (:data:`UNCHECKED`).
"""

from __future__ import annotations
import __future__

import ast
import contextlib
import copy
import importlib
import inspect
from dataclasses import dataclass

import numpy as np
import pytest
from test_bad_inputs import ROWS, failure

# With a check deleted, lib runs on inputs it would have refused: NumPy's warnings then are
# expected, and only the table's verdict matters.
pytestmark = pytest.mark.filterwarnings("ignore")

MODULES = (
    "lib.attention",
    "lib.blockwise",
    "lib.kv_cache",
    "lib.backprop",
    "lib.tiny",
    "lib.tasks",
    "lib.torch_bridge",
    "lib.positions",
)
ALIASES = {"valid"}  # how the modules import lib._validate
# Functions of lib._validate that are not checks: a computation and the error builder (its
# call sites are the `raise` statements around it).
NOT_CHECKS = {"divisors", "overflow"}
PREDICATES = {"all_finite"}
# Checks kept in the module that needs them (called by name or as self.<name>): deleted like
# the checks of lib._validate.
LOCAL_CHECKS = {"_base", "_new_tokens", "_cache_contents"}


def _mha_inputs(x_q, x_kv, p, mask, causal=False, unbatched_ok=True):
    """What valid.mha_inputs returns, computed without a check: arrays, a batch axis, the mask
    with four axes and ``causal`` folded in."""
    x_q, x_kv = np.asarray(x_q), np.asarray(x_kv)
    unbatched = x_q.ndim == 2
    if unbatched:
        x_q, x_kv = x_q[None], x_kv[None]
    if causal:
        rule = np.tri(x_q.shape[1], x_kv.shape[1], k=x_kv.shape[1] - x_q.shape[1], dtype=bool)
        mask = rule if mask is None else mask & rule
    if mask is not None:
        mask = np.asarray(mask)
        mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    return x_q, x_kv, p, mask, unbatched


def _attention_inputs(q, k, v, mask):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    return q, k, v, mask, np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])


def _new_tokens(x, batch, d_model, length, max_len):
    x = np.asarray(x)
    return (x[None], True) if x.ndim == 2 else (x, False)


# What a check that computes a result gives when it is deleted: the result, unchecked.
UNCHECKED = {
    "mha_inputs": _mha_inputs,
    "attention_inputs": _attention_inputs,
    "_new_tokens": _new_tokens,
    "_cache_contents": lambda keys, values, shape: (np.asarray(keys), np.asarray(values)),
    "heads": lambda d_model, n_heads: d_model // n_heads,
    "kv_heads": lambda n_heads, n_kv_heads: n_heads // n_kv_heads,
    "integers": lambda values, name: np.asarray(values),
}


@dataclass(frozen=True)
class Site:
    module: str
    owner: str | None  # the class, for a method
    function: str
    line: int
    col: int
    check: str

    @property
    def id(self) -> str:
        return f"{self.module.removeprefix('lib.')}:{self.line} {self.check}"


def _check_name(node) -> str | None:
    """The name of the check a call makes (None: not a check): valid.<name>, or a local check
    called as <name>(...), A.<name>(...) or self.<name>(...)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        return func.id if func.id in LOCAL_CHECKS else None
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id in ALIASES:
        return func.attr
    return func.attr if func.attr in LOCAL_CHECKS else None


def _is_v_call(node) -> bool:
    return _check_name(node) is not None


def _functions(tree):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield None, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    yield node.name, item


def find_sites() -> list[Site]:
    sites = []
    for name in MODULES:
        tree = ast.parse(inspect.getsource(importlib.import_module(name)))
        for owner, fn in _functions(tree):
            for node in ast.walk(fn):
                if isinstance(node, ast.Raise) and _is_v_call(node.exc):
                    check = "raise " + ast.unparse(node.exc.func)
                elif _is_v_call(node) and _check_name(node) not in NOT_CHECKS:
                    check = ast.unparse(node.func)
                else:
                    continue
                sites.append(Site(name, owner, fn.name, node.lineno, node.col_offset, check))
    return sites


class _Delete(ast.NodeTransformer):
    def __init__(self, site: Site | None):
        self.site = site
        self.done = 0

    def _hit(self, node) -> bool:
        return self.site is not None and (node.lineno, node.col_offset) == (
            self.site.line,
            self.site.col,
        )

    def visit_Raise(self, node):
        if self._hit(node):
            self.done += 1
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_Expr(self, node):
        if _is_v_call(node.value) and self._hit(node.value):
            self.done += 1
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_Call(self, node):
        if not (_is_v_call(node) and self._hit(node)):
            return self.generic_visit(node)
        self.done += 1
        name = _check_name(node)
        if name in PREDICATES:
            return ast.copy_location(ast.Constant(True), node)
        if name in UNCHECKED:
            func = ast.Subscript(
                ast.Name("__unchecked__", ast.Load()), ast.Constant(name), ast.Load()
            )
            return ast.copy_location(ast.Call(func, node.args, node.keywords), node)
        return node.args[0]  # the value it was given, unchecked and unconverted


class patched:
    """Context manager: lib with the one call at ``site`` deleted (None: recompiled as is)."""

    def __init__(self, site: Site | None, module: str, owner: str | None, function: str):
        self.site, self.owner, self.function = site, owner, function
        self.module = importlib.import_module(module)

    def __enter__(self):
        tree = ast.parse(inspect.getsource(self.module))
        fn = next(
            f for owner, f in _functions(tree) if (owner, f.name) == (self.owner, self.function)
        )
        deleter = _Delete(self.site)
        new = deleter.visit(copy.deepcopy(fn))
        assert deleter.done == (0 if self.site is None else 1), (self.site, deleter.done)
        code = compile(
            ast.fix_missing_locations(ast.Module([new], [])),
            inspect.getsourcefile(self.module),
            "exec",
            flags=__future__.annotations.compiler_flag,
            dont_inherit=True,
        )
        namespace: dict = {}
        self.module.__dict__["__unchecked__"] = UNCHECKED
        exec(code, self.module.__dict__, namespace)
        self.target = self.module if self.owner is None else getattr(self.module, self.owner)
        self.original = self.target.__dict__[self.function]
        setattr(self.target, self.function, namespace[self.function])
        return self

    def __exit__(self, *exc):
        setattr(self.target, self.function, self.original)
        self.module.__dict__.pop("__unchecked__", None)


SITES = find_sites()


def _module_of(row) -> str:
    """The module of a row's entry point: "lib.kv_cache" for "kv_cache.Decoder", lib.attention
    for the names without a module ("softmax", "MHAParams")."""
    return "lib." + (row.function.split(".")[0] if "." in row.function else "attention")


def _first_failing_row(module: str) -> str | None:
    """The first row that fails, trying the rows of ``module`` first (they notice soonest)."""
    for row in sorted(ROWS, key=lambda row: _module_of(row) != module):
        problem = failure(row)
        if problem is not None:
            return f"{row.id}: {problem}"
    return None


def test_every_module_has_its_checks_found():
    found = {site.module for site in SITES}
    assert found == set(MODULES), found
    assert len(SITES) >= 100, len(SITES)
    # a name left here after lib dropped it would be a check this test no longer deletes
    called = {site.check.split(".")[-1] for site in SITES}  # "valid.heads" -> "heads"
    stale = (LOCAL_CHECKS | set(UNCHECKED) | PREDICATES) - called
    assert not stale, f"names in this test that lib no longer calls: {stale}"


def test_recompiling_every_function_unchanged_breaks_nothing():
    """The machinery itself (recompiling from source, swapping in) changes nothing: with
    every function that holds a check recompiled as it is, the whole table holds."""
    with contextlib.ExitStack() as stack:
        for key in sorted({(s.module, s.owner or "", s.function) for s in SITES}):
            module, owner, function = key
            stack.enter_context(patched(None, module, owner or None, function))
        problems = [f"{row.id}: {failure(row)}" for row in ROWS if failure(row) is not None]
    assert not problems, problems


@pytest.mark.parametrize("site", SITES, ids=[site.id for site in SITES])
def test_deleting_a_validation_call_is_noticed(site):
    with patched(site, site.module, site.owner, site.function):
        caught = _first_failing_row(site.module)
    assert caught is not None, f"no row of the bad-input table fails without {site.id}"
