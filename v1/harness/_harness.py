"""`Harness`: how a task is attempted.

`await harness.run(task)` resolves the rollout (model, client, sampling args,
system prompt, tools, turn limit), opens the rollout on the interception
endpoint, runs setups, the program, updates, scoring and cleanups, and returns
a JSON-serializable `State`. Every failure is recorded on the state; `run`
only raises for a harness that cannot run at all (no model, no client).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from v1._util.deadline import within
from v1._util.entropy import uuid4_hex
from v1._util.exact_sum import ExactSum, finite_number
from v1._util.steps import take_out_foreign_entries
from v1._util.token_budgets import TOKEN_BUDGETS
from v1.clients import Client, ClientLike, resolve_client
from v1.config import (
    ArtifactConfig,
    ClientConfig,
    HandlerLike,
    HarnessConfig,
    ProgramConfig,
    ProgramLike,
    SandboxLike,
    SystemPromptLike,
    SystemPromptStrategy,
)
from v1.errors import ConfigError, Error, RolloutStopped, ToolError
from v1.interception import get_endpoint, stop_at_timeout, upstream
from v1.programs import (
    Program,
    check_row_data,
    narrow_child_sandbox,
    narrow_program,
    narrow_sandbox,
    program_sandbox,
    resolve_program,
)
from v1.rollout import (
    Handler,
    Handlers,
    RolloutContext,
    State,
    Task,
    group_arguments,
    owned_handlers,
    rollout_arguments,
    score_group,
    score_rollout,
    thaw,
)
from v1.sandbox import EndpointTarget, RolloutSandboxes, SandboxScopes, network_tally
from v1.taskset import Taskset, User, UserLike, resolve_user
from v1.tools import RolloutToolbox, Toolset, merge_toolsets
from v1.types import Messages, TokenUsage

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


def _system_messages(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}] if value else []
    if isinstance(value, Mapping):  # one message, e.g. vf.SystemMessage.from_path(...)
        return [thaw(value)]
    return [thaw(message) for message in value]


def resolve_system_prompt(harness_prompt: Any, task_prompt: Any, strategy: str) -> list[dict[str, Any]]:
    """The system messages of a rollout, from the harness's (H) and the task's (T) prompts.

    Strategies: `HT` both, harness first; `TH` both, task first; `H_OR_T` the
    harness's if set, else the task's; `T_OR_H` the reverse; `H` / `T` only one;
    `REJECT` fails when both are set.
    """
    harness_messages, task_messages = _system_messages(harness_prompt), _system_messages(task_prompt)
    if strategy == "HT":
        return harness_messages + task_messages
    if strategy == "TH":
        return task_messages + harness_messages
    if strategy == "H_OR_T":
        return harness_messages or task_messages
    if strategy == "T_OR_H":
        return task_messages or harness_messages
    if strategy == "H":
        return harness_messages
    if strategy == "T":
        return task_messages
    if strategy == "REJECT":
        if harness_messages and task_messages:
            raise ConfigError("system_prompt_strategy='REJECT': both the harness and the task set a system prompt")
        return harness_messages or task_messages
    raise ConfigError(f"unknown system_prompt_strategy {strategy!r}")


def token_usage(state: State) -> TokenUsage:
    """Input/output tokens over all turns, and of the final context (see `TokenUsage`)."""
    inputs: list[Any] = []
    outputs: list[Any] = []
    exact = True
    for step in state["trajectory"]:
        response = step.get("response") if isinstance(step, dict) else None  # a program may append steps of its own
        usage = response.get("usage") if isinstance(response, dict) else None
        if isinstance(usage, dict) and usage:
            prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
            inputs.append(prompt)
            outputs.append(completion)
            exact = exact and type(prompt) is int and type(completion) is int
            exact = exact and -_EXACT_INT <= prompt <= _EXACT_INT and -_EXACT_INT <= completion <= _EXACT_INT
    if not inputs:
        return TokenUsage()
    if exact:
        # Each count is a float exactly: an integer sum rounded once is what `ExactSum` gives.
        output_total = float(sum(outputs))
        return TokenUsage(
            input_tokens=float(sum(inputs)),
            output_tokens=output_total,
            final_input_tokens=max(0.0, float(inputs[-1] + outputs[-1] - int(output_total))),
            final_output_tokens=output_total,
        )
    # an upstream reports the counts: an absurd one (1e308, a 400-digit integer) must not make a total infinite
    input_counts = [finite_number(count) or 0.0 for count in inputs]
    output_counts = [finite_number(count) or 0.0 for count in outputs]
    final_output = _exact_total(output_counts)
    return TokenUsage(
        input_tokens=_exact_total(input_counts),
        output_tokens=final_output,
        final_input_tokens=max(0.0, _exact_total([input_counts[-1], output_counts[-1], -final_output])),
        final_output_tokens=final_output,
    )


_EXACT_INT = 2**53
"""Every integer up to this size is a float exactly."""


def _exact_total(values: list[float]) -> float:
    total = ExactSum()
    for value in values:
        total.add(value)
    return total.value


def _take_out_foreign_entries(state: State, where: str) -> None:
    """What `where` left in the trajectory that is not a step is taken out, as the rollout's error (`v1._util.steps`)."""
    error = take_out_foreign_entries(state["trajectory"])
    if error is not None:
        state.record_error(error, where)


