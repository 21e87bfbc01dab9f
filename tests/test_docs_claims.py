"""The prose of the docs holds: what the README's Status names exists, and no .md file hides control characters."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import v1
from v1.cli._main import build_parser
from v1.clients import CLIENT_TYPES
from v1.config import _config as v1_config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CODE_SPAN = re.compile(r"`([^`]+)`")
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Spans of the Status that name no module, command or field, each with the check that makes it true.
NAMED_ELSEWHERE: dict[str, Callable[[], bool]] = {
    "\\boxed{}": lambda: v1.extract_boxed_answer("so \\boxed{42}") == "42",
    "####": lambda: v1.extract_hash_answer("so #### 42") == "42",
    "torchrun": lambda: importlib.util.find_spec("torch.distributed.run") is not None,
    "openai-agents": lambda: importlib.metadata.distribution("openai-agents") is not None,
    "generateContent": lambda: "generateContent" in (ROOT / "v1" / "interception" / "_gemini.py").read_text(encoding="utf-8"),
    "[distributed]": lambda: "distributed" in (importlib.metadata.metadata("v1").get_all("Provides-Extra") or []),
}


def status_section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("\n## Status\n", 1)[1].split("\n## ", 1)[0]


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subparsers.choices)


def config_fields() -> set[str]:
    models = [value for value in vars(v1_config).values() if isinstance(value, type) and issubclass(value, v1.Config)]
    return {field for model in models for field in model.model_fields}


def resolves(dotted: str) -> bool:
    """Whether `dotted` is an importable module or an attribute of one."""
    module_name, _, attribute = dotted.rpartition(".")
    try:
        importlib.import_module(dotted)
        return True
    except ImportError:
        pass
    try:
        return hasattr(importlib.import_module(module_name), attribute)
    except ImportError:
        return False


def names_something_that_exists(span: str) -> bool:
    """Whether a code span of the Status names a command, module, folder, file, public name, client type or config field."""
    parsers = command_parsers()
    if span.startswith("v1 "):
        return span.split()[1] in parsers
    if span.startswith("python -m "):
        return importlib.util.find_spec(span.split()[2]) is not None
    if span.startswith("--"):
        flag = span.split()[0]
        return any(flag in parser._option_string_actions for parser in parsers.values())
    if span.endswith("/"):
        return (ROOT / span).is_dir()
    if "/" in span:
        return (ROOT / span).is_file()
    if span.startswith("v1."):
        return resolves(span)
    if span in NAMED_ELSEWHERE:
        return NAMED_ELSEWHERE[span]()
    bundled = [ROOT / package / f"{span}.py" for package in ("tasksets", "harnesses", "toolsets")]
    return span in v1.__all__ or span in CLIENT_TYPES or span in config_fields() or any(path.is_file() for path in bundled)


def test_every_name_in_the_readme_status_exists() -> None:
    spans = CODE_SPAN.findall(status_section().replace("\n", " "))
    assert len(spans) > 40, "the Status names its parts in code spans"
    missing = [span for span in spans if not names_something_that_exists(span)]
    assert not missing, f"README Status names what does not exist (or what this test can't resolve): {missing}"


def test_the_status_check_refuses_names_that_do_not_exist() -> None:
    for span in (
        "v1 deploy",
        "python -m v1.nowhere",
        "--no-such-flag",
        "nowhere/",
        "benchmarks/nowhere.sh",
        "v1.nowhere",
        "v1.env._executors.Nowhere",
        "terminux",
        "NoSuchClass",
    ):
        assert not names_something_that_exists(span), span


def test_the_status_lists_nothing_as_unbuilt_that_exists() -> None:
    text = status_section().lower()
    for harness in ("terminus", "rlm", "replay"):
        assert (ROOT / "harnesses" / f"{harness}.py").is_file()
        assert f"`{harness}`" in text
    assert "not yet built" not in text


def markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.split()]


@pytest.mark.parametrize("document", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_control_characters_in_markdown(document: Path) -> None:
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), start=1):
        found = CONTROL_CHARACTER.search(line)
        assert found is None, f"{document.relative_to(ROOT)}:{number}: control character {found.group()!r} in {line!r}"


def test_markdown_files_are_found() -> None:
    assert {README, ROOT / "docs" / "architecture.md"} <= set(markdown_files())
