"""The import graph of lib and course_setup, read from the source: no cycle, and no import
inside a function except of the optional heavy packages a notebook may not need (so that a
module's dependencies are the lines at its top, and a cycle cannot hide behind an import
placed late)."""

import ast
from pathlib import Path

import course_setup
import lib

PACKAGES = [Path(lib.__file__).parent, Path(course_setup.__file__).parent]
# Imported only where they are used: large, and needed by one notebook (torch: 08; the
# pretrained model's files: 07, 10), or by course_setup.install before the course is installed.
LATE_IMPORTS_ALLOWED = {"torch", "transformers", "safetensors", "tokenizers", "packaging", "pip"}
# The environment doctor must run, and say what it could not check, where these are missing.
LATE_IN_DOCTOR = {"numpy", "threadpoolctl"}


def modules() -> dict[str, ast.Module]:
    found = {}
    for root in PACKAGES:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = ast.parse(path.read_text(), str(path))
    return found


def imported(name: str, node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement of module `name` brings in (absolute names)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module]
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    target = ".".join(base + ([node.module] if node.module else []))
    if node.module is None:  # from . import a, b: each is a module
        return [f"{target}.{alias.name}" for alias in node.names]
    return [target]


def graph() -> tuple[dict[str, set[str]], list[str]]:
    """lib's module-level import edges, and every import made inside a function."""
    all_modules = modules()
    edges, late = {}, []
    for name, tree in all_modules.items():
        is_package = (PACKAGES[0].parent / name.replace(".", "/") / "__init__.py").exists()
        package = name if is_package else name.rpartition(".")[0]
        edges[name] = set()
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            targets = imported(name, node, package)
            if id(node) not in top:
                late += [f"{name}:{node.lineno} imports {t}" for t in targets]
            edges[name] |= {t for t in targets if t in all_modules and t != name}
    return edges, late


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as a list of modules, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == "open":
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_lib_has_no_import_cycle():
    edges, _ = graph()
    assert edges["lib.blockwise"] >= {"lib.attention", "lib._validate"}  # the graph is read
    assert edges["course_setup.doctor"] == {"course_setup.install"}
    found = cycle(edges)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_no_import_inside_a_function_except_optional_heavy_packages():
    _, late = graph()
    wrong = [
        line
        for line in late
        if line.split(" imports ")[1].split(".")[0] not in LATE_IMPORTS_ALLOWED
        and not (
            line.startswith("course_setup.doctor:") and line.split(" imports ")[1] in LATE_IN_DOCTOR
        )
    ]
    assert not wrong, "imports inside functions:\n" + "\n".join(wrong)


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle(edges) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None
