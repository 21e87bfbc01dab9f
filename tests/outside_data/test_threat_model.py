"""docs/sandbox.md's outside-data threat model names a test module for every source, and each exists.

The table is the list; this test walks it: every source the design names (task rows, run folders,
checkpoints, dependency strings, tool-call arguments, MCP and HTTP bodies, result files, env vars
from rows, upstream answers) has a row, every row names test modules in `tests/outside_data/` that exist, and every
module there is named by some row.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SECTION = "## Threat model: outside data"
SOURCES = (
    "task rows",
    "env vars from rows",
    "dependency strings",
    "run folders",
    "checkpoints",
    "tool-call arguments",
    "MCP and HTTP bodies",
    "result files",
    "upstream answers",
)
TEST_PATH = re.compile(r"`(tests/outside_data/test_\w+\.py)`")


def threat_table() -> dict[str, list[str]]:
    """The table's rows: source -> the test modules its last column names."""
    text = (ROOT / "docs" / "sandbox.md").read_text()
    assert SECTION in text, f"docs/sandbox.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # after the header and its rule
    table: dict[str, list[str]] = {}
    for line in rows:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"a row of the table needs source | may change | never | test: {line}"
        assert cells[1] and cells[2], f"{cells[0]}: says neither what it may change nor what it never may"
        table[cells[0]] = TEST_PATH.findall(cells[3])
    return table


def test_every_source_of_outside_data_has_a_row() -> None:
    table = threat_table()
    missing = [source for source in SOURCES if not any(row.startswith(source) for row in table)]
    assert missing == []


def test_every_row_names_a_test_module_that_exists() -> None:
    table = threat_table()
    unnamed = [source for source, paths in table.items() if not paths]
    assert unnamed == []
    absent = sorted({path for paths in table.values() for path in paths if not (ROOT / path).is_file()})
    assert absent == [], f"the threat model names test modules that don't exist: {absent}"


def test_every_module_here_is_named_by_the_table() -> None:
    named = {Path(path).name for paths in threat_table().values() for path in paths}
    here = {path.name for path in HERE.glob("test_*.py")} - {Path(__file__).name}
    assert here - named == set()
