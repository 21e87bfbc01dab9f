"""`State`: the mutable record of one rollout.

A `State` is a plain dict of JSON values plus a process-local `RolloutRuntime`
(model name, endpoint address, tools, borrowed handles) that never becomes a dict
key, so `json.dumps(state)` works once `run` returns. Framework-managed fields can
only change through `stop()`, raising a `v1.Error`, or the framework's own setters.

What a program must not reach (the upstream `Client` with its API key, the
harness's sampling args and limits, the endpoint session) is not an attribute of
the state at all: it lives in the interception layer (`v1.interception`),
keyed weakly by the state's runtime, so nothing reachable from the state, its
runtime or the SDK clients it hands out leads to the upstream.

This module is a leaf: it imports only modules that import nothing of the rollout
machinery (config, errors, task, types, and the `Sandbox` and `ToolContent` types it
hands out). The handles the runtime carries (toolbox, sandboxes, SDK pools) are typed
by the small protocols declared here, which the framework's parts above implement.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from v1._util.entropy import uuid4_hex
from v1._util.json_check import is_json
from v1.config import SandboxConfig
from v1.errors import ConfigError, EndpointError, NotSupportedError, StateFieldError
from v1.rollout._task import Task
from v1.rollout._timing import TimingRecord, stamps_are_numbers
from v1.sandbox import Sandbox
from v1.types import RolloutTiming, ToolContent

MANAGED_FIELDS = frozenset({"is_completed", "stop_condition", "is_truncated", "error", "trajectory"})
BORROWABLE = ("model", "client", "sandbox", "tools")
SUPPORTED_APIS = ("chat_completions", "completions", "responses", "messages")
API_ALIASES = {
    "chat": "chat_completions",
    "openai_chat_completions": "chat_completions",
    "openai_completions": "completions",
    "openai_responses": "responses",
    "anthropic_messages": "messages",
}
"""verifiers' other names for the same APIs (its ``EndpointApi`` and ``ClientType`` values)."""

_T = TypeVar("_T")


class _TaskOrInstanceMethod(Generic[_T]):
    """Binds to the instance when there is one, else to the class (like `for_task` needs)."""

    def __init__(self, fn: Callable[..., _T]) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__
        self._cache_name = f"_{fn.__name__}_on_class"

    def __set_name__(self, owner: type, name: str) -> None:
        self._cache_name = f"_{name}_on_class"

    def __get__(self, instance: Any, owner: type) -> Callable[..., _T]:
        if instance is None:  # bound to each class once, kept on the class itself: `State.for_task` is looked up every rollout
            on_class: Callable[..., _T] | None = vars(owner).get(self._cache_name)
            if on_class is None:
                on_class = self._bind(None, owner)
                setattr(owner, self._cache_name, on_class)
            return on_class
        return self._bind(instance, owner)

    def _bind(self, instance: Any, owner: type) -> Callable[..., _T]:
        def bound(*args: Any, **kwargs: Any) -> _T:
            return self.fn(owner, instance, *args, **kwargs)

        bound.__doc__ = self.fn.__doc__
        return bound


class NamedToolset(Protocol):
    """A toolset as `State.add_tool` names it: the object itself, matched by identity, or its name."""

    @property
    def name(self) -> str | None: ...


class SDKClientFactory(Protocol):
    """Makes the official SDK clients a program gets from `State.get_client` (the endpoint's `EndpointPools`)."""

    @property
    def transport(self) -> Any:
        """The HTTP transport to the endpoint: the in-process carrier (`v1.clients.InProcessTransport`)."""

    def sdk_client(self, api: str, base_url: str, api_key: str, *, sync: bool = False) -> Any: ...


class RolloutTools(Protocol):
    """A rollout's toolbox as the state and the framework's parts reach it (`v1.tools.RolloutToolbox`)."""

    @property
    def group_id(self) -> str: ...

    async def call(
        self, name: str, arguments: str | Mapping[str, Any], injected: Mapping[str, Any] | None = None
    ) -> ToolContent: ...

    def add_tool(self, toolset: NamedToolset | str, fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]: ...

    async def user_client(self, state: State, model: str) -> Any: ...

    async def aclose(self, include_group: bool | None = None) -> list[BaseException]: ...


