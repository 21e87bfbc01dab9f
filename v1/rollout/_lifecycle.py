"""Lifecycle decorators and handler collection.

`@stop`, `@setup`, `@update`, `@metric`, `@reward(weight=)`, `@advantage`,
`@cleanup` and `@teardown` mark functions or methods; `collect_handlers` finds
them on tasksets, harnesses and toolsets, adds the ones named in constructor
or config lists, and orders them by `priority` (higher first). Handler
arguments are injected by name: `task`, `state`, `prompt`, `completion`,
`answer`, `info`, `trajectory`, `example_id`, or their plurals (`tasks`,
`states`, ...) for group handlers, which get the whole group at once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from v1._util.calling import call_user_code
from v1.config import HandlerConfig, resolve_callable
from v1.errors import ConfigError

if TYPE_CHECKING:
    from v1.rollout._state import State
    from v1.rollout._task import Task

Kind = Literal["stop", "setup", "update", "metric", "reward", "advantage", "cleanup", "teardown"]
KINDS: tuple[Kind, ...] = ("stop", "setup", "update", "metric", "reward", "advantage", "cleanup", "teardown")
SPEC_ATTRIBUTE = "__v1_handler__"

SINGLE_ARGS = ("task", "state", "prompt", "completion", "answer", "info", "trajectory", "example_id")
GROUP_ARGS = {
    "tasks": "task",
    "states": "state",
    "prompts": "prompt",
    "completions": "completion",
    "answers": "answer",
    "infos": "info",
    "trajectories": "trajectory",
    "example_ids": "example_id",
}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class HandlerSpec:
    kind: Kind
    priority: int = 0
    weight: float | None = None


def _decorator(kind: Kind, fn: F | None, stage: str | None = None, **spec: Any) -> Any:
    def mark(target: F) -> F:
        if stage is not None:
            _check_stage(kind, target, stage)
        setattr(target, SPEC_ATTRIBUTE, HandlerSpec(kind=kind, **spec))
        return target

    return mark(fn) if fn is not None else mark


def _check_stage(kind: Kind, fn: Callable[..., Any], stage: str) -> None:
    """verifiers' ``stage=`` says what the arguments already say (``tasks``/``states``: group); they must agree."""
    if stage not in ("rollout", "group"):
        raise ConfigError(f"@vf.{kind}(stage={stage!r}) on {getattr(fn, '__name__', fn)!r}: stage is 'rollout' or 'group'")
    is_group = any(name in GROUP_ARGS for name in inspect.signature(fn).parameters)
    if is_group != (stage == "group"):
        raise ConfigError(
            f"@vf.{kind}(stage={stage!r}) on {getattr(fn, '__name__', fn)!r}: its arguments make it a "
            f"{'group' if is_group else 'rollout'} handler (group handlers take tasks/states)"
        )


