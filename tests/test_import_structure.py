"""v1's modules depend one way: no import cycles, and no v1 imports hidden inside functions.

Imports under `if TYPE_CHECKING:` are for annotations only and don't count. The one kind of
import allowed inside a function is a CLI command loading its torch-heavy package, so that
`v1 eval` never imports torch.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "v1"
LAZY_ALLOWED = {"v1.cli.serve": {"v1.inference"}, "v1.cli.train": {"v1.train"}}


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
        if name and name != module and not module.startswith(name + "."):
            found.add(name)
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module-level edges, and edges from imports inside functions (TYPE_CHECKING blocks left out)."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    known = set(paths)
    top: dict[str, set[str]] = {name: set() for name in paths}
    inner: dict[str, set[str]] = {name: set() for name in paths}

    def visit(module: str, node: ast.AST, in_function: bool, is_package: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if nested else top)[module] |= imported_modules(module, child, is_package, known)
            visit(module, child, nested, is_package)

    for name, path in paths.items():
        visit(name, ast.parse(path.read_text(encoding="utf-8")), False, path.name == "__init__.py")
    return top, inner


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


def test_no_import_cycles() -> None:
    top, _ = import_graph()
    assert find_cycle(top) is None, " -> ".join(find_cycle(top) or [])


def test_no_v1_imports_hidden_in_functions() -> None:
    _, inner = import_graph()
    hidden = {
        (module, target)
        for module, targets in inner.items()
        for target in targets
        if not any(target == allowed or target.startswith(allowed + ".") for allowed in LAZY_ALLOWED.get(module, ()))
    }
    assert hidden == set()


def test_the_checker_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_import_v1_loads_no_sdk_or_server_library() -> None:
    """`import v1` stays light: the SDKs, aiohttp, mcp and rich load when first used."""
    probe = "import sys, v1; print(' '.join(m for m in HEAVY if m in sys.modules))"
    heavy = ("openai", "anthropic", "aiohttp", "httpx", "httpx2", "mcp", "rich", "torch", "ray")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {heavy!r}\n{probe}"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
