"""`User`: a simulated user who answers between model turns of the base loop.

The base loop calls `get_response(task, state, messages)` whenever the model
answers without tool calls; the returned messages are appended and the loop goes
on. The user ends the rollout with `state.stop(...)` (or by returning nothing).
A user may call a model itself (`client` argument or `get_client(state)`): its
calls go through the interception endpoint on a session of their own, so they
are forwarded and timed like any call but never become trajectory steps of the
policy (the trajectory is training data).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Union

from v1._util.calling import call_user_code
from v1.config import SharedSandboxLike, ToolScope, UserConfig, resolve_callable
from v1.errors import ConfigError
from v1.rollout import Binding, BindingContext
from v1.tools import ScopedOwner, build_object_factories, rollout_sandbox, sandbox_setting

if TYPE_CHECKING:
    from v1.rollout import State, Task

USER_ARGUMENTS = ("task", "state", "messages", "client", "model")


class User(ScopedOwner):
    """A user simulator owned by a taskset (or a harness).

    Args:
        fn: ``fn(messages, ...) -> str | message | list[message] | None``; it may take
            `task`, `state`, `messages`, `client` (an `AsyncOpenAI` on the user's own,
            unrecorded endpoint session), `model`, and its bound arguments. Sync or async.
            Subclasses may override `get_response` instead.
        bindings: ``{"argument": source}`` with `task.*`, `state.*`, `objects.*` paths or callables.
        objects: ``{"name": factory}``, built lazily once per scope and closed when it ends.
        scope: `rollout` (default), `group` or `global`.
        model: the model the user's own calls use (default: the rollout's).
        sandbox: `"program"` (the program's sandbox) or a `SandboxConfig`: handed to a `sandbox` argument.
        config: a `UserConfig` (or mapping, or `module:object` reference).
    """

    def __init__(
        self,
        fn: Callable[..., Any] | str | None = None,
        *,
        bindings: Mapping[str, Any] | None = None,
        objects: Mapping[str, Any] | None = None,
        scope: ToolScope | None = None,
        model: str | None = None,
        sandbox: SharedSandboxLike | None = None,
        config: UserConfig | Mapping[str, object] | str | None = None,
    ) -> None:
        super().__init__()
        self.config = UserConfig.from_config(config if not isinstance(config, str) else {"fn": config})
        source = fn if fn is not None else self.config.fn
        self.fn = resolve_callable(source, "user.fn") if source is not None else None
        if self.fn is None and type(self).get_response is User.get_response:
            raise ConfigError("User needs fn= (or a subclass overriding get_response)")
        self.scope = scope or self.config.scope or "rollout"
        self.model = model or self.config.model
        self.sandbox = sandbox_setting(sandbox if sandbox is not None else self.config.sandbox, "user sandbox")
        self.object_factories = build_object_factories({**self.config.objects, **dict(objects or {})}, "user")
        self.bindings = {
            name: Binding(name, source, write=True) for name, source in {**self.config.bindings, **dict(bindings or {})}.items()
        }
        self.parameters: tuple[str, ...] = ()
        if self.fn is not None:
            signature = inspect.signature(self.fn)
            self.parameters = tuple(signature.parameters)
            for name, binding in self.bindings.items():
                if name not in self.parameters:
                    raise ConfigError(f"binding {name!r}: the user function takes no argument {name!r}")
                if name in USER_ARGUMENTS:
                    raise ConfigError(f"binding {name!r}: {name!r} is provided by the framework and can't be bound")
                binding.check(self.object_factories, None)
            for name, param in signature.parameters.items():
                injectable = name in USER_ARGUMENTS or name in self.bindings or (name == "sandbox" and self.sandbox is not None)
                if (
                    not injectable
                    and param.default is param.empty
                    and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL)
                ):
                    raise ConfigError(
                        f"user function argument {name!r} can't be injected; available: {', '.join(USER_ARGUMENTS)} "
                        "and bound arguments"
                    )
        else:
            for binding in self.bindings.values():
                binding.check(self.object_factories, None)

    def describe(self) -> str:
        return "user"

    async def get_response(self, task: Task, state: State, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The user's reply to the conversation so far (empty: nothing to say, the rollout ends)."""
        assert self.fn is not None
        kwargs: dict[str, Any] = {}
        if "task" in self.parameters:
            kwargs["task"] = task
        if "state" in self.parameters:
            kwargs["state"] = state
        if "messages" in self.parameters:
            kwargs["messages"] = messages
        if "client" in self.parameters:
            kwargs["client"] = await self.get_client(state)
        if "model" in self.parameters:
            kwargs["model"] = self.get_model(state)
        if "sandbox" in self.parameters and self.sandbox is not None:
            kwargs["sandbox"] = await rollout_sandbox(state, self.sandbox)
        if self.bindings:
            context = BindingContext(task, state, self.scope_for(state))
            for name, binding in self.bindings.items():
                kwargs[name] = await binding.resolve(context)
        return as_messages(await call_user_code(self.fn, **kwargs))

    def scope_for(self, state: State) -> Any:
        """The live scope (objects) of this user for `state`'s rollout."""
        toolbox = state.runtime.toolbox
        group_id = toolbox.group_id if toolbox is not None else state["trajectory_id"]
        return self.open_scope(self.scope_key(state["trajectory_id"], group_id))

    async def get_object(self, state: State, name: str) -> Any:
        """The user's object `name` in `state`'s scope (built on first use)."""
        return await self.scope_for(state).get_object(name)

    def get_model(self, state: State) -> str:
        return self.model or state.get_model()

    async def get_client(self, state: State) -> Any:
        """An `AsyncOpenAI` for the user's own model calls: through the endpoint, never recorded."""
        toolbox = state.runtime.toolbox
        if toolbox is None:
            raise ConfigError("the user's client is only available inside a rollout")
        return await toolbox.user_client(state, self.get_model(state))


def as_messages(reply: Any) -> list[dict[str, Any]]:
    """A user's reply as messages: a string is one user message; None or "" is no reply."""
    if reply is None or reply == "":
        return []
    if isinstance(reply, str):
        return [{"role": "user", "content": reply}]
    if isinstance(reply, Mapping):
        return [dict(reply)]
    messages = []
    for item in reply:
        messages += as_messages(item)
    return messages


UserLike = Union[User, UserConfig, Mapping[str, Any], Callable[..., Any], str]
"""What a `user=` argument takes: a `User`, its function (or `module:object` reference), or a `UserConfig` (or mapping)."""


def resolve_user(value: UserLike | None) -> User | None:
    """A `User` from a `User`, a callable, a `module:object` reference, a mapping or a `UserConfig`."""
    if value is None or isinstance(value, User):
        return value
    config = None
    source: Any = value
    if isinstance(value, (UserConfig, Mapping)):
        config = UserConfig.from_config(value)
        if config.fn is None:
            raise ConfigError("user: a user config needs fn (a callable or a 'module:object' reference)")
        source = config.fn
    target = resolve_callable(source, "user.fn") if isinstance(source, str) else source
    if config is not None and not isinstance(target, User) and not (isinstance(target, type) and issubclass(target, User)):
        return User(target, config=config.model_copy(update={"fn": None}))
    if isinstance(target, User):
        return target
    if isinstance(target, type) and issubclass(target, User):
        return target()
    return User(target)


__all__ = ["User", "as_messages", "resolve_user", "UserLike"]
