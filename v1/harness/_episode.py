"""An episode of roles: several harnesses (a policy, a judge, a user, ...) in one rollout.

`Role` is one named harness of an episode; `Episode` is what a control program is handed: the
episode's task and state, its roles, and `run`, which runs one role as a child rollout of the
episode. Each child rollout has its own state, so its own endpoint session: a judge's or a user's
model calls are recorded in that role's trajectory, never in the policy's. The finished child is
kept under `state["roles"][key]`, with its role name, whether it is trainable and its seed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from v1.config import RoleConfig
from v1.errors import ConfigError, ProgramError, error_class
from v1.harness._harness import Harness
from v1.interception import upstream
from v1.rollout import State, Task

POLICY = "policy"


@dataclass(frozen=True)
class Role:
    """One role of an episode.

    Args:
        harness: how the role attempts its tasks (its own model, client, sandbox and limits; with
            no client it uses the episode's, with no model the episode's model).
        trainable: whether a trainer learns from this role's tokens (default: only `policy`).
        attempts_task: whether the role gets the episode's taskset (prompt, tools, rewards);
            default: only `policy`.
    """

    harness: Harness
    trainable: bool
    attempts_task: bool


RoleLike = Union[Role, Harness, RoleConfig, Mapping[str, Any]]
"""A role as `EpisodeHarness(roles=...)` takes it: a `Role`, a `Harness`, or a `RoleConfig` (or mapping)."""


def resolve_role(name: str, value: RoleLike) -> Role:
    """`value` as the `Role` named `name` (a plain harness or config gets the name's defaults)."""
    if isinstance(value, Role):
        return value
    default = name == POLICY
    if isinstance(value, Harness):
        return Role(value, trainable=default, attempts_task=default)
    config = RoleConfig.from_config(value) if isinstance(value, (RoleConfig, Mapping)) else None
    if config is None:
        raise ConfigError(f"role {name!r}: expected a Role, a Harness or a role config, got {type(value).__name__}")
    harness_fields = config.model_dump(exclude_unset=True, exclude={"trainable", "attempts_task"})
    return Role(
        Harness(config=harness_fields),
        trainable=default if config.trainable is None else config.trainable,
        attempts_task=default if config.attempts_task is None else config.attempts_task,
    )


class Episode:
    """One running episode, as its control program gets it.

    Args:
        roles: the episode's roles by name.
        task: the episode's task (what the policy attempts).
        state: the episode's state; each role's finished rollout lands in `state["roles"]`.
    """

    def __init__(self, roles: Mapping[str, Role], task: Task, state: State) -> None:
        self.roles = dict(roles)
        self.task = task
        self.state = state

    def role(self, name: str) -> Role:
        """The role `name`; a `ConfigError` names the roles there are."""
        if name not in self.roles:
            raise ConfigError(f"the episode has no role {name!r}; its roles are {sorted(self.roles)}")
        return self.roles[name]

    async def run(
        self,
        role: str,
        task: Task | Mapping[str, Any] | str | None = None,
        *,
        key: str | None = None,
        seed: int | None = None,
        harness: Harness | None = None,
        sandbox_of: State | None = None,
    ) -> State:
        """Run `role` on `task` (default: the episode's task) as a child rollout; returns its finished state.

        Args:
            role: the role's name.
            task: what the role attempts.
            key: where the result is kept in `state["roles"]` (default: the role's name). Running a
                key again appends the new trajectory to the kept one (a user's turns).
            seed: the sampling seed of this run (it wins over the role's and the episode's).
            harness: a variant of the role's harness to run instead (same role, same trainability).
            sandbox_of: a running rollout whose program sandbox this run works in (a shared judge).
        """
        spec = self.role(role)
        harness = harness or spec.harness
        if seed is not None and _has_own_client(harness):
            harness = _with_seed(harness, seed)
        child_task = self.task if task is None else _as_task(task)
        child = self._child_state(harness, child_task, sandbox_of)
        if seed is not None and not _has_own_client(harness):
            upstream(child).sampling_args["seed"] = seed
        finished = await harness.run(child_task, child)
        self._record(key or role, role, spec, finished, seed)
        return finished

    def _child_state(self, harness: Harness, task: Task, sandbox_of: State | None) -> State:
        """A fresh state of its own (so its own endpoint session), using the episode's client and model
        unless the role's harness has its own."""
        child = sandbox_of.for_task(task, borrow=["sandbox"]) if sandbox_of is not None else State.for_task(task)
        if not _has_own_client(harness):
            child.runtime.upstream_from = self.state.runtime
            handles = upstream(child)
            handles.sampling_args.update(harness.config.sampling_args)
        child.runtime.model = harness.config.model or (None if _has_own_client(harness) else self.state.runtime.model)
        return child

    def _record(self, key: str, name: str, spec: Role, finished: State, seed: int | None) -> None:
        record: dict[str, Any] = {**finished, "role": name, "trainable": spec.trainable, "runs": 1}
        if seed is not None:
            record["seed"] = seed
        roles = dict(self.state.get("roles") or {})
        previous = roles.get(key)
        if previous is not None:
            record["trajectory"] = list(previous["trajectory"]) + list(record["trajectory"])
            record["token_usage"] = _summed(previous.get("token_usage") or {}, record.get("token_usage") or {})
            record["runs"] = int(previous.get("runs", 1)) + 1
        roles[key] = record
        self.state["roles"] = roles

    def fail_with(self, finished: State, role: str) -> bool:
        """Make a role's failure the episode's, as the same error class (so `Env` retries a retryable
        one); True when the role failed. A control stops using a failed role's result."""
        error = finished.get("error")
        if error is None:
            return False
        message = f"role {role!r} failed: {error.get('message')}"
        try:
            failure: Exception = (error_class(str(error.get("type"))) or ProgramError)(message)
        except TypeError:
            failure = ProgramError(message)
        self.state.record_error(failure, f"role:{role}:{error.get('where')}")
        return True

    def set_reward(self, value: float) -> None:
        """The episode's reward from its control (added to the taskset's and harness's rewards)."""
        self.state["episode_reward"] = float(value)

    def set_metric(self, name: str, value: float) -> None:
        """A metric of the episode (kept in `state["metrics"]` beside the scored ones)."""
        self.state["metrics"] = {**(self.state.get("metrics") or {}), name: float(value)}

    def set_completion(self, finished: State) -> None:
        """Make a role's completion the episode's (what the taskset's rewards and the results show)."""
        self.state["completion"] = finished.get("completion") or []


def _as_task(task: Task | Mapping[str, Any] | str) -> Task:
    if isinstance(task, str):
        return Task({"prompt": task}).freeze()
    return task if isinstance(task, Task) and task.frozen else Task(task).freeze()


def _has_own_client(harness: Harness) -> bool:
    return harness.client is not None or harness.config.client is not None


def _with_seed(harness: Harness, seed: int) -> Harness:
    """A copy of `harness` whose sampling args carry `seed` (its sandboxes and handlers shared)."""
    copied = copy.copy(harness)
    copied.config = harness.config.model_copy(update={"sampling_args": {**harness.config.sampling_args, "seed": seed}})
    return copied


def _summed(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, float]:
    return {name: float(first.get(name) or 0.0) + float(second.get(name) or 0.0) for name in {*first, *second}}


__all__ = ["POLICY", "Episode", "Role", "RoleLike", "resolve_role"]
