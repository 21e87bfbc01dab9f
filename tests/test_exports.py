"""The public surface of `v1`: a rename or removal must be a decision, not an accident."""

from __future__ import annotations

import importlib
import types
from pathlib import Path

import pytest

import v1

EXPECTED = {
    "MissingKeyError",
    "MaybeThinkParser",
    "Parser",
    "ThinkParser",
    "XMLParser",
    "extract_boxed_answer",
    "extract_hash_answer",
    "ensure_keys",
    "judge_reward",
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
    "Harness",
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
    "GroupRewardFunc",
    "Info",
    "IndividualRewardFunc",
    "PRIME_PLUGIN_API_VERSION",
    "PrimeCLIPlugin",
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


# Public submodules: they appear in vars(v1) once imported. Every other module is named as internal (`_name`).
SUBMODULES = {
    "cli",
    "clients",
    "config",
    "env",
    "env_group",
    "errors",
    "executors",
    "harness",
    "inference",
    "interception",
    "judge",
    "lifecycle",
    "parsers",
    "sample_view",
    "loading",
    "mcp",
    "programs",
    "results",
    "sandbox",
    "state",
    "task",
    "taskset",
    "testing",
    "toolset",
    "train",
    "types",
    "user",
    "view",
    "multiturn_env",
    "rubric",
    "tool_env",
    "sandbox_env",
    "sandbox_mixin",
    "swe_debug_env",
    "openenv_env",
    "eval_config",
    "logs",
    "messages",
    "prime_plugin",
    "registry",
}


def test_all_is_exactly_the_expected_set():
    assert set(v1.__all__) == EXPECTED
    assert len(v1.__all__) == len(EXPECTED), "v1.__all__ has duplicates"


def test_all_is_sorted_and_nothing_leaks_beside_it():
    """Built from vars(v1), like httpx's test: a name that leaks into the package by accident fails."""
    assert v1.__all__ == sorted(v1.__all__)
    public = {name for name, value in vars(v1).items() if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert public == set(v1.__all__) - {"__version__"}
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