def render_completion(state: State) -> Messages:
    """The messages after the rollout's prompt, as of the last model call."""
    steps = state["trajectory"]
    if not steps:
        return []
    last = steps[-1]
    context = list(last["prompt"]) + list(last["completion"])
    prompt = state.get("prompt") or []
    if context[: len(prompt)] == list(prompt):
        return context[len(prompt) :]
    return list(last["completion"])


def _stop_check(context: RolloutContext) -> Callable[[State], Awaitable[str | None]] | None:
    """What the endpoint asks before each of the program's calls: the `@stop` handlers, or nothing without any
    (its admission refuses a completed rollout itself, all that `first_stop` would then check)."""
    return context.first_stop if context.handlers.of("stop", group=False) else None


def _within(seconds: float | None, step: Awaitable[_T]) -> Awaitable[_T]:
    """`step`, cancelled with `TimeoutError` past `seconds` when awaited; without a limit `step` itself (no timer, no frame)."""
    return step if seconds is None else _timed(seconds, step)


async def _timed(seconds: float, step: Awaitable[_T]) -> _T:
    with within(seconds):  # its timer holds no context: the program's holds its rollout's state
        return await step


_RUNNING: contextvars.ContextVar[State | None] = contextvars.ContextVar("harness_running_state", default=None)
"""The state of the rollout whose program is running (a nested `Harness.run` borrows its model and client)."""


