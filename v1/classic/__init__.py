"""The classic API (seed 001's `Environment` family, Rubrics, Parsers, messages, the Prime plugin) as one
layer on top of the v1 core: a classic environment is a core `Env`, and its rollout a v1 rollout through
the interception endpoint. Nothing in the core imports this package; `v1` re-exports its names.
`CodeMathEnv` and `ReasoningGymEnv` load on first use.
"""

from typing import TYPE_CHECKING

from v1._util.lazy import lazy_attributes
from v1.classic._env_group import EnvGroup
from v1.classic._environment import ClassicTaskset, Environment
from v1.classic._messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from v1.classic._multiturn_env import MultiTurnEnv, SingleTurnEnv
from v1.classic._openenv_env import OpenEnvEnv
from v1.classic._parsers import MaybeThinkParser, Parser, ThinkParser, XMLParser, extract_boxed_answer, extract_hash_answer
from v1.classic._prime_plugin import PRIME_PLUGIN_API_VERSION, PrimeCLIPlugin, get_plugin
from v1.classic._rubric import JudgeRubric, MathRubric, Rubric, RubricGroup, ToolRubric
from v1.classic._sandbox_env import PythonEnv, SandboxEnv
from v1.classic._sandbox_mixin import SandboxMixin
from v1.classic._swe_debug_env import SandboxTaskSet, SWEDebugEnv
from v1.classic._tool_env import StatefulToolEnv, ToolEnv
from v1.classic._types import (
    GenerateInputs,
    GroupRewardFunc,
    IndividualRewardFunc,
    Message,
    ProcessedOutputs,
    RewardFunc,
    RolloutInput,
    RolloutScore,
    RolloutScores,
)
from v1.classic._verifiers_alias import install_verifiers_alias

if TYPE_CHECKING:
    from v1.classic._code_math_env import CodeMathEnv
    from v1.classic._reasoning_gym_env import ReasoningGymEnv

__getattr__ = lazy_attributes(
    __name__, {"CodeMathEnv": "v1.classic._code_math_env", "ReasoningGymEnv": "v1.classic._reasoning_gym_env"}
)

__all__ = [
    "PRIME_PLUGIN_API_VERSION",
    "AssistantMessage",
    "CodeMathEnv",
    "ClassicTaskset",
    "EnvGroup",
    "Environment",
    "GenerateInputs",
    "GroupRewardFunc",
    "IndividualRewardFunc",
    "JudgeRubric",
    "MathRubric",
    "MaybeThinkParser",
    "Message",
    "MultiTurnEnv",
    "OpenEnvEnv",
    "Parser",
    "PrimeCLIPlugin",
    "ProcessedOutputs",
    "PythonEnv",
    "ReasoningGymEnv",
    "RewardFunc",
    "RolloutInput",
    "RolloutScore",
    "RolloutScores",
    "Rubric",
    "RubricGroup",
    "SWEDebugEnv",
    "SandboxEnv",
    "SandboxMixin",
    "SandboxTaskSet",
    "SingleTurnEnv",
    "StatefulToolEnv",
    "SystemMessage",
    "ThinkParser",
    "ToolEnv",
    "ToolMessage",
    "ToolRubric",
    "UserMessage",
    "XMLParser",
    "extract_boxed_answer",
    "extract_hash_answer",
    "get_plugin",
    "install_verifiers_alias",
]
