"""`Environment`: the seed's classic base, a taskset/harness pair built from a dataset, a rubric and a loop.

It is a core `Env` underneath (eval, training workers, results, resume, Ray): the dataset becomes a
`ClassicTaskset` whose handlers are the rubric's functions and the environment's decorated methods,
and the loop (`rollout_program`, implemented by `MultiTurnEnv`) is the harness's program, so every
model call goes through the interception endpoint. A core `Env` counts as an `Environment` too
(`isinstance(env, vf.Environment)`, as the seed's `class Env(vf.Environment)` says).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping
from typing import Any

from v1._util.calling import resize_pool
from v1.classic._classic_state import RolloutState, classic_view
from v1.classic._parsers import Parser
from v1.classic._rubric import Rubric, RubricGroup
from v1.classic._seed_forms import built_once, is_dataset_builder, set_free_attributes
from v1.env import MESSAGE_TYPES, Env
from v1.errors import ConfigError, TaskError
from v1.harness import Harness
from v1.interception import upstream
from v1.rollout import Handler, State, Task, handlers_of
from v1.taskset import Taskset
from v1.types import GenerateOutputs, SamplingArgs

_RUNNING: contextvars.ContextVar[State | None] = contextvars.ContextVar("classic_running_state", default=None)
"""The state of the rollout whose program is a subclass's own `rollout`, until its `init_state` takes it."""
_IN_OWN_ROLLOUT: contextvars.ContextVar[bool] = contextvars.ContextVar("classic_in_own_rollout", default=False)


class ClassicTaskset(Taskset):
    """The taskset of a classic environment: its rows, plus the environment's decorated methods and
    rubric functions as handlers (collected by the harness on first use, and again after `add_rubric`)."""

    def __init__(self, env: Environment, **kwargs: Any) -> None:
        self.env = env
        super().__init__(**kwargs)

    @property
    def handlers(self) -> list[Handler]:
        return super().handlers + self.env.classic_handlers()


