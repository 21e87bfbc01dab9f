"""`Env`: a taskset/harness pair made usable by eval and training workers.

`generate` runs groups of rollouts (one group per example) with at most
`max_concurrent` rollouts in flight, scores each group with `score_group` when
all of its rollouts finish, retries groups whose rollouts failed for an
infrastructure reason, and turns each final state into a JSON `RolloutOutput`.
Outputs stream to an optional `ResultsWriter` and into an `EvalSummary`, so an
eval that does not keep its outputs (`keep_outputs=False`) uses memory for the
rollouts in flight only.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

import orjson

from v1._util import loop_scope as loop_scope
from v1._util.calling import resize_pool
from v1._util.gc_tuning import batch_gc
from v1._util.provenance import version_info
from v1.clients import Client, resolve_client
from v1.config import ClientConfig, EnvConfig
from v1.env._env_state import EnvState
from v1.env._handler_rubric import HandlerRubric
from v1.env._results import EvalSummary, ResultsWriter, RolloutKey
from v1.env._scheduling import Executor, LocalExecutor, RolloutLimiter, StreamPlan, Unit, UnitJob, is_stream, plan_units
from v1.errors import ConfigError, TaskError, error_class
from v1.harness import Harness
from v1.interception import upstream
from v1.programs import CHAT_ROUTE, COMPLETIONS_ROUTE, call_model
from v1.rollout import Handler, State, Task, thaw
from v1.taskset import RowSource, Taskset, rows_to_dataset
from v1.types import GenerateMetadata, GenerateOutputs, Info, Messages, Response, RolloutOutput, SamplingArgs

if TYPE_CHECKING:
    from datasets import Dataset

logger = logging.getLogger(__name__)

MESSAGE_TYPES = ("chat", "completion")

_PLAIN_OR_FROZEN = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
"""orjson refuses a dataclass or a datetime here (a state's fields are JSON once finalized); a task's
`FrozenDict`/`FrozenList` (dict and list subclasses) are written as the dict and list they are."""

OUTPUT_FIELDS = (
    "example_id",
    "rollout_index",
    "prompt",
    "completion",
    "answer",
    "info",
    "reward",
    "advantage",
    "metrics",
    "timing",
    "is_completed",
    "is_truncated",
    "stop_condition",
    "error",
    "token_usage",
    "trajectory",
    "tool_defs",
    "trajectory_id",
    "attempts",
    "model_retries",
)

ProgressCallback = Callable[[list[RolloutOutput], EvalSummary], None]
RetryCallback = Callable[[list[RolloutKey], list[Mapping[str, Any]]], None]
"""Called before a group is re-run: the keys of its rollouts and the errors of the failed attempt."""


def is_retryable(error: Mapping[str, Any] | None) -> bool:
    """Whether a rollout's recorded error (`{"type", "message", "where"}`) names a retryable `v1.Error` class."""
    if not error:
        return False
    cls = error_class(str(error.get("type")))
    return cls is not None and cls.retryable


def _base_url(client: Any) -> str:
    if isinstance(client, ClientConfig):
        return client.api_base_url
    config = getattr(client, "config", None)
    if isinstance(config, ClientConfig):
        return config.api_base_url
    return str(getattr(getattr(client, "client", client), "base_url", ""))


def state_to_output(
    state: State, task: Task, rollout_index: int, attempts: int, state_columns: Iterable[str] = ()
) -> RolloutOutput:
    """The JSON record of one finished rollout: the seed's fields, `attempts`, an episode's `roles`, and any `state_columns`.

    `error` stays a dict (`{"type", "message", "where"}`) or None.
    """
    values = {**state, "answer": task.get("answer"), "info": task.get("info") or {}}
    values["rollout_index"] = rollout_index
    values["attempts"] = attempts
    fields = {name: values.get(name) for name in OUTPUT_FIELDS}
    if "roles" in state:  # an episode of roles keeps each role's rollout (its trajectory, usage, trainability)
        fields["roles"] = state["roles"]
    for column in state_columns:
        fields[column] = state.get(column)
    return RolloutOutput(plain_copy(fields))


def plain_copy(fields: dict[str, Any]) -> dict[str, Any]:
    """A plain, mutable deep copy of `fields` (what `thaw` makes of each), copied by orjson where that is exact.

    orjson writes and reads the JSON of a finished state's fields in C; where reading it back does not
    give a value equal to `fields` (a NaN, an int wider than 64 bits, anything orjson writes but
    `json.dumps` would treat differently), `thaw` copies them in Python as before.
    """
    try:
        copy = orjson.loads(orjson.dumps(fields, option=_PLAIN_OR_FROZEN))
    except TypeError:  # orjson.JSONEncodeError included
        copy = None
    return copy if copy == fields else {name: thaw(value) for name, value in fields.items()}


class _GenerateRecorder:
    """What one `generate` call produces: outputs streamed to the writer, the summary, the progress
    callback and (optionally) a kept list; metadata rewritten at most once a second while it runs."""

    def __init__(
        self,
        pass_threshold: float,
        results: ResultsWriter | None,
        keep_outputs: bool,
        on_progress: ProgressCallback | None,
    ) -> None:
        self.summary = EvalSummary(pass_threshold)
        self.metadata: dict[str, Any] = {}
        self.results = results
        self.keep_outputs = keep_outputs
        self.on_progress = on_progress
        self.kept: list[RolloutOutput] = []
        self.started = time.time()
        self.last_metadata_write = 0.0

    def current_metadata(self) -> GenerateMetadata:
        self.metadata["time_ms"] = (time.time() - self.started) * 1000
        return GenerateMetadata(**{**self.metadata, **self.summary.metadata()})  # type: ignore[typeddict-item]

    async def open(self) -> None:
        if self.results is not None:
            await self.results.write_metadata(self.current_metadata())
        if self.on_progress is not None:
            self.on_progress([], self.summary)

    async def finished(self, outputs: list[RolloutOutput]) -> None:
        """Write and count a unit's outputs; a cancellation (Ctrl-C) arriving meanwhile waits for both, so the
        metadata written on the way out counts every line the results file holds."""
        recording = asyncio.ensure_future(self._record(outputs))
        try:
            await asyncio.shield(recording)
        except asyncio.CancelledError:
            await recording
            raise

    async def _record(self, outputs: list[RolloutOutput]) -> None:
        if self.results is not None:
            await self.results.write(outputs)
        for output in outputs:
            self.summary.add(output)
        if self.keep_outputs:
            self.kept.extend(outputs)
        if self.on_progress is not None:
            self.on_progress(outputs, self.summary)
        if self.results is not None and time.time() - self.last_metadata_write > 1.0:
            self.last_metadata_write = time.time()
            await self.results.write_metadata(self.current_metadata())

    async def close(self) -> None:
        if self.results is not None:
            await self.results.write_metadata(self.current_metadata())
            await self.results.close()

    def outputs_in_order(self, example_order: list[Any]) -> list[RolloutOutput]:
        """The kept outputs by input order, then rollout index."""
        order = {example_id: position for position, example_id in enumerate(example_order)}
        return sorted(self.kept, key=lambda output: (order[output["example_id"]], output["rollout_index"]))


class EnvOrigin(Protocol):
    """Where an env was loaded from, so a worker elsewhere can load it again (`v1.env.EnvSource`)."""

    def load(self) -> Env: ...


class Env:
    """Makes a taskset/harness pair usable by eval and training workers.

    Args:
        taskset: the tasks and what they own (tools, rewards, stops).
        harness: how each task is attempted; the base `Harness()` when omitted.
            The harness is bound to the taskset (`harness.taskset = taskset`).
        env_id: the name results are saved under; the taskset's id by default.
        env_args: how the environment was configured, recorded in results metadata.
        pass_threshold: the reward at which a rollout counts as passed for pass@k.
    """

    state_type: type[State] = EnvState
    """The `State` class each rollout of this env starts from (`EnvState`: the seed's reads of its handles)."""

    def __init__(
        self,
        taskset: Taskset,
        harness: Harness | None = None,
        *,
        env_id: str | None = None,
        env_args: Mapping[str, Any] | None = None,
        pass_threshold: float = 0.5,
    ) -> None:
        self.bind_pair(
            taskset,
            harness if harness is not None else Harness(),
            env_id=env_id,
            env_args=env_args,
            pass_threshold=pass_threshold,
        )
        self.rubric: Any = HandlerRubric(self.scoring_handlers)
        """The env's rewards and metrics as a rubric (`HandlerRubric`; a classic environment's own `Rubric`)."""

    def scoring_handlers(self) -> list[Handler]:
        """The harness's reward and metric handlers (the taskset's, its own and its toolsets'), in scoring order."""
        return [*self.harness.handlers.of("reward"), *self.harness.handlers.of("metric")]

    def bind_pair(
        self, taskset: Taskset, harness: Harness, *, env_id: str | None, env_args: Mapping[str, Any] | None, pass_threshold: float
    ) -> None:
        """Bind the taskset/harness pair this environment runs (every constructor ends here)."""
        self.taskset = taskset
        self.harness = harness
        self.harness.taskset = taskset
        module = type(taskset).__module__
        self.init_run_fields(
            env_id=env_id or taskset.taskset_id,
            env_args=(
                dict(env_args)
                if env_args is not None
                else self.config.model_dump(mode="json", exclude_defaults=True, fallback=repr)
            ),
            pass_threshold=pass_threshold,
            module=module if module.split(".")[0] != "v1" else None,
        )

    def init_run_fields(self, *, env_id: str, env_args: dict[str, Any], pass_threshold: float, module: str | None) -> None:
        """The fields every environment has beside its parts (an `EnvGroup`, which has no single pair, sets them here too).

        Args:
            env_id: the name results are saved under.
            env_args: how the environment was configured, recorded in results metadata.
            pass_threshold: the reward at which a rollout counts as passed for pass@k.
            module: the module a worker elsewhere imports to rebuild the env (None: v1's own).
        """
        self.env_id = env_id
        self.env_args = env_args
        self.pass_threshold = pass_threshold
        self.concurrency = -1
        self.module: str | None = module
        self.source: EnvOrigin | None = None
        """How this env was loaded (set by `load_environment`): what a remote executor's workers rebuild it from."""
        self._endpoint_turn = 0
        self._direct: dict[str, State] = {}
        """Rollouts a caller drives itself (`init_state` + `get_model_response`), open until finished or `teardown`."""

    @property
    def config(self) -> EnvConfig:
        """The taskset's and harness's configs, as one `EnvConfig`."""
        return EnvConfig(taskset=self.taskset.config, harness=self.harness.config)

    # -- datasets -------------------------------------------------------------------------

    @staticmethod
    def _select(rows: list[dict[str, Any]], n: int, seed: int | None) -> list[dict[str, Any]]:
        if seed is not None:
            rows = list(rows)
            random.Random(seed).shuffle(rows)
        return rows[:n] if n is not None and n >= 0 else list(rows)

    def eval_rows(self, n: int = -1, seed: int | None = None) -> list[dict[str, Any]]:
        """The first `n` evaluation rows (all when n < 0), shuffled with `seed` first if given.

        Without an `eval_source`, the training rows are used, with a warning. Of a stream, only
        the first `n` rows are drawn (see `eval_inputs` to draw them one at a time).
        """
        if self.row_stream("eval") is not None:
            return list(self.eval_inputs(n, seed))
        rows = self.taskset.eval_rows()
        if not rows:
            logger.warning("%s has no eval split (eval_source); evaluating on its training rows", self.env_id)
            rows = self.taskset.rows()
        return self._select(rows, n, seed)

    def train_rows(self, n: int = -1, seed: int | None = None) -> list[dict[str, Any]]:
        """The first `n` training rows (all when n < 0), shuffled with `seed` first if given."""
        stream = self.row_stream("train")
        if stream is not None:
            return list(_draw(stream, n, seed, self.env_id))
        return self._select(self.taskset.rows(), n, seed)

    def row_stream(self, split: Literal["train", "eval"] = "train") -> RowSource | None:
        """The rows of `split` when they are a stream, drawn on demand; None when they are a list.

        The eval split without an `eval_source` is the training rows'.
        """
        source = self.taskset.row_source(split)
        if split == "eval" and source.listed() == []:
            source = self.taskset.row_source("train")
        return None if source.listed() is not None else source

    def eval_inputs(self, n: int = -1, seed: int | None = None) -> Iterable[dict[str, Any]]:
        """What `evaluate` runs: `eval_rows(n, seed)`, except that a stream's rows are drawn as the run takes them.

        Raises:
            ConfigError: the rows are an infinite stream and `n` < 0, or `seed` asks to shuffle one.
        """
        stream = self.row_stream("eval")
        if stream is None:
            return self.eval_rows(n, seed)
        if stream is self.taskset.row_source("train"):
            logger.warning("%s has no eval split (eval_source); evaluating on its training rows", self.env_id)
        return _draw(stream, n, seed, self.env_id)

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Dataset:
        """The training rows as a `datasets.Dataset`: the first `n` (all when n < 0), shuffled with `seed` if given."""
        return rows_to_dataset(self.train_rows(n, seed), f"{self.taskset.taskset_id} source")

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Dataset:
        """The evaluation rows as a `datasets.Dataset` (training rows, with a warning, when there is no eval split)."""
        return rows_to_dataset(self.eval_rows(n, seed), f"{self.taskset.taskset_id} eval rows")

    # -- running --------------------------------------------------------------------------

    async def resolve_clients(self, client: Any) -> list[Client[Any, Any, Any, Any]]:
        """The clients `client` names (as `generate` takes it; None: the harness's), one per endpoint variant."""
        if client is None:
            client = self.harness.client if self.harness.client is not None else self.harness.config.client
        if client is None:
            raise ConfigError("no model client: pass client=ClientConfig(...) (or a v1 Client), or set [env.harness.client]")
        sources = list(client) if isinstance(client, (list, tuple)) else [client]
        configs = [
            c for source in sources for c in (source.endpoint_variants() if isinstance(source, ClientConfig) else [source])
        ]
        return [await resolve_client(source) for source in configs]

    async def _next_client(self, client: Any) -> Client[Any, Any, Any, Any]:
        """The client of the next group or rollout outside `generate`: the endpoint variants take turns
        (a training worker's `run_group` calls spread over every server, each group on one)."""
        clients = await self.resolve_clients(client)
        chosen = clients[self._endpoint_turn % len(clients)]
        self._endpoint_turn += 1
        return chosen

    def resolve_model(self, model: str | None) -> str:
        """`model`, else the harness's; one `ConfigError` line when neither names one."""
        model = model or self.harness.config.model
        if not model:
            raise ConfigError("no model: pass model=... or set [env.harness] model")
        return model

    def merged_sampling_args(self, sampling_args: SamplingArgs | None) -> SamplingArgs:
        """`sampling_args` over the harness's, with the harness's token limits (enforced by the endpoint, never sent)."""
        # The harness's token limits ride with the sampling args (the endpoint enforces them, never sends them).
        config = self.harness.config
        limits = {"max_seq_len": config.max_seq_len, "max_total_completion_tokens": config.max_total_completion_tokens}
        return {**config.sampling_args, **{k: v for k, v in limits.items() if v is not None}, **(sampling_args or {})}

    async def run_tasks(
        self, tasks: list[Task], client: Client[Any, Any, Any, Any], model: str, sampling_args: SamplingArgs
    ) -> list[State]:
        """Run `tasks` as one group with a resolved client, model and merged sampling args; the scored states."""
        tasks, states = await self._group_states(tasks)
        for state in states:
            handles = upstream(state)
            handles.client = client
            handles.sampling_args = dict(sampling_args)
            state.runtime.model = model
        return await self.harness.run_group(tasks, states)

    async def _group_states(self, tasks: list[Task]) -> tuple[list[Task], list[State]]:
        """The tasks and fresh states of one group: the taskset's `init_group` when it has its own and the
        group is rollouts of one task (it may give each rollout its own task, e.g. an assigned candidate)."""
        own_init = type(self.taskset).init_group is not Taskset.init_group
        if own_init and tasks and all(task == tasks[0] for task in tasks):
            group_tasks, states = await self.taskset.init_group(tasks[0], len(tasks))
            if len(group_tasks) != len(tasks) or len(states) != len(tasks):
                raise TaskError(
                    f"{type(self.taskset).__name__}.init_group returned {len(group_tasks)} tasks and {len(states)} states "
                    f"for {len(tasks)} rollouts"
                )
            return [self.to_task(task) for task in group_tasks], states
        return tasks, [self.state_type.for_task(task) for task in tasks]

    async def run_group(
        self,
        group_inputs: Iterable[Mapping[str, Any] | Task],
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> list[State]:
        """Run one group (e.g. `[row] * 8` for 8 rollouts of a task) and score it together.

        Returns the finalized states, each with `reward`, `advantage`, `metrics` and the
        `trajectory` (token ids and logprobs per step when the server returns them):
        what a training worker consumes. With several endpoints (`endpoint_configs`),
        successive groups take turns, each group on one endpoint.
        """
        tasks = [self.to_task(row) for row in group_inputs]
        return await self.run_tasks(
            tasks, await self._next_client(client), self.resolve_model(model), self.merged_sampling_args(sampling_args)
        )

    def to_task(self, row: Mapping[str, Any] | Task | str) -> Task:
        """The task a row (or task, or bare prompt string) becomes in this environment."""
        return self.taskset.to_task(row)

    # -- the worker interface of the seed's Environment ---------------------------------------

    async def get_model_response(
        self,
        state: State,
        prompt: Any,
        tools: list[dict[str, Any]] | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> Response | None:
        """One model call of a running rollout through its endpoint (recorded as a trajectory step).

        Args:
            state: the rollout's state (inside its program).
            prompt: chat messages, or a string for the completions API.
            tools: OpenAI tool definitions (`{"type": "function", "function": {...}}`) offered to the model.
            sampling_args: this call's sampling args (the harness's win where both set one).

        Returns the recorded step's `Response`, or None when the endpoint refused the call because
        the rollout had stopped (turn limit, stop condition, token budget); other failures raise.

        Called outside a running rollout (a state from `init_state`, driven by the caller), the first
        call opens the rollout's endpoint; `finish_state` or `teardown` closes it.
        """
        from openai import APIStatusError

        if state.runtime.endpoint is None and not state.runtime.finalized:
            await self.harness.open_direct(state.task, state)
            self._direct[state["trajectory_id"]] = state

        request: dict[str, Any] = {**(sampling_args or {}), ("prompt" if isinstance(prompt, str) else "messages"): prompt}
        if tools:
            request["tools"] = tools
        steps = len(state["trajectory"])
        try:
            await call_model(state, request, COMPLETIONS_ROUTE if isinstance(prompt, str) else CHAT_ROUTE)
        except APIStatusError:
            if state["is_completed"]:
                return None
            raise
        if len(state["trajectory"]) == steps:
            return None
        return Response.model_validate(state["trajectory"][-1]["response"])

    async def finish_state(self, state: State) -> State:
        """Finish a rollout its caller drove with `get_model_response`: cleanups run, its endpoint closes,
        the state is finalized (a state `rollout`/`generate` ran is finished already). Returns `state`."""
        if self._direct.pop(state["trajectory_id"], None) is not None:
            await self.harness.close_direct(state)
        return state

    async def init_state(
        self,
        input: Mapping[str, Any] | Task,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> State:
        """A fresh state for one input, with its client, model and sampling args resolved."""
        task = self.to_task(input)
        state = self.state_type.for_task(task)
        handles = upstream(state)
        handles.client = await self._next_client(client)
        handles.sampling_args = dict(self.merged_sampling_args(sampling_args))
        state.runtime.model = self.resolve_model(model)
        return state

    @overload
    async def rollout(
        self,
        input: Mapping[str, Any] | Task,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
    ) -> State: ...

    @overload
    async def rollout(
        self,
        input: None = None,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        *,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        example_id: Any = 0,
    ) -> tuple[Messages, State]: ...

    async def rollout(
        self,
        input: Mapping[str, Any] | Task | None = None,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        **older: Any,
    ) -> Any:
        """Run one rollout of `input` and score it alone (no group scoring, advantage left unset).

        The older keyword form `rollout(client=..., model=..., prompt=..., answer=..., task=..., info=...)`
        (seed 003's trainer cookbook, seed 004) runs the same rollout of that row and returns
        `(completion, state)`; which form a call is is decided by the keywords present.

        Raises:
            ConfigError: both `input` and the older form's `prompt=`.
            TypeError: no input at all, or a keyword neither form has.
        """
        if older:
            state = await self.rollout(_older_rollout_input(input, older), client, model, sampling_args)
            return state.get("completion"), state
        if input is None:
            raise TypeError(
                "rollout() needs an input row: rollout(input, client, model) or rollout(prompt=..., client=..., model=...)"
            )
        state = await self.init_state(input, client, model, sampling_args)
        return await self.harness.run(state.task, state)

    async def run_rollout(
        self, *args: Any, gen_sampling_args: SamplingArgs | None = None, gen_sem: Any = None, **kwargs: Any
    ) -> State:
        """`rollout`, in both call forms that outside callers use.

        The seed's `run_rollout(semaphore, input, client, model, sampling_args)` holds the semaphore
        (bounding the rollouts in flight) around the rollout; the older form
        `run_rollout(input, client, model, gen_sampling_args=..., gen_sem=...)` (chatan's) holds
        `gen_sem` when given.

        Raises:
            ConfigError: both `sampling_args` and `gen_sampling_args`, or arguments of neither form.
        """
        semaphore = args[0] if args and hasattr(args[0], "__aenter__") else None
        names = ("input", "client", "model", "sampling_args")
        positional = args[1:] if semaphore is not None else args
        semaphore = semaphore or gen_sem
        if len(positional) > len(names) or set(kwargs) - set(names) or set(kwargs) & set(names[: len(positional)]):
            raise ConfigError(
                "run_rollout(semaphore, input, client, model, sampling_args) or run_rollout(input, client, model, "
                f"gen_sampling_args=...); got {len(args)} positional and {sorted(kwargs)} keyword arguments"
            )
        bound = {**dict(zip(names, positional)), **kwargs}
        if gen_sampling_args is not None:
            if bound.get("sampling_args") is not None:
                raise ConfigError("run_rollout: pass sampling_args or gen_sampling_args, not both")
            bound["sampling_args"] = gen_sampling_args
        if "input" not in bound:
            raise ConfigError("run_rollout: no input row given")
        if semaphore is None:
            return await self.rollout(**bound)
        async with semaphore:
            return await self.rollout(**bound)

    @staticmethod
    def is_completed(state: Mapping[str, Any]) -> bool:
        """Whether the rollout has stopped (a stop condition, the program's end, or an error)."""
        return bool(state.get("is_completed"))

    @staticmethod
    def make_dataset(inputs: Iterable[Mapping[str, Any]]) -> Dataset:
        """Rows as a `datasets.Dataset` (string prompts as message lists, so `question` and `prompt` rows mix)."""
        return rows_to_dataset([dict(row) for row in inputs], "make_dataset inputs")

    def set_kwargs(self, **kwargs: Any) -> None:
        """Set each keyword through its `set_<name>` method when there is one, else as an attribute.

        Raises:
            ConfigError: for a name the environment has neither a setter nor an attribute for.
        """
        for name, value in kwargs.items():
            setter = getattr(self, f"set_{name}", None)
            if callable(setter):
                setter(value)
            elif hasattr(self, name) and not callable(getattr(self, name)):
                setattr(self, name, value)
            else:
                raise ConfigError(f"{type(self).__name__}.set_kwargs: unknown setting {name!r}")

    def set_concurrency(self, concurrency: int) -> None:
        """The most rollouts in flight when `generate` is not given `max_concurrent` (<= 0: no limit);
        a positive value also resizes v1's thread pool for sync user code (tools, rewards, sync programs) to match."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise ConfigError(f"set_concurrency: expected an integer, got {concurrency!r}")
        self.concurrency = concurrency
        if concurrency > 0:
            resize_pool("user", concurrency)

    def set_max_seq_len(self, max_seq_len: int | None) -> None:
        """The context limit of every rollout: a turn whose context reaches it stops with `prompt_too_long`."""
        self.harness.config.max_seq_len = max_seq_len

    def set_score_rollouts(self, score_rollouts: bool) -> None:
        """Whether rollouts are scored (rewards, metrics, advantages); unscored ones have none."""
        self.harness.score_rollouts = bool(score_rollouts)

    async def generate(
        self,
        inputs: Iterable[Mapping[str, Any] | Task],
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        *,
        rollouts_per_example: int = 1,
        max_concurrent: int = -1,
        independent_scoring: bool = False,
        max_retries: int = 0,
        state_columns: Iterable[str] | None = None,
        results: ResultsWriter | None = None,
        keep_outputs: bool = True,
        on_progress: ProgressCallback | None = None,
        on_retry: RetryCallback | None = None,
        executor: Executor | None = None,
    ) -> GenerateOutputs:
        """Run `rollouts_per_example` rollouts of every input and return their outputs and metadata.

        Inputs with the same `example_id` form one group (so `[row] * 4` is a group of four). Inputs
        that are not a list or a `Dataset` (a generator, a stream taskset's rows) are drawn as the run
        takes them, each row its own group (a repeated id gets `-2`, `-3`, ...), and the rollouts
        running when drawing raises are finished and kept before the error propagates.

        Args:
            inputs: rows, tasks, or a `datasets.Dataset`.
            client: a `ClientConfig` (its `endpoint_configs` are used round-robin, one group
                each), a v1 `Client`, a list of either, or None for the harness's own.
            model: the model name; the harness's when None.
            sampling_args: merged over the harness's sampling args.
            rollouts_per_example: rollouts per input row.
            max_concurrent: the most rollouts in flight across groups (<= 0: no limit).
            independent_scoring: score each rollout alone, as a group of one: group rewards
                and metrics still run (on that one rollout) and every advantage is 0.
            max_retries: attempts after the first for a group with a retryable error
                (the error class's `retryable`); each output records its `attempts`.
            state_columns: extra state fields to copy into each output.
            results: where to stream outputs and metadata; rollouts it already holds
                (a resumed run) are not run again and count in the aggregates.
            keep_outputs: return the outputs (False keeps memory bounded by the rollouts in flight).
            on_progress: called with each finished group's outputs and the running summary.
            on_retry: called before a group is re-run, with its rollout keys and the failed
                attempt's errors. An exception raised by either callback aborts the run
                (the rollouts in flight are cancelled, the metadata is written) and propagates.
            executor: where the groups run: this event loop when None (`LocalExecutor`), or
                e.g. `v1.env.RayExecutor` for Ray actors; outputs come back here and are
                written by this process alone. A non-default executor's `describe()` is recorded
                as `executor` in the metadata when the run ends.
        """
        if rollouts_per_example < 1:
            raise ConfigError(f"rollouts_per_example must be at least 1, got {rollouts_per_example}")
        stream = StreamPlan(inputs, self.to_task, rollouts_per_example, independent_scoring) if is_stream(inputs) else None
        plan = plan_units(inputs, self.to_task, rollouts_per_example, independent_scoring) if stream is None else None
        clients = await self.resolve_clients(None if client is None else client)
        model_name = self.resolve_model(model)
        merged_args = self.merged_sampling_args(sampling_args)
        record = _GenerateRecorder(self.pass_threshold, results, keep_outputs, on_progress)
        units: Iterable[tuple[Any, Unit]]
        if stream is not None:
            if results is not None:
                stream.done = await asyncio.to_thread(
                    results.load_stream, rollouts_per_example, independent_scoring, record.summary
                )
            units, task_of, example_order = stream.units(), stream.task, stream.example_order
        else:
            assert plan is not None
            done = await asyncio.to_thread(results.load, plan.keys(), record.summary) if results is not None else set()
            units = [(uid, unit) for uid, unit in plan.units.items() if uid not in done]
            task_of, example_order = plan.task, plan.example_order
        record.metadata.update(
            {
                "env_id": self.env_id,
                "env_args": self.env_args,
                "model": model_name,
                "base_url": ",".join(_base_url(c) for c in clients),
                "num_examples": len(example_order),
                "rollouts_per_example": rollouts_per_example,
                "sampling_args": merged_args,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "time_ms": 0.0,
                "independent_scoring": independent_scoring,
                "max_retries": max_retries,
                "scoring": self.scoring_plan(independent_scoring),
                "version_info": await asyncio.to_thread(version_info, self.module),
                "state_columns": list(state_columns or []),
                "path_to_save": str(results.path) if results is not None else "",
                "tools": self.tool_descriptions(),
            }
        )

        job = UnitJob(
            env=self,
            units=units,
            task_of=task_of,
            clients=clients,
            client_sources=client,
            model=model_name,
            sampling_args=merged_args,
            max_retries=max_retries,
            state_columns=record.metadata["state_columns"],
            max_concurrent=max_concurrent if max_concurrent > 0 else self.concurrency,
            finished=record.finished,
            on_retry=on_retry,
        )
        await record.open()
        try:
            await (executor or LocalExecutor()).run(job)
        finally:
            if executor is not None:
                record.metadata["executor"] = executor.describe()
            record.metadata["num_examples"] = len(example_order)
            await record.close()
        return GenerateOutputs(outputs=record.outputs_in_order(example_order), metadata=record.current_metadata())

    async def run_unit(
        self,
        unit: Unit,
        task: Task,
        client: Client[Any, Any, Any, Any],
        model: str,
        sampling_args: SamplingArgs,
        max_retries: int,
        state_columns: list[str],
        on_retry: RetryCallback | None = None,
    ) -> list[RolloutOutput]:
        """Run one unit of `generate` (a group, or one rollout under independent scoring) and return its outputs.

        `task` is the unit's task (`Plan.task`). The unit is re-run while a rollout failed retryably
        and attempts remain (`max_retries`); executors call this wherever they run the unit, and its
        rollouts run inside `batch_gc()`.
        """
        attempts = 0
        while True:
            attempts += 1
            with batch_gc():  # wherever units run (this loop, a Ray actor), many are in flight at once
                states = await self.run_tasks([task] * len(unit.indices), client, model, sampling_args)
            if attempts > max_retries or not any(is_retryable(state["error"]) for state in states):
                break
            if on_retry is not None:
                on_retry(unit.keys(), [state["error"] for state in states if state["error"]])
            logger.info(
                "example %s: retrying its group (attempt %d of %d) after %s",
                unit.example_id,
                attempts + 1,
                max_retries + 1,
                next(state["error"] for state in states if is_retryable(state["error"])),
            )
        return [state_to_output(state, task, index, attempts, state_columns) for state, index in zip(states, unit.indices)]

    async def evaluate(
        self,
        client: Any = None,
        model: str | None = None,
        sampling_args: SamplingArgs | None = None,
        num_examples: int = -1,
        rollouts_per_example: int = 1,
        max_concurrent: int = -1,
        **kwargs: Any,
    ) -> GenerateOutputs:
        """`generate` over the first `num_examples` evaluation rows (see `eval_inputs`); kwargs go to `generate`.

        The positional order is the reference's and seed 004's (`client, model, sampling_args,
        num_examples, rollouts_per_example`). A stream's rows are drawn as the run takes them; an
        infinite one needs `num_examples`.
        """
        return await self.generate(
            self.eval_inputs(num_examples),
            client,
            model,
            sampling_args,
            rollouts_per_example=rollouts_per_example,
            max_concurrent=max_concurrent,
            **kwargs,
        )

    def generate_sync(self, *args: Any, **kwargs: Any) -> GenerateOutputs:
        """`generate` from synchronous code (not from inside a running event loop)."""
        return _run_sync(self.generate(*args, **kwargs))

    def evaluate_sync(self, *args: Any, **kwargs: Any) -> GenerateOutputs:
        """`evaluate` from synchronous code (not from inside a running event loop)."""
        return _run_sync(self.evaluate(*args, **kwargs))

    # -- description ----------------------------------------------------------------------

    def tools(self) -> list[dict[str, Any]] | None:
        """The Python tools offered by default, or None without any (see `tool_descriptions`)."""
        return self.tool_descriptions()

    def tool_descriptions(self) -> list[dict[str, Any]] | None:
        """The Python tools the harness's toolsets show by default, or None without any.

        MCP tools are listed only once their server starts, so they are not included here.
        (`ToolEnv` keeps the seed's `tools` list attribute, so `generate` asks this method.)
        """
        tools = [
            tool.model_dump(exclude_none=True)
            for toolset in self.harness.all_toolsets
            for tool in toolset.tools
            if toolset.visible(tool.name)
        ]
        return tools or None

    async def teardown(self) -> None:
        """The environment is done: its teardown handlers run (taskset, harness, toolsets, a classic
        env's `@vf.teardown` methods; highest priority first) and its global-scope objects, MCP
        servers and sandboxes close. `v1 eval` and `v1 train` call it once at the end; a handler's
        failure is logged, not raised. Rollouts a caller drove itself and left open are finished first."""
        for state in list(self._direct.values()):
            await self.finish_state(state)
        await self.harness.teardown()

    def scoring_plan(self, independent_scoring: bool = False) -> dict[str, Any]:
        """What scores a rollout: per-rollout and group rewards/metrics, and how advantages are computed."""
        handlers = self.harness.handlers
        group = [h.name for kind in ("reward", "metric") for h in handlers.of(kind, group=True)]  # type: ignore[arg-type]
        advantage = [h.name for h in handlers.of("advantage")]
        plan: dict[str, Any] = {
            "rollout": [h.name for kind in ("reward", "metric") for h in handlers.of(kind, group=False)],  # type: ignore[arg-type]
            "group": group,
            "advantage": advantage[0] if advantage else "reward - group mean",
            "groups_of_one": independent_scoring,
        }
        if independent_scoring:
            plan["note"] = (
                "independent_scoring: each rollout is scored as a group of one; "
                + (f"group functions {group} see only that rollout; " if group else "")
                + "advantages are 0 unless an @advantage function says otherwise"
            )
        return plan


OLDER_ROLLOUT_FIELDS = ("prompt", "answer", "task", "info", "example_id")
"""The keywords of the older `rollout(client=, model=, prompt=, answer=, task=, info=)` form (seeds 003 and 004)."""


def _older_rollout_input(input: Any, older: Mapping[str, Any]) -> dict[str, Any]:
    """The input row of an older-form `rollout(prompt=..., answer=..., ...)` call.

    Raises:
        ConfigError: an `input` too (the two forms mixed in one call).
        TypeError: a keyword neither form has, or no `prompt`.
    """
    unknown = sorted(set(older) - set(OLDER_ROLLOUT_FIELDS))
    if unknown:
        raise TypeError(f"rollout() got an unexpected keyword argument {unknown[0]!r}")
    if input is not None:
        raise ConfigError("rollout: pass input (rollout(input, client, model)) or prompt=... (the older form), not both")
    if "prompt" not in older:
        raise TypeError(f"rollout(): the older form needs prompt=...; got {sorted(older)}")
    row = {"example_id": 0, **older}
    if row.get("info") is None:
        row.pop("info", None)
    return row


def _draw(source: RowSource, n: int, seed: int | None, env_id: str) -> Iterator[dict[str, Any]]:
    """The first `n` rows of a stream (all when n < 0), shuffled with `seed` first if given, drawn on demand."""
    if n is None or n < 0:
        if source.infinite:
            raise ConfigError(f"{env_id}: {source.field} is infinite: pass num_examples (v1 eval: -n N), the rows to draw")
    if seed is not None:
        source = source.shuffle(seed)
    if n == 0:
        return iter(())
    return source.head(n).draw() if n is not None and n > 0 else source.draw()


def _run_sync(coroutine: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return loop_scope.run(coroutine)
    coroutine.close()
    raise ConfigError("generate_sync/evaluate_sync can't run inside an event loop; await generate/evaluate instead")


__all__ = [
    "MESSAGE_TYPES",
    "Env",
    "EnvOrigin",
    "ProgressCallback",
    "RetryCallback",
    "RolloutLimiter",
    "is_retryable",
    "state_to_output",
]
