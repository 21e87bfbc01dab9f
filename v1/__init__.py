"""v1: LLM evaluation and RL environments as Taskset + Harness, every model call intercepted.

import v1 as vf
"""

import typing as _typing
from importlib import metadata as _metadata

from v1._gc_tuning import batch_gc
from v1._sample_view import print_prompt_completions_sample
from v1.classic import (
    PRIME_PLUGIN_API_VERSION,
    AssistantMessage,
    EnvGroup,
    Environment,
    GroupRewardFunc,
    IndividualRewardFunc,
    JudgeRubric,
    MathRubric,
    MaybeThinkParser,
    MultiTurnEnv,
    OpenEnvEnv,
    Parser,
    PrimeCLIPlugin,
    PythonEnv,
    RewardFunc,
    RolloutInput,
    RolloutScore,
    RolloutScores,
    Rubric,
    RubricGroup,
    SandboxEnv,
    SandboxTaskSet,
    SingleTurnEnv,
    StatefulToolEnv,
    SWEDebugEnv,
    SystemMessage,
    ThinkParser,
    ToolEnv,
    ToolMessage,
    ToolRubric,
    UserMessage,
    XMLParser,
    extract_boxed_answer,
    extract_hash_answer,
    get_plugin,
)
from v1.clients import (
    AnthropicMessagesClient,
    Client,
    OpenAIChatCompletionsClient,
    OpenAIChatCompletionsTokenClient,
    OpenAICompletionsClient,
    OpenAIResponsesClient,
)
from v1.clients.endpoints import Endpoint, Endpoints
from v1.config import (
    ClientConfig,
    Config,
    EndpointClientConfig,
    EnvConfig,
    HarnessConfig,
    MCPToolConfig,
    ProgramConfig,
    SandboxConfig,
    ScoringConfig,
    TasksetConfig,
    ToolsetConfig,
    UserConfig,
    ensure_keys,
)
from v1.env import Env
from v1.errors import (
    ConfigError,
    EndpointError,
    Error,
    InvalidModelResponseError,
    MissingKeyError,
    ModelError,
    ModelRequestError,
    NotSupportedError,
    OverlongPromptError,
    PluginError,
    ProgramError,
    RolloutStopped,
    SandboxError,
    StateFieldError,
    TaskError,
    ToolError,
    UnknownNameError,
)
from v1.eval_config import EvalConfig
from v1.harness import Harness
from v1.judge import judge_reward
from v1.lifecycle import advantage, cleanup, metric, reward, setup, stop, teardown, update
from v1.loading import load_environment, load_example_dataset
from v1.logs import log_level, quiet_verifiers, setup_logging
from v1.mcp import MCPTool
from v1.results import EvalSummary, ResultsWriter
from v1.state import State
from v1.task import Task
from v1.taskset import Taskset
from v1.toolset import Toolset
from v1.types import (
    ChatMessage,
    ClientType,
    GenerateMetadata,
    GenerateOutputs,
    Info,
    Messages,
    MessageType,
    Response,
    ResponseDelta,
    ResponseMessage,
    ResponseTokens,
    RolloutOutput,
    RolloutTiming,
    SamplingArgs,
    TimeSpan,
    TimeSpans,
    TokenUsage,
    Tool,
    ToolCall,
    TrajectoryStep,
    TrajectoryStepTokens,
    Usage,
    VersionInfo,
)
from v1.user import User

try:
    __version__ = _metadata.version("v1")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+local"

__all__ = [
    "AnthropicMessagesClient",
    "AssistantMessage",
    "ChatMessage",
    "Client",
    "ClientConfig",
    "ClientType",
    "CodeMathEnv",
    "Config",
    "ConfigError",
    "Endpoint",
    "EndpointClientConfig",
    "EndpointError",
    "Endpoints",
    "Env",
    "EnvConfig",
    "EnvGroup",
    "Environment",
    "Error",
    "EvalConfig",
    "EvalSummary",
    "GenerateMetadata",
    "GenerateOutputs",
    "GroupRewardFunc",
    "Harness",
    "HarnessConfig",
    "IndividualRewardFunc",
    "Info",
    "InvalidModelResponseError",
    "JudgeRubric",
    "MCPTool",
    "MCPToolConfig",
    "MathRubric",
    "MaybeThinkParser",
    "MessageType",
    "Messages",
    "MissingKeyError",
    "ModelError",
    "ModelRequestError",
    "MultiTurnEnv",
    "NeMoRLChatCompletionsClient",
    "NotSupportedError",
    "OpenAIChatCompletionsClient",
    "OpenAIChatCompletionsTokenClient",
    "OpenAICompletionsClient",
    "OpenAIResponsesClient",
    "OpenEnvEnv",
    "OverlongPromptError",
    "PRIME_PLUGIN_API_VERSION",
    "Parser",
    "PluginError",
    "PrimeCLIPlugin",
    "ProgramConfig",
    "ProgramError",
    "PythonEnv",
    "ReasoningGymEnv",
    "RendererClient",
    "Response",
    "ResponseDelta",
    "ResponseMessage",
    "ResponseTokens",
    "ResultsWriter",
    "RewardFunc",
    "RolloutInput",
    "RolloutOutput",
    "RolloutScore",
    "RolloutScores",
    "RolloutStopped",
    "RolloutTiming",
    "Rubric",
    "RubricGroup",
    "SWEDebugEnv",
    "SamplingArgs",
    "SandboxConfig",
    "SandboxEnv",
    "SandboxError",
    "SandboxTaskSet",
    "ScoringConfig",
    "SingleTurnEnv",
    "State",
    "StateFieldError",
    "StatefulToolEnv",
    "SystemMessage",
    "Task",
    "TaskError",
    "Taskset",
    "TasksetConfig",
    "ThinkParser",
    "TimeSpan",
    "TimeSpans",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolError",
    "ToolMessage",
    "ToolRubric",
    "Toolset",
    "ToolsetConfig",
    "TrajectoryStep",
    "TrajectoryStepTokens",
    "UnknownNameError",
    "Usage",
    "User",
    "UserConfig",
    "UserMessage",
    "VersionInfo",
    "XMLParser",
    "__version__",
    "advantage",
    "batch_gc",
    "cleanup",
    "ensure_keys",
    "extract_boxed_answer",
    "extract_hash_answer",
    "get_plugin",
    "install_verifiers_alias",
    "judge_reward",
    "load_environment",
    "load_example_dataset",
    "log_level",
    "metric",
    "print_prompt_completions_sample",
    "quiet_verifiers",
    "reward",
    "setup",
    "setup_logging",
    "stop",
    "teardown",
    "update",
]

if _typing.TYPE_CHECKING:
    from v1.classic.verifiers_alias import install_verifiers_alias

_LAZY = {
    "CodeMathEnv": "v1.classic.code_math_env",
    "ReasoningGymEnv": "v1.classic.reasoning_gym_env",
    "RendererClient": "v1.clients.renderer",
    "NeMoRLChatCompletionsClient": "v1.clients.nemorl_chat_completions",
    "install_verifiers_alias": "v1.classic.verifiers_alias",
}


def __getattr__(name: str) -> object:
    """Clients whose modules are slow to import load on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'v1' has no attribute {name!r}")