class Environment(Env, metaclass=ABCMeta):
    """The seed's abstract environment, base of the classic family (`SingleTurnEnv`, `MultiTurnEnv`,
    `ToolEnv`, ...) built with this constructor; a core `Env(taskset, harness)` counts as one too.

    A classic environment is a core `Env` underneath, a taskset/harness pair: its dataset becomes a `Taskset` whose rewards and metrics are
    the rubric's functions and whose stop/cleanup/teardown handlers are the environment's
    decorated methods, and its rollout loop is the `Harness`'s program, so every model call
    goes through the interception endpoint. `vf.Environment` itself can't be instantiated.

    Args:
        dataset, eval_dataset: rows (a `datasets.Dataset` or mappings) with a `prompt` or a
            `question` column (and optionally `answer`, `info`, `example_id`).
        system_prompt: the system prompt of every rollout.
        few_shot: messages put before each `question`.
        parser: the parser the rubric's functions get (a plain `Parser` by default).
        rubric: the reward functions (an empty `Rubric` by default).
        sampling_args: the harness's sampling args.
        message_type: ``"chat"`` (messages) or ``"completion"`` (a text prompt, the completions API).
        max_workers: threads for sync user code (tools, rewards): `set_concurrency` scales them.
        env_id, env_args: the name results are saved under, and how the env was configured.
        max_seq_len: the context limit (a turn that reaches it stops with `prompt_too_long`).
        score_rollouts: whether rollouts are scored.
        pass_threshold: the reward at which a rollout counts as passed for pass@k.
        **kwargs: attributes set on the environment (as `set_kwargs` does).
    """

    def __init__(
        self,
        dataset: Any = None,
        eval_dataset: Any = None,
        system_prompt: str | None = None,
        few_shot: list[dict[str, Any]] | None = None,
        parser: Parser | None = None,
        rubric: Rubric | None = None,
        sampling_args: SamplingArgs | None = None,
        message_type: str = "chat",
        max_workers: int = 512,
        env_id: str | None = None,
        env_args: Mapping[str, Any] | None = None,
        max_seq_len: int | None = None,
        score_rollouts: bool = True,
        pass_threshold: float = 0.5,
        **kwargs: Any,
    ) -> None:
        if message_type not in MESSAGE_TYPES:
            raise ConfigError(f"{type(self).__name__}: message_type must be one of {MESSAGE_TYPES}, got {message_type!r}")
        self.message_type = message_type
        self.few_shot = [dict(message) for message in few_shot or []]
        self.parser = parser if parser is not None else (rubric.parser if rubric is not None else Parser())
        self.rubric = rubric if rubric is not None else Rubric(parser=self.parser)
        self.max_workers = max_workers
        name = env_id or type(self).__name__
        taskset = ClassicTaskset(
            self,
            source=self.classic_rows(dataset, "dataset"),
            eval_source=self.classic_rows(eval_dataset, "eval_dataset"),
            taskset_id=name,
            system_prompt=system_prompt,
        )
        harness = Harness(
            program=self.rollout_program,
            sampling_args=sampling_args,
            max_seq_len=max_seq_len,
            **self.harness_options(),
        )
        self.bind_pair(taskset, harness, env_id=name, env_args=env_args or {}, pass_threshold=pass_threshold)
        self.set_score_rollouts(score_rollouts)
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ConfigError(f"{type(self).__name__}: max_workers must be a positive integer, got {max_workers!r}")
        resize_pool("user", max_workers)
        self.set_kwargs(**kwargs)

    def harness_options(self) -> dict[str, Any]:
        """Harness settings of a classic subclass (`max_turns`, `timeout_seconds`); none here."""
        return {}

    async def rollout_program(self, task: Task, state: State) -> None:
        """The program a classic environment's harness runs for one rollout; `MultiTurnEnv` implements it.

        A subclass that implements the seed's `rollout(input, client, model, sampling_args)` instead has it
        run here: its `init_state` gets this rollout's state, so its `get_model_response` calls are this
        rollout's turns through the endpoint, and the state it fills is scored like any other.
        """
        _IN_OWN_ROLLOUT.set(True)
        _RUNNING.set(state)
        handles = upstream(state)
        await self.rollout(task, handles.client, state.runtime.model or "", handles.sampling_args)

    async def init_state(
        self,
        input: Mapping[str, Any] | Task,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> State:
        """`Env.init_state`; inside a subclass's own `rollout` run by the harness, the running rollout's state."""
        running = _RUNNING.get()
        if running is not None and running.task == self.to_task(input):
            _RUNNING.set(None)
            return running
        return await super().init_state(input, client, model, sampling_args)

    @abstractmethod
    async def rollout(
        self,
        input: Mapping[str, Any] | Task | None = None,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        **older: Any,
    ) -> Any:
        """Run one rollout of `input` and score it alone; the seed's classic `State` (typed `timing`, `error`, responses).

        Abstract, as the seed's: a subclass implements it, or (`MultiTurnEnv`, `EnvGroup`) calls this
        body, which runs the harness. The older `rollout(client=, model=, prompt=, answer=, ...)` form
        returns `(completion, state)` (`Env.rollout`).
        """
        if older or input is None:
            return await super().rollout(input, client, model, sampling_args, **older)
        if _IN_OWN_ROLLOUT.get():
            raise NotImplementedError(f"{type(self).__name__}.rollout calls the base rollout, which would run it again")
        return classic_view(await super().rollout(input, client, model, sampling_args))  # type: ignore[return-value]

    def classic_rows(self, dataset: Any, field: str) -> list[dict[str, Any]] | None:
        """A dataset's rows as task rows: a `question` becomes the prompt (after `few_shot`).

        Raises:
            TaskError: a row that is not a mapping or has neither `prompt` nor `question`.
        """
        if dataset is None:
            return None
        if is_dataset_builder(dataset):
            return functools.partial(self._built_rows, dataset, field)  # type: ignore[return-value]
        if isinstance(dataset, Mapping) or isinstance(dataset, (str, bytes)):
            raise TaskError(f"{type(self).__name__}: {field} must be rows (a datasets.Dataset or a list of mappings)")
        rows = []
        for index, row in enumerate(dataset):
            if not isinstance(row, Mapping):
                raise TaskError(f"{type(self).__name__}: {field} row {index}: expected a mapping, got {type(row).__name__}")
            row = dict(row)
            if row.get("prompt") is None:
                if row.get("question") is None:
                    raise TaskError(
                        f"{type(self).__name__}: {field} row {index} has neither 'prompt' nor 'question'; columns: {sorted(row)}"
                    )
                question = str(row["question"])
                row["prompt"] = (
                    question if self.message_type == "completion" else [*self.few_shot, {"role": "user", "content": question}]
                )
            rows.append(row)
        return rows

    state_type = RolloutState

    async def generate(self, *args: Any, score_rollouts: bool | None = None, **kwargs: Any) -> GenerateOutputs:
        """`Env.generate`; seed 004's `score_rollouts=` switches scoring for this call only."""
        if score_rollouts is None:
            return await super().generate(*args, **kwargs)
        before = self.harness.score_rollouts
        self.set_score_rollouts(score_rollouts)
        try:
            return await super().generate(*args, **kwargs)
        finally:
            self.set_score_rollouts(before)

    def _built_rows(self, builder: Any, field: str) -> list[dict[str, Any]] | None:
        """The rows of a dataset builder, built on first use and once per process."""
        return self.classic_rows(built_once(builder), field)

    def set_kwargs(self, **kwargs: Any) -> None:
        """Set each keyword through its `set_<name>` method when there is one, else as an attribute (the seed's form).

        A name that is a near miss of a known setting (``sytem_prompt``) is kept too, with one warning naming it.
        """
        free = {}
        for name, value in kwargs.items():
            setter = getattr(self, f"set_{name}", None)
            if callable(setter):
                setter(value)
            else:
                free[name] = value
        set_free_attributes(self, free, self._known_settings())

    def _known_settings(self) -> set[str]:
        names = {n for n in vars(self) if not n.startswith("_")}
        for klass in type(self).__mro__:
            init = klass.__dict__.get("__init__")
            if init is not None:
                names |= {p for p in inspect.signature(init).parameters if p not in ("self", "kwargs")}
        return names

    async def _is_completed_stop(self, state: State) -> bool:
        """An overridden `is_completed(state)` (or seed 004's `is_completed(messages, state)`) as a stop condition."""
        check: Any = self.is_completed
        if "messages" in inspect.signature(check).parameters:
            outcome = check(messages=list(state.get("completion") or []), state=state)
        else:
            outcome = check(state)
        return bool(await outcome if inspect.isawaitable(outcome) else outcome)

    def classic_handlers(self) -> list[Handler]:
        """The environment's decorated methods and its rubric's functions, as the taskset's handlers."""
        overridden = type(self).is_completed is not Env.is_completed  # seed 004: is_completed as the stop check
        stop = [Handler.build(self._is_completed_stop, "stop")] if overridden else []
        return handlers_of(self) + stop + self.rubric.handlers()

    def add_rubric(self, rubric: Rubric) -> None:
        """Score with `rubric` too: the current rubric and it become one `RubricGroup`."""
        self.rubric = rubric if not self.rubric.funcs else RubricGroup([self.rubric, rubric])
        self.harness.taskset = self.taskset

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        """Every core `Env` is an `Environment` (the seed's `class Env(vf.Environment)`)."""
        if cls is Environment and issubclass(subclass, Env):
            return True
        return NotImplemented  # type: ignore[no-any-return]


__all__ = ["ClassicTaskset", "Environment"]
