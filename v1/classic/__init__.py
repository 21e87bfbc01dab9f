"""The classic API (seed 001's `Environment` family, Rubrics, Parsers, messages, the Prime plugin) as one
layer on top of the v1 core: a classic environment is a core `Env`, and its rollout a v1 rollout through
the interception endpoint. Nothing in the core imports this package; `v1` re-exports its names.
"""

from v1.classic.env_group import EnvGroup
from v1.classic.environment import ClassicTaskset, Environment
from v1.classic.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from v1.classic.multiturn_env import MultiTurnEnv, SingleTurnEnv
from v1.classic.openenv_env import OpenEnvEnv
from v1.classic.parsers import MaybeThinkParser, Parser, ThinkParser, XMLParser, extract_boxed_answer, extract_hash_answer
from v1.classic.prime_plugin import PRIME_PLUGIN_API_VERSION, PrimeCLIPlugin, get_plugin
from v1.classic.rubric import HandlerRubric, JudgeRubric, MathRubric, Rubric, RubricGroup, ToolRubric
from v1.classic.sandbox_env import PythonEnv, SandboxEnv
from v1.classic.sandbox_mixin import SandboxMixin
from v1.classic.swe_debug_env import SandboxTaskSet, SWEDebugEnv
from v1.classic.tool_env import StatefulToolEnv, ToolEnv
from v1.classic.types import GroupRewardFunc, IndividualRewardFunc, RewardFunc, RolloutInput, RolloutScore, RolloutScores

__all__ = [
    "PRIME_PLUGIN_API_VERSION",
    "AssistantMessage",
    "ClassicTaskset",
    "EnvGroup",
    "Environment",
    "GroupRewardFunc",
    "HandlerRubric",
    "IndividualRewardFunc",
    "JudgeRubric",
    "MathRubric",
    "MaybeThinkParser",
    "MultiTurnEnv",
    "OpenEnvEnv",
    "Parser",
    "PrimeCLIPlugin",
    "PythonEnv",
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
]
