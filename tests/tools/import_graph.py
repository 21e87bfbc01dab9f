"""v1's import graph, and its layers as docs/architecture.md shows them.

`python -m tests.tools.import_graph` prints the layers: each line a layer of v1's modules (a
subpackage counts as one, `interception/`), importing only from the lines below it at module
level, annotation-only imports included (`if TYPE_CHECKING:` blocks, and `v1.x.Name` written in a
string annotation). Modules that import each other would share a line, joined by `<->`.
`tests/test_import_structure.py` checks the graph has no cycle at any level and that
docs/architecture.md shows exactly these layers. ``--type-level`` prints the circles that
annotation-only imports close (none since issue 24 item 1; the test keeps it so).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "v1"
DOTTED_V1_NAME = re.compile(r"\bv1(?:\.\w+)+")
MODULE_OBJECT_REFERENCE = re.compile(r"(v1(?:\.\w+)*):[A-Za-z_][\w.]*")
PLAIN_MODULE_NAME = re.compile(r"v1(?:\.\w+)*")
IMPORTS_BY_NAME = ("__import__", "import_module", "run_module", "find_spec", "lazy_attributes")
"""Functions that import a module named by a string: importlib's and runpy's, and `v1._util.lazy.lazy_attributes`
(by any alias that adds leading underscores)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(module: str, node: ast.Import | ast.ImportFrom, is_package: bool, known: set[str]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = set()
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:  # an ancestor package counts: importing from it runs its __init__
            found.add(name)
    return found


def annotations(tree: ast.AST) -> Iterator[ast.expr]:
    """Every annotation under `tree`: of arguments, assignments and return values."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.arg, ast.AnnAssign)) and node.annotation is not None:
            yield node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            yield node.returns


def string_annotation_modules(tree: ast.AST, known: set[str]) -> set[str]:
    """The v1 modules named by dotted names (`"v1.harness.Harness"`) in the string annotations under `tree`."""
    found = set()
    for annotation in annotations(tree):
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in DOTTED_V1_NAME.findall(node.value):
                    while name and name not in known:
                        name = name.rpartition(".")[0]
                    if name:
                        found.add(name)
    return found


def imports_by_name(call: ast.Call) -> bool:
    """Whether `call` imports modules named by strings among its arguments (`importlib.import_module("v1.x")`)."""
    name = ast.unparse(call.func).rpartition(".")[2]
    return name in IMPORTS_BY_NAME or name.lstrip("_") in IMPORTS_BY_NAME


def strings_under(node: ast.AST) -> Iterator[str]:
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield child.value


def imported_by_name(tree: ast.Module) -> Iterator[str]:
    """The strings given to a function that imports by name: its arguments, and the values of the module-level
    names passed to it (``__getattr__ = lazy_attributes("v1", _LAZY)`` imports what ``_LAZY`` names)."""
    assigned = {
        target.id: statement.value
        for statement in tree.body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and imports_by_name(call):
            for argument in [*call.args, *(keyword.value for keyword in call.keywords)]:
                yield from strings_under(assigned.get(argument.id, argument) if isinstance(argument, ast.Name) else argument)


def string_reference_modules(tree: ast.Module, known: set[str]) -> tuple[set[str], set[str]]:
    """The v1 modules that strings under `tree` name to import, and the names among them that are no module.

    A ``module:object`` string anywhere (a registry default, an entry point, a plugin reference) names its module;
    a plain dotted name (``"v1.train._run"``) names a module where it is given to a function that imports by name.
    Other strings that happen to spell a module (the entry-point group ``"v1.clients"``) import nothing.
    """
    named = {match.group(1) for text in strings_under(tree) if (match := MODULE_OBJECT_REFERENCE.fullmatch(text.strip()))}
    named |= {text.strip() for text in imported_by_name(tree) if PLAIN_MODULE_NAME.fullmatch(text.strip())}
    return named & known, named - known


def import_graph(type_checking: bool = False) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module-level edges, and edges from imports inside functions.

    Annotation-only edges (`if TYPE_CHECKING:` imports, modules named in string annotations)
    are left out unless `type_checking`; then they count as module-level edges. Modules named in strings
    to be imported by name (`string_reference_modules`) count as imports inside functions: they load on use.
    Read from the source files once per process (seconds of parsing); each call gets its own copy.
    """
    top, inner = read_import_graph(type_checking)
    return {module: set(targets) for module, targets in top.items()}, {module: set(targets) for module, targets in inner.items()}


@functools.cache
def read_import_graph(type_checking: bool) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """`import_graph`'s edges, as the source files hold them now."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    top: dict[str, set[str]] = {name: set() for name in paths}
    inner: dict[str, set[str]] = {name: set() for name in paths}

    def visit(module: str, node: ast.AST, in_function: bool, is_package: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if not type_checking and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if nested else top)[module] |= imported_modules(module, child, is_package, known)
            visit(module, child, nested, is_package)

    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        visit(name, tree, False, path.name == "__init__.py")
        inner[name] |= string_reference_modules(tree, known)[0] - {name}
        if type_checking:
            top[name] |= string_annotation_modules(tree, known) - {name}
    return {module: frozenset(targets) for module, targets in top.items()}, {
        module: frozenset(targets) for module, targets in inner.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := walk(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := walk(node)):
            return cycle
    return None


def package_node(module: str) -> str:
    """The node a module counts as in the layers: a top-level module by name, a subpackage as ``name/``."""
    parts = module.split(".")[1:]
    return f"{parts[0]}/" if len(parts) > 1 or (PACKAGE / parts[0]).is_dir() else parts[0]


def package_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module edges collapsed to package nodes, `v1/__init__.py` (which re-exports everything) left out."""
    collapsed: dict[str, set[str]] = {}
    for module, targets in edges.items():
        if module == "v1":
            continue
        node = package_node(module)
        collapsed.setdefault(node, set())
        collapsed[node] |= {package_node(target) for target in targets if target != "v1"} - {node}
    return collapsed


def strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """The graph's strongly connected components (Tarjan), each a set of nodes."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """Lines of nodes, the lowest first: each line imports only from lines below it (a cycle shares one entry)."""
    components = strongly_connected(edges)
    owner = {node: i for i, component in enumerate(components) for node in component}
    depth: dict[int, int] = {}

    def level(i: int) -> int:
        if i not in depth:
            below = {owner[t] for node in components[i] for t in edges[node]} - {i}
            depth[i] = 1 + max((level(j) for j in below), default=-1)
        return depth[i]

    lines: list[list[str]] = [[] for _ in range(1 + max((level(i) for i in range(len(components))), default=-1))]
    for i, component in enumerate(components):
        lines[level(i)].append(" <-> ".join(sorted(component)))
    return [sorted(line) for line in lines]


def render() -> str:
    """The layers as docs/architecture.md shows them, the top layer first (annotation-only imports count)."""
    top, _ = import_graph(type_checking=True)
    lines = layers(package_edges(top))
    return "\n".join(f"{len(lines) - 1 - n:>2}  {'  '.join(line)}" for n, line in enumerate(reversed(lines)))


def type_level_cycles() -> list[list[str]]:
    """The groups of v1 modules that import each other once `if TYPE_CHECKING:` imports count too."""
    top, _ = import_graph(type_checking=True)
    return [sorted(component) for component in strongly_connected(top) if len(component) > 1]


def main(argv: list[str]) -> None:
    """Print the layers; with ``--type-level``, the import circles annotation-only imports close (none)."""
    if argv == ["--type-level"]:
        cycles = type_level_cycles()
        for cycle in cycles:
            print(f"{len(cycle)} modules: {' '.join(cycle)}")
        if not cycles:
            print("no import circle at any level")
        return
    if argv:
        sys.exit(f"usage: python -m tests.tools.import_graph [--type-level] (got {' '.join(argv)})")
    print(render())


if __name__ == "__main__":
    main(sys.argv[1:])
