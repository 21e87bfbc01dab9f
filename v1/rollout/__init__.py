"""One rollout: the immutable `Task`, the `State` it fills, the lifecycle hooks (`@reward`, `@stop`, ...),
scoring, the `RolloutContext` a program is lent, and the LLM judge."""

from v1.rollout._bindings import Binding, BindingContext, ObjectScope
from v1.rollout._context import RolloutContext, UserSimulator
from v1.rollout._judge import ask_judge, judge_question, judge_reward
from v1.rollout._lifecycle import (
    GROUP_ARGS,
    LIST_KINDS,
    SINGLE_ARGS,
    Handler,
    Handlers,
    advantage,
    apply_scoring,
    cleanup,
    group_arguments,
    handlers_of,
    metric,
    owned_handlers,
    reward,
    rollout_arguments,
    setup,
    stop,
    teardown,
    update,
)
from v1.rollout._sample_view import print_prompt_completions_sample
from v1.rollout._scoring import score_group, score_rollout
from v1.rollout._state import EndpointAccess, NamedToolset, RolloutRuntime, State
from v1.rollout._task import Task, thaw

__all__ = [
    "Binding",
    "BindingContext",
    "ObjectScope",
    "EndpointAccess",
    "GROUP_ARGS",
    "Handler",
    "Handlers",
    "LIST_KINDS",
    "NamedToolset",
    "RolloutContext",
    "RolloutRuntime",
    "SINGLE_ARGS",
    "State",
    "Task",
    "advantage",
    "apply_scoring",
    "ask_judge",
    "cleanup",
    "group_arguments",
    "handlers_of",
    "judge_question",
    "judge_reward",
    "metric",
    "owned_handlers",
    "print_prompt_completions_sample",
    "reward",
    "rollout_arguments",
    "score_group",
    "score_rollout",
    "setup",
    "stop",
    "teardown",
    "thaw",
    "update",
    "UserSimulator",
]