@overload
def stop(fn: F, /) -> F: ...
@overload
def stop(*, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def stop(fn: F | None = None, /, *, priority: int = 0, stage: str | None = None) -> Any:
    """Mark a stop condition: return True to end the rollout; its name becomes `stop_condition`."""
    return _decorator("stop", fn, stage, priority=priority)


@overload
def setup(fn: F, /) -> F: ...
@overload
def setup(*, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def setup(fn: F | None = None, /, *, priority: int = 0, stage: str | None = None) -> Any:
    """Mark a setup handler, run before the program."""
    return _decorator("setup", fn, stage, priority=priority)


@overload
def update(fn: F, /) -> F: ...
@overload
def update(*, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def update(fn: F | None = None, /, *, priority: int = 0, stage: str | None = None) -> Any:
    """Mark an update handler, run after the program and before scoring."""
    return _decorator("update", fn, stage, priority=priority)


@overload
def metric(fn: F, /) -> F: ...
@overload
def metric(*, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def metric(fn: F | None = None, /, *, priority: int = 0, stage: str | None = None) -> Any:
    """Mark a metric: recorded in `state["metrics"]`, weight 0 in the reward."""
    return _decorator("metric", fn, stage, priority=priority, weight=0.0)


@overload
def reward(fn: F, /) -> F: ...
@overload
def reward(*, weight: float = 1.0, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def reward(fn: F | None = None, /, *, weight: float = 1.0, priority: int = 0, stage: str | None = None) -> Any:
    """Mark a reward function; the rollout's reward is the weighted sum of them all."""
    return _decorator("reward", fn, stage, priority=priority, weight=weight)


@overload
def advantage(fn: F, /) -> F: ...
@overload
def advantage(*, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def advantage(fn: F | None = None, /, *, priority: int = 0, stage: str | None = None) -> Any:
    """Mark a group advantage function: returns one advantage per state of the group."""
    return _decorator("advantage", fn, stage, priority=priority)


@overload
def cleanup(fn: F, /) -> F: ...
@overload
def cleanup(*, priority: int = 0, stage: str | None = None) -> Callable[[F], F]: ...
def cleanup(fn: F | None = None, /, *, priority: int = 0, stage: str | None = None) -> Any:
    """Mark a cleanup handler, run after scoring even when the rollout failed."""
    return _decorator("cleanup", fn, stage, priority=priority)


@overload
def teardown(fn: F, /) -> F: ...
@overload
def teardown(*, priority: int = 0) -> Callable[[F], F]: ...
def teardown(fn: F | None = None, /, *, priority: int = 0) -> Any:
    """Mark a teardown handler, run once by `Harness.teardown()`."""
    return _decorator("teardown", fn, priority=priority)


@dataclass
class Handler:
    """A collected handler: the callable, what it is, and which arguments it takes."""

    fn: Callable[..., Any]
    kind: Kind
    name: str
    priority: int
    weight: float
    params: tuple[str, ...]
    takes_all: bool
    is_group: bool

    @classmethod
    def build(cls, fn: Callable[..., Any], kind: Kind, *, priority: int = 0, weight: float | None = None) -> Handler:
        name = getattr(fn, "__name__", None) or type(fn).__name__
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{kind} handler {name!r}: cannot read its signature ({exc})") from None
        params, takes_all = [], False
        for param in signature.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                takes_all = True
            elif param.kind is param.VAR_POSITIONAL:
                continue
            else:
                params.append(param.name)
        group = [p for p in params if p in GROUP_ARGS]
        single = [p for p in params if p in SINGLE_ARGS]
        if group and single:
            raise ConfigError(f"{kind} handler {name!r} mixes per-rollout {single} and group {group} arguments; use one form")
        is_group = bool(group) or kind == "advantage"
        allowed = () if kind == "teardown" else (tuple(GROUP_ARGS) if is_group else SINGLE_ARGS)
        for param in signature.parameters.values():
            if param.name in params and param.name not in allowed and param.default is param.empty:
                raise ConfigError(
                    f"{kind} handler {name!r}: argument {param.name!r} can't be injected; "
                    f"available: {', '.join(allowed) or 'none'}"
                )
        default_weight = 1.0 if kind == "reward" else 0.0
        return cls(
            fn=fn,
            kind=kind,
            name=name,
            priority=priority,
            weight=default_weight if weight is None else float(weight),
            params=tuple(p for p in params if p in allowed),
            takes_all=takes_all,
            is_group=is_group,
        )

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Call with the injected arguments; sync handlers run in a worker thread."""
        kwargs = dict(arguments) if self.takes_all else {name: arguments[name] for name in self.params if name in arguments}
        return await call_user_code(self.fn, **kwargs)


def rollout_arguments(task: Task, state: State) -> dict[str, Any]:
    """The arguments a per-rollout handler can ask for."""
    return {
        "task": task,
        "state": state,
        "prompt": state.get("prompt", task.get("prompt")),
        "completion": state.get("completion"),
        "answer": task.get("answer"),
        "info": task.get("info") or {},
        "trajectory": state["trajectory"],
        "example_id": state.get("example_id"),
    }


def group_arguments(tasks: list[Task], states: list[State]) -> dict[str, Any]:
    """The arguments a group handler can ask for: each per-rollout argument as a list."""
    per_rollout = [rollout_arguments(task, state) for task, state in zip(tasks, states)]
    return {plural: [args[single] for args in per_rollout] for plural, single in GROUP_ARGS.items()}


LIST_KINDS: dict[str, Kind] = {  # config/constructor list name -> handler kind
    "stops": "stop",
    "setups": "setup",
    "updates": "update",
    "metrics": "metric",
    "rewards": "reward",
    "advantages": "advantage",
    "cleanups": "cleanup",
    "teardowns": "teardown",
}


def handlers_of(owner: object) -> list[Handler]:
    """The decorated methods of `owner`, bound to it."""
    found = []
    for attr in dir(type(owner)):
        spec = getattr(getattr(type(owner), attr, None), SPEC_ATTRIBUTE, None)
        if isinstance(spec, HandlerSpec):
            found.append(Handler.build(getattr(owner, attr), spec.kind, priority=spec.priority, weight=spec.weight))
    return found


def handlers_from_list(list_name: str, entries: Iterable[Any], where: str) -> list[Handler]:
    """Handlers named in a constructor or config list (`rewards=[...]`, `[[env.taskset.rewards]]`)."""
    kind = LIST_KINDS[list_name]
    built = []
    for i, entry in enumerate(entries):
        entry = entry if isinstance(entry, HandlerConfig) else HandlerConfig.model_validate(entry)
        fn = resolve_callable(entry.fn, f"{where}.{list_name}[{i}].fn")
        spec = getattr(fn, SPEC_ATTRIBUTE, None)
        weight = entry.weight if entry.weight is not None else (spec.weight if isinstance(spec, HandlerSpec) else None)
        if kind == "metric":
            weight = 0.0
        priority = entry.priority or (spec.priority if isinstance(spec, HandlerSpec) else 0)
        built.append(Handler.build(fn, kind, priority=priority, weight=weight))
    return built


def owned_handlers(owner: object, config: Any, lists: Mapping[str, Iterable[Any] | None], where: str) -> list[Handler]:
    """An owner's handlers: its decorated methods, then each config list (`config.rewards`, ...)
    followed by the matching constructor list (`lists["rewards"]`)."""
    handlers = handlers_of(owner)
    for list_name in LIST_KINDS:
        if hasattr(config, list_name) or lists.get(list_name):
            entries = list(getattr(config, list_name, None) or []) + list(lists.get(list_name) or [])
            handlers += handlers_from_list(list_name, entries, where)
    return handlers


def apply_scoring(handlers: list[Handler], scoring: Mapping[str, Any], where: str) -> list[Handler]:
    """Re-weight or drop rewards/metrics by name (`ScoringConfig` values); unknown names fail."""
    scored = {h.name for h in handlers if h.kind in ("reward", "metric")}
    unknown = sorted(set(scoring) - scored)
    if unknown:
        raise ConfigError(
            f"field '{where}.scoring.{unknown[0]}': no reward or metric named {unknown[0]!r}; known: {sorted(scored) or 'none'}"
        )
    result = []
    for handler in handlers:
        override = scoring.get(handler.name) if handler.kind in ("reward", "metric") else None
        if override is None:
            result.append(handler)
        elif not override.skip:
            weight = handler.weight if override.weight is None else float(override.weight)
            result.append(replace(handler, weight=weight))
    return result


@dataclass
class Handlers:
    """All handlers of a harness run, by kind, highest priority first."""

    by_kind: dict[str, list[Handler]]
    _selections: dict[tuple[str, bool | None], tuple[Handler, ...]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def collect(cls, handlers: Iterable[Handler]) -> Handlers:
        by_kind: dict[str, list[Handler]] = {kind: [] for kind in KINDS}
        for handler in handlers:
            by_kind[handler.kind].append(handler)
        scored = by_kind["reward"] + by_kind["metric"]
        seen: dict[str, Handler] = {}
        for handler in scored:
            if handler.name in seen and seen[handler.name].fn != handler.fn:
                raise ConfigError(
                    f"two reward/metric functions are named {handler.name!r}; "
                    "names key state['metrics'], so give one of them another name"
                )
            seen[handler.name] = handler
        for kind in KINDS:
            unique: dict[Any, Handler] = {}
            for handler in by_kind[kind]:
                unique.setdefault(handler.fn, handler)
            by_kind[kind] = sorted(unique.values(), key=lambda h: -h.priority)
        return cls(by_kind)

    def of(self, kind: Kind, *, group: bool | None = None) -> tuple[Handler, ...]:
        """The handlers of `kind` (only group or only per-rollout ones when `group` says), highest priority first.

        Asked several times a rollout, so each selection is made once.
        """
        selection = self._selections.get((kind, group))
        if selection is None:
            selection = tuple(h for h in self.by_kind[kind] if group is None or h.is_group == group)
            self._selections[(kind, group)] = selection
        return selection


__all__ = [
    "LIST_KINDS",
    "Handler",
    "HandlerSpec",
    "Handlers",
    "advantage",
    "apply_scoring",
    "cleanup",
    "group_arguments",
    "handlers_from_list",
    "handlers_of",
    "owned_handlers",
    "metric",
    "reward",
    "rollout_arguments",
    "setup",
    "stop",
    "teardown",
    "update",
]
