"""Every ```python block in the README and docs/ runs (blocks of one file share a namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_python_examples_run(document: Path) -> None:
    blocks = BLOCK.findall(document.read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": f"docs_{document.stem}"}
    for index, block in enumerate(blocks):
        try:
            exec(compile(block, f"{document.name}[python block {index}]", "exec"), namespace)
        except Exception as exc:
            pytest.fail(f"{document.name}, python block {index} failed: {type(exc).__name__}: {exc}")


def test_documents_have_examples() -> None:
    with_code = [d.name for d in DOCUMENTS if BLOCK.search(d.read_text(encoding="utf-8"))]
    assert {"README.md", "harness.md", "config.md", "testing.md"} <= set(with_code)
