"""Rubrics: the classic API's reward functions, scored by v1's one scoring path.

A `Rubric` holds reward functions with weights (weight 0: a metric only) and turns each into a
lifecycle `Handler` (`handlers()`), so an environment's rubric functions are its taskset's
rewards and metrics: `Harness` scores them like any `@reward`, and `Rubric.score_rollout` /
`score_group` call the very same `v1.rollout` functions. Arguments are injected by name:
`prompt`, `completion`, `answer`, `state`, `task`, `info`, `trajectory`, `example_id`,
`parser`, the rubric's class objects, or the plurals (`completions`, `states`, ...) for a
group function, which gets the whole group at once, in the group's order.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from v1._util.calling import call_user_code
from v1.classic._messages import typed_messages
from v1.classic._parsers import MaybeThinkParser, Parser, extract_boxed_answer
from v1.classic._types import RewardFunc
from v1.env import HandlerRubric
from v1.errors import ConfigError
from v1.rollout import (
    GROUP_ARGS,
    SINGLE_ARGS,
    Handler,
    State,
    ask_judge,
    judge_question,
)

RUBRIC_ARGS = ("parser",)


class RubricFunction:
    """One reward function of a rubric as a handler's callable: picks its arguments by name.

    Args:
        func: the reward function.
        rubric: the rubric whose parser and class objects it may ask for.
    """

    def __init__(self, func: RewardFunc, rubric: Rubric) -> None:
        if not callable(func):
            raise ConfigError(f"Rubric: a reward function must be callable, got {type(func).__name__}")
        self.func = func
        self.rubric = rubric
        self.__name__ = getattr(func, "__name__", None) or type(func).__name__
        try:
            parameters = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"reward function {self.__name__!r}: cannot read its signature ({exc})") from None
        self.takes_all = any(p.kind is p.VAR_KEYWORD for p in parameters)
        self.params = [p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        self.required = [p.name for p in parameters if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        group, single = [p for p in self.params if p in GROUP_ARGS], [p for p in self.params if p in SINGLE_ARGS]
        if group and single:
            raise ConfigError(
                f"reward function {self.__name__!r} mixes per-rollout {single} and group {group} arguments; use one form"
            )
        self.is_group = bool(group)

    async def __call__(self, **arguments: Any) -> Any:
        available = {**arguments, "parser": self.rubric.parser, **self.rubric.class_objects}
        state = arguments.get("state")
        for field in ("prompt", "completion"):  # the seed's message objects: completion[-1].role, .tool_calls
            if field in available:
                available[field] = typed_messages(available[field])
        for field in ("answer", "info"):  # a classic rollout's own write (state["answer"] = ...) wins
            if isinstance(state, dict) and dict.__contains__(state, field):
                available[field] = dict.__getitem__(state, field)
        missing = [name for name in self.required if name not in available]
        if missing:
            known = sorted(set(GROUP_ARGS if self.is_group else SINGLE_ARGS) | {"parser"} | set(self.rubric.class_objects))
            raise TypeError(f"reward function {self.__name__!r}: can't inject {missing}; available: {', '.join(known)}")
        kwargs = available if self.takes_all else {name: available[name] for name in self.params if name in available}
        return await call_user_code(self.func, **kwargs)


class Rubric:
    """Reward functions with weights; weight 0 makes a function a metric (recorded, not in the reward).

    Args:
        funcs: reward functions (individual or group), sync or async.
        weights: one per function; 1.0 each when omitted.
        parser: what functions asking for `parser` get (a plain `Parser` by default).
    """

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        **kwargs: Any,
    ) -> None:
        funcs = list(funcs or [])
        weights = list(weights) if weights is not None else [1.0] * len(funcs)
        if len(weights) != len(funcs):
            raise ConfigError(f"Rubric: {len(funcs)} functions but {len(weights)} weights; give one weight per function")
        self.parser = parser if parser is not None else Parser()
        self.class_objects: dict[str, Any] = {}
        self.funcs: list[RubricFunction] = []
        self.weights: list[float] = []
        for func, weight in zip(funcs, weights):
            self.add_reward_func(func, weight)
        for name, value in kwargs.items():
            self.add_class_object(name, value)
            setattr(self, name, value)

    def get_reward_func_names(self) -> list[str]:
        """The function names (seed 004's name for `names`)."""
        return self.names()

    def get_reward_funcs(self) -> list[RewardFunc]:
        """The reward functions as given (seed 004)."""
        return [func.func for func in self.all_funcs()]

    def get_reward_weights(self) -> list[float]:
        """One weight per function (seed 004)."""
        return [weight for _, weight in self.weighted_funcs()]

    def all_funcs(self) -> list[RubricFunction]:
        """The wrapped functions, in scoring order."""
        return [func for func, _ in self.weighted_funcs()]

    def weighted_funcs(self) -> list[tuple[RubricFunction, float]]:
        """(function, weight) pairs, in scoring order."""
        return list(zip(self.funcs, self.weights))

    async def call_reward_func(self, func: RewardFunc, **arguments: Any) -> float:
        """Call one reward function with the arguments it asks for (seed 004): `prompt`, `completion`, `answer`, `state`, ..."""
        wrapped = func if isinstance(func, RubricFunction) else RubricFunction(func, self)
        return float(await wrapped(**arguments))

    async def score_rollouts(self, states: list[State]) -> None:
        """Score a group of finished rollouts in place (seed 004's name for `score_group`)."""
        await self.score_group(states)

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        """Add a reward function (weight 0: a metric only).

        Raises:
            ConfigError: a non-callable, a weight that is not a finite number, or a name already used.
        """
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ConfigError(f"Rubric: weight of {getattr(func, '__name__', func)!r} must be a finite number, got {weight!r}")
        wrapped = RubricFunction(func, self)
        if wrapped.__name__ in self.names():
            raise ConfigError(f"Rubric: a function named {wrapped.__name__!r} is already in the rubric; names key the metrics")
        self.funcs.append(wrapped)
        self.weights.append(float(weight))

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        """Add a metric: recorded in `state["metrics"]`, contributing `weight` (0 by default) to the reward."""
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Make `obj` injectable into the reward functions as the argument `name`.

        Raises:
            ConfigError: a name that is not an identifier or shadows an injected argument.
        """
        if not name.isidentifier() or name in SINGLE_ARGS or name in GROUP_ARGS or name in RUBRIC_ARGS:
            raise ConfigError(f"Rubric.add_class_object: {name!r} is not a free argument name")
        self.class_objects[name] = obj

    def names(self) -> list[str]:
        """The rubric's function names (the keys of `state["metrics"]`)."""
        return [func.__name__ for func in self.funcs]

    def handlers(self) -> list[Handler]:
        """Each function as a reward (weight != 0) or metric (weight 0) handler of v1's scoring."""
        return [
            Handler(
                fn=func,
                kind="reward" if weight != 0 else "metric",
                name=func.__name__,
                priority=0,
                weight=weight,
                params=(),
                takes_all=True,
                is_group=func.is_group,
            )
            for func, weight in zip(self.funcs, self.weights)
        ]

    async def score_rollout(
        self,
        state: State | None = None,
        *,
        prompt: Any = None,
        completion: Any = None,
        answer: Any = None,
        info: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Score one finished rollout with the individual functions; returns `{"reward", "metrics"}`.

        Given a v1 `State` alone, its task and completion are scored (and the scores set on it). The
        older keyword form (`score_rollout(prompt=..., completion=..., answer=..., state=...)`, as
        seed 003's trainer calls it) scores that completion on a fresh state for that prompt.
        """
        return await HandlerRubric(self.handlers).score_rollout(
            state, prompt=prompt, completion=completion, answer=answer, info=info
        )

    async def score_group(self, states: list[State]) -> dict[str, Any]:
        """Score a group: individual functions per rollout, then group functions, then advantages.

        Returns `{"reward": [...], "metrics": {name: [...]}}` in the order of `states`.
        """
        return await HandlerRubric(self.handlers).score_group(states)


class RubricGroup(Rubric):
    """Several rubrics scored as one (e.g. an `EnvGroup`'s, or a rubric plus a `ToolRubric`).

    Args:
        rubrics: the rubrics; their function names must differ.
    """

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any) -> None:
        if not rubrics:
            raise ConfigError("RubricGroup needs at least one rubric")
        self.rubrics = list(rubrics)
        super().__init__(parser=self.rubrics[0].parser, **kwargs)
        seen: set[str] = set()
        for rubric in self.rubrics:
            for func in rubric.all_funcs():
                name, index = func.__name__, 2
                while func.__name__ in seen:
                    func.__name__, index = f"{name}_{index}", index + 1
                seen.add(func.__name__)

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        if not hasattr(self, "rubrics"):
            super().add_reward_func(func, weight)
            return
        self.rubrics[0].add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        for rubric in getattr(self, "rubrics", []):
            rubric.add_class_object(name, obj)
        super().add_class_object(name, obj)

    def names(self) -> list[str]:
        return [name for rubric in getattr(self, "rubrics", []) for name in rubric.names()]

    def weighted_funcs(self) -> list[tuple[RubricFunction, float]]:
        return [pair for rubric in getattr(self, "rubrics", []) for pair in rubric.weighted_funcs()]

    def handlers(self) -> list[Handler]:
        return [handler for rubric in self.rubrics for handler in rubric.handlers()]


DEFAULT_JUDGE_PROMPT = """Given a ground truth answer and a response, determine if the response is correct.

Question:
```
{question}
```

Ground truth answer:
```
{answer}
```

Response:
```
{response}
```

Respond either "yes" or "no" only."""


_OLDER_JUDGE_ARGS = {
    "model": "judge_model",
    "judge_models": "judge_model",
    "prompt_template": "judge_prompt",
    "template": "judge_prompt",
    "client": "judge_client",
}
"""Older `JudgeRubric` argument names (seeds 003 and 004) and seed 001's names for them."""


class JudgeRubric(Rubric):
    """LLM-as-judge: reward functions get an awaitable `judge(prompt, completion, answer, state)` returning the judge's text.

    Args:
        parser: picks the response out of the completion for the judge prompt.
        judge_client: an `AsyncOpenAI`-like client, a v1 `Client` or a `ClientConfig`. None: the
            rollout's own model through its endpoint (forwarded after the program, never a turn).
        judge_model: the judge's model (None: the rollout's model; required with a `judge_client`).
        judge_prompt: with ``{question}``, ``{answer}`` and ``{response}`` fields.
        judge_sampling_args: sent with each judge call.
    """

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        judge_client: Any = None,
        judge_model: str | None = None,
        judge_prompt: str = DEFAULT_JUDGE_PROMPT,
        judge_sampling_args: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        for older, newer in _OLDER_JUDGE_ARGS.items():
            if older in kwargs:
                value = kwargs.pop(older)
                if newer == "judge_model":
                    judge_model = judge_model or value
                elif newer == "judge_prompt":
                    judge_prompt = value
                elif newer == "judge_client":
                    judge_client = judge_client or value
        if judge_client is not None and not judge_model:
            raise ConfigError("JudgeRubric: judge_model is required with a judge_client")
        super().__init__(funcs, weights, parser, **kwargs)
        self.judge_client = judge_client
        self.judge_model = judge_model
        self.judge_prompt = judge_prompt
        self.judge_sampling_args = dict(judge_sampling_args or {})
        self.class_objects["judge"] = self.judge

    async def judge(self, prompt: Any, completion: Any, answer: Any, state: State) -> str:
        """The judge's reply for one rollout, kept in ``state["judge_responses"]["judge"]`` (`v1.rollout.ask_judge`)."""
        response = self.parser.parse_answer(completion) or ""
        content = self.judge_prompt.format(question=judge_question(prompt), answer=answer, response=response)
        return await ask_judge(
            state, content, client=self.judge_client, model=self.judge_model, sampling_args=self.judge_sampling_args
        )


class MathRubric(Rubric):
    """Math answers checked by math-verify: `correct_answer` is 1.0 when the parsed answer equals `answer`.

    Args:
        parser: extracts the answer (default: `MaybeThinkParser(extract_boxed_answer)`).

    Raises:
        ConfigError: when math-verify is not installed (``pip install 'v1[tasksets]'``).
    """

    MAX_ANSWER_CHARS = 500

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        **kwargs: Any,
    ) -> None:
        if importlib.util.find_spec("math_verify") is None:
            raise ConfigError("MathRubric needs math-verify: pip install 'v1[tasksets]'")
        strict = functools.partial(extract_boxed_answer, strict=True)
        super().__init__(funcs, weights, parser or MaybeThinkParser(strict), **kwargs)
        self.add_reward_func(self.correct_answer)

    def correct_answer(self, parser: Parser, completion: Any, answer: Any) -> float:
        """1.0 when the completion's answer is mathematically equal to `answer`."""
        from math_verify import parse, verify

        response = parser.parse_answer(completion) or ""
        gold = str(answer if answer is not None else "")
        if not response or len(response) > self.MAX_ANSWER_CHARS:
            return 0.0
        if response.strip() == gold.strip():
            return 1.0

        expected = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)  # type: ignore[arg-type]
        got = parse(f"\\boxed{{{response}}}", parsing_timeout=None)  # type: ignore[arg-type]
        return float(bool(expected and got and verify(expected, got, timeout_seconds=None)))


class ToolRubric(Rubric):
    """Tool-use metrics (weight 0): `total_tool_calls` and `<tool>_calls` for each tool.

    Seed 004's `ToolRubric(tools, weights=[answer, execution, format])` adds three rewards with
    those weights first: `correct_answer` (the parsed answer equals `answer`), `tool_execution`
    (the share of the completion's tool calls that name one of `tools`; 0 without any call) and
    the parser's format reward.

    Args:
        tools: the tools whose calls are counted (functions; their names are used).
        weights: seed 004's three reward weights; None for the metrics only.
        **kwargs: `Rubric`'s other arguments (`parser`, class objects).

    Raises:
        ConfigError: `weights` that are not three numbers.
    """

    def __init__(
        self, tools: Sequence[Callable[..., Any]] | None = None, weights: Sequence[float] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.tool_names = [getattr(tool, "__name__", str(tool)) for tool in tools or []]
        if weights is not None:
            if isinstance(weights, (str, bytes)) or len(list(weights)) != 3:
                raise ConfigError(
                    f"ToolRubric: weights are [correct_answer, tool_execution, format], three numbers; got {weights!r}"
                )
            answer_weight, execution_weight, format_weight = weights
            self.add_reward_func(correct_answer, answer_weight)
            self.add_reward_func(_tool_execution(self.tool_names), execution_weight)
            self.add_reward_func(self.parser.get_format_reward_func(), format_weight)
        self.add_metric(_call_counter("total_tool_calls", None))
        for name in self.tool_names:
            self.add_metric(_call_counter(f"{name}_calls", name))


def correct_answer(completion: Any, answer: Any, parser: Parser) -> float:
    """1.0 when the parser's answer equals the row's `answer` (surrounding whitespace aside)."""
    parsed = parser.parse_answer(completion)
    return float(parsed is not None and str(parsed).strip() == str(answer or "").strip())


def _tool_execution(tool_names: list[str]) -> Callable[..., float]:
    known = set(tool_names)

    def tool_execution(completion: Any) -> float:
        names = [
            call["function"]["name"]
            for message in (completion if isinstance(completion, list) else [])
            if message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
        return sum(1 for name in names if name in known) / len(names) if names else 0.0

    return tool_execution


def _call_counter(metric_name: str, tool_name: str | None) -> Callable[..., float]:
    def count(completion: Any) -> float:
        calls = [
            call
            for message in (completion if isinstance(completion, list) else [])
            if message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
        return float(sum(1 for call in calls if tool_name is None or call["function"]["name"] == tool_name))

    count.__name__ = count.__qualname__ = metric_name
    return count


JudgeFunction = Callable[[Any, Any, Any, State], Awaitable[str]]

__all__ = [
    "DEFAULT_JUDGE_PROMPT",
    "JudgeFunction",
    "JudgeRubric",
    "MathRubric",
    "Rubric",
    "RubricFunction",
    "RubricGroup",
    "ToolRubric",
]