class RolloutSandboxHandles(Protocol):
    """A rollout's sandboxes, created on first use (`v1.sandbox.RolloutSandboxes`)."""

    @property
    def rollout_id(self) -> str: ...

    @property
    def group_id(self) -> str: ...

    @property
    def program(self) -> SandboxConfig | None: ...

    async def get(self, config: SandboxConfig | str = "program") -> Sandbox: ...


class OwnCall(Protocol):
    """v1's own whole-answer model call handed to the endpoint (`EndpointAccess.own_call`): route, key, JSON body
    and, when the caller has it, the value the body reads as (a value of its own: the endpoint keeps it) in; the
    carrier's whole answer out (status, headers, body, value), or None."""

    def __call__(self, route: str, api_key: str, body: bytes, read: Any = None, /) -> Awaitable[Any]: ...


@dataclass(eq=False)
class EndpointAccess:
    """How a program reaches its rollout's endpoint: the URL, the rollout's own key, the SDK pools; nothing upstream.

    `own_call`: how v1's own whole-answer calls (`v1.programs.call_model`) reach the endpoint on the loop
    that serves it, without a carrier: the route under `base_url`, the key and the JSON body in, the answer
    out, through the same checks as a request (None: not that loop; the call then goes by `pools`).
    """

    base_url: str
    api_key: str
    pools: SDKClientFactory
    open: bool = True
    own_call: OwnCall | None = None


@dataclass(eq=False)
class RolloutRuntime:
    """Process-local handles of one rollout that a program may use; never serialized."""

    model: str | None = None
    max_turns: int | None = None
    token_budgets: dict[str, int] = field(default_factory=dict)
    """The token budgets the user set (`max_input_tokens`, ...): a task's may lower one, or set one that is unset."""
    endpoint: EndpointAccess | None = None
    tools: dict[str, Callable[..., Awaitable[Any]]] = field(default_factory=dict)
    borrowed: dict[str, Any] = field(default_factory=dict)
    timing: TimingRecord | RolloutTiming = field(default_factory=TimingRecord)
    """Where the rollout's times are stamped; `typed_timing()` reads it as a `RolloutTiming`."""
    sdk_clients: dict[tuple[str, bool], Any] = field(default_factory=dict)
    toolbox: RolloutTools | None = None
    sandboxes: RolloutSandboxHandles | None = None
    judge_prompts: dict[str, str] = field(default_factory=dict)
    """The prompt each judge name last answered in `state["judge_responses"]` (`v1.rollout.ask_judge`)."""
    upstream_from: RolloutRuntime | None = None
    """The parent rollout whose upstream client and sampling args this one borrowed; the
    interception layer copies them the first time it looks this rollout's handles up."""
    finalized: bool = False

    def typed_timing(self) -> RolloutTiming:
        """The timing as a `RolloutTiming` (the seed's `state["timing"]`), which records the rest of the rollout."""
        if isinstance(self.timing, TimingRecord):
            self.timing = self.timing.to_model()
        return self.timing


_NO_TASK = Task().freeze()
"""A state's task until it gets one (frozen: every state may share it)."""
_MISSING = object()


def _guard(key: object) -> None:
    if key in MANAGED_FIELDS:
        hint = "use state.stop(condition)" if key in ("is_completed", "stop_condition") else "raise a v1.Error subclass"
        if key == "trajectory":
            hint = "the trajectory is recorded by the interception endpoint"
        raise StateFieldError(f"state[{key!r}] is managed by the framework and can't be assigned; {hint}")


