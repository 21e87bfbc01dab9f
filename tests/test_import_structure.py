"""v1's modules depend one way: no import cycles, and no v1 imports hidden inside functions.

No cycle at any level: imports under `if TYPE_CHECKING:` (what string annotations need) count
too. The imports allowed inside a function are a CLI command loading its torch-heavy package, so
that `v1 eval` never imports torch, and the deprecated aliases of names that moved up.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

from tests.tools.import_graph import (
    PACKAGE,
    find_cycle,
    import_graph,
    imported_modules,
    layers,
    render,
    string_annotation_modules,
    type_level_cycles,
)

UPSTREAM = "v1.interception.upstream"
DEPRECATED_ALIASES = {"v1.state": {UPSTREAM}, "v1.interception.session": {UPSTREAM}}
"""Module `__getattr__`s that keep names which moved up importable from their old path, with a warning."""
# Each defers torch and transformers until the command (or a tiny model) asks for them: `import v1` and the
# config's validation stay torch-free (tests/train/test_cli.py::test_import_v1_does_not_import_torch).
LAZY_ALLOWED = {
    "v1.cli.serve": {"v1.inference"},
    "v1.cli.train": {"v1.train"},
    "v1.train.config": {"v1.inference.tiny"},
    **DEPRECATED_ALIASES,
}
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
LAYERS_BLOCK = re.compile(r"<!-- layers: python -m tests.tools.import_graph -->\n```text\n(.*?)\n```", re.DOTALL)


def test_no_import_cycles_at_any_level() -> None:
    """Annotation-only imports (`if TYPE_CHECKING:`, dotted names in string annotations) close no circle either."""
    top, _ = import_graph(type_checking=True)
    assert find_cycle(top) is None, " -> ".join(find_cycle(top) or [])
    assert type_level_cycles() == []


def test_the_checker_counts_annotation_only_imports() -> None:
    source = 'def f(x: "v1.harness.Harness") -> "list[v1.state.State]":\n    y: "int" = 0\n'
    assert string_annotation_modules(ast.parse(source), {"v1.harness", "v1.state"}) == {"v1.harness", "v1.state"}
    top, _ = import_graph(type_checking=True)
    plain, _ = import_graph()
    only_for_annotations = top["v1.programs.base_loop"] - plain["v1.programs.base_loop"]
    assert "v1._rollout_context" in only_for_annotations, "base_loop's TYPE_CHECKING import of RolloutContext"


OUTSIDE_V1 = ("harnesses", "tasksets", "toolsets")


def test_programs_and_the_state_cannot_reach_the_upstream() -> None:
    """The rule "programs cannot reach the upstream" as a package boundary: nothing a program's code
    imports, at any level and however indirectly, leads to `v1.interception.upstream`."""
    top, inner = import_graph(type_checking=True)
    edges = {module: top[module] | (inner[module] - DEPRECATED_ALIASES.get(module, set())) for module in top}
    starts = [module for module in top if module.startswith("v1.programs") or module == "v1.state"]
    reached, stack = set(starts), list(starts)
    while stack:
        for target in edges[stack.pop()] - reached:
            reached.add(target)
            stack.append(target)
    assert UPSTREAM in top and UPSTREAM not in reached, sorted(reached)
    for folder in OUTSIDE_V1:
        for path in (PACKAGE.parent / folder).rglob("*.py"):
            assert "interception.upstream" not in path.read_text(encoding="utf-8"), path


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


def test_architecture_md_shows_the_layers_of_the_import_graph() -> None:
    shown = LAYERS_BLOCK.search(ARCHITECTURE.read_text(encoding="utf-8"))
    assert shown is not None, "docs/architecture.md lost its generated layers block"
    assert shown.group(1) == render(), "docs/architecture.md's layers drifted: paste `python -m tests.tools.import_graph`"


def test_layers_put_each_module_above_what_it_imports() -> None:
    assert layers({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"c"}}) == [["c"], ["b", "d"], ["a"]]
    assert layers({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a <-> b"], ["c"]]


def test_import_v1_loads_no_sdk_or_server_library() -> None:
    """`import v1` stays light: the SDKs, aiohttp, mcp and rich load when first used."""
    probe = "import sys, v1; print(' '.join(m for m in HEAVY if m in sys.modules))"
    heavy = ("openai", "anthropic", "aiohttp", "httpx", "httpx2", "mcp", "rich", "torch", "ray")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run([sys.executable, "-c", f"HEAVY = {heavy!r}\n{probe}"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []


CLASSIC = "v1.classic"


def classic_imports(top: dict[str, set[str]], inner: dict[str, set[str]]) -> list[str]:
    """`module -> target` for every import of the classic layer by a module outside it (the package root,
    which re-exports the public names, sits above every layer and is not a module of the core)."""
    return sorted(
        f"{module} -> {target}"
        for edges in (top, inner)
        for module, targets in edges.items()
        for target in targets
        if module != PACKAGE.name
        and not (module == CLASSIC or module.startswith(CLASSIC + "."))
        and (target == CLASSIC or target.startswith(CLASSIC + "."))
    )


def test_nothing_outside_the_classic_layer_imports_it() -> None:
    """The classic API is one layer on top of the core: no core module imports it, at module level, inside a
    function, under `if TYPE_CHECKING:` or in a string annotation (docs/architecture.md, `v1/classic/`)."""
    top, inner = import_graph(type_checking=True)
    assert any(module.startswith(CLASSIC + ".") for module in top), "v1/classic/ is gone"
    assert classic_imports(top, inner) == []


def test_the_classic_import_checker_sees_every_form() -> None:
    forms = {
        "v1.a": "import v1.classic.rubric\n",
        "v1.b": "from v1 import classic\n",
        "v1.c": "def f():\n    from v1.classic.parsers import Parser\n",
        "v1.d": "from .classic import Environment\n",
        "v1.x.e": "from ..classic.types import RolloutInput\n",
        "v1.f": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from v1.classic import Rubric\n",
        "v1.g": 'def f(x: "v1.classic.rubric.Rubric") -> None: ...\n',
    }
    known = {"v1", "v1.classic", "v1.classic.rubric", "v1.classic.parsers", "v1.classic.types", *forms}
    top: dict[str, set[str]] = {module: set() for module in forms}
    inner: dict[str, set[str]] = {module: set() for module in forms}
    for module, source in forms.items():
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                in_function = any(isinstance(parent, ast.FunctionDef) and node in ast.walk(parent) for parent in ast.walk(tree))
                (inner if in_function else top)[module] |= imported_modules(module, node, False, known)
        top[module] |= string_annotation_modules(tree, known)
    assert [line.split(" -> ")[0] for line in classic_imports(top, inner)] == sorted(forms)
