"""v1's modules depend one way: no import cycle at any level, and packages meet only through their `__init__`.

No cycle at any level and no exemption: imports inside functions count, and so do imports under `if
TYPE_CHECKING:` (what string annotations need), imports of an ancestor package (`from v1 import x` runs
`v1/__init__.py`) and modules named in strings to be imported by name (a ``module:object`` reference such as
a registry default, a module given to `importlib.import_module` or `lazy_attributes`). A function-level import
is allowed when it closes no circle: the CLI loads its torch-heavy packages on use, so `v1 eval` never imports
torch. A private module (any `_` part in its dotted name) is imported only from inside the package that holds it.
v1's own entry points (``pyproject.toml``) each name an object that imports.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys

import tomllib

from tests.tools.import_graph import (
    PACKAGE,
    find_cycle,
    import_graph,
    imported_modules,
    layers,
    module_name,
    package_edges,
    render,
    string_annotation_modules,
    string_reference_modules,
    type_level_cycles,
)

UPSTREAM = "v1.interception._upstream"
CONCEPT_PACKAGES = (
    "config",
    "env",
    "harness",
    "programs",
    "registry",
    "rollout",
    "sandbox",
    "taskset",
    "testing",
    "tools",
    "view",
    "cli",
)
"""Packages whose modules are all private: other packages see only what their `__init__` lists."""
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
LAYERS_BLOCK = re.compile(r"<!-- layers: python -m tests.tools.import_graph -->\n```text\n(.*?)\n```", re.DOTALL)


def everything(type_checking: bool = True) -> dict[str, set[str]]:
    """Every edge: module level, inside functions and (with `type_checking`) annotation-only."""
    top, inner = import_graph(type_checking=type_checking)
    return {module: top[module] | inner[module] for module in top}


def test_no_import_cycles_at_any_level() -> None:
    """Imports inside functions and annotation-only imports (`if TYPE_CHECKING:`, dotted names in string
    annotations) close no circle either; there is no list of allowed ones."""
    edges = everything()
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])
    assert type_level_cycles() == []


def test_packages_depend_one_way() -> None:
    """Collapsed to packages (`rollout/`, `tools/`, ...) the graph has no circle either, so importing a package's
    `__init__` never re-enters it. `__main__` modules are run, never imported: they import what they start."""
    edges = {module: targets for module, targets in everything().items() if not module.endswith(".__main__")}
    collapsed = package_edges(edges)
    assert find_cycle(collapsed) is None, " -> ".join(find_cycle(collapsed) or [])


def owner_of_private(module: str) -> str | None:
    """The package a private module belongs to (`v1.rollout` for `v1.rollout._state`, `v1` for `v1._util.x`)."""
    parts = module.split(".")
    for index, part in enumerate(parts[1:], start=1):
        if part.startswith("_"):
            return ".".join(parts[:index])
    return None


def private_imports(edges: dict[str, set[str]]) -> list[str]:
    """`module -> target` for each import of a private module from outside the package that holds it."""
    found = []
    for module, targets in edges.items():
        for target in targets:
            owner = owner_of_private(target)
            if owner is not None and module != owner and not module.startswith(owner + "."):
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_packages_meet_only_through_their_init() -> None:
    """No module imports another package's private module, at any level: what a package offers is its `__all__`."""
    assert private_imports(everything()) == []


def test_the_private_import_checker_sees_a_reach_inside() -> None:
    edges = {"v1.tools._toolset": {"v1.rollout._state", "v1.rollout", "v1._util.calling", "v1.tools._mcp"}, "v1": {"v1.env._env"}}
    assert private_imports(edges) == ["v1 -> v1.env._env", "v1.tools._toolset -> v1.rollout._state"]


def test_concept_packages_keep_their_modules_private() -> None:
    """Each concept package lists its names in `__init__.__all__`; every module beside it starts with `_`."""
    for name in CONCEPT_PACKAGES:
        folder = PACKAGE / name
        assert (folder / "__init__.py").is_file(), folder
        public = sorted(path.name for path in folder.glob("*.py") if not path.name.startswith("_"))
        assert public == [], f"v1/{name}/ has public modules: {public}"
        assert "__all__" in (folder / "__init__.py").read_text(encoding="utf-8"), f"v1/{name}/__init__.py lists no names"


def test_v1_top_level_holds_a_handful_of_files() -> None:
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py", "errors.py", "types.py"]


def test_the_checker_counts_annotation_only_imports() -> None:
    source = 'def f(x: "v1.harness.Harness") -> "list[v1.rollout.State]":\n    y: "int" = 0\n'
    assert string_annotation_modules(ast.parse(source), {"v1.harness", "v1.rollout"}) == {
        "v1.harness",
        "v1.rollout",
    }
    top, _ = import_graph(type_checking=True)
    plain, _ = import_graph()
    only_for_annotations = top["v1.programs._base_loop"] - plain["v1.programs._base_loop"]
    assert "v1.rollout" in only_for_annotations, "base_loop's TYPE_CHECKING import of RolloutContext"


