"""docs/config-reference.md is what docs/generate_config_reference.py makes from the config models today."""

from __future__ import annotations

import runpy
from pathlib import Path

import v1.config._config as config

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = runpy.run_path(str(ROOT / "docs" / "generate_config_reference.py"))


def test_the_page_matches_the_models() -> None:
    page = (ROOT / "docs" / "config-reference.md").read_text(encoding="utf-8")
    assert page == GENERATOR["render"](), "the config models changed: run python docs/generate_config_reference.py"


def test_every_config_model_has_a_section() -> None:
    documented = {model for _, model in GENERATOR["SECTIONS"]}
    models = {value for value in vars(config).values() if isinstance(value, type) and issubclass(value, config.Config)}
    models -= {config.Config}
    assert {m for m in models if not m.__name__.startswith("_")} <= documented


def test_a_new_field_is_drift() -> None:
    class Changed(config.SandboxConfig):
        extra_knob: int = 3

    sections = GENERATOR["SECTIONS"]
    original = list(sections)
    try:
        sections[sections.index(("[env.harness.sandbox]", config.SandboxConfig))] = ("[env.harness.sandbox]", Changed)
        assert "| `extra_knob` | int | `3` | |" in GENERATOR["render"]()
    finally:
        sections[:] = original
