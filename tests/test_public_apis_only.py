"""Project code uses the public API of openai, anthropic, httpx, pydantic and aiohttp only.

A private module or attribute of a library changes without notice; when one is truly needed it is
listed in `ALLOWED` with the reason. Checked on the source (no imports of the project), over the
packages that ship: v1, harnesses, toolsets, tasksets.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import aiohttp.web
import anthropic
import httpx
import httpx2
import openai
import pydantic
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("v1", "harnesses", "toolsets", "tasksets")
LIBRARIES = ("openai", "anthropic", "httpx", "httpx2", "pydantic", "pydantic_core", "aiohttp")
PRIVATE_MODULE_TEXT = re.compile(rf"\b(?:{'|'.join(LIBRARIES)})(?:\.\w+)*\._\w")

# (file, what it touches): why.
ALLOWED = {
    ("v1/config/_config.py", "pydantic._internal._model_construction"): (
        "under TYPE_CHECKING only: a named subclass of pydantic's metaclass keeps Config's positional "
        "__init__ visible to type checkers; nothing runs it"
    ),
}


@functools.cache
def library_private_names() -> frozenset[str]:
    """Private attribute names the libraries' public objects carry (instances and classes), e.g. `_transport`."""
    instances: list[object] = [
        httpx.AsyncClient(),
        httpx2.AsyncClient(),
        openai.AsyncOpenAI(api_key="k"),
        anthropic.AsyncAnthropic(api_key="k"),
    ]
    classes: list[type] = [
        httpx.AsyncHTTPTransport,
        httpx2.AsyncHTTPTransport,
        pydantic.BaseModel,
        aiohttp.ClientSession,
        aiohttp.web.Application,
        aiohttp.web.Request,
        aiohttp.web.StreamResponse,
        aiohttp.web.RequestHandler,  # the endpoint's connections (the connection gate)
        aiohttp.web.Server,
    ]
    names: set[str] = set()
    for instance in instances:
        names.update(vars(instance))
        names.update(dir(instance))
    for cls in classes:
        names.update(dir(cls))
    return frozenset(name for name in names if name.startswith("_") and not name.startswith("__"))


def project_files() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def findings(path: Path, private_names: frozenset[str]) -> Iterator[tuple[int, str]]:
    """(line, what) for every use of a library's private module or attribute in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and PRIVATE_MODULE_TEXT.search(node.module):
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names if PRIVATE_MODULE_TEXT.search(alias.name))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and PRIVATE_MODULE_TEXT.search(node.value):
            yield node.lineno, node.value
        elif isinstance(node, ast.Attribute) and node.attr in private_names:
            receiver = node.value
            if not (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")):
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in private_names:
                yield node.lineno, ast.unparse(node)


def test_no_private_module_or_attribute_of_a_library_in_project_code() -> None:
    private_names = library_private_names()
    found = []
    for path in project_files():
        relative = path.relative_to(ROOT).as_posix()
        found += [f"{relative}:{line}: {what}" for line, what in findings(path, private_names) if (relative, what) not in ALLOWED]
    assert not found, "private API of a library used (use its public API, or list it in ALLOWED with why):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from openai._base_client import get_platform",
        "import anthropic._vendor.httpx_aiohttp",
        "transport = shared._transport",
        "client._platform = platform",
        "pool = self.openai._transport",
        "importlib.util.find_spec('openai._vendor.httpx_aiohttp')",
        "value = getattr(client, '_platform', None)",
    ],
)
def test_the_check_finds_private_uses(tmp_path: Path, source: str) -> None:
    module = tmp_path / "module.py"
    module.write_text(source + "\n", encoding="utf-8")
    assert list(findings(module, library_private_names()))


def test_the_check_lets_project_privates_and_public_apis_pass(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        "self._transport = x\nstate._set_managed('a', 1)\nclient = httpx.AsyncClient(mounts={})\n", encoding="utf-8"
    )
    assert list(findings(module, library_private_names())) == []