class State(dict):  # type: ignore[type-arg]
    """Mutable rollout output: trajectory, completion, reward, metrics, timing, errors and user fields.

    Framework-managed fields (`is_completed`, `stop_condition`, `is_truncated`,
    `error`, `trajectory`) can't be written directly: use `stop()` or raise a
    `v1.Error`. Runtime handles are reached with the `get_*` methods.

    Reading a key of `INPUT_FIELDS` that the state has no value of its own for reads the task's
    (the reference's forwarding to the rollout input): the task's data stays on the task.
    """

    INPUT_FIELDS: ClassVar[list[str]] = ["prompt", "answer", "info", "example_id"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(
            trajectory_id=uuid4_hex(),
            trajectory=[],
            is_completed=False,
            is_truncated=False,
            stop_condition=None,
            error=None,
        )
        if args or kwargs:  # a fresh rollout's state (`for_task`) has nothing more
            data = dict(*args, **kwargs)
            for key in data:
                _guard(key)
            super().update(data)
        self.task: Task = _NO_TASK
        self.runtime = RolloutRuntime()

    # -- construction -------------------------------------------------------------------

    @_TaskOrInstanceMethod
    def for_task(
        cls: type[State],
        parent: State | None,
        task: Mapping[str, Any] | Task,
        borrow: Iterable[str] | str | None = None,
        tools: Iterable[str] | str | None = None,
    ) -> State:
        """A fresh state for `task`.

        Called on an existing state (`state.for_task(child_task, borrow=["model"], tools="bash")`),
        the child borrows the named runtime handles of that parent state.

        Args:
            task: the task (a mapping is turned into a frozen `Task`).
            borrow: handles to share with the parent: any of "model", "client", "sandbox", "tools".
            tools: names of the parent's tools the child may call.
        """
        state = cls()
        state.task = task if isinstance(task, Task) and task.frozen else Task(task).freeze()
        if "example_id" in state.task:
            dict.__setitem__(state, "example_id", state.task["example_id"])
        if borrow is None and tools is None and parent is None:  # a fresh rollout's state: nothing to borrow
            return state
        borrow_names = [borrow] if isinstance(borrow, str) else list(borrow or [])
        tool_names = [tools] if isinstance(tools, str) else list(tools or [])
        if (borrow_names or tool_names) and parent is None:
            raise ConfigError("borrow= and tools= need a parent: call for_task on the state to borrow from")
        if parent is not None:
            state._borrow_from(parent, borrow_names, tool_names)
        return state

    def _borrow_from(self, parent: State, names: list[str], tool_names: list[str]) -> None:
        unknown = sorted(set(names) - set(BORROWABLE))
        if unknown:
            raise ConfigError(f"borrow: unknown handle(s) {unknown}; borrowable handles are {list(BORROWABLE)}")
        source = parent.runtime
        if "model" in names or "client" in names:
            self.runtime.model = source.model
            self.runtime.upstream_from = source
        if "sandbox" in names:
            sandboxes = source.borrowed.get("sandbox") or source.sandboxes
            if sandboxes is None or sandboxes.program is None:
                raise ConfigError("borrow=['sandbox']: the parent rollout has no sandbox (its program has none)")
            self.runtime.borrowed["sandbox"] = sandboxes
        if "tools" in names:
            self.runtime.tools.update(source.tools)
        missing = [name for name in tool_names if name not in source.tools]
        if missing:
            raise ConfigError(f"tools: the parent rollout has no tool(s) {missing}; it has {sorted(source.tools)}")
        self.runtime.tools.update({name: source.tools[name] for name in tool_names})

    # -- guarded dict interface -----------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        try:
            return dict.__getitem__(self, key)  # the state's own value first: most reads find one
        except KeyError:
            value = self._task_input(key)
            if value is _MISSING:
                raise
            return value

    def _task_input(self, key: str) -> Any:
        """The task's value of input field `key` (a state that has none of its own reads it), else `_MISSING`."""
        if key in self.INPUT_FIELDS:
            task = self.__dict__.get("task")
            if task is not None and key in task:
                return task[key]
        return _MISSING

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """`state[key]` (an input field read from the task), or `default`."""
        if type(self).__getitem__ is not State.__getitem__:  # a subclass's reads are its own
            try:
                return self[key]
            except KeyError:
                return default
        value = dict.get(self, key, _MISSING)  # what `__getitem__` reads, without raising for a missing key
        if value is _MISSING:
            value = self._task_input(key)
        return default if value is _MISSING else value

    def __setitem__(self, key: str, value: Any) -> None:
        _guard(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        _guard(key)
        super().__delitem__(key)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        data = dict(*args, **kwargs)
        for key in data:
            _guard(key)
        super().update(data)

    def setdefault(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        _guard(key)
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str, *default: Any) -> Any:  # type: ignore[override]
        _guard(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[Any, Any]:
        raise StateFieldError("state.popitem() is not allowed; pop user fields by name")

    def clear(self) -> None:
        raise StateFieldError("state.clear() is not allowed: it would drop framework-managed fields")

    def __ior__(self, other: Any) -> State:  # type: ignore[override,misc]
        self.update(other)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_state, (dict(self), dict(self.task), self.task.frozen))

    # -- framework setters ----------------------------------------------------------------

    def stop(self, condition: str = "state_done") -> None:
        """End the rollout; the first stop condition wins."""
        if not self["is_completed"]:
            dict.__setitem__(self, "is_completed", True)
            dict.__setitem__(self, "stop_condition", condition)

    def _set_managed(self, key: str, value: Any) -> None:
        dict.__setitem__(self, key, value)

    def record_error(self, error: BaseException, where: str) -> None:
        """Record a failure on this rollout and stop it as `has_error`: the one way errors are recorded.

        The first recorded error wins; later ones leave it as it is. The record is
        `{"type", "message", "where"}`, plus `status` when the error carries an HTTP status. Never raises.

        Args:
            error: the exception that ended the rollout.
            where: the part that failed, e.g. `"program"`, `"model"`, `"tool"`, `"cleanup:<handler>"`.
        """
        if self.get("error") is None:
            record: dict[str, Any] = {"type": type(error).__name__, "message": str(error), "where": where}
            status = getattr(error, "status_code", None)
            if isinstance(status, int):
                record["status"] = status
            dict.__setitem__(self, "error", record)
        dict.__setitem__(self, "is_completed", True)
        dict.__setitem__(self, "stop_condition", "has_error")

    # -- runtime accessors ----------------------------------------------------------------

    def get_model(self) -> str:
        """The model this rollout calls."""
        if not self.runtime.model:
            raise ConfigError("no model for this rollout: pass Harness(model=...) or set [env.harness] model")
        return self.runtime.model

    def _require_session(self) -> EndpointAccess:
        access = self.runtime.endpoint
        if access is None or not access.open:
            raise EndpointError(
                "this rollout has no open endpoint: get_client()/get_endpoint_config() work from setup until cleanup ends"
            )
        return access

    def get_endpoint_config(self, api: str = "chat_completions") -> dict[str, str]:
        """`base_url`, `api_key` and `model` to reach this rollout's endpoint with any HTTP client.

        Args:
            api: `"chat_completions"`, `"completions"`, `"responses"` (OpenAI base URL, ending in
                ``/v1``, also as `api_base`, the name litellm and dspy take) or `"messages"` (Anthropic
                base URL: the SDK appends ``/v1/messages``); or a name of `API_ALIASES`.
        """
        api = _check_api(api)
        session = self._require_session()
        base_url = session.base_url.removesuffix("/v1") if api == "messages" else session.base_url
        config = {"api": api, "base_url": base_url, "api_key": session.api_key, "model": self.get_model()}
        return config if api == "messages" else {**config, "api_base": base_url}

    def get_client(self, api: str = "chat_completions", *, sync: bool = False) -> Any:
        """An official SDK client pointed at this rollout's endpoint.

        Args:
            api: `"chat_completions"`, `"completions"` or `"responses"` give an `AsyncOpenAI`
                (`OpenAI` with `sync=True`); `"messages"` gives an `AsyncAnthropic` (`Anthropic`).
            sync: a blocking client, for programs running in a worker thread.
        """
        api = _check_api(api)
        session = self._require_session()
        key = ("anthropic" if api == "messages" else "openai", sync)
        if key not in self.runtime.sdk_clients:
            self.runtime.sdk_clients[key] = session.pools.sdk_client(api, session.base_url, session.api_key, sync=sync)
        return self.runtime.sdk_clients[key]

    def get_tools(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        """The rollout's visible tools as awaitable callables taking the tool's arguments.

        Bindings are applied: call them with the model-visible arguments only.
        """
        return dict(self.runtime.tools)

    async def get_sandbox(self) -> Sandbox:
        """The rollout program's sandbox (created on first use), or the one borrowed from a parent.

        Raises:
            ConfigError: outside a rollout, or when the program has no sandbox.
        """
        sandboxes = self.runtime.borrowed.get("sandbox") or self.runtime.sandboxes
        if sandboxes is None:
            raise ConfigError("state.get_sandbox(): this rollout has no sandbox; set Harness(sandbox=...) or program.sandbox")
        return await sandboxes.get("program")

    def add_tool(self, toolset: NamedToolset | str, tool: Callable[..., Any]) -> None:
        """Add a Python tool for the rest of this rollout to one of its rollout-scoped toolsets.

        Args:
            toolset: one of the rollout's toolsets (a `Toolset`) or its name.
            tool: the Python function to add.

        Raises:
            ConfigError: outside a rollout, for a toolset that is not rollout-scoped or not in
                this rollout, or for a name the rollout already has.
        """
        if self.runtime.toolbox is None:
            raise ConfigError("add_tool works inside a running rollout (from setup until the program ends)")
        self.runtime.toolbox.add_tool(toolset, tool)

    def get_max_turns(self, default: int) -> int:
        """The turn limit: the harness's (else `default`), lowered by the task's `max_turns`, never raised by it.

        A task is outside data: whether the user set the limit or left the default, the row narrows it.
        """
        limit = self.runtime.max_turns if self.runtime.max_turns is not None else default
        task_limit = self.task.get("max_turns")
        return min(int(task_limit), limit) if task_limit is not None else limit

    def get_token_budget(self, name: str) -> int | None:
        """A token budget (`max_input_tokens`, `max_output_tokens`, `max_total_tokens`), or None when unlimited.

        The smaller of the harness's and the task's: a task row narrows a budget, never widens it.
        """
        limits = [int(value) for value in (self.runtime.token_budgets.get(name), self.task.get(name)) if value is not None]
        return min(limits) if limits else None

    def finalize(self) -> State:
        """Drop runtime handles and make sure every field is JSON. Returns `self`.

        A user field that isn't JSON is replaced by its `repr` and reported in `error`.
        """
        if self.runtime.finalized:
            return self
        timing = self.runtime.timing
        try:
            record = timing.as_dict()
        except Exception as exc:  # a program holds the record: a time it set may not even subtract
            record = None
            self.record_error(TypeError(f"state['timing'] could not be written ({exc!r}); saved as null"), "finalize")
        dict.__setitem__(self, "timing", record)
        checked = dict(self)
        if record is not None and stamps_are_numbers(timing):  # JSON by construction; floats are most of its check
            del checked["timing"]
        fields = [] if is_json(checked) else list(checked)  # one pass when every field is JSON, as nearly always
        for key in fields:
            try:
                json.dumps(self[key])
            except (TypeError, ValueError) as exc:
                dict.__setitem__(self, key, repr(self[key]))
                self.record_error(TypeError(f"state[{key!r}] is not JSON-serializable ({exc}); saved as its repr"), "finalize")
        self.runtime = RolloutRuntime(finalized=True, timing=timing)
        return self

    def _mark(self, span: str, edge: str) -> None:
        setattr(getattr(self.runtime.timing, span), edge, time.time())


def _check_api(api: str) -> str:
    """`api` as one of `SUPPORTED_APIS` (an `API_ALIASES` name translated)."""
    canonical = API_ALIASES.get(api, api)
    if canonical not in SUPPORTED_APIS:
        raise NotSupportedError(f"api={api!r} is not supported yet; supported: {list(SUPPORTED_APIS)}")
    return canonical


def _rebuild_state(data: dict[str, Any], task: dict[str, Any], frozen: bool) -> State:
    state = State()
    dict.update(state, data)
    state.task = Task(task).freeze() if frozen else Task(task)
    return state


__all__ = [
    "MANAGED_FIELDS",
    "EndpointAccess",
    "OwnCall",
    "NamedToolset",
    "RolloutRuntime",
    "RolloutSandboxHandles",
    "RolloutTools",
    "SDKClientFactory",
    "State",
]