def test_the_checker_counts_module_names_in_strings() -> None:
    """A ``module:object`` string names its module wherever it is; a plain dotted name only where it is imported
    by name (an entry-point group or a logger named like a package imports nothing)."""
    source = """
import importlib, runpy
from v1._util.lazy import lazy_attributes as _lazy_attributes
DEFAULTS = {"local": "v1.sandbox._local:LocalBackend", "gone": "v1.no_such_module:Thing"}
LAZY = {"Trainer": "v1.train._trainer"}
__getattr__ = _lazy_attributes(__name__, LAZY)
def load():
    importlib.import_module("v1.clients._renderer")
    runpy.run_module("v1.train", run_name="__main__")
GROUP = "v1.interception"
"""
    known = {"v1.sandbox._local", "v1.train._trainer", "v1.clients._renderer", "v1.train", "v1.interception"}
    named, missing = string_reference_modules(ast.parse(source), known)
    assert named == {"v1.sandbox._local", "v1.train._trainer", "v1.clients._renderer", "v1.train"}
    assert missing == {"v1.no_such_module"}
    _, inner = import_graph()
    assert "v1.train._run" in inner["v1.train"], "v1.train's lazy names load their modules"


def test_module_names_in_strings_name_modules_that_exist() -> None:
    """A string reference to a v1 module that is not there would be an edge the graph cannot see."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    missing = {
        module: sorted(string_reference_modules(ast.parse(path.read_text(encoding="utf-8")), set(paths))[1])
        for module, path in paths.items()
    }
    assert {module: names for module, names in missing.items() if names} == {}


def declared_entry_points() -> dict[str, dict[str, str]]:
    """v1's own entry points by group, as ``pyproject.toml`` declares them (its commands as ``console_scripts``)."""
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"console_scripts": project["scripts"], **{group: dict(points) for group, points in project["entry-points"].items()}}


def test_v1s_entry_points_name_objects_that_import() -> None:
    """Each of v1's entry points (its built-in parts, its console script) names a module that imports and an
    object it has: a typo there is a built-in every install lacks."""
    declared = declared_entry_points()
    assert {"v1.clients", "v1.dialects", "v1.sandbox_backends", "v1.harnesses", "v1.tasksets"} <= set(declared)
    broken = []
    for group, points in declared.items():
        for name, reference in points.items():
            module, _, attributes = reference.partition(":")
            try:
                target: object = importlib.import_module(module.strip())
                for attribute in filter(None, attributes.strip().split(".")):
                    target = getattr(target, attribute)
            except (ImportError, AttributeError) as exc:
                broken.append(f"[{group}] {name} = {reference!r}: {type(exc).__name__}: {exc}")
    assert broken == []


OUTSIDE_V1 = ("harnesses", "tasksets", "toolsets")


def test_programs_and_the_state_cannot_reach_the_upstream() -> None:
    """The rule "programs cannot reach the upstream" as a package boundary: nothing a program's code
    imports, at any level and however indirectly, leads to `v1.interception._upstream`."""
    edges = everything()
    starts = [module for module in edges if module.startswith("v1.programs") or module == "v1.rollout._state"]
    reached, stack = set(starts), list(starts)
    while stack:
        for target in edges[stack.pop()] - reached:
            reached.add(target)
            stack.append(target)
    assert UPSTREAM in edges and UPSTREAM not in reached, sorted(reached)
    for folder in OUTSIDE_V1:
        for path in (PACKAGE.parent / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "interception._upstream" not in text and not re.search(
                r"from v1\.interception import[^\n]*\bupstream\b", text
            ), path


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


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"import sys\n{code}\nprint(' '.join(sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_import_v1_loads_its_packages_on_first_use() -> None:
    """`import v1` runs only `v1.errors` and the logging helpers; a name or package namespace of `v1` loads
    its package when first read (`lazy_attributes`), so a command pays for what it uses."""
    assert {module for module in loaded_after("import v1") if module.startswith("v1.")} <= {
        "v1.errors",
        "v1._util",
        "v1._util.gc_tuning",
        "v1._util.lazy",
        "v1._util.logs",
    }
    assert {"v1.env", "v1.env._env", "v1.testing"} <= loaded_after("import v1\nv1.Env\nv1.testing.MockModelServer")


def test_the_cli_parser_loads_no_server_the_commands_start() -> None:
    """`v1 --help` builds every command's parser: the mock model server, the run viewer and aiohttp load only
    when `v1 demo` or `v1 view` runs."""
    loaded = loaded_after("from v1.cli._main import build_parser\nbuild_parser()")
    assert loaded & {"v1.testing", "v1.view", "aiohttp"} == set()


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
        "v1.a": "import v1.classic._rubric\n",
        "v1.b": "from v1 import classic\n",
        "v1.c": "def f():\n    from v1.classic._parsers import Parser\n",
        "v1.d": "from .classic import Environment\n",
        "v1.x.e": "from ..classic._types import RolloutInput\n",
        "v1.f": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from v1.classic import Rubric\n",
        "v1.g": 'def f(x: "v1.classic._rubric.Rubric") -> None: ...\n',
    }
    known = {"v1", "v1.classic", "v1.classic._rubric", "v1.classic._parsers", "v1.classic._types", *forms}
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