class Harness:
    """Runs one task at a time; see the module docs for the rollout lifecycle.

    Args:
        program: None (the default tool loop), a callable `(task, state)`, or a
            mapping/`ProgramConfig` (`{"base": True}`, `{"fn": "pkg.module:run"}`).
        task_programs: programs a task row may choose by name (`{"program": "name"}`); without
            them a row can only add data to the harness's program (see `v1.programs`).
        task_env: the environment variables a task row's `program.env` may set, each by name
            (none by default; there is no wildcard).
        system_prompt: the harness's system prompt (see `system_prompt_strategy`).
        client: a `ClientConfig`, a v1 `Client`, or an SDK client such as `AsyncOpenAI`.
        model, sampling_args, max_turns: what to call and how; a task's
            `max_turns` may lower the harness's turn limit (set or default), never raise it.
        max_input_tokens, max_output_tokens, max_total_tokens: token budgets of one rollout, summed
            over the recorded usage of its program's model calls; once one is spent the endpoint
            refuses the next call and the rollout stops as `<budget>_reached`. A task row may lower
            one, or set one left unset, never raise one.
        timeout_seconds, setup_timeout_seconds, scoring_timeout_seconds: time limits of the program
            (`timeout_reached`), the setup handlers (`setup_timeout_reached`) and the scoring
            (`scoring_timeout_reached`).
        max_tool_output: characters of one tool result the model sees (default 20,000); the rest is
            cut and a marker says how much.
        toolsets: toolsets whose tools every task of this harness may use.
        taskset: the taskset whose tasks this harness runs (its prompt, tools and handlers apply).
        config: a `HarnessConfig` (or mapping); keyword arguments override it.
    """

    config_type: ClassVar[type[HarnessConfig]] = HarnessConfig
    scores_with_taskset: ClassVar[bool] = True
    """Whether the taskset's handlers (rewards, setups, stops, ...) apply to this harness's rollouts; an
    episode's do not: its roles attempt the task, and the episode's reward is its control's."""

    def __init__(
        self,
        program: ProgramLike | None = None,
        *,
        system_prompt: SystemPromptLike | None = None,
        user: UserLike | None = None,
        sandbox: SandboxLike | None = None,
        client: ClientLike | None = None,
        model: str | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        max_turns: int | None = None,
        toolsets: Iterable[Toolset] | None = None,
        stops: Iterable[HandlerLike] | None = None,
        setups: Iterable[HandlerLike] | None = None,
        updates: Iterable[HandlerLike] | None = None,
        metrics: Iterable[HandlerLike] | None = None,
        rewards: Iterable[HandlerLike] | None = None,
        advantages: Iterable[HandlerLike] | None = None,
        cleanups: Iterable[HandlerLike] | None = None,
        config: HarnessConfig | Mapping[str, object] | None = None,
        system_prompt_strategy: SystemPromptStrategy | None = None,
        timeout_seconds: float | None = None,
        max_seq_len: int | None = None,
        max_total_completion_tokens: int | None = None,
        taskset: Taskset | None = None,
        task_programs: Mapping[str, ProgramLike] | None = None,
        task_env: Iterable[str] | None = None,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_total_tokens: int | None = None,
        setup_timeout_seconds: float | None = None,
        scoring_timeout_seconds: float | None = None,
        max_tool_output: int | None = None,
    ) -> None:
        given: dict[str, Any] = {
            "program": program,
            "task_programs": dict(task_programs) if task_programs is not None else None,
            "task_env": task_env if task_env is None or isinstance(task_env, str) else list(task_env),
            "system_prompt": system_prompt,
            "system_prompt_strategy": system_prompt_strategy,
            "sandbox": sandbox,
            "model": model,
            "sampling_args": dict(sampling_args) if sampling_args is not None else None,
            "max_turns": max_turns,
            "timeout_seconds": timeout_seconds,
            "max_seq_len": max_seq_len,
            "max_total_completion_tokens": max_total_completion_tokens,
            "max_input_tokens": max_input_tokens,
            "max_output_tokens": max_output_tokens,
            "max_total_tokens": max_total_tokens,
            "setup_timeout_seconds": setup_timeout_seconds,
            "scoring_timeout_seconds": scoring_timeout_seconds,
            "max_tool_output": max_tool_output,
        }
        if isinstance(client, (ClientConfig, Mapping)):
            given["client"], client = client, None
        self.config = self.config_type.from_config(config, **{k: v for k, v in given.items() if v is not None})
        self.user: User | None = resolve_user(user if user is not None else self.config.user)
        self.client = client
        self.program: Program = resolve_program(self.config.program, self.config.sandbox)
        self.sandbox_scopes = SandboxScopes()
        self.toolsets = [Toolset(config=toolset_config) for toolset_config in self.config.toolsets] + list(toolsets or [])
        lists = {"stops": stops, "setups": setups, "updates": updates, "metrics": metrics}
        lists |= {"rewards": rewards, "advantages": advantages, "cleanups": cleanups}
        self._own_handlers: list[Handler] = owned_handlers(self, self.config, lists, "harness")
        self.taskset = taskset
        self._handlers: Handlers | None = None
        self.score_rollouts = True

    # -- resolution -----------------------------------------------------------------------

    @property
    def taskset(self) -> Taskset | None:
        return self._taskset

    @taskset.setter
    def taskset(self, taskset: Taskset | None) -> None:
        if taskset is not None and taskset.user is not None and self.user is not None:
            raise ConfigError("both the taskset and the harness have a user simulator; give the rollout one user")
        merge_toolsets((taskset.toolsets if taskset is not None else []) + self.toolsets)
        self._taskset = taskset
        self._handlers = None

    @property
    def all_toolsets(self) -> list[Toolset]:
        """The taskset's toolsets, then the harness's."""
        taskset = self._taskset
        return taskset.toolsets + self.toolsets if taskset is not None else list(self.toolsets)

    @property
    def active_user(self) -> User | None:
        """The rollout's user simulator: the taskset's, else the harness's."""
        taskset = self._taskset
        if taskset is not None and taskset.user is not None:
            return taskset.user
        return self.user

    @property
    def handlers(self) -> Handlers:
        if self._handlers is None:
            taskset_handlers = self.taskset.handlers if self.taskset is not None and self.scores_with_taskset else []
            toolset_handlers = [handler for toolset in self.all_toolsets for handler in toolset.handlers]
            self._handlers = Handlers.collect(taskset_handlers + self._own_handlers + toolset_handlers)
        return self._handlers

    def _as_task(self, task: Task | Mapping[str, Any] | str) -> Task:
        if self.taskset is not None:
            return self.taskset.to_task(task)
        if isinstance(task, str):
            return Task({"prompt": task}).freeze()
        return task.freeze() if isinstance(task, Task) else Task(task).freeze()

    async def _resolve_runtime(self, state: State) -> None:
        """Model, client, sampling args and turn limit; raises when the harness can't run at all."""
        runtime = state.runtime
        handles = upstream(state)
        if handles.client is None:
            source = self.client if self.client is not None else self.config.client
            if source is None:
                raise ConfigError(
                    "no model client: pass Harness(client=ClientConfig(...) or AsyncOpenAI(...)) or set [env.harness.client]"
                )
            handles.client = await resolve_client(source)
            # The token limits ride with the sampling args; the endpoint enforces them and never sends them upstream.
            config = self.config
            sampling_args = dict(config.sampling_args)
            if config.max_seq_len is not None:
                sampling_args["max_seq_len"] = config.max_seq_len
            if config.max_total_completion_tokens is not None:
                sampling_args["max_total_completion_tokens"] = config.max_total_completion_tokens
            handles.sampling_args = sampling_args
        own = self.rollout_client(state)
        if own is not None:
            handles.client = own
        if runtime.model is None:
            runtime.model = self.config.model
        if not runtime.model:
            raise ConfigError("no model: pass Harness(model=...) or set [env.harness] model")
        runtime.max_turns = self.config.max_turns
        config = self.config
        runtime.token_budgets = {name: value for name in TOKEN_BUDGETS if (value := getattr(config, name)) is not None}
        state["model"] = runtime.model

    def _declared_artifacts(self) -> list[ArtifactConfig]:
        """The artifacts this harness's taskset and toolsets declare (a rollout's program adds its own)."""
        taskset = self._taskset
        declared = list(taskset.config.artifacts) if taskset is not None else []
        for toolset in self.all_toolsets:
            declared += toolset.config.artifacts
        return declared

    def rollout_client(self, state: State) -> Client | None:
        """A client of this harness's own for one rollout, replacing the resolved one (the env's or the config's).

        None, the default, keeps the resolved client. Subclasses answer with one (a recording, a
        router); the program never sees it: its calls still go through the endpoint.
        """
        return None

    def build_program(self, spec: Any, task_sandbox: Mapping[str, Any] | None = None) -> Program:
        """The program for a task whose `program`/`sandbox` fields change the harness's (`spec`: the merged config).

        Subclasses that wrap their program (the agent harnesses) override this, so a task's
        override keeps the wrapper.
        """
        return resolve_program(spec, self.config.sandbox, task_sandbox)

    def with_program(self, program: ProgramConfig | Callable[..., Any]) -> Harness:
        """A copy of this harness that runs `program` for every task, everything else (sandbox, tools,
        handlers, limits) unchanged: how `v1 validate` runs a taskset's gold solution.

        The copy offers no `task_programs`, so a row can't choose another program; a row's data fields
        and `sandbox` still narrow it as they narrow the harness's own program.
        """
        copied = copy.copy(self)
        copied.config = self.config.model_copy(update={"program": program, "task_programs": {}})
        copied.program = resolve_program(program, self.config.sandbox)
        return copied

    def with_handlers(self, *, setups: Iterable[HandlerLike] = (), cleanups: Iterable[HandlerLike] = ()) -> Harness:
        """A copy of this harness with more setup and cleanup handlers, everything else shared: an
        episode's judge restores the policy's files in a setup, and a shared judge runs in the
        policy's cleanup, in its sandbox before it is deleted."""
        copied = copy.copy(self)
        lists = {"setups": list(setups), "cleanups": list(cleanups)}
        copied._own_handlers = [*self._own_handlers, *owned_handlers(None, None, lists, "harness")]
        copied._handlers = None
        return copied

    def _resolve_program(self, task: Task, state: State, group_id: str, endpoint: EndpointTarget) -> Program:
        """This rollout's program and its sandbox: the harness's, narrowed by the task's fields (see `v1.programs`)."""
        row_program, row_sandbox = task.get("program"), task.get("sandbox")
        spec = self.config.program
        if row_program or row_sandbox:
            spec = narrow_program(spec, row_program, self.config.task_programs, self.config.task_env)
        config = spec if isinstance(spec, ProgramConfig) else None
        sandbox = narrow_sandbox(program_sandbox(config, self.config.sandbox), row_sandbox)
        parent = _RUNNING.get()
        if parent is not None and parent is not state:
            parent_sandboxes = parent.runtime.borrowed.get("sandbox") or parent.runtime.sandboxes
            sandbox = narrow_child_sandbox(parent_sandboxes.program if parent_sandboxes is not None else None, sandbox)
        if row_program is not None:  # what check_row_data checks is the row's program data
            check_row_data(row_program, spec, sandbox)
        program = self.build_program(spec, row_sandbox) if row_program or row_sandbox else self.program
        borrowed = state.runtime.borrowed.get("sandbox")
        state.runtime.sandboxes = borrowed or RolloutSandboxes(
            self.sandbox_scopes, state["trajectory_id"], group_id, sandbox, endpoint
        )
        return program

    async def _resolve_task(self, task: Task, state: State) -> None:
        """Prompt and visible tools of this task; errors here belong to this rollout only."""
        task_system_prompt = task.get("system_prompt")
        if task_system_prompt is None and self.taskset is not None:
            task_system_prompt = self.taskset.system_prompt
        state["prompt"] = resolve_system_prompt(
            self.config.system_prompt, task_system_prompt, self.config.system_prompt_strategy
        ) + thaw(task.get("prompt") or [])
        toolbox = state.runtime.toolbox
        assert isinstance(toolbox, RolloutToolbox)
        await toolbox.resolve(task, self.all_toolsets, self.active_user)

    # -- one rollout ------------------------------------------------------------------------

    async def run(self, task: Task | Mapping[str, Any] | str, state: State | None = None) -> State:
        """Run one rollout of `task` and return its finalized, JSON-serializable state.

        Without a `state`, called from inside a running rollout (a tool, a program) by a harness with no
        client and no model of its own, the child rollout borrows that rollout's model and client.
        """
        task = self._as_task(task)
        if state is None:
            parent = _RUNNING.get()
            if parent is None or self.client is not None or self.config.client is not None or self.config.model:
                state = State.for_task(task)
            else:
                state = parent.for_task(task, borrow=["model", "client"])
        try:
            await self._rollout(task, state)
        finally:
            if upstream(state).session is not None:  # opened: cleanups run even on a crash or cancellation
                await self._finish(task, state)
            else:
                await self._close_tools(state)
                await self._close_sandboxes(state)
        return state

    async def _rollout(self, task: Task, state: State, group_id: str | None = None) -> RolloutContext:
        """Everything up to and including per-rollout scoring; the endpoint stays open."""
        if not isinstance(state.task, Task) or not state.task:
            state.task = task
        # The timing is looked up at each stamp: a classic reader may swap it for a typed one meanwhile.
        state.runtime.timing.start_time = state.runtime.timing.generation.start = time.time()
        await self._resolve_runtime(state)
        state.runtime.toolbox = RolloutToolbox(state, group_id, self.config.max_tool_output)
        endpoint = await get_endpoint()
        assert endpoint.port is not None
        program = self.program
        try:
            program = self._resolve_program(
                task, state, state.runtime.toolbox.group_id, EndpointTarget(endpoint.host, endpoint.port)
            )
            await self._resolve_task(task, state)
            task_ok = True
        except Error as exc:
            state.record_error(exc, "tools" if isinstance(exc, ToolError) else "task")
            task_ok = False
        context = self._context(task, state)
        session = endpoint.open(state, _stop_check(context))
        state.runtime.timing.setup.start = time.time()
        ok = task_ok and await self._setup(task, state)
        state.runtime.timing.setup.end = time.time()
        if ok:
            await self._run_program(program, task, state, context)
        session.end_program_phase()
        state.runtime.timing.generation.end = time.time()
        self._record_network(state)
        if self.handlers.of("update", group=False):  # most harnesses have none: no coroutine to make and run
            await self._run_handlers("update", task, state)
        _take_out_foreign_entries(state, "program")
        if "completion" not in state:
            state["completion"] = render_completion(state)
        state["token_usage"] = token_usage(state)
        state.runtime.timing.scoring.start = time.time()
        if self.score_rollouts:
            await self._within_scoring_time(score_rollout(self.handlers, task, state), [state])
        state.runtime.timing.scoring.end = time.time()
        return context

    async def _setup(self, task: Task, state: State) -> bool:
        """The setup handlers, within `setup_timeout_seconds`: past it the rollout stops as `setup_timeout_reached`."""
        if not self.handlers.of("setup", group=False):
            return True  # nothing to time: no timer per rollout
        try:
            return await _within(self.config.setup_timeout_seconds, self._run_handlers("setup", task, state))
        except TimeoutError:
            state.stop("setup_timeout_reached")
            return False

    async def _within_scoring_time(self, scoring: Awaitable[None], states: list[State]) -> None:
        """Scoring within `scoring_timeout_seconds`. Past it each rollout keeps the scores it has (a reward
        not yet given is 0.0) and ends as `scoring_timeout_reached`, unless it already ended on an error."""
        try:
            await _within(self.config.scoring_timeout_seconds, scoring)
        except TimeoutError:
            for state in states:
                state.setdefault("metrics", {})
                if state.get("reward") is None:
                    state["reward"] = 0.0
                if state.get("error") is None:
                    state._set_managed("stop_condition", "scoring_timeout_reached")

    def _context(self, task: Task, state: State) -> RolloutContext:
        return RolloutContext(
            task=task,
            state=state,
            handlers=self.handlers,
            user=self.active_user,
            default_max_turns=self.config.max_turns,
            timeout_seconds=self.config.timeout_seconds,
            artifacts=self._declared_artifacts(),
        )

    async def open_direct(self, task: Task, state: State) -> None:
        """Open the endpoint of a rollout its caller drives itself (`init_state`, then `get_model_response`).

        The rollout gets what `run` gives a program before it starts (runtime, tools, prompt, stop checks)
        but no program: the caller's calls are its turns, recorded on the state. `close_direct` ends it.
        """
        if not isinstance(state.task, Task) or not state.task:
            state.task = task
        state.runtime.timing.start_time = state.runtime.timing.generation.start = time.time()
        await self._resolve_runtime(state)
        state.runtime.toolbox = RolloutToolbox(state, None, self.config.max_tool_output)
        await self._resolve_task(task, state)
        endpoint = await get_endpoint()
        endpoint.open(state, _stop_check(self._context(task, state)))

    async def close_direct(self, state: State) -> None:
        """End a rollout `open_direct` opened: cleanups, its endpoint, tools and sandboxes close, the state is finalized."""
        if upstream(state).session is not None:
            state.runtime.timing.generation.end = time.time()
            state.stop("state_done")
            await self._finish(state.task, state)

    async def _run_program(self, program: Program, task: Task, state: State, context: RolloutContext) -> None:
        # A command program kills its own process tree at the timeout and records how it ended.
        timeout = None if getattr(program, "handles_timeout", False) else self.config.timeout_seconds
        running = _RUNNING.set(state)
        session = upstream(state).session
        if session is not None:  # tools the program calls through the endpoint's MCP route run in this context too
            session.program_context = contextvars.copy_context()
        try:
            await _within(timeout, program(task, state, context))  # in this task: no task of its own per rollout
        except RolloutStopped as stopped:
            if stopped.condition == "has_error":
                state.record_error(stopped.__cause__ or stopped, "tool")
            else:
                state.stop(stopped.condition)
        except TimeoutError:
            stop_at_timeout(state)
        except Exception as exc:
            session = upstream(state).session
            # A program that fails because the endpoint refused its call (turn limit, stop
            # condition, error already recorded) ended the way the refusal said.
            if session is None or session.refused is None:
                state.record_error(exc, "program")
        finally:
            _RUNNING.reset(running)
        state.stop("state_done")

    async def _run_handlers(self, kind: str, task: Task, state: State) -> bool:
        ok = True
        handlers = self.handlers.of(kind, group=False)  # type: ignore[arg-type]
        arguments = rollout_arguments(task, state) if handlers else {}
        for handler in handlers:
            try:
                await handler.call(arguments)
            except Exception as exc:
                state.record_error(exc, f"{kind}:{handler.name}")
                ok = False
                if kind == "setup":
                    break
        return ok

    async def _finish(self, task: Task, state: State) -> None:
        """Cleanups (they may still call the model), then close the rollout and finalize the state."""
        try:
            if self.handlers.of("cleanup", group=False):
                await self._run_handlers("cleanup", task, state)
        finally:
            endpoint = await get_endpoint()
            endpoint.close_session(state)
            await self._close_tools(state)
            await self._close_sandboxes(state)
            self._record_network(state, done=True)
            _take_out_foreign_entries(state, "cleanup")
            state.finalize()

    @staticmethod
    def _record_network(state: State, done: bool = False) -> None:
        """`state["network"]`: the connections its sandboxed commands made through an egress proxy, if any."""
        tally = network_tally(state["trajectory_id"], done=done)
        if tally is not None:
            state["network"] = tally

    async def _close_sandboxes(self, state: State) -> None:
        """Delete the rollout's own sandboxes (and a standalone run's group sandboxes)."""
        sandboxes = state.runtime.sandboxes
        if sandboxes is None or sandboxes is state.runtime.borrowed.get("sandbox") or not self.sandbox_scopes.shared:
            return  # no scope of this harness holds a sandbox (or one being created): nothing to delete
        keys = [f"rollout:{sandboxes.rollout_id}"]
        if sandboxes.group_id == sandboxes.rollout_id:
            keys.append(f"group:{sandboxes.group_id}")
        for key in keys:
            for error in await self.sandbox_scopes.close(key):
                state.record_error(error, "sandbox:close")

    async def _close_tools(self, state: State) -> None:
        """Close the rollout's tool scopes (objects, MCP servers); a failure to close is recorded."""
        toolbox, state.runtime.toolbox = state.runtime.toolbox, None
        if toolbox is None:
            return
        for error in await toolbox.aclose():
            state.record_error(error, "tools:close")

    # -- groups -----------------------------------------------------------------------------

    async def run_group(self, tasks: list[Task], states: list[State] | None = None) -> list[State]:
        """Run rollouts together, score them as a group, then clean up, whatever failed."""
        tasks = [self._as_task(task) for task in tasks]
        states = states if states is not None else [State.for_task(task) for task in tasks]
        group_id = uuid4_hex()
        try:
            results = await asyncio.gather(
                *(self._rollout(t, s, group_id) for t, s in zip(tasks, states)), return_exceptions=True
            )
            for state, result in zip(states, results):
                if isinstance(result, BaseException):
                    if not isinstance(result, Exception):
                        raise result
                    state.record_error(result, "harness")
            await self.score_group(tasks, states)
        finally:
            try:
                await self.cleanup_group(tasks, states)
            finally:
                await asyncio.gather(*(self._finish(t, s) for t, s in zip(tasks, states)), return_exceptions=True)
                for owner in self._scoped_owners():
                    for error in await owner.close_scope(f"group:{group_id}"):
                        logger.error("closing a group-scoped object of %s failed: %s", owner.describe(), error)
                for error in await self.sandbox_scopes.close(f"group:{group_id}"):
                    logger.error("deleting a group sandbox failed: %s", error)
        return states

    def _scoped_owners(self) -> list[Any]:
        user = self.active_user
        return [*self.all_toolsets, *([user] if user is not None else [])]

    async def score_group(self, tasks: list[Task], states: list[State]) -> list[State]:
        """Group rewards and metrics, then advantages (default: reward minus the group mean); skipped when `score_rollouts` is off."""
        if self.score_rollouts:
            await self._within_scoring_time(score_group(self.handlers, tasks, states), states)
        return states

    async def cleanup_group(self, tasks: list[Task], states: list[State]) -> None:
        """Group cleanup handlers; each runs even when another fails."""
        arguments = group_arguments(tasks, states)
        for handler in self.handlers.of("cleanup", group=True):
            try:
                await handler.call(arguments)
            except Exception as exc:
                for state in states:
                    state.record_error(exc, f"cleanup:{handler.name}")

    async def teardown(self) -> None:
        """Teardown handlers (harness, taskset, toolsets; highest priority first), then close
        global-scope objects and MCP servers of the toolsets and the user."""
        for handler in self.handlers.of("teardown"):
            try:
                await handler.call({})
            except Exception:
                logger.exception("teardown handler %s failed", handler.name)
        for owner in self._scoped_owners():
            for error in await owner.close_scope("global"):
                logger.error("closing a global object of %s failed: %s", owner.describe(), error)
        for error in await self.sandbox_scopes.close("global"):
            logger.error("deleting a global sandbox failed: %s", error)


__all__ = ["Harness", "RolloutContext", "render_completion", "resolve_system_prompt", "token_usage"]
