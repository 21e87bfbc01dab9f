"""The public surface of `v1`: a rename or removal must be a decision, not an accident."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

import v1
from tests.tools.patience import HANG_S

EXPECTED = {
    "install_verifiers_alias",
    "RLConfig",
    "RLTrainer",
    "TrainerCallback",
    "ReasoningGymEnv",
    "CodeMathEnv",
    "Endpoint",
    "Endpoints",
    "MessageType",
    "VersionInfo",
    "RendererClient",
    "NeMoRLChatCompletionsClient",
    "MissingKeyError",
    "MaybeThinkParser",
    "Parser",
    "ThinkParser",
    "XMLParser",
    "extract_boxed_answer",
    "extract_hash_answer",
    "ensure_keys",
    "judge_reward",
    "answer_gold",
    "load_example_dataset",
    "print_prompt_completions_sample",
    "Env",
    "EnvGroup",
    "EvalSummary",
    "ResultsWriter",
    "ScoringConfig",
    "load_environment",
    "Client",
    "ClientConfig",
    "Config",
    "ConfigError",
    "EndpointClientConfig",
    "EndpointError",
    "EnvConfig",
    "Error",
    "GenerateMetadata",
    "GenerateOutputs",
    "BestOfN",
    "Episode",
    "EpisodeConfig",
    "EpisodeHarness",
    "Harness",
    "JudgeControl",
    "Role",
    "RoleConfig",
    "UserControl",
    "HarnessConfig",
    "InvalidModelResponseError",
    "MCPTool",
    "MCPToolConfig",
    "Messages",
    "ModelError",
    "ModelRequestError",
    "NotSupportedError",
    "AnthropicMessagesClient",
    "OpenAIChatCompletionsClient",
    "OpenAIChatCompletionsTokenClient",
    "OpenAICompletionsClient",
    "OpenAIResponsesClient",
    "OverlongPromptError",
    "ProgramConfig",
    "ProgramError",
    "Response",
    "ResponseDelta",
    "ResponseMessage",
    "ResponseTokens",
    "RolloutOutput",
    "RolloutStopped",
    "RolloutTiming",
    "SandboxConfig",
    "SandboxError",
    "State",
    "StateFieldError",
    "Task",
    "TaskError",
    "Taskset",
    "TasksetConfig",
    "TimeSpan",
    "TimeSpans",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolError",
    "Toolset",
    "ToolsetConfig",
    "TrajectoryStep",
    "TrajectoryStepTokens",
    "Usage",
    "User",
    "UserConfig",
    "__version__",
    "advantage",
    "batch_gc",
    "cleanup",
    "metric",
    "reward",
    "setup",
    "stop",
    "teardown",
    "update",
    "Environment",
    "SingleTurnEnv",
    "MultiTurnEnv",
    "ToolEnv",
    "StatefulToolEnv",
    "Rubric",
    "JudgeRubric",
    "MathRubric",
    "RubricGroup",
    "ToolRubric",
    "SandboxEnv",
    "PythonEnv",
    "SWEDebugEnv",
    "SandboxTaskSet",
    "OpenEnvEnv",
    "AssistantMessage",
    "ChatMessage",
    "ClientType",
    "EvalConfig",
    "GenerateInputs",
    "GroupRewardFunc",
    "Info",
    "IndividualRewardFunc",
    "PRIME_PLUGIN_API_VERSION",
    "PrimeCLIPlugin",
    "Message",
    "ProcessedOutputs",
    "RewardFunc",
    "RolloutInput",
    "RolloutScore",
    "RolloutScores",
    "SamplingArgs",
    "SystemMessage",
    "ToolMessage",
    "UserMessage",
    "get_plugin",
    "log_level",
    "quiet_verifiers",
    "setup_logging",
    "PluginError",
    "UnknownNameError",
}

ERRORS = [
    "ConfigError",
    "EndpointError",
    "InvalidModelResponseError",
    "ModelError",
    "NotSupportedError",
    "OverlongPromptError",
    "ProgramError",
    "RolloutStopped",
    "SandboxError",
    "StateFieldError",
    "TaskError",
    "ToolError",
]


# The package namespaces and leaf modules: they appear in vars(v1) once imported. Every other module is internal (`_name`).
SUBMODULES = {
    "classic",
    "cli",
    "clients",
    "config",
    "env",
    "errors",
    "harness",
    "inference",
    "interception",
    "programs",
    "registry",
    "rollout",
    "sandbox",
    "taskset",
    "testing",
    "tools",
    "train",
    "types",
    "view",
}


def test_all_is_exactly_the_expected_set():
    assert set(v1.__all__) == EXPECTED
    assert len(v1.__all__) == len(EXPECTED), "v1.__all__ has duplicates"


def test_all_is_sorted_and_nothing_leaks_beside_it():
    """Built from vars(v1), like httpx's test: a name that leaks into the package by accident fails."""
    assert v1.__all__ == sorted(v1.__all__)
    public = {name for name, value in vars(v1).items() if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert public == set(v1.__all__) - {"__version__"} - set(v1._LAZY)
    modules = {name for name, value in vars(v1).items() if not name.startswith("_") and isinstance(value, types.ModuleType)}
    assert modules <= SUBMODULES, f"unexpected module names in v1: {sorted(modules - SUBMODULES)}"


def test_every_module_is_public_by_the_list_or_named_internal():
    """A new module is either added to SUBMODULES on purpose or named `_name`."""
    package = Path(v1.__file__).parent
    names = {path.stem for path in package.glob("*.py")} | {path.parent.name for path in package.glob("*/__init__.py")}
    public = {name for name in names if not name.startswith("_")}
    assert public == SUBMODULES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_is_importable(name):
    module = importlib.import_module("v1")
    assert getattr(module, name) is not None
    namespace: dict = {}
    exec(f"from v1 import {name}", namespace)
    assert namespace[name] is getattr(v1, name)


def test_star_import_gives_exactly_all():
    namespace: dict = {}
    exec("from v1 import *", namespace)
    assert set(namespace) - {"__builtins__"} == EXPECTED


@pytest.mark.parametrize("name", ERRORS)
def test_every_exported_error_is_a_v1_error(name):
    assert issubclass(getattr(v1, name), v1.Error)


def test_error_hierarchy():
    assert issubclass(v1.Error, Exception)
    assert issubclass(v1.ConfigError, ValueError)
    assert issubclass(v1.TaskError, ValueError)
    assert issubclass(v1.StateFieldError, KeyError)
    assert issubclass(v1.NotSupportedError, v1.ConfigError)
    assert issubclass(v1.InvalidModelResponseError, v1.ModelError)
    assert issubclass(v1.OverlongPromptError, v1.ModelError)
    assert issubclass(v1.ModelRequestError, v1.ModelError)


def test_rollout_stopped_carries_its_condition():
    error = v1.RolloutStopped("max_turns_reached")
    assert error.condition == "max_turns_reached"
    assert str(error) == "rollout stopped: max_turns_reached"
    assert str(v1.RolloutStopped("x", "custom")) == "custom"


def test_version_is_a_string():
    assert isinstance(v1.__version__, str) and v1.__version__


# -- the rule for every module (docs/architecture.md, "Public surface") -------------------------------------------

# Imports every module of v1 in a process of its own (some load torch), and reports what each exports.
SURFACE_REPORT = r"""
import importlib, inspect, json, pkgutil, sys, warnings
import v1

warnings.simplefilter("ignore", DeprecationWarning)
report = {}
for info in [pkgutil.ModuleInfo(None, "v1", True), *pkgutil.walk_packages(v1.__path__, "v1.")]:
    module = importlib.import_module(info.name)
    exported = getattr(module, "__all__", None)
    homes = {}
    for name in exported or []:
        value = getattr(module, name, None)
        if inspect.isclass(value) or inspect.isfunction(value):
            homes[name] = value.__module__
    report[info.name] = {"package": info.ispkg, "all": exported, "missing": [n for n in exported or [] if not hasattr(module, n)], "homes": homes}
json.dump(report, sys.stdout)
"""


def is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


@pytest.fixture(scope="module")
def surface() -> dict[str, dict[str, Any]]:
    """Every public module of v1 (no `_` part in its dotted path) and what it exports."""
    root = Path(v1.__file__).parent.parent
    done = subprocess.run([sys.executable, "-c", SURFACE_REPORT], capture_output=True, text=True, cwd=root, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return {name: entry for name, entry in report.items() if not is_private(name)}


def test_every_public_module_declares_all(surface: dict[str, dict[str, Any]]) -> None:
    assert len(surface) >= 15
    assert sorted(name for name, entry in surface.items() if entry["all"] is None) == []


def test_every_exported_name_exists_once_and_is_public(surface: dict[str, dict[str, Any]]) -> None:
    problems = {}
    for module, entry in surface.items():
        exported = entry["all"]
        duplicates = sorted({name for name in exported if exported.count(name) > 1})
        underscored = [name for name in exported if name.startswith("_") and name != "__version__"]
        if entry["missing"] or duplicates or underscored:
            problems[module] = {"missing": entry["missing"], "duplicates": duplicates, "underscored": underscored}
    assert problems == {}


def test_a_public_name_has_one_public_home(surface: dict[str, dict[str, Any]]) -> None:
    """A public module exports what it defines, or re-exports implementation from a `_` module; a package's
    `__init__` may gather its own submodules' names. Re-exporting another public module's name is a second home."""
    second_homes = []
    for module, entry in surface.items():
        if module == "v1":
            continue
        for name, home in entry["homes"].items():
            own = home == module or (entry["package"] and home.startswith(module + "."))
            if not own and home.startswith("v1") and not is_private(home):
                second_homes.append(f"{module}.{name} (defined in {home})")
    assert second_homes == []


def imported_v1_names(source: str) -> list[tuple[int, str, str | None]]:
    """(line, module, name) for each `from v1... import name` and `import v1...` in `source`."""
    found: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "v1" and node.level == 0:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "v1"]
    return found


def shipped_sources() -> list[tuple[str, str]]:
    """What users copy or run: tasksets, harnesses and toolsets, and the Python blocks of README and docs."""
    root = Path(v1.__file__).parent.parent
    sources = [
        (str(path.relative_to(root)), path.read_text())
        for folder in ("tasksets", "harnesses", "toolsets")
        for path in (root / folder).rglob("*.py")
    ]
    for document in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for index, block in enumerate(re.findall(r"```python\n(.*?)```", document.read_text(), re.DOTALL)):
            sources.append((f"{document.name}[python block {index}]", block))
    return sources


def test_shipped_code_imports_only_public_names(surface: dict[str, dict[str, Any]]) -> None:
    private = []
    for where, source in shipped_sources():
        for line, module, name in imported_v1_names(source):
            public = not is_private(module) and module in surface
            if public and name is not None:
                public = name in surface[module]["all"] or f"{module}.{name}" in surface
            if not public:
                private.append(f"{where}:{line}: {module}{'' if name is None else ':' + name}")
    assert len(shipped_sources()) > 50
    assert private == []


def test_the_import_checker_sees_private_imports() -> None:
    source = "import v1\nimport v1.env._scheduling\nfrom v1.interception._server import MAX_CALLS_IN_FLIGHT\nfrom . import x\n"
    assert imported_v1_names(source) == [
        (1, "v1", None),
        (2, "v1.env._scheduling", None),
        (3, "v1.interception._server", "MAX_CALLS_IN_FLIGHT"),
    ]


def test_the_public_surface_is_v1_its_leaf_modules_and_the_package_namespaces(surface: dict[str, dict[str, Any]]) -> None:
    """What a user can import: `v1`, `v1.errors`, `v1.types` and each package's `__init__`, no module beside them.
    Counted: the public modules and the names their `__all__` lists."""
    closed = {f"v1.{name}" for name in SUBMODULES} | {"v1"}
    beyond = sorted(name for name in surface if name not in closed)
    assert beyond == []
    names = sum(len(entry["all"]) for entry in surface.values())
    # Before the packages (d6fccb4): 150 public modules, 1091 names; after issue 37's first pass: 103 modules, 898
    # names; with classic/, clients/, inference/, interception/ and train/ closed too: 20 modules, 504 names;
    # stream tasksets (issue 44) added v1.taskset's RowSource and content_key: 506;
    # validate and rescore: answer_gold (v1, v1.taskset) and seven names of v1.env;
    # the Python trainer (RLTrainer, RLConfig, TrainerCallback);
    # per-rank checkpoints: `v1.train.export_checkpoint` (behind `v1 train export`) and `v1.inference.SafetensorsWriter`
    # (the streamed file the weight syncs and the checkpoints write);
    # checks before any rank loads weights: `v1.train.check_before_loading`, `v1.inference.check_vllm_start`: 523;
    # sandbox network policies (issue 46): `v1.config.NetworkPolicy`, `v1.sandbox.network_tally`,
    # `v1.programs.narrow_child_sandbox`: 525;
    # episodes of roles (issue 46): `EpisodeHarness`, `Episode`, `Role` (v1, v1.harness) and their configs
    # `EpisodeConfig`, `RoleConfig`, `JudgeControl`, `BestOfN`, `UserControl` (v1, v1.config): 541;
    # seed 004's type names `GenerateInputs`, `ProcessedOutputs`, `Message` (v1, v1.classic): 547;
    # `v1.env.EnvState` (the seed's reads of a rollout's handles): 548; `HandlerRubric` moved from
    # v1.classic to v1.env, `v1.env.set_rubric_view` (an import-time hook) dropped: 547; `v1.train` lists the
    # trainer's `RLTrainer`, `RLConfig`, `TrainerCallback` (v1's lazy names load them from there, not a private module): 550;
    # `v1.clients.tls_context` (one TLS context a process for every pool the endpoint and the clients build): 551;
    # `v1.env.PassRates` (pass@k kept per rollout, shared by the eval summary and `v1 view`): 552.
    assert len(surface) <= 20 and names <= 552, f"the surface grew back: {len(surface)} modules, {names} names"


def test_importing_v1_warns_about_nothing_of_its_own() -> None:
    check = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import v1\n"
        "print([str(w.message) for w in caught if 'is deprecated and will be removed' in str(w.message)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=HANG_S, cwd=Path(v1.__file__).parent.parent
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
