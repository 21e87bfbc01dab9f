"""The Prime CLI plugin names real command modules: ``python -m MODULE --help`` works for each."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

import v1 as vf
from tests.tools.patience import HANG_S
from v1.config._config import read_toml

ROOT = Path(__file__).resolve().parent.parent


def test_plugin_contract_fields_and_defaults() -> None:
    plugin = vf.get_plugin()
    assert isinstance(plugin, vf.PrimeCLIPlugin) and plugin.api_version == vf.PRIME_PLUGIN_API_VERSION == 1
    names = [field.name for field in dataclasses.fields(plugin)]
    assert names == ["api_version", "eval_module", "gepa_module", "install_module", "init_module", "setup_module", "build_module"]
    assert plugin.modules() == ["v1.cli._eval", "v1.cli._init"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plugin.eval_module = "os"  # type: ignore[misc]


@pytest.mark.parametrize("module", vf.get_plugin().modules())
def test_each_named_module_runs_with_help(module: str) -> None:
    command = vf.get_plugin().build_module_command(module, ["--help"])
    assert command == [sys.executable, "-m", module, "--help"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=HANG_S, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ")


def test_build_module_command_refuses_modules_it_does_not_name_and_bad_args() -> None:
    plugin = vf.get_plugin()
    for module in ("os", "v1.cli._train", "", "v1.cli._eval; rm -rf /"):
        with pytest.raises(ValueError, match="is not one of its modules"):
            plugin.build_module_command(module)
    with pytest.raises(ValueError, match="is not one of its modules"):
        plugin.build_module_command(None)  # type: ignore[arg-type]
    for args in ("--help", [1], [None]):
        with pytest.raises(ValueError, match="args must be a sequence of strings"):
            plugin.build_module_command("v1.cli._eval", args)  # type: ignore[arg-type]
    assert plugin.build_module_command("v1.cli._eval")[-1] == "v1.cli._eval"


def test_vf_eval_console_script_points_at_the_standalone_eval() -> None:
    scripts = read_toml(ROOT / "pyproject.toml")["project"]["scripts"]
    module, _, name = scripts["vf-eval"].partition(":")
    assert getattr(import_module(module), name) is import_module("v1.cli._eval").main
